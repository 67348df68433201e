"""`specmon adopt` over the real test sshd: the simulator started by a plain shell (`nohup ... >
log &`, no specmon involved) with an allowed variable (NCCL_PROTO) and a secret (HF_TOKEN)
becomes a profile: `--dry-run` prints it with HF_TOKEN = "***" and never the secret; without
it the config file gains the profile, its comments intact; launching it is refused for the
unfilled secret alone, and once filled in, the run's argv is the foreign server's argv."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from support.hosts import free_port, kill_everything_under
from support.paths import REPO
from support.sshd import SshdServer

WAIT_S = 30.0
SECRET = "hf_secret123"
SERVER_ENV = {
    "SPECMON_SIM_TIME_SCALE": "0.003",
    "SPECMON_SIM_SHARDS": "4",
    "NCCL_PROTO": "LL",
    "HF_TOKEN": SECRET,
}


def start_by_hand(tmp_path: Path, command: str) -> int:
    """``nohup COMMAND > LOG 2>&1 &`` from a plain shell; the server's pid."""
    shell = subprocess.run(
        ["sh", "-c", f"nohup {command} > {tmp_path / 'server.log'} 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        timeout=10,
        start_new_session=True,
        env={**os.environ, **SERVER_ENV, "PYTHONPATH": str(REPO)},
        check=True,
    )
    return int(shell.stdout.strip())


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listened on port {port} within {WAIT_S}s")


def specmon(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specmon", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_adopt_a_server_started_by_hand(sshd: SshdServer, tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    config = tmp_path / "specmon.toml"
    original = f"""\
# hand-written: these comments must survive adopt
[hosts.testbox]
address = "127.0.0.1"  # the test sshd
port = {sshd.port}
user = "{sshd.user}"
identity_file = "{sshd.client_key}"
known_hosts = "{sshd.known_hosts}"
python = "{sys.executable}"
state_dir = "{state_dir}"
"""
    config.write_text(original)
    port = free_port()
    pid = start_by_hand(
        tmp_path,
        f"{sys.executable} -m specmon.sim --model-path moonshotai/Kimi-K2.5 --tp 2 --port {port}",
    )
    try:
        wait_listening(port)
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        foreign_argv = [word.decode() for word in argv]

        dry = specmon(config, "adopt", "testbox", "--pid", str(pid), "-p", "adopted", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert SECRET not in dry.stdout + dry.stderr
        assert dry.stdout.startswith("[profiles.adopted]\n")
        assert 'HF_TOKEN = "***" # fill in the secret' in dry.stdout
        assert 'NCCL_PROTO = "LL"' in dry.stdout and "tp = 2" in dry.stdout
        assert f"port = {port}" in dry.stdout
        assert "nothing written" in dry.stderr
        assert config.read_text() == original

        wrote = specmon(config, "adopt", "testbox", "--pid", str(pid), "-p", "adopted")
        assert wrote.returncode == 0, wrote.stderr
        assert f"wrote profile adopted in {config}" in wrote.stdout
        assert "fill in profiles.adopted.env.HF_TOKEN" in wrote.stdout
        text = config.read_text()
        assert text.startswith(original + "\n[profiles.adopted]\n")
        assert SECRET not in text

        taken = specmon(config, "adopt", "testbox", "--pid", str(pid), "-p", "adopted")
        assert taken.returncode == 2 and len(taken.stderr.splitlines()) == 1
        assert "already exists" in taken.stderr and config.read_text() == text

        refused = specmon(config, "launch", "testbox", "-p", "adopted", "--gpu-agent", "none")
        assert refused.returncode == 2
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert 'profiles.adopted.env.HF_TOKEN: is the placeholder "***"' in refused.stderr
        assert not (state_dir / "runs").exists() or not list((state_dir / "runs").iterdir())

        config.write_text(text.replace('HF_TOKEN = "***"', 'HF_TOKEN = "hf_filled"'))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        launched = specmon(
            config, "launch", "testbox", "-p", "adopted", "--gpu-agent", "none", "--json"
        )
        assert launched.returncode == 0, launched.stderr
        run_id = json.loads(launched.stdout.splitlines()[0])["run_id"]
        record = json.loads((state_dir / "runs" / run_id / "run.json").read_text())
        assert record["argv"] == foreign_argv
        assert record["env"]["NCCL_PROTO"] == "LL" and record["env"]["HF_TOKEN"] == "***"
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        kill_everything_under(state_dir)

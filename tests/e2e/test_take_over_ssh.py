"""`specmon launch HOST -p P --take-over PID --yes` over the real test sshd (issue 28 item 4):
a simulator started by a plain shell (`nohup ... > log &`, SGLang personality, 5 speculative
steps, its simulated GPUs in the state dir's sim-gpus.json) is stopped (SIGTERM to its process
tree: its group is the shell's) and the profile (2 steps) launched on its port as a specmon
run, ready; the stop told as a take-over. Refused in one line: a pid that is no server, a pid
that is gone, a take-over with no TTY and no --yes; a launch on the port it holds names it as
a server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.by_hand import alive, kill_group, start_by_hand, wait_listening
from support.hosts import free_port, kill_everything_under
from support.paths import REPO
from support.sshd import SshdServer, start_sshd, stop_sshd


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdServer]:
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    try:
        yield server
    finally:
        server.drop_connections()
        stop_sshd(server.proc)


def write_config(tmp_path: Path, sshd: SshdServer, state_dir: Path, port: int) -> Path:
    path = tmp_path / "specmon.toml"
    path.write_text(
        f"""
[hosts.testbox]
address = "127.0.0.1"
port = {sshd.port}
user = "{sshd.user}"
identity_file = "{sshd.client_key}"
known_hosts = "{sshd.known_hosts}"
python = "{sys.executable}"
state_dir = "{state_dir}"

[profiles.fast]
command = ["{{python}}", "-m", "specmon.sim"]
model_path = "sim/Kimi-K2.5"
draft_model_path = "/models/kimi-k2.5-eagle3"
tp = 2
port = {port}
gpu_agent = "sim"
stop_grace_s = 5.0

[profiles.fast.speculative]
algorithm = "EAGLE3"
num_steps = 2
eagle_topk = 1
num_draft_tokens = 3

[profiles.fast.env]
SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN = "1"
SPECMON_SIM_TIME_SCALE = "0.003"
SPECMON_SIM_SHARDS = "4"
"""
    )
    return path


def specmon(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specmon", "--config", str(config), *args],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_take_over_relaunch_stops_the_foreign_server_and_the_new_run_is_ready(
    sshd: SshdServer, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    port = free_port()
    config = write_config(tmp_path, sshd, state_dir, port)
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    server = start_by_hand(
        tmp_path, "sglang", f"{sys.executable} -m specmon.sim --model-path sim/Kimi-K2.5 "
        "--speculative-draft-model-path /models/kimi-k2.5-eagle3 --tp 2 "
        f"--port {port} --speculative-algorithm EAGLE3 --speculative-num-steps 5 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 6", port,
        env={
            "SPECMON_SIM_GPU_STATE": str(state_dir / "sim-gpus.json"),
            "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1",
        },
    )  # fmt: skip
    try:
        wait_listening(port)
        assert server.pgid != server.pid  # the shell's group: its tree is signalled, not it

        # A plain launch on its port is refused, naming it as a server.
        plain = specmon(config, "launch", "testbox", "-p", "fast")
        assert plain.returncode != 0
        line = plain.stderr.strip()
        assert len(line.splitlines()) == 1, plain.stderr
        assert f"a sglang server, pid {server.pid}" in line, line
        assert "specmon.sim" in line and f"--take-over {server.pid}" in line, line

        # Refusals: no TTY and no --yes; a pid that is no server; a pid that is gone.
        no_tty = specmon(config, "launch", "testbox", "-p", "fast", "--take-over", str(server.pid))
        assert no_tty.returncode == 2 and "add --yes" in no_tty.stderr, no_tty.stderr
        not_server = specmon(
            config, "launch", "testbox", "-p", "fast", "--take-over", str(sleeper.pid), "--yes"
        )
        assert not_server.returncode == 2, not_server.stderr
        assert len(not_server.stderr.splitlines()) == 1, not_server.stderr
        assert f"pid {sleeper.pid}" in not_server.stderr and "not a server" in not_server.stderr
        assert alive(sleeper.pid)
        gone = subprocess.Popen(["true"])
        gone.wait()
        missing = specmon(
            config, "launch", "testbox", "-p", "fast", "--take-over", str(gone.pid), "--yes"
        )
        assert missing.returncode == 2 and f"no process {gone.pid}" in missing.stderr
        assert alive(server.pid)

        taken = specmon(
            config, "launch", "testbox", "-p", "fast", "--take-over", str(server.pid),
            "--yes", "--wait", "ready", "--json",
        )  # fmt: skip
        assert taken.returncode == 0, taken.stderr + taken.stdout
        assert "Traceback" not in taken.stderr
        assert f"take over pid {server.pid}" in taken.stderr and "sglang" in taken.stderr
        assert not alive(server.pid)
        events = [json.loads(x) for x in taken.stdout.splitlines()]
        run_id = events[0]["run_id"]
        old = f"pid-{server.pid}"
        steps = [
            e["step"] for e in events if e.get("kind") == "stop_progress" and e["run_id"] == old
        ]
        assert steps[0] == "sigterm" and "group_gone" in steps and steps[-1] == "gpu_released"
        stopped = [e for e in events if e.get("kind") == "run_state" and e["run_id"] == old]
        assert stopped and "taken over" in stopped[-1]["detail"], stopped
        assert stopped[-1]["end"]["kind"] in ("stopped", "killed")
        assert any(e.get("kind") == "ready" for e in events), [e.get("kind") for e in events]

        status = specmon(config, "status", "testbox", "--json")
        assert status.returncode == 0, status.stderr
        runs = {r["run_id"]: r for r in json.loads(status.stdout)["runs"]}
        run = runs[run_id]
        assert run["alive"] and run["ready_at"], run
        argv = run["argv"]
        assert argv[argv.index("--speculative-num-steps") + 1] == "2", argv
        record = json.loads((state_dir / "runs" / run_id / "run.json").read_text())
        foreign = record["meta"]["replaces_foreign"]
        assert foreign["pid"] == server.pid and "--speculative-num-steps" in foreign["argv"]
    finally:
        sleeper.kill()
        sleeper.wait(5)
        kill_group(server.pgid)
        kill_everything_under(state_dir)

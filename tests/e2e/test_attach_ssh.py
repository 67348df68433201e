"""`specmon attach` over the real test sshd: servers started by a plain shell (`nohup ... >
log &`, no specmon involved) are found with their backend, pid, user, port, log file and start
time; a run specmon launched in the same state dir is not listed; docker, the journal and the
GPUs are told in one line each, as this machine has them; `--pid` of a process that is not a
server is refused in one line (exit 2)."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import time
from pathlib import Path

from support.by_hand import Started, kill_group, start_by_hand, wait_listening
from support.hosts import free_port, kill_everything_under
from support.paths import REPO
from support.sshd import SshdServer


def write_config(tmp_path: Path, sshd: SshdServer, state_dir: Path) -> Path:
    path = tmp_path / "specmon.toml"
    path.write_text(
        f"""
{sshd.host_toml(state_dir)}

[profiles.fast]
command = ["{{python}}", "-m", "specmon.sim"]
model_path = "moonshotai/Kimi-K2.5"
tp = 2
port = {free_port()}
gpu_agent = "none"
stop_grace_s = 5.0

[profiles.fast.env]
SPECMON_SIM_TIME_SCALE = "0.003"
SPECMON_SIM_SHARDS = "4"
"""
    )
    return path


def specmon(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specmon", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def children_of(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{name}/stat").read_text()
            if int(stat[stat.rfind(")") + 2 :].split()[1]) == pid:
                found.append(int(name))
    return found


def test_attach_finds_servers_started_by_hand(sshd: SshdServer, tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    config = write_config(tmp_path, sshd, state_dir)
    python = sys.executable
    started: list[Started] = []
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    began = time.time()
    try:
        sglang_port, vllm_port = free_port(), free_port()
        started.append(
            start_by_hand(
                tmp_path, "sglang", f"{python} -m specmon.sim --model-path moonshotai/Kimi-K2.5 "
                f"--tp 2 --port {sglang_port}", sglang_port,
            )
        )  # fmt: skip
        started.append(
            start_by_hand(
                tmp_path, "vllm", f"{python} -m specmon.sim.vllm serve "
                f"meta-llama/Llama-3.3-70B-Instruct --tensor-parallel-size 8 --host 127.0.0.1 "
                f"--port {vllm_port}", vllm_port,
            )
        )  # fmt: skip
        launched = specmon(config, "launch", "testbox", "-p", "fast", "--json")
        assert launched.returncode == 0, launched.stderr
        own_run = json.loads(launched.stdout.splitlines()[0])["run_id"]
        for server in started:
            wait_listening(server.port)
        ended = time.time()

        listed = specmon(config, "attach", "testbox", "--json")
        assert listed.returncode == 0, listed.stderr
        lines = [json.loads(line) for line in listed.stdout.splitlines()]
        servers = {s["pid"]: s for s in lines if s["kind"] == "server"}
        host = [line for line in lines if line["kind"] == "host"]
        assert len(host) == 1 and lines[-1] is host[0]
        me = pwd.getpwuid(os.getuid()).pw_name
        for server, backend in zip(started, ("sglang", "vllm"), strict=True):
            found = servers.get(server.pid)
            assert found is not None, (server, sorted(servers))
            assert found["backend"] == backend
            assert found["user"] == me
            assert found["port"] == server.port and found["port_source"] == "socket"
            assert found["log"]["kind"] == "file"
            assert found["log"]["path"] == os.path.realpath(server.log)
            assert found["log"]["follow"].startswith("tail -F ")
            assert began - 2 <= found["started_at"] <= ended + 2
        # The simulated TP ranks are workers of the SGLang server, not servers of their own.
        ranks = children_of(started[0].pid)
        assert ranks and not set(ranks) & set(servers)
        # specmon's own run in this state dir is left out, and said so.
        own_pgids = {
            json.loads(p.read_text())["pgid"] for p in (state_dir / "runs").glob("*/run.json")
        }
        assert not [s for s in servers.values() if s["pgid"] in own_pgids]
        assert host[0]["specmon_runs"] == [own_run]

        text = specmon(config, "attach", "testbox")
        assert text.returncode == 0, text.stderr
        out = text.stdout.splitlines()
        assert out[0].split() == ["PID", "USER", "BACKEND", "PORT", "STARTED", "GPUS", "LOG"]
        for server, backend in zip(started, ("sglang", "vllm"), strict=True):
            row = next(line for line in out if line.startswith(f"{server.pid} "))
            assert row.split()[1:4] == [me, backend, str(server.port)]
            assert row.endswith(os.path.realpath(server.log))
        docker = [line for line in out if line.startswith("docker:")]
        journal = [line for line in out if line.startswith("journal:")]
        gpus = [line for line in out if line.startswith("gpus:")]
        assert len(docker) == len(journal) == len(gpus) == 1, out
        if shutil.which("docker") is None:
            assert docker[0] == "docker: not installed on testbox: containers not searched"
        else:
            assert "not installed" not in docker[0]
        assert ("not installed" in journal[0]) == (shutil.which("journalctl") is None)
        assert ("not installed" in gpus[0]) == (shutil.which("nvidia-smi") is None)

        one = specmon(config, "attach", "testbox", "--pid", str(started[1].pid))
        assert one.returncode == 0, one.stderr
        assert "backend:   vllm" in one.stdout and f"port:      {vllm_port}" in one.stdout

        refused = specmon(config, "attach", "testbox", "--pid", str(sleeper.pid))
        assert refused.returncode == 2
        assert refused.stdout == ""
        assert len(refused.stderr.splitlines()) == 1, refused.stderr
        assert f"pid {sleeper.pid}" in refused.stderr and "not a server" in refused.stderr
        worker = specmon(config, "attach", "testbox", "--pid", str(ranks[0]))
        assert worker.returncode == 2
        assert f"worker of server pid {started[0].pid}" in worker.stderr
    finally:
        sleeper.kill()
        sleeper.wait(5)
        for server in started:
            kill_group(server.pgid)
        kill_everything_under(state_dir)

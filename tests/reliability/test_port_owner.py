"""The server specmon started, and no other: an unrelated HTTP server on the profile's port
must never pass for the launched one (issue 24, item 4). Real processes throughout: the
simulator, a foreign http.server (tests/support/answer_200.py) started by the test, and the
helper reading /proc/net/tcp{,6} on this machine."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.hosts import free_port, kill_everything_under
from support.paths import REPO, TESTS
from support.profiles import SIMBENCH_PROFILE_TOML

from specmon.remote import HELPER_SOURCE

SUPPORT = TESTS / "support"
TIMEOUT = 120


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    try:
        yield path
    finally:
        kill_everything_under(path)


@pytest.fixture
def foreign_servers() -> Iterator[list[subprocess.Popen[str]]]:
    """The unrelated servers a test starts; killed at the end whatever happened."""
    started: list[subprocess.Popen[str]] = []
    try:
        yield started
    finally:
        for proc in started:
            proc.kill()
            proc.wait(10)


def start_foreign(port: int, started: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    """answer_200.py on ``port``, returned once it listens."""
    proc = subprocess.Popen(
        [sys.executable, str(SUPPORT / "answer_200.py"), str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    started.append(proc)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "listening"
    return proc


def specmon(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specmon", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def runs_of(config: Path, host: str = "box") -> list[dict]:
    status = specmon(config, "status", host, "--json", "--all")
    assert status.returncode == 0, status.stderr
    return json.loads(status.stdout)["runs"]


def sim_config(tmp_path: Path, state: Path, port: int, time_scale: float) -> Path:
    config = tmp_path / "specmon.toml"
    config.write_text(
        f'[hosts.box]\ntransport = "local"\nstate_dir = "{state}"\n'
        + SIMBENCH_PROFILE_TOML.format(server_port=port, time_scale=time_scale)
    )
    return config


def test_launch_is_refused_while_another_process_listens_on_the_port(
    tmp_path: Path, state: Path, foreign_servers: list[subprocess.Popen[str]]
) -> None:
    """The reproduction: before, `launch --wait ready` printed ready (exit 0) and recorded
    ready_at for the foreign server while the launched one died of "Address already in use"."""
    port = free_port()
    config = sim_config(tmp_path, state, port, 0.003)
    foreign = start_foreign(port, foreign_servers)
    launched = specmon(config, "launch", "box", "-p", "simbench", "--wait", "ready")
    assert launched.returncode != 0, launched.stdout
    refusal = launched.stderr.strip()
    assert f"port {port}" in refusal and "already in use" in refusal, refusal
    assert f"pid {foreign.pid}" in refusal and "answer_200.py" in refusal, refusal
    user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    assert f"user {user}" in refusal, refusal
    assert len(refusal.splitlines()) == 1 and "Traceback" not in launched.stderr
    assert not (state / "runs").exists() or not any((state / "runs").iterdir())
    assert runs_of(config) == []


def test_a_listener_that_takes_the_port_during_loading_never_makes_the_run_ready(
    tmp_path: Path, state: Path, foreign_servers: list[subprocess.Popen[str]]
) -> None:
    """The race the pre-check cannot see: the port is free at launch, another server takes it
    while the simulator loads (it binds only after loading). Its health answers 200, but the
    run is never ready: it fails with the bind error as its root cause."""
    port = free_port()
    config = sim_config(tmp_path, state, port, 0.006)
    launch = subprocess.Popen(
        [
            *(sys.executable, "-m", "specmon", "--config", str(config), "launch", "box"),
            *("-p", "simbench", "--wait", "ready", "--json"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert launch.stdout is not None
        first = json.loads(launch.stdout.readline())  # printed once the helper launched it
        start_foreign(port, foreign_servers)
        rest, err = launch.communicate(timeout=TIMEOUT)
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.wait(10)
    events = [json.loads(line) for line in rest.splitlines()]
    kinds = [e.get("kind") for e in events]
    assert launch.returncode != 0, kinds
    assert "ready" not in kinds and not any(e.get("state") == "ready" for e in events), events
    assert any(e.get("kind") == "health" and e.get("status") == 200 for e in events), kinds
    failed = [e for e in events if e.get("kind") == "server_failed"]
    assert failed, kinds
    assert "address already in use" in failed[0]["root_cause"][0].lower(), failed[0]
    run = next(r for r in runs_of(config) if r["run_id"] == first["run_id"])
    assert run["ready_at"] is None and not run["alive"], run
    assert "Traceback" not in err


READY_ELSEWHERE_TOML = """
[hosts.box]
transport = "local"
state_dir = "{state}"

[profiles.elsewhere]
command = ["{{python}}", "{script}"]
model_path = "sim/Kimi-K2.5"
port = {port}
gpu_agent = "none"
stop_grace_s = 2.0

[profiles.elsewhere.env]
SPECMON_TEST_FOREIGN_PID = "{pid_file}"
SPECMON_TEST_HAND_OVER = "{hand_over}"
"""


def elsewhere_config(tmp_path: Path, state: Path, pid_file: Path, hand_over: str) -> Path:
    config = tmp_path / "specmon.toml"
    config.write_text(
        READY_ELSEWHERE_TOML.format(
            state=state,
            script=SUPPORT / "ready_elsewhere.py",
            port=free_port(),
            pid_file=pid_file,
            hand_over=hand_over,
        )
    )
    return config


def test_a_ready_line_while_another_process_holds_the_port_fails_the_run(
    tmp_path: Path, state: Path
) -> None:
    """The server's own ready line is not enough: printed while a process outside the run's
    session holds its port (tests/support/ready_elsewhere.py), the run fails at once, the
    listener named, and a sweep records its point as failed without numbers."""
    pid_file = tmp_path / "foreign.pid"
    config = elsewhere_config(tmp_path, state, pid_file, "start")
    try:
        launched = specmon(config, "launch", "box", "-p", "elsewhere", "--wait", "ready")
        assert launched.returncode != 0, launched.stdout
        foreign_pid = int(pid_file.read_text())
        assert "run state   ready" not in launched.stdout, launched.stdout
        failed = [line for line in launched.stdout.splitlines() if "FAILED" in line]
        assert failed and f"pid {foreign_pid}" in failed[0] and "not by run" in failed[0], failed
        assert all(r["ready_at"] is None for r in runs_of(config)), runs_of(config)
        specmon(config, "stop", "box")
        kill_foreign(pid_file)  # the sweep's launch would be refused while it holds the port

        sweep = specmon(
            config,
            *("sweep", "box", "--profile", "elsewhere", "--grid", "mem-fraction-static=0.8"),
            *("--requests", "2", "--warmup", "0", "--ready-timeout", "30"),
            *("--ledger", str(tmp_path / "ledger.sqlite"), "--json"),
        )
        points = [json.loads(line) for line in sweep.stdout.splitlines()]
        assert points and all(p["status"] == "failed" for p in points), sweep.stderr
        assert all("not by run" in p["error"] for p in points), points
        assert all(p.get("tok_s") is None for p in points), points
    finally:
        kill_foreign(pid_file)


def test_bench_refuses_a_ready_run_whose_port_another_process_took(
    tmp_path: Path, state: Path
) -> None:
    """A run that was ready on its own port, which another process then took: `bench`
    reattaches, asks who listens, and refuses naming the listener (before, it measured
    whatever answered there and stored the numbers under the run's settings)."""
    pid_file = tmp_path / "foreign.pid"
    config = elsewhere_config(tmp_path, state, pid_file, "on-signal")
    try:
        launched = specmon(config, "launch", "box", "-p", "elsewhere", "--wait", "ready")
        assert launched.returncode == 0, launched.stdout + launched.stderr
        (run,) = runs_of(config)
        assert run["ready_at"] is not None, run
        os.kill(run["pid"], signal.SIGUSR1)
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        foreign_pid = int(pid_file.read_text())
        bench = specmon(
            config, "bench", "box", "--requests", "2", "--ledger", str(tmp_path / "l.sqlite")
        )
        assert bench.returncode != 0, bench.stdout
        assert f"pid {foreign_pid}" in bench.stderr and "not by run" in bench.stderr, bench.stderr
        assert "Traceback" not in bench.stderr
    finally:
        kill_foreign(pid_file)


def kill_foreign(pid_file: Path) -> None:
    """Kill the detached listener ready_elsewhere.py started (outside the run's group, so
    stopping the run leaves it) and wait until its port is free."""
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pid_file.unlink()


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/bin/setpriv").exists() or not Path(SYSTEM_PYTHON).exists(),
    reason="needs root, setpriv and a system python3 to run the helper as nobody",
)
def test_a_listener_of_another_user_is_named_by_its_user_and_its_pid_said_unreadable(
    foreign_servers: list[subprocess.Popen[str]],
) -> None:
    """The helper as it runs on a host, as `nobody` (via setpriv), asked to launch on a port
    that root's server holds: /proc/PID/fd of root's process cannot be read, so the refusal
    names the user from /proc/net/tcp and says the pid is unreadable."""
    helper_source = HELPER_SOURCE
    home = Path(tempfile.mkdtemp(prefix="specmon-port-owner-"))
    try:
        shutil.copy(helper_source, home / "specmon_helper.py")
        os.chmod(home, 0o755)
        (home / "state").mkdir(mode=0o700)
        os.chown(home / "state", 65534, 65534)
        port = free_port()
        start_foreign(port, foreign_servers)
        spec = {"argv": ["sleep", "60"], "port": port, "port_must_be_free": True}
        refused = subprocess.run(
            [
                *("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"),
                *(SYSTEM_PYTHON, str(home / "specmon_helper.py"), "launch"),
                *("--state-dir", str(home / "state")),
            ],
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
        )
        assert refused.returncode != 0, refused.stdout
        error = json.loads(refused.stdout.splitlines()[-1])["error"]
        assert f"port {port}" in error, error
        assert "a process of user root (its pid is not readable by this user)" in error, error
        assert not any((home / "state" / "runs").iterdir())
    finally:
        shutil.rmtree(home, ignore_errors=True)

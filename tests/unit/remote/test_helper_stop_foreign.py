"""The helper's `stop-foreign` (what `specmon launch --take-over` runs on the host): the pid is
named with its start ticks (a reused pid is never signalled); only a process this user may
signal is stopped; one in a container or a systemd unit is left to its supervisor unless the
profile says to run its stop command; the escalation is SIGTERM (its group when it leads one,
else its process tree), the grace, SIGKILL, all gone. Real processes throughout; "no
permission" runs the helper as ``nobody`` (setpriv) against a process of root's."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from specmon.remote import HELPER_SOURCE, helper

CID = "4f1c2d3e4b5a69788796a5b4c3d2e1f0" * 2
DOCKER_CGROUP = f"0::/system.slice/docker-{CID}.scope\n"
UNIT_CGROUP = "0::/system.slice/vllm.service\n"
USER_UNIT_CGROUP = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/llm.service\n"


def run_helper(tmp_path: Path, *args: str) -> tuple[int, list[dict]]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = helper.main(["stop-foreign", "--state-dir", str(tmp_path / "state"), *args])
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


def ticks(pid: int) -> int:
    ticks = helper.proc_start_ticks(pid)
    assert ticks is not None
    return ticks


def test_may_signal_is_the_kill_rule_for_a_caller_without_cap_kill() -> None:
    # (real, effective) of the caller; (real, effective, saved) of the target
    assert helper.may_signal((1000, 0), (0, 0, 0))  # root (effective) may
    assert helper.may_signal((1000, 1000), (1000, 1000, 1000))
    assert helper.may_signal((1000, 1000), (1000, 0, 0))  # its real uid is the caller's
    assert helper.may_signal((1000, 1000), (0, 0, 1000))  # its saved uid is the caller's
    assert not helper.may_signal((1000, 1000), (2000, 1000, 2000))  # effective does not count
    assert not helper.may_signal((0, 1000), (2000, 2000, 2000))  # a real root, effective not


def test_the_supervisor_and_its_stop_command_come_from_the_cgroup() -> None:
    docker = helper.supervisor_of(helper.parse_cgroup(DOCKER_CGROUP))
    assert docker == {"kind": "docker", "name": CID}
    assert helper.supervisor_argv(docker)[:2] == ["docker", "stop"]
    unit = helper.supervisor_of(helper.parse_cgroup(UNIT_CGROUP))
    assert helper.supervisor_argv(unit) == ["systemctl", "stop", "--", "vllm.service"]
    user = helper.supervisor_of(helper.parse_cgroup(USER_UNIT_CGROUP))
    assert helper.supervisor_argv(user) == ["systemctl", "--user", "stop", "--", "llm.service"]
    assert helper.supervisor_of(helper.parse_cgroup("0::/user.slice/session-3.scope\n")) is None


@pytest.mark.parametrize(
    ("cgroup", "command"),
    [(DOCKER_CGROUP, "`docker stop 4f1c2d3e"), (UNIT_CGROUP, "`systemctl stop -- vllm.service`")],
)
def test_a_supervised_process_is_refused_without_take_over(
    tmp_path: Path, procs: list, monkeypatch: pytest.MonkeyPatch, cgroup: str, command: str
) -> None:
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    procs.append(proc)
    real = helper.read_capped
    monkeypatch.setattr(
        helper,
        "read_capped",
        lambda path, limit: cgroup.encode() if path == f"/proc/{proc.pid}/cgroup" else real(path, limit),
    )  # fmt: skip
    code, lines = run_helper(tmp_path, f"--pid={proc.pid}", f"--ticks={ticks(proc.pid)}")
    assert code == 3 and lines[-1]["ok"] is False
    error = lines[-1]["error"]
    assert "behind" in error and command in error and "take_over" in error, error
    time.sleep(0.2)
    assert proc.poll() is None  # nothing signalled


def test_a_reused_pid_and_a_gone_pid_are_refused(tmp_path: Path, procs: list) -> None:
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    procs.append(proc)
    code, lines = run_helper(tmp_path, f"--pid={proc.pid}", f"--ticks={ticks(proc.pid) - 1}")
    assert code == 3 and "no longer the process chosen" in lines[-1]["error"]
    assert proc.poll() is None
    gone = subprocess.Popen(["true"])
    gone.wait()
    code, lines = run_helper(tmp_path, f"--pid={gone.pid}", "--ticks=1")
    assert code == 3 and lines[-1]["error"].startswith(f"no process {gone.pid}")


def test_a_process_leading_its_own_group_is_stopped_by_its_group(
    tmp_path: Path, procs: list
) -> None:
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    procs.append(proc)
    time.sleep(0.2)
    code, lines = run_helper(tmp_path, f"--pid={proc.pid}", f"--ticks={ticks(proc.pid)}")
    assert code == 0, lines
    steps = [line["step"] for line in lines if "step" in line]
    assert steps == ["sigterm", "exited", "group_gone"]
    assert f"process group {proc.pid}" in lines[0]["detail"]
    assert (
        lines[-1]["ok"] and lines[-1]["left"] == [] and lines[-1]["steps"][0]["step"] == "sigterm"
    )
    assert not helper.group_members(proc.pid)


def test_a_process_in_another_group_is_stopped_by_its_tree_and_sigkilled_after_the_grace(
    tmp_path: Path, procs: list
) -> None:
    """Its group is this test's (as a nohup server's is its shell's): only its tree goes."""
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", stubborn])
    procs.append(proc)
    time.sleep(0.3)
    assert os.getpgid(proc.pid) != proc.pid
    code, lines = run_helper(
        tmp_path, f"--pid={proc.pid}", f"--ticks={ticks(proc.pid)}", "--grace=0.3"
    )
    assert code == 0, lines
    steps = [line["step"] for line in lines if "step" in line]
    assert steps == ["sigterm", "sigkill", "group_gone"]
    assert "process tree" in lines[0]["detail"] and "not its own" in lines[0]["detail"]
    assert proc.wait(5) == -9


def test_dry_run_checks_and_signals_nothing(tmp_path: Path, procs: list) -> None:
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    procs.append(proc)
    code, lines = run_helper(
        tmp_path, f"--pid={proc.pid}", f"--ticks={ticks(proc.pid)}", "--dry-run"
    )
    assert code == 0 and lines[-1]["may_signal"] and lines[-1]["group"] == "own"
    time.sleep(0.2)
    assert proc.poll() is None


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv"
)
def test_no_permission_to_signal_another_users_process(procs: list) -> None:
    """The helper run as ``nobody`` against a process of root's: refused, naming the user."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    procs.append(proc)
    work = Path(tempfile.mkdtemp(prefix="specmon-nobody-", dir="/tmp"))
    try:
        work.chmod(0o755)
        script = work / "specmon_helper.py"
        script.write_bytes(HELPER_SOURCE.read_bytes())
        script.chmod(0o644)
        state = work / "state"
        state.mkdir(mode=0o777)
        state.chmod(0o777)
        result = subprocess.run(
            [
                "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                sys.executable, str(script), "stop-foreign", "--state-dir", str(state),
                f"--pid={proc.pid}", f"--ticks={ticks(proc.pid)}",
            ],
            capture_output=True, text=True, timeout=30, cwd="/",
        )  # fmt: skip
        assert result.returncode == 3, result.stderr
        error = json.loads(result.stdout.splitlines()[-1])["error"]
        assert error.startswith(f"no permission to signal pid {proc.pid} (user root)"), error
        assert proc.poll() is None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_a_listener_whose_command_holds_a_servers_word_is_named_as_that_server() -> None:
    sock = {"uid": os.getuid(), "inode": 0, "address": ""}
    words = {"specmon.sim": "sglang", "specmon.sim.vllm": "vllm", "pytest": "probe"}
    named = helper.describe_listener(sock, os.getpid(), words)
    assert named["backend"] == "probe" and named["text"].startswith(
        f"a probe server, pid {os.getpid()}"
    )
    plain = helper.describe_listener(sock, os.getpid(), {"nothing-here": "x"})
    assert plain["backend"] is None and plain["text"].startswith(f"pid {os.getpid()} (user ")

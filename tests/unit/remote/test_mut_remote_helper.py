"""The helper's `stop`, run in this process against real process groups started by the test
(a polite one, one that ignores SIGTERM, one whose leader left a child behind, one whose pid
was reused), so mutation testing sees every line of it (docs/testing.md, "Mutation testing").
The same steps over SSH and the local transport are in the stop tests of the session suite."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.process_groups import POLITE, start_group

from specmon.remote import helper as remote_helper

RUN_ID = "20261203-120000-abcd"
# Ignores SIGTERM, says so on stdout, then sleeps: only SIGKILL ends it.
STUBBORN = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def write_run(state: Path, record: dict[str, object]) -> Path:
    rdir = state / "runs" / RUN_ID
    rdir.mkdir(parents=True, mode=0o700)
    (rdir / "run.json").write_text(json.dumps(record))
    return rdir


def record_of(proc: subprocess.Popen[bytes], monitored: bool = True) -> dict[str, object]:
    """run.json as `launch` writes it; the monitor is this test's process (alive throughout)."""
    record: dict[str, object] = {
        "pid": proc.pid,
        "pgid": proc.pid,
        "start_ticks": remote_helper.proc_start_ticks(proc.pid),
    }
    if monitored:
        record["monitor_pid"] = os.getpid()
        record["monitor_ticks"] = remote_helper.proc_start_ticks(os.getpid())
    return record


def stop(
    state: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, list[dict[str, object]]]:
    code = remote_helper.main(
        ["stop", "--state-dir", str(state), "--run-id", RUN_ID, "--by", "me@console", *extra]
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return code, lines


def test_a_polite_server_stops_on_sigterm_within_the_grace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], started: list[subprocess.Popen[bytes]]
) -> None:
    proc = start_group(started, POLITE)
    rdir = write_run(tmp_path, record_of(proc))
    before = time.time()
    code, lines = stop(tmp_path, capsys, "--grace", "20", "--command", "specmon stop x")
    took = time.time() - before
    assert code == 0
    assert [line.get("step") for line in lines] == ["sigterm", "exited", "group_gone", None]
    assert lines[1]["detail"] == "after SIGTERM"
    assert lines[2]["detail"] == "no process left"
    assert lines[3] == {"ok": True, "left": []}
    assert 0 <= lines[0]["seconds"] <= lines[1]["seconds"] <= lines[2]["seconds"] <= took
    assert took < 10  # it did not wait out the grace
    assert proc.wait(timeout=10) == -signal.SIGTERM
    record = json.loads((rdir / "stop.json").read_text())
    assert record.pop("at") == pytest.approx(before, abs=5)
    assert record == {
        "by": "me@console",
        "command": "specmon stop x",
        "reason": "stop",
        "grace": 20.0,
    }


def test_a_server_that_ignores_sigterm_is_killed_after_the_grace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], started: list[subprocess.Popen[bytes]]
) -> None:
    proc = start_group(started, STUBBORN)
    rdir = write_run(tmp_path, record_of(proc))
    before = time.time()
    code, lines = stop(tmp_path, capsys, "--grace", "0.6", "--reason", "replace")
    took = time.time() - before
    assert code == 0
    assert [line.get("step") for line in lines] == ["sigterm", "sigkill", "group_gone", None]
    assert lines[0]["seconds"] < 0.6
    assert 0.6 <= lines[1]["seconds"] <= lines[2]["seconds"] <= took < 10
    assert lines[1]["detail"] == "grace 0.6s ran out"
    assert all(round(line["seconds"], 3) == line["seconds"] for line in lines[:3])
    assert lines[2]["detail"] == "no process left"
    assert lines[3] == {"ok": True, "left": []}
    assert proc.wait(timeout=10) == -signal.SIGKILL
    record = json.loads((rdir / "stop.json").read_text())
    assert record["reason"] == "replace"
    assert record["grace"] == 0.6
    assert record["at"] + 0.6 <= record["sigkill_at"] <= before + took


def test_a_run_already_ended_is_not_signalled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], started: list[subprocess.Popen[bytes]]
) -> None:
    ended = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    ended.wait(timeout=30)
    rdir = write_run(tmp_path, {"pid": ended.pid, "pgid": ended.pid, "start_ticks": 1})
    code, lines = stop(tmp_path, capsys)
    assert code == 0
    assert lines == [
        {"step": "group_gone", "seconds": 0.0, "detail": "already stopped"},
        {"ok": True, "already": True},
    ]
    assert not (rdir / "stop.json").exists()


def test_a_reused_pid_is_not_the_run_and_is_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], started: list[subprocess.Popen[bytes]]
) -> None:
    proc = start_group(started, POLITE)
    record = record_of(proc, monitored=False)
    record["start_ticks"] = int(str(record["start_ticks"])) - 1  # the run's process started earlier
    write_run(tmp_path, record)
    code, lines = stop(tmp_path, capsys)
    assert (code, lines[-1]) == (0, {"ok": True, "already": True})
    time.sleep(0.2)
    assert proc.poll() is None  # the unrelated process was not signalled


def test_a_run_without_a_pid_is_ended(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], started: list[subprocess.Popen[bytes]]
) -> None:
    proc = start_group(started, POLITE)
    write_run(tmp_path, {"pgid": proc.pid})  # no leader recorded and no monitor: not trusted
    code, lines = stop(tmp_path, capsys)
    assert (code, lines[-1]) == (0, {"ok": True, "already": True})
    assert proc.poll() is None


@pytest.mark.parametrize("monitor_ticks_off_by", [0, 1])
def test_a_group_left_by_its_leader_is_stopped_only_while_its_monitor_vouches(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    started: list[subprocess.Popen[bytes]],
    monitor_ticks_off_by: int,
) -> None:
    """A crashed launcher's workers still hold GPUs: the group lives on without its leader.
    The group id is trusted only while the monitor that `launch` started is the same process
    (pid and start time): after a reboot the id may be another user's group."""
    leader = start_group(
        started,
        "import subprocess, sys\n"
        f"child = subprocess.Popen([sys.executable, '-c', {STUBBORN!r}], stdout=subprocess.PIPE)\n"
        "child.stdout.readline()\n"  # its SIGTERM handler is in place
        "print('ready', flush=True)\n",
    )
    assert leader.wait(timeout=30) == 0
    deadline = time.time() + 10
    while not remote_helper.group_members(leader.pid) and time.time() < deadline:
        time.sleep(0.02)
    orphans = remote_helper.group_members(leader.pid)
    assert len(orphans) == 1
    record = record_of(leader)
    record["start_ticks"] = 0  # the leader's pid is gone
    record["monitor_ticks"] = int(str(record["monitor_ticks"])) + monitor_ticks_off_by
    write_run(tmp_path, record)
    code, lines = stop(tmp_path, capsys, "--grace", "0.3", "--kill-wait", "5")
    if monitor_ticks_off_by:
        assert lines[-1] == {"ok": True, "already": True}
        assert remote_helper.group_members(leader.pid) == orphans
        return
    assert code == 0
    assert [line.get("step") for line in lines] == ["sigterm", "sigkill", "group_gone", None]
    assert lines[-1] == {"ok": True, "left": []}
    assert remote_helper.group_members(leader.pid) == []


def test_a_run_with_no_group_on_record_is_a_clear_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path, {"pid": 1})
    code, lines = stop(tmp_path, capsys)
    assert code == 3
    assert lines == [
        {
            "ok": False,
            "error": f"run {RUN_ID} has no record of a process group this helper started",
        }
    ]


def test_waiting_for_a_group_honours_its_deadline(
    started: list[subprocess.Popen[bytes]],
) -> None:
    proc = start_group(started, POLITE)
    before = time.time()
    assert remote_helper.wait_group_gone(proc.pid, before + 0.3) is False
    assert 0.3 <= time.time() - before < 1.0  # looked at every 50 ms, not every second
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    before = time.time()
    assert remote_helper.wait_group_gone(proc.pid, before + 5) is True
    assert time.time() - before < 1
    assert remote_helper.wait_group_gone(proc.pid, before - 1) is True  # deadline past: one look


def test_a_live_leader_without_a_monitor_is_stopped_by_its_own_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], started: list[subprocess.Popen[bytes]]
) -> None:
    """The leader's pid and start time alone say the run lives (no monitor vouches)."""
    proc = start_group(started, POLITE)
    write_run(tmp_path, record_of(proc, monitored=False))
    code, lines = stop(tmp_path, capsys, "--grace", "20")
    assert code == 0
    assert [line.get("step") for line in lines] == ["sigterm", "exited", "group_gone", None]
    # Each step's time is given in milliseconds, and a polite server goes well within a second.
    assert all(round(line["seconds"], 3) == line["seconds"] for line in lines[:3])
    assert lines[1]["seconds"] < 1.0
    assert proc.wait(timeout=10) == -signal.SIGTERM


def test_only_the_runs_process_group_is_signalled_not_its_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], started: list[subprocess.Popen[bytes]]
) -> None:
    """A run whose group is not its session's: only that group is waited for and signalled;
    the session's other processes are left."""
    leader = start_group(
        started,
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', {STUBBORN!r}], stdout=subprocess.PIPE,"
        " process_group=0)\n"
        "child.stdout.readline()\n"
        "print(child.pid, flush=True)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n",
        ready=False,
    )
    assert leader.stdout is not None
    child = int(leader.stdout.readline())
    assert leader.stdout.readline() == b"ready\n"
    assert os.getsid(child) == leader.pid != os.getpgid(child) == child
    record = {
        "pid": child,
        "pgid": child,
        "start_ticks": remote_helper.proc_start_ticks(child),
    }
    write_run(tmp_path, record)
    code, lines = stop(tmp_path, capsys, "--grace", "0.3")
    assert code == 0
    # The group ignores SIGTERM: it is waited for, then killed (the session's id is no group).
    assert [line.get("step") for line in lines] == ["sigterm", "sigkill", "group_gone", None]
    assert remote_helper.group_members(child) == []
    assert leader.poll() is None  # the session's leader, in another group, lives on

"""A server that ignores SIGTERM is SIGKILLed when the stop's grace period runs out: not before,
not much after, with every process of its group, and its end reads "killed after the grace
period" (issue 30 item 2: replacing that SIGKILL with a second SIGTERM survived every stop test,
because no test server ignored SIGTERM). The hostile server's ``ignore-term`` step sets SIGTERM
to SIG_IGN in the leader, and the child its ``fork`` step makes inherits it, so the group can
only end by the escalation; the stop runs through a real session, local and over the real sshd,
and through the helper's tether (the demo's console gone)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.hostile import HOSTILE_SERVER, hostile_profile_toml
from support.hosts import Recorder, kill_everything_under, local_session, ssh_session

from specmon.launch.config import parse_config_text
from specmon.model.run_end import SIGKILL
from specmon.session import HostSession
from specmon.session.helper_client import HELPER_SOURCE
from specmon.state.run_status import RunStatus

# The leader ignores SIGTERM, then forks a child that inherits the ignored disposition.
MODE = "ignore-term,fork,ready,serve"
# How late the SIGKILL may go after the grace by the helper's own clock (it polls the group
# every 0.05 s), and how late the group may vanish by ours (the helper's start over SSH, a
# busy two-core machine).
HELPER_SLACK_S = 0.5
OBSERVED_SLACK_S = 3.0


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    try:
        yield path
    finally:
        kill_everything_under(path)


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(name))
    return found


def ignores_sigterm(pid: int) -> bool:
    """Whether the kernel holds SIGTERM ignored for ``pid`` (its SigIgn mask)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


class GroupWatch:
    """When a process group vanished, by this process's monotonic clock: a thread polls /proc
    every 10 ms, so the test measures the grace with no word from the code under test."""

    def __init__(self, pgid: int, timeout: float) -> None:
        self.pgid = pgid
        self.gone_at: float | None = None
        self._deadline = time.monotonic() + timeout
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while time.monotonic() < self._deadline:
            if not group_members(self.pgid):
                self.gone_at = time.monotonic()
                return
            time.sleep(0.01)

    def join(self) -> float | None:
        self._thread.join(timeout=max(0.0, self._deadline - time.monotonic()) + 1)
        return self.gone_at


def assert_sigterm_ignored_by_the_group(pgid: int) -> None:
    members = group_members(pgid)
    assert len(members) >= 2, members  # the leader and its forked child
    assert all(ignores_sigterm(pid) for pid in members), members


async def ended_run(session: HostSession, run_id: str) -> RunStatus:
    """The run as ``status`` tells it once its monitor has written the leader's exit."""
    deadline = time.monotonic() + 10
    while True:
        run = next(r for r in await session.status() if r.run_id == run_id)
        if (run.exit_signal is not None and not run.alive) or time.monotonic() > deadline:
            return run
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("transport", ["local", "ssh"])
async def test_a_server_that_ignores_sigterm_is_killed_when_the_grace_runs_out(
    transport: str, state_dir: Path, request: pytest.FixtureRequest
) -> None:
    profiles = parse_config_text(hostile_profile_toml(MODE), None, environ={}).profiles
    grace = profiles["hostile"].stop_grace_s
    if transport == "ssh":
        session = ssh_session(
            request.getfixturevalue("sshd"), state_dir, profiles, gpu_agent="none"
        )
    else:
        session = local_session(state_dir, profiles, gpu_agent="none")
    await session.start()
    recorder = Recorder(session)
    try:
        run_id = await session.launch("hostile")
        await session.wait_for(lambda s: s.run_state == "ready", 30)
        run = session.current_run
        assert run is not None and run.pgid is not None
        assert_sigterm_ignored_by_the_group(run.pgid)

        started = time.monotonic()
        watch = GroupWatch(run.pgid, timeout=grace + 30)
        report = await session.stop()
        gone_at = watch.join()

        assert report is not None and report.run_id == run_id
        assert [step for step, _, _ in report.steps] == [
            "sigterm",
            "sigkill",
            "group_gone",
            "gpu_released",
        ]
        seconds = {step: (secs, detail) for step, secs, detail in report.steps}
        kill_seconds, kill_detail = seconds["sigkill"]
        assert grace <= kill_seconds < grace + HELPER_SLACK_S, kill_seconds
        assert kill_detail == f"grace {grace:.1f}s ran out"
        # By this test's own clock: the group lived through the whole grace (no early
        # SIGKILL) and was gone soon after it (a SIGTERM in its place leaves it alive).
        assert gone_at is not None, "the group outlived the stop"
        assert grace <= gone_at - started < grace + OBSERVED_SLACK_S, gone_at - started
        assert group_members(run.pgid) == []

        expected = (
            f"killed after the grace period (stopped by {session.options.owner} "
            f"({session.command_name}))"
        )
        stopped = [e for e in recorder.kinds("run_state") if e.state == "stopped"]
        assert stopped and stopped[-1].end is not None, recorder.kinds("run_state")
        assert stopped[-1].end.kind == "killed" and stopped[-1].detail == expected
        ended = await ended_run(session, run_id)
        assert ended.end is not None and ended.end.kind == "killed", ended.end
        assert ended.exit_signal == SIGKILL and ended.state == expected
        assert not ended.end.failed  # a stop specmon asked for, not a failure of the server
    finally:
        recorder.close()
        await session.close()


def helper(state_dir: Path, *args: str, stdin: str | None = None) -> list[dict]:
    result = subprocess.run(
        [sys.executable, str(HELPER_SOURCE), args[0], "--state-dir", str(state_dir), *args[1:]],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def start_ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2 :].split()[19])


def test_the_tether_kills_a_server_that_ignores_sigterm_once_its_console_is_gone(
    state_dir: Path,
) -> None:
    grace = 1.0
    console = subprocess.Popen(["sleep", "300"])  # stands for the demo's console process
    try:
        spec = {
            "argv": [sys.executable, str(HOSTILE_SERVER)],
            "env": {"SPECMON_HOSTILE_MODE": "ignore-term,fork,serve"},
            "profile": "hostile",
            "port": None,
            "meta": {},
            "tether": {
                "pid": console.pid,
                "ticks": start_ticks(console.pid),
                "grace": grace,
                "owner": "ann@box pid 7",
            },
        }
        (reply,) = helper(state_dir, "launch", stdin=json.dumps(spec))
        assert reply["ok"], reply
        pgid = int(reply["pgid"])
        deadline = time.monotonic() + 10
        while len(group_members(pgid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert_sigterm_ignored_by_the_group(pgid)
    finally:
        console.kill()
        console.wait()
    console_gone = time.monotonic()
    watch = GroupWatch(pgid, timeout=grace + 30)
    gone_at = watch.join()
    assert gone_at is not None, "the tether left the group alive"
    # The monitor looks at its console every 0.5 s, then gives the grace.
    assert grace <= gone_at - console_gone < grace + 0.5 + OBSERVED_SLACK_S
    record = json.loads((state_dir / "runs" / reply["run_id"] / "stop.json").read_text())
    assert record["sigkill_at"] - record["at"] >= grace
    deadline = time.monotonic() + 10
    while True:
        runs = helper(state_dir, "status")[-1]["runs"]
        run = RunStatus.from_helper(next(r for r in runs if r["run_id"] == reply["run_id"]))
        if run.exit_signal is not None or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert run.end is not None and run.end.kind == "killed", run.end
    assert run.exit_signal == SIGKILL
    assert (
        run.state == "killed after the grace period (stopped by ann@box pid 7 (its console ended))"
    )

"""How a run ended, from the helper's records: a stop is a stop whatever the leader's exit
status, the group clean-up's SIGKILL never overwrites the leader's own end, and a leader that
outlived the grace period reads as killed (issue 25 item 2)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.hosts import kill_everything_under

from specmon.model.run_end import RunEnd, run_end
from specmon.session.helper_client import HELPER_SOURCE
from specmon.state.run_status import RunStatus


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    try:
        yield path
    finally:
        kill_everything_under(path)


def helper(state_dir: Path, *args: str, stdin: str | None = None) -> list[dict]:
    result = subprocess.run(
        [sys.executable, str(HELPER_SOURCE), args[0], "--state-dir", str(state_dir), *args[1:]],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def launch(state_dir: Path, script: str) -> str:
    spec = {"argv": ["sh", "-c", script], "env": {}, "profile": "p", "port": None, "meta": {}}
    (reply,) = helper(state_dir, "launch", stdin=json.dumps(spec))
    assert reply["ok"], reply
    time.sleep(0.3)  # the shell sets its traps
    return str(reply["run_id"])


def status(state_dir: Path, run_id: str) -> RunStatus:
    deadline = time.monotonic() + 10
    while True:
        runs = helper(state_dir, "status")[-1]["runs"]
        run = RunStatus.from_helper(next(r for r in runs if r["run_id"] == run_id))
        if not run.alive or time.monotonic() > deadline:
            return run
        time.sleep(0.1)


def stop(state_dir: Path, run_id: str) -> dict[str, dict]:
    steps = helper(
        state_dir,
        "stop",
        "--run-id",
        run_id,
        "--grace",
        "0.5",
        "--kill-wait",
        "5",
        "--by",
        "ann@box pid 7",
        "--command",
        "specmon stop",
    )
    return {s["step"]: s for s in steps if "step" in s}


def test_a_leader_that_ends_on_sigterm_is_stopped_though_its_group_needed_the_sigkill(
    state_dir: Path,
) -> None:
    # A worker that ignores SIGTERM (it inherits the ignored disposition into its sleep).
    run_id = launch(state_dir, "sh -c 'trap \"\" TERM; sleep 300' & sleep 300")
    steps = stop(state_dir, run_id)
    assert "sigkill" in steps  # the group clean-up was needed
    run = status(state_dir, run_id)
    assert run.exit_signal == 15  # the leader's own end, kept
    assert run.end is not None and run.end.kind == "stopped", run.end
    assert run.state == "stopped by ann@box pid 7 (specmon stop)"


def test_a_leader_that_outlives_the_grace_period_is_killed(state_dir: Path) -> None:
    run_id = launch(state_dir, "trap '' TERM; sleep 300")
    assert "sigkill" in stop(state_dir, run_id)
    run = status(state_dir, run_id)
    assert run.exit_signal == 9 and run.end is not None and run.end.kind == "killed"
    assert run.state == "killed after the grace period (stopped by ann@box pid 7 (specmon stop))"
    assert not run.end.failed


def test_a_launch_that_replaces_a_run_names_itself_in_the_old_runs_stop_record(
    state_dir: Path,
) -> None:
    old = launch(state_dir, "sleep 300")
    stop(state_dir, old)
    spec = {
        "argv": ["sleep", "300"],
        "env": {},
        "profile": "q",
        "port": None,
        "meta": {"owner": "bob@desk pid 9"},
        "replaces": [old],
    }
    (reply,) = helper(state_dir, "launch", stdin=json.dumps(spec))
    end = status(state_dir, old).end
    assert end is not None and end.kind == "replaced" and end.replaced_by == reply["run_id"]
    assert end.text().startswith(
        f"replaced by run {reply['run_id']} (profile q, by bob@desk pid 9, at "
    )
    assert RunEnd.from_dict(end.to_dict()) == end


@pytest.mark.parametrize(
    ("exit_info", "stop_record", "kind", "failed"),
    [
        ({"code": None, "signal": 9, "ended_at": 10.0}, {"at": 9.0, "by": "a"}, "stopped", False),
        ({"code": None, "signal": 9, "ended_at": 10.0}, None, "crashed", True),
        ({"code": 0, "signal": None, "ended_at": 10.0}, None, "exited", False),
        ({"code": 1, "signal": None, "ended_at": 10.0}, None, "exited", True),
        # The leader died before the stop began: its end is its own.
        ({"code": None, "signal": 11, "ended_at": 8.0}, {"at": 9.0, "by": "a"}, "crashed", True),
        (
            {"code": None, "signal": 9, "ended_at": 12.0},
            {"at": 9.0, "sigkill_at": 11.0},
            "killed",
            False,
        ),
        (None, None, "unknown", False),
    ],
)
def test_the_end_of_a_run_from_its_records(
    exit_info: dict | None, stop_record: dict | None, kind: str, failed: bool
) -> None:
    end = run_end(exit_info, stop_record)
    assert (end.kind, end.failed) == (kind, failed)

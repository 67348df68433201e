"""The ready time on the host, shared by every client of a run: `annotate --unless-set` keeps
a ready time a client saw live from a later "ready, time unknown" note, and `follow` tells
each ready time noted in meta.json, so a client that read the ready line only in its replay
gets the launcher's load time when its note lands."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from specmon.remote import helper

RUN_ID = "20261203-120000-abcd"
HELPER = Path(helper.__file__)
LIVE = {"ready_at": 1003.5, "ready_late": False, "load_seconds": 3.5}
LATE = {"ready_at": 1009.0, "ready_late": True}


def annotate(state: Path, capsys: pytest.CaptureFixture[str], notes: dict, *extra: str) -> dict:
    argv = ["annotate", "--state-dir", str(state), "--run-id", RUN_ID]
    code = helper.main([*argv, "--json", json.dumps(notes), *extra])
    assert code == 0
    return json.loads(capsys.readouterr().out.splitlines()[-1])


def meta(state: Path) -> dict:
    return json.loads((state / "runs" / RUN_ID / "meta.json").read_text())


def run_dir(state: Path) -> Path:
    rdir = state / "runs" / RUN_ID
    rdir.mkdir(parents=True, mode=0o700)
    return rdir


def test_a_late_note_keeps_a_ready_time_seen_live_and_fills_an_empty_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir(tmp_path)
    # Nothing noted yet: the late note is all there is.
    assert annotate(tmp_path, capsys, LATE, "--unless-set", "ready_at") == {"ok": True}
    assert meta(tmp_path) == LATE
    # The line seen live overwrites it (a plain annotate merges).
    annotate(tmp_path, capsys, LIVE)
    assert meta(tmp_path) == LIVE
    # A late note landing after it changes nothing.
    reply = annotate(tmp_path, capsys, LATE, "--unless-set", "ready_at")
    assert reply == {"ok": True, "kept": "ready_at"}
    assert meta(tmp_path) == LIVE


def test_follow_tells_each_ready_time_noted_once(tmp_path: Path) -> None:
    rdir = run_dir(tmp_path)
    (rdir / "server.log").write_bytes(b"ready\n")
    sleeper = subprocess.Popen(["sleep", "60"])  # the server: its end ends the follow
    (rdir / "run.json").write_text(
        json.dumps(
            {
                "pid": sleeper.pid,
                "pgid": sleeper.pid,
                "start_ticks": helper.proc_start_ticks(sleeper.pid),
            }
        )
    )
    proc = subprocess.Popen(
        [sys.executable, str(HELPER), "follow", "--state-dir", str(tmp_path),
         "--run-id", RUN_ID, "--interval=0.02"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip

    def next_message(*kinds: str) -> dict[str, Any]:
        assert proc.stdout is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, "the helper ended"
            msg = json.loads(line)
            if msg["t"] in kinds:
                return msg
        raise AssertionError(f"no {kinds} within 10s")

    try:
        assert next_message("log", "ready")["t"] == "log"  # no note yet: nothing told
        (rdir / "meta.json").write_text(json.dumps({**LATE, "other": 1}))
        assert next_message("ready") == {"t": "ready", **LATE}
        (rdir / "meta.json").write_text(json.dumps({**LATE, "other": 2}))  # the same time
        (rdir / "meta.json").write_text(json.dumps(LIVE))
        assert next_message("ready") == {"t": "ready", "ready_at": 1003.5, "ready_late": False}
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(10)
        sleeper.kill()
        sleeper.wait()

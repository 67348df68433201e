"""After kill -9 of `specmon demo --headless` (or of a `watch` with ssh options), its
/tmp/specmon-* directory is removed at the next start; a directory whose owner lives, or
whose owner is unknown, is never touched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from support.hosts import kill_everything_under
from support.paths import REPO

from specmon.model.process_owner import this_process
from specmon.session.tempdirs import OWNER_FILE, owned_tempdir, remove_stale


def test_a_killed_demo_leaves_a_dir_the_next_start_removes(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp)}
    demo = subprocess.Popen(
        [sys.executable, "-m", "specmon", "demo", "--headless", "--time-scale", "0.003"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not list(tmp.glob("specmon-demo-*/runs/*")):
            assert time.monotonic() < deadline, "the demo never launched"
            time.sleep(0.1)
        os.kill(demo.pid, signal.SIGKILL)
        demo.wait(10)
        (left,) = tmp.glob("specmon-demo-*")
        assert json.loads((left / OWNER_FILE).read_text())["pid"] == demo.pid
        kill_everything_under(left)  # the demo's tether does this too, in its own time
        assert remove_stale("specmon-demo-", str(tmp)) == [left]
        assert not left.exists()
    finally:
        if demo.poll() is None:
            demo.kill()
        for directory in tmp.glob("specmon-demo-*"):
            kill_everything_under(directory)


def test_dirs_of_a_living_or_unknown_owner_stay(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    mine = owned_tempdir("specmon-ssh-")  # this process lives
    unknown = tmp_path / "specmon-ssh-unknown"
    unknown.mkdir()  # no owner file: perhaps an older specmon's; not ours to judge
    elsewhere = tmp_path / "specmon-ssh-elsewhere"
    elsewhere.mkdir()
    (elsewhere / OWNER_FILE).write_text(json.dumps({**this_process(), "host": "other-host"}))
    reused = tmp_path / "specmon-ssh-reused"
    reused.mkdir()  # the recorded pid now runs another process (a different start time)
    (reused / OWNER_FILE).write_text(json.dumps({**this_process(), "start": 1}))
    assert remove_stale("specmon-ssh-", str(tmp_path)) == [reused]
    assert mine.exists() and unknown.exists() and elsewhere.exists()
    second = owned_tempdir("specmon-ssh-")
    assert second.exists() and mine.exists()

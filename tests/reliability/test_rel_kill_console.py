"""A console killed with SIGKILL at any step of a relaunch (taking the host lock, listing runs,
stopping the old run, launching the new one, attaching) leaves the host usable: the lock is
recovered within seconds, the next relaunch succeeds, exactly one run is live afterwards and
no helper of the killed console is left. Kill points are spread evenly over a measured
relaunch: 12 with SPECMON_RELIABILITY_FULL=1, 4 otherwise."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from support.hostile import hostile_profile_toml
from support.hosts import kill_everything_under, processes_mentioning
from support.reliability import count

REPO = Path(__file__).resolve().parents[2]
KILL_POINTS = count(12, 4)
LOCK_RECOVERY_S = 10.0


def test_a_console_killed_mid_relaunch_leaves_the_lock_recoverable(tmp_path: Path) -> None:
    config = tmp_path / "specmon.toml"
    config.write_text(hostile_profile_toml("ready,serve"))
    state = tmp_path / "state"
    argv = [sys.executable, "-m", "specmon", "--config", str(config)]
    where = ["local", "--state-dir", str(state)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def relaunch(*extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*argv, "launch", *where, "-p", "hostile", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip

    def relaunch_until_the_lock_is_free() -> None:
        deadline = time.monotonic() + LOCK_RECOVERY_S
        while True:
            out, err = relaunch("--wait", "ready", "--timeout", "30").communicate(timeout=60)
            if "busy" not in err or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert "busy" not in err, f"lock not recovered within {LOCK_RECOVERY_S}s: {err}"
        assert "launched" in out, err

    def live_runs() -> list[dict]:
        shown = subprocess.run(
            [*argv, "status", *where, "--json"], capture_output=True, text=True, env=env
        )
        return [r for r in json.loads(shown.stdout)["runs"] if r["alive"]]

    try:
        relaunch_until_the_lock_is_free()  # a first run to replace
        began = time.monotonic()
        relaunch_until_the_lock_is_free()
        duration = time.monotonic() - began
        for k in range(KILL_POINTS):
            console = relaunch()
            time.sleep(duration * (k + 0.5) / KILL_POINTS)
            console.send_signal(signal.SIGKILL)
            console.communicate(timeout=10)
            relaunch_until_the_lock_is_free()
            assert len(live_runs()) == 1, f"kill point {k}"
        helpers = [p for p in processes_mentioning(str(state)) if "hold-lock" in p[1]]
        assert helpers == []
    finally:
        kill_everything_under(state)

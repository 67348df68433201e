"""`specmon launch --wait ready` over a live run waits for the new run's ready, not the old
run's replayed one; launch, relaunch and stop leave stderr clean."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.hosts import free_port, kill_everything_under
from support.paths import REPO
from support.profiles import SIMBENCH_PROFILE_TOML


@pytest.fixture
def box(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    config = tmp_path / "specmon.toml"
    config.write_text(SIMBENCH_PROFILE_TOML.format(server_port=free_port(), time_scale=0.003))
    state = tmp_path / "state"
    try:
        yield config, state
    finally:
        kill_everything_under(state)


def specmon(config: Path, state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "specmon", "--config", str(config), args[0], "local"]
    return subprocess.run(
        [*argv, "--state-dir", str(state), *args[1:]],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_relaunch_with_wait_returns_on_the_new_runs_ready(box: tuple[Path, Path]) -> None:
    config, state = box
    first = specmon(config, state, "launch", "-p", "simbench", "--wait", "ready")
    assert first.returncode == 0, first.stderr
    second = specmon(config, state, "launch", "-p", "simbench", "--wait", "ready", "--json")
    assert second.returncode == 0, second.stderr
    lines = [json.loads(line) for line in second.stdout.splitlines()]
    new_run = lines[0]["run_id"]
    assert lines[-1]["kind"] == "ready"
    assert all(e.get("run_id") in (None, new_run) for e in lines[1:]), "an old run's event"
    status = json.loads(specmon(config, state, "status", "--json").stdout)
    runs = {r["run_id"]: r for r in status["runs"]}
    assert runs[new_run]["alive"] and runs[new_run]["ready_at"] is not None, runs[new_run]
    stopped = specmon(config, state, "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert first.stderr == second.stderr == stopped.stderr == ""

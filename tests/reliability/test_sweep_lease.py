"""Two sweeps on one host (issue 24, item 6): the second is refused while the first runs,
told which sweep holds the host, whose and since when; before, it reattached to the first's
server and replaced it, and the first sweep's point ended "interrupted"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.hosts import free_port, kill_everything_under
from support.paths import REPO
from support.profiles import SIMBENCH_PROFILE_TOML

TIMEOUT = 180


@pytest.fixture
def box(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    state = tmp_path / "state"
    config = tmp_path / "specmon.toml"
    config.write_text(
        f'[hosts.box]\ntransport = "local"\nstate_dir = "{state}"\n'
        + SIMBENCH_PROFILE_TOML.format(server_port=free_port(), time_scale=0.006)
    )
    try:
        yield config, state
    finally:
        kill_everything_under(state)


def sweep_argv(config: Path, ledger: Path) -> list[str]:
    return [
        *(sys.executable, "-m", "specmon", "--config", str(config), "sweep", "box"),
        *("--profile", "simbench", "--grid", "speculative-num-steps=2"),
        *("--requests", "2", "--max-tokens", "16", "--warmup", "0", "--ready-timeout", "90"),
        *("--ledger", str(ledger), "--json"),
    ]


def test_a_second_sweep_is_refused_while_the_first_holds_the_host(
    box: tuple[Path, Path], tmp_path: Path
) -> None:
    config, _state = box
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = subprocess.Popen(
        sweep_argv(config, tmp_path / "first.sqlite"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert first.stderr is not None
        said: list[str] = []
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:  # the lease is named before the sweep starts
            line = first.stderr.readline()
            said.append(line)
            if not line or "launch:" in line:
                break
        assert any("starting sweep s1" in line for line in said), said
        started_at = time.time()
        second = subprocess.run(
            sweep_argv(config, tmp_path / "second.sqlite"),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=env,
        )
        assert second.returncode != 0, second.stderr
        refusal = second.stderr.strip().splitlines()
        assert len(refusal) == 1 and "Traceback" not in second.stderr, second.stderr
        assert "sweep s1 (profile simbench)" in refusal[0], refusal
        assert " pid " in refusal[0] and "since " in refusal[0], refusal
        assert time.strftime("%Y-%m-%d", time.gmtime(started_at)) in refusal[0], refusal
        out, err = first.communicate(timeout=TIMEOUT)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(10)
    assert first.returncode == 0, err
    points = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [p["status"] for p in points] == ["ok"], (points, err)

    # The lease ends with the sweep: the same command now runs (resuming nothing: done).
    third = subprocess.run(
        sweep_argv(config, tmp_path / "second.sqlite"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
    )
    assert third.returncode == 0, third.stderr

"""Cancelling a sweep is the runner's job: at once while a point waits for ready or
benchmarks, but never in the middle of a launch or stop (the host session could keep the host
lock); the sweep stays resumable ('interrupted')."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.hosts import kill_everything_under, local_session, sim_profiles

from specmon.experiments.bench.runner import BenchSettings
from specmon.experiments.ledger import Ledger
from specmon.experiments.sweep import (
    PointStarted,
    SweepEvent,
    SweepPlan,
    SweepRunner,
    parse_grid,
    plan_points,
)
from specmon.launch.config import BUILTIN_CONFIG_TOML, parse_config_text


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    try:
        yield path
    finally:
        kill_everything_under(path)


async def test_a_cancel_asked_during_a_launch_waits_for_the_first_safe_moment(
    state_dir: Path, tmp_path: Path
) -> None:
    profiles = sim_profiles()
    config = dataclasses.replace(
        parse_config_text(BUILTIN_CONFIG_TOML, None, environ={}), profiles=profiles
    )
    session = local_session(state_dir, profiles, gpu_agent="none")
    await session.start()
    answers: list[bool] = []
    seen: list[str] = []
    try:
        plan = SweepPlan(
            host=session.host_label,
            profile="fast",
            axes=parse_grid(["speculative-num-steps=2,3"]),
            baseline=False,
            bench=BenchSettings(requests=1, max_tokens=16, warmup=0),
        )
        points = plan_points(config, plan, python=sys.executable)
        with Ledger(tmp_path / "ledger.sqlite3") as ledger:
            runner = SweepRunner(session, ledger, plan, points, ready_timeout_s=60)

            def on_event(event: SweepEvent) -> None:
                seen.append(type(event).__name__)
                if isinstance(event, PointStarted) and not answers:
                    answers.append(runner.request_cancel())  # the launch is about to run

            runner.on_event = on_event
            task = asyncio.get_running_loop().create_task(runner.run())
            with pytest.raises(asyncio.CancelledError):
                await task
            assert runner.sweep_id is not None
            sweep = ledger.get_sweep(runner.sweep_id)
            assert sweep is not None and sweep.status == "interrupted"
    finally:
        await session.close()
    assert answers == [False]  # deferred: a launch was in progress
    assert seen[-1] in ("PointLoading", "PointBenchmarking")  # cancelled at the first safe step
    assert "PointFinished" not in seen

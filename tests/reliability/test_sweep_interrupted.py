"""A sweep point whose server another console replaced is interrupted (resumable, saying who),
not failed; a sweep whose process was killed with SIGKILL reads as interrupted, not running."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.hosts import free_port, kill_everything_under
from support.paths import REPO
from support.profiles import SIMBENCH_PROFILE_TOML

from specmon.experiments.bench.runner import BenchSettings
from specmon.experiments.ledger import Ledger
from specmon.experiments.sweep import (
    PointInterrupted,
    PointLoading,
    SweepPlan,
    SweepRunner,
    parse_grid,
    plan_points,
)
from specmon.launch.config import parse_config_text
from specmon.session import SessionOptions, open_session


async def test_a_point_replaced_by_another_console_is_interrupted_not_failed(
    tmp_path: Path,
) -> None:
    config = parse_config_text(
        SIMBENCH_PROFILE_TOML.format(server_port=free_port(), time_scale=0.01), None, environ={}
    )
    state = tmp_path / "state"
    sweeper = open_session(
        "local", config, options=SessionOptions(state_dir=str(state), gpu_agent="none")
    )
    other = open_session(
        "local",
        config,
        options=SessionOptions(state_dir=str(state), gpu_agent="none", owner="ops@other pid 1"),
    )
    replaced: list[asyncio.Task[str]] = []

    def on_event(event: object) -> None:
        if isinstance(event, PointLoading) and event.shards_done and not replaced:
            # another console, attached to the sweep's run, relaunches the host
            replaced.append(asyncio.ensure_future(relaunch_from_elsewhere()))

    async def relaunch_from_elsewhere() -> str:
        await other.start()
        return await other.launch("simbench")

    await sweeper.start()
    try:
        plan = SweepPlan(
            host=sweeper.host_label,
            profile="simbench",
            axes=parse_grid(["speculative-num-steps=2"]),
            baseline=False,
            bench=BenchSettings(requests=1, max_tokens=8, warmup=0),
        )
        points = plan_points(config, plan, python=sys.executable)
        with Ledger(tmp_path / "ledger.sqlite3") as ledger:
            runner = SweepRunner(sweeper, ledger, plan, points, on_event=on_event)
            with pytest.raises(PointInterrupted, match="ops@other pid 1") as info:
                await runner.run()
            new_run = await replaced[0]
            assert new_run in str(info.value) and "not failed" in str(info.value)
            assert ledger.sweep_points(1) == []  # nothing recorded against the combination
            sweep = ledger.get_sweep(1)
            assert sweep.status == "interrupted" and "ops@other pid 1" in (sweep.note or "")
            assert ledger.resumable_sweep(plan.key).id == 1
        assert any(r.alive and r.run_id == new_run for r in await sweeper.status())
    finally:
        await sweeper.close()
        await other.close()
        kill_everything_under(state)


def test_a_sweep_killed_with_sigkill_reads_as_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    code = (
        "import os, signal, sys\n"
        "from specmon.experiments.ledger import Ledger\n"
        "ledger = Ledger(sys.argv[1])\n"
        "ledger.start_sweep('k', 'host', 'p', {'grid': []})\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", code, str(path)], env=env, timeout=30)
    with Ledger(path) as ledger:
        sweep = ledger.get_sweep(1)
        assert sweep.status == "interrupted", sweep
        assert "ended without a word" in (sweep.note or "")
        assert ledger.resumable_sweep("k").id == 1
        live = ledger.start_sweep("k2", "host", "p", {"grid": []})
        assert ledger.get_sweep(live).status == "running"  # this process lives

"""`[ui] gpu_sample_hz`, `http_poll_s` and `log_lines` take effect (they were documented and
read, but nothing used them)."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

from support.hosts import kill_everything_under
from support.tui_replay import FROZEN_NOW, ReplayController, recorded_session

from specmon.launch.config import parse_config_text
from specmon.model.events import GpuSample, LogLine
from specmon.session import SessionOptions, open_session
from specmon.tui.app import SpecmonApp
from specmon.tui.widgets.log_pane import LogPane

UI = """
[ui]
gpu_sample_hz = 20.0
http_poll_s = 0.5
log_lines = 150
"""


def test_sample_and_poll_rates_reach_the_session_unless_the_caller_chose() -> None:
    config = parse_config_text(UI, None, environ={})
    options = open_session("local", config).options
    assert (options.gpu_rate_hz, options.health_interval_s) == (20.0, 0.5)
    chosen = SessionOptions(gpu_rate_hz=2.0, health_interval_s=7.0)
    options = open_session("local", config, options=chosen).options
    assert (options.gpu_rate_hz, options.health_interval_s) == (2.0, 7.0)


async def test_the_gpu_agent_samples_at_gpu_sample_hz(tmp_path: Path) -> None:
    config = parse_config_text(UI, None, environ={})
    state = tmp_path / "state"
    session = open_session(
        "local", config, options=SessionOptions(state_dir=str(state), gpu_agent="sim")
    )
    queue = session.bus.subscribe()
    try:
        await session.start()
        arrivals: list[float] = []
        deadline = time.monotonic() + 20
        while len(arrivals) < 12 and time.monotonic() < deadline:
            at, event = await asyncio.wait_for(queue.get(), 20)
            if isinstance(event, GpuSample):
                arrivals.append(at)
        gaps = sorted(b - a for a, b in itertools.pairwise(arrivals[1:]))
        assert gaps[len(gaps) // 2] < 0.15, gaps  # 20 Hz, not the default 4 Hz (0.25 s)
    finally:
        await session.close()
        kill_everything_under(state)


async def test_the_log_pane_keeps_log_lines() -> None:
    config = parse_config_text(UI, None, environ={})
    app = SpecmonApp(ReplayController(recorded_session()), config, clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.3)
        for i in range(400):
            app.controller.bus.publish(LogLine(text=f"line {i}", offset=i))
        await pilot.pause(0.6)
        view = app.main.query_one(LogPane).log_view
        assert view.max_lines == 150 and len(view.lines) == 150
        assert view.lines[-1].text == "line 399"

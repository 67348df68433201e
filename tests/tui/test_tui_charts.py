"""Issue 26 item 5: the history's acceptance-by-position chart has SGLang's data (from the
probe, as the throughput panel shows), its key is beside the charts, not over the lines; the
draft/verify panel shows no extend figures for vLLM, which has no extend phase; sparklines
rise from zero, so 68.5 -> 69.5 tok/s looks like the noise it is."""

from __future__ import annotations

import re

from support.paths import REPO
from support.tui_replay import FROZEN_NOW, T0, ReplayController, recorded_session
from textual.widgets import Static
from textual_plotext import PlotextPlot

from specmon.launch.config import load_config
from specmon.model.events import ProbeTiming, RunInfo
from specmon.state.store import StateStore
from specmon.tui.app import SpecmonApp
from specmon.tui.screens.history_charts import HistoryScreen
from specmon.tui.widgets.throughput import ThroughputPanel
from specmon.tui.widgets.timing import render_timing


def sglang_app() -> SpecmonApp:
    controller = ReplayController(recorded_session())
    return SpecmonApp(controller, load_config(REPO / "specmon.toml"), clock=lambda: FROZEN_NOW)


async def test_sglang_history_charts_acceptance_by_position_from_the_probe() -> None:
    app = sglang_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(0.3)
        shown = app.main.query_one(ThroughputPanel).query_one("#positions", Static)
        assert "acceptance by position" in str(shown.render())  # the live panel has them
        series = app.session_history.position_series()
        assert len(series) == 3 and all(points for points in series)  # 4 draft tokens - root
        await pilot.press("h")
        await pilot.pause(0.3)
        assert isinstance(app.screen, HistoryScreen)
        legend = str(app.screen.query_one("#legend", Static).render())
        assert "acceptance by position: ■ 1  ■ 2  ■ 3" in legend
        chart = app.screen.query_one("#chart-accept_by_position", PlotextPlot)
        drawn = re.sub(r"\x1b\[[0-9;]*m", "", chart.plt.build())
        assert "pos 1" not in drawn  # plotext's own legend box overprinted the lines
        # the launch (at minute 0) is a vertical line beside the y axis, on every row
        assert sum(("┤│" in row or "││" in row) for row in drawn.splitlines()) >= 8, drawn


async def test_sparklines_rise_from_zero_so_noise_looks_like_noise() -> None:
    app = sglang_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(0.3)
        spark = app.main.query_one("#tps-spark")
        spark.data = [68.5, 69.5] * 10  # type: ignore[attr-defined]
        await pilot.pause(0.2)
        bars = "".join(segment.text for segment in spark.render_line(0)).strip()
        assert bars and set(bars) <= {"▇", "█"}, bars


def timing_of(backend: str) -> str:
    store = StateStore()
    store.apply(RunInfo(run_id="r1", backend=backend), T0)
    for step in range(5):
        store.apply(
            ProbeTiming(wall=T0 + step, draft_ms=1.0, verify_ms=20.0, extend_ms=0.0, cycle_ms=21.0),
            T0 + step,
        )
    return render_timing(store, 80).plain


def test_vllm_shows_no_extend_phase_and_sglang_does() -> None:
    vllm = timing_of("vllm")
    assert "draft" in vllm and "verify" in vllm
    assert "extend" not in vllm
    assert "extend" in timing_of("sglang")


async def test_acceptance_by_position_keeps_both_live_panels_whole() -> None:
    """The positions row makes the throughput panel a row taller: the live row grows with it,
    so neither its nor the draft/verify panel's bottom border is cut (it was at 7 rows)."""
    from specmon.tui.widgets.timing import TimingPanel

    app = sglang_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(0.3)
        panel = app.main.query_one(ThroughputPanel)
        assert panel.has_class("-positions")
        row = app.main.query_one("#live-row").region
        for widget in (panel, app.main.query_one(TimingPanel)):
            assert widget.outer_size.height == 8
            assert widget.region.bottom <= row.bottom, (widget, widget.region, row)

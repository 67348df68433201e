"""Issue 29 item 1, the console's part: the Latency & capacity panel, the saturation badges,
the ITL and TTFT p90 history charts and the fleet overview's columns, fed ``latency`` events
through the store (no server); the simulator's own figures: tests/e2e/test_latency_console.py."""

from __future__ import annotations

import io
import math
import re

import pytest
from rich.console import Console
from support.console import wait_until
from support.latency_sample import (
    ITL,
    TTFT,
    sample_latency,
    saturated_latency,
    session_with_latency,
)
from support.paths import REPO
from support.tui_replay import FROZEN_NOW, T0, ReplayController, recorded_session
from textual.widgets import Static
from textual_plotext import PlotextPlot

from specmon.backends import get_backend
from specmon.launch.config import load_config
from specmon.model.events import LatencyGroup, RunInfo
from specmon.model.quantiles import WindowQuantiles
from specmon.state.fleet import fleet_row, sort_rows
from specmon.state.saturation import SATURATION_LEGEND, kv_badge, saturation_badges
from specmon.state.store import StateStore
from specmon.tui.app import SpecmonApp
from specmon.tui.fleet_app import FleetApp
from specmon.tui.formatting import format_latency, format_tokens
from specmon.tui.history import SessionHistory
from specmon.tui.screens.help import HelpScreen
from specmon.tui.screens.history_charts import HistoryScreen
from specmon.tui.widgets.fleet_table import COLUMNS, FleetTable
from specmon.tui.widgets.gpus import GpuPanel
from specmon.tui.widgets.header import HeaderBar
from specmon.tui.widgets.latency import LatencyPanel, panel_rows, render_latency
from specmon.tui.widgets.log_pane import LogPane

BADGES = ("QUEUE ↑", "KV 93%", "PREEMPT")


def make_app(events: list | None = None) -> SpecmonApp:
    controller = ReplayController(events if events is not None else recorded_session())
    return SpecmonApp(controller, load_config(REPO / "specmon.toml"), clock=lambda: FROZEN_NOW)


def text_of(widget: Static) -> str:
    return str(widget.render())


def panel_text(app: SpecmonApp) -> str:
    return text_of(app.main.query_one(LatencyPanel))


async def shows(pilot, app: SpecmonApp, words: str, where=panel_text) -> str:
    """Wait (bounded) until ``words`` is drawn: the panels redraw on the console's timer."""
    await wait_until(pilot, lambda: words in where(app), 10, repr(words))
    return where(app)


def header_text(app: SpecmonApp) -> str:
    return text_of(app.main.query_one(HeaderBar))


# --- formatting ------------------------------------------------------------------------------


def test_latencies_read_in_the_unit_that_fits() -> None:
    assert format_latency(None) == "—"
    assert format_latency(0.00085) == "850 µs"
    assert format_latency(0.0062) == "6.2 ms"
    assert format_latency(0.062) == "62 ms"
    assert format_latency(0.9996) == "1.00 s"  # never "1000 ms"
    assert format_latency(1.75) == "1.75 s"
    assert format_latency(12.34) == "12.3 s"
    assert format_latency(125.0) == "2m05s"
    assert format_tokens(None) == "—"
    assert [format_tokens(n) for n in (812, 12_561, 560_138, 1_200_000)] == [
        "812",
        "12.6k",
        "560k",
        "1.20M",
    ]


def test_badges_are_the_flags_that_are_up_in_the_legends_order() -> None:
    assert saturation_badges(None) == ()
    assert saturation_badges(sample_latency()) == ()
    assert saturation_badges(saturated_latency()) == BADGES
    assert saturation_badges(sample_latency(preempting=True, preemptions=1.0)) == ("PREEMPT",)
    assert kv_badge(0.899) == "KV 89%" and kv_badge(0.9) == "KV 90%"  # floored, never up
    assert [badge for badge, _ in SATURATION_LEGEND] == ["QUEUE ↑", "KV 9x%", "PREEMPT"]


# --- the panel -------------------------------------------------------------------------------


def test_every_figure_is_in_the_panel_with_its_unit() -> None:
    text = render_latency(sample_latency(), 76).plain
    lines = text.splitlines()
    assert re.search(r"TTFT\s+62 ms\s+94 ms\s+121 ms", text), text
    assert re.search(r"ITL\s+16 ms\s+35 ms\s+48 ms", text), text
    assert re.search(r"e2e\s+1\.75 s\s+2\.35 s\s+2\.90 s", text), text
    assert "req/s 0.80" in text and "done length 40  stop 8" in text
    assert "running 5/48" in text and "waiting 0" in text
    assert "KV " in text and " 2%  12.6k/560k tok" in text
    assert "prompt p50 380 tok" in text and "gen p50 100 tok" in text
    assert "prefix cache hit 12%" in text and "preempted 0 in window" in text
    # the two engines, below the figures on an 80-column panel
    assert re.search(r"engine\s+run\s+wait\s+KV\s+ITL p90\s+TTFT p90", text), text
    assert re.search(r"^0\s+3\s+0\s+3%\s+35 ms\s+94 ms", lines[7]), lines
    assert re.search(r"^1\s+2\s+0\s+2%\s+35 ms\s+94 ms", lines[8]), lines
    assert all(len(line) <= 76 for line in lines)


def test_absent_figures_are_a_dash_with_why_never_zero() -> None:
    latency = sample_latency(
        itl_s=WindowQuantiles(count=0.0, mean=None, p50=None, p90=None, p99=None),
        max_running=None,
        kv_total_tokens=None,
        finished=None,
        prefix_cache_hit_rate=None,
        preemptions=None,
        prompt_tokens=None,
        requests_per_s=None,
        groups=(),
    )
    text = render_latency(latency, 100).plain
    assert re.search(r"ITL\s+—  none in window", text), text  # served, nothing in the window
    assert re.search(r"TPOT\s+—  not served", text), text  # no such family
    assert re.search(r"queue\s+—  not served", text), text
    assert "req/s — (not served)" in text and "done — (not served)" in text
    assert "running 5/— (limit unknown)" in text
    assert "12.6k/— (size unknown)" in text
    assert "prompt p50 — (not served)" in text
    assert "prefix cache hit — (not served)" in text and "preempted — (not served)" in text
    assert not re.search(r"(?<![\d.])0(\.0+)? ?(ms|s|%|tok)\b", text), text  # no made-up zero


def test_a_wide_panel_puts_the_group_table_beside_and_a_short_one_says_how_many() -> None:
    latency = sample_latency()
    wide = render_latency(latency, 156).plain.splitlines()
    assert len(wide) == 6 and "engine" in wide[0] and "TTFT" in wide[1]
    assert panel_rows(latency, 156) == 8 and panel_rows(latency, 76) == 8 + 3
    short = render_latency(latency, 76, lines=6).plain
    assert "run wait" not in short and "2 by engine hidden" in short
    assert panel_rows(latency, 76, room=8) == 8
    many = tuple(LatencyGroup(name=str(n), running=n) for n in range(9))
    below = render_latency(sample_latency(groups=many), 76).plain.splitlines()
    assert below[-1] == "+6 more (watch --json)" and len(below) == 6 + 1 + 3 + 1
    beside = render_latency(sample_latency(groups=many), 156).plain.splitlines()
    assert "+5 more (watch --json)" in beside[5]


async def test_the_panel_fills_from_latency_events_and_says_why_while_empty() -> None:
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await shows(pilot, app, "No latency figures yet")
        await pilot.pause(0.3)
        panel = app.main.query_one(LatencyPanel)
        assert panel.display and panel.outer_size.height == 8
        hint = get_backend("sglang").metrics_hint
        assert hint and hint in panel_text(app)  # how the run's server is made to serve it
        app.controller.bus.publish(sample_latency(), FROZEN_NOW)
        text = await shows(pilot, app, "121 ms")
        assert re.search(r"ITL\s+16 ms\s+35 ms\s+48 ms", text), text
        assert "No latency figures yet" not in text
        assert panel.border_subtitle == "/metrics · last 60 s"
        app.controller.bus.publish(sample_latency(span_s=12.0, itl_s=None), FROZEN_NOW)
        text = await shows(pilot, app, "ITL          —  not served")
        assert panel.border_subtitle == "/metrics · window filling: 12 of 60 s"


@pytest.mark.parametrize(("size", "shown"), [((80, 24), False), ((160, 48), True)])
async def test_c_shows_or_hides_the_panel_and_the_screen_still_fits(size, shown) -> None:
    app = make_app(session_with_latency(saturated_latency()))
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.3)
        panel = app.main.query_one(LatencyPanel)
        gpus = app.main.query_one(GpuPanel)
        log = app.main.query_one(LogPane)
        await wait_until(pilot, lambda: app.main.has_class("-live"), 10, "live")
        await pilot.pause(0.3)
        assert panel.display is shown  # where it fits beside every GPU row, by default
        assert gpus.outer_size.height == 8 + 2
        for want in (not shown, shown):
            await pilot.press("c")
            await wait_until(pilot, lambda want=want: panel.display is want, 5, f"shown={want}")
            await pilot.pause(0.3)
            if want:
                assert "QUEUE" not in panel_text(app) and "93%" in panel_text(app)
            total = sum(
                w.outer_size.height for w in app.main.children if w.display and w.id != "banner"
            )
            assert total <= size[1], total  # nothing pushed off the screen
            assert log.outer_size.height >= 4
            assert app.main.max_scroll_y == 0
        if size == (80, 24):  # shown on 24 rows: the GPU panel gave up its rows, not the log
            await pilot.press("c")
            await wait_until(pilot, lambda: panel.display, 5, "shown")
            await pilot.pause(0.3)
            assert gpus.outer_size.height == 3 and panel.outer_size.height == 8
            assert "2 by engine hidden" in panel_text(app)


async def test_c_while_loading_says_when_the_panel_comes() -> None:
    app = make_app(recorded_session(ready=False))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.3)
        await pilot.press("c")
        await wait_until(
            pilot,
            lambda: any("once the server is ready" in str(n.message) for n in app._notifications),
            5,
            "the toast",
        )
        assert not app.main.query_one(LatencyPanel).display


# --- header badges ---------------------------------------------------------------------------


async def test_badges_appear_when_the_server_saturates_and_go_when_it_recovers() -> None:
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        assert not any(badge in header_text(app) for badge in BADGES)
        app.controller.bus.publish(saturated_latency(), FROZEN_NOW)
        header = await shows(pilot, app, "PREEMPT", header_text)
        assert all(badge in header for badge in BADGES), header
        # said before the uptime and the flags, which an 80-column header cuts first
        assert header.index("ready") < header.index("QUEUE ↑") < header.index("up 10m")
        app.controller.bus.publish(sample_latency(kv_usage=0.95, kv_near_full=True), FROZEN_NOW)
        header = await shows(pilot, app, "KV 95%", header_text)
        assert "QUEUE" not in header and "PREEMPT" not in header
        app.controller.bus.publish(sample_latency(), FROZEN_NOW)
        await wait_until(pilot, lambda: "KV 9" not in header_text(app), 10, "no badge")
        app.controller.bus.publish(saturated_latency(), FROZEN_NOW)
        await shows(pilot, app, "PREEMPT", header_text)
        app.controller.bus.publish(RunInfo(run_id="next", profile="kimi-eagle3"), FROZEN_NOW)
        # a new run: the last run's figures are not this one's
        await wait_until(pilot, lambda: "PREEMPT" not in header_text(app), 10, "no badge")


async def test_help_explains_each_badge() -> None:
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), 5, "help")
        console = Console(width=100, file=io.StringIO(), record=True)
        console.print(app.screen.table)
        console.print(app.screen.badges)
        lines = [line.strip() for line in console.export_text().splitlines()]
        assert any(line.startswith("c ") and "Latency panel" in line for line in lines)
        for badge, meaning in SATURATION_LEGEND:
            assert any(line.startswith(badge) and meaning[:30] in line for line in lines), badge


# --- history charts --------------------------------------------------------------------------


def test_the_history_keeps_itl_and_ttft_p90_in_ms_and_skips_windows_without_one() -> None:
    history = SessionHistory()
    history.record(T0, RunInfo(run_id="a", profile="p"))
    history.record(T0 + 4, sample_latency())
    history.record(
        T0 + 8, sample_latency(itl_s=None, ttft_s=WindowQuantiles(0, None, None, None, None))
    )
    history.record(T0 + 12, sample_latency(itl_s=WindowQuantiles(9, 0.02, 0.01, 0.05, 0.06)))
    history.flush()
    assert list(history.itl_p90_ms) == [
        (T0 + 4, pytest.approx(35.0)),
        (T0 + 12, pytest.approx(50.0)),
    ]
    assert list(history.ttft_p90_ms) == [
        (T0 + 4, pytest.approx(94.0)),
        (T0 + 12, pytest.approx(94.0)),
    ]


def drawn(chart: PlotextPlot) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", chart.plt.build())


async def test_history_charts_itl_and_ttft_p90_with_each_launch_marked() -> None:
    events = recorded_session()
    for step in range(30):  # a scrape every 4 s for two minutes, ITL p90 rising
        itl = WindowQuantiles(count=900.0, mean=0.02, p50=0.016, p90=0.030 + step / 1000, p99=0.05)
        events.append((T0 + 300.0 + 4 * step, sample_latency(itl_s=itl)))
    events.append((T0 + 430.0, RunInfo(run_id="second", profile="kimi-eagle3")))
    for step in range(30):
        events.append((T0 + 440.0 + 4 * step, sample_latency(ttft_s=TTFT, itl_s=ITL)))
    app = make_app(events)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(0.3)
        await pilot.press("h")
        await wait_until(pilot, lambda: isinstance(app.screen, HistoryScreen), 10, "history")
        await pilot.pause(0.3)
        assert len(app.session_history.itl_p90_ms) == 60
        assert app.session_history.itl_p90_ms[-1][1] == pytest.approx(35.0)
        for key, title in (
            ("itl_p90_ms", "inter-token latency p90"),
            ("ttft_p90_ms", "time to first token p90"),
        ):
            chart = app.screen.query_one(f"#chart-{key}", PlotextPlot)
            picture = drawn(chart)
            assert title in picture
            # both launches are vertical lines, the second one inside the plot
            rows = picture.splitlines()
            assert sum(("┤│" in row or "││" in row) for row in rows) >= 6, picture
            assert sum(row.count("│") >= 3 for row in rows) >= 6, picture  # axis, launch 2, frame
            assert "⠀" in picture or any(ch in picture for ch in "⡀⠄⠂⠁⢀⠠⠐⠈"), picture
        legend = text_of(app.screen.query_one("#legend", Static))
        assert "launch 2: kimi-eagle3" in legend


# --- the fleet overview ----------------------------------------------------------------------


def test_a_fleet_row_has_the_hosts_itl_p90_and_saturation() -> None:
    def row_of(events):
        controller = ReplayController(events)
        controller.replay()
        return fleet_row("h", controller.bus.store, FROZEN_NOW, {})

    calm = row_of(session_with_latency(sample_latency()))
    busy = row_of(session_with_latency(saturated_latency()))
    silent = row_of(recorded_session())
    assert calm.itl_p90_s == pytest.approx(0.035) and calm.saturation == () and calm.latency_known
    assert busy.saturation == BADGES
    assert silent.itl_p90_s is None and not silent.latency_known
    slow = row_of(
        session_with_latency(sample_latency(itl_s=WindowQuantiles(9, 0.1, 0.1, 0.2, 0.3)))
    )
    ranked = sort_rows([calm, silent, slow], "itl")
    assert [row.itl_p90_s for row in ranked] == [pytest.approx(0.2), pytest.approx(0.035), None]
    store = StateStore()
    store.apply(RunInfo(run_id="r", profile="p"), T0)
    store.apply(saturated_latency(), T0)  # figures of a run that is not ready: none shown
    assert fleet_row("h", store, T0, {}).saturation == ()


async def test_the_fleet_overview_shows_itl_p90_and_saturation_per_host() -> None:
    hosts = [
        ("calm", ReplayController(session_with_latency(sample_latency()), host_label="calm:22")),
        ("busy", ReplayController(session_with_latency(saturated_latency()), host_label="busy:22")),
        ("quiet", ReplayController(recorded_session(), host_label="quiet:22")),
    ]
    app = FleetApp(hosts, load_config(REPO / "specmon.toml"), clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(240, 20)) as pilot:
        table = app.screen.query_one(FleetTable)

        def cells(name: str) -> dict[str, str]:
            return dict(zip(COLUMNS, (str(cell) for cell in table.get_row(name)), strict=True))

        await wait_until(pilot, lambda: cells("busy")["ITL p90"] == "35 ms", 10, "ITL p90")
        assert cells("busy")["saturation"] == "QUEUE ↑ KV 93% PREEMPT"
        assert (cells("calm")["ITL p90"], cells("calm")["saturation"]) == ("35 ms", "none")
        assert (cells("quiet")["ITL p90"], cells("quiet")["saturation"]) == ("-", "-")


async def test_a_quantile_the_histogram_only_bounds_is_shown_as_a_bound() -> None:
    """Every token under the lowest ITL bucket (10 ms) and every request past the highest
    finite TTFT bucket (30 s): the panel says "<10 ms" and ">30.0 s", never the 5/9/9.9 ms
    Prometheus interpolates from 0; `watch` says the same."""
    from specmon.commands.printers import latency_text
    from specmon.model.quantiles import window_quantiles

    itl = window_quantiles({0.01: 900.0, 0.05: 900.0, math.inf: 900.0})
    ttft = window_quantiles({1.0: 0.0, 30.0: 0.0, math.inf: 12.0})
    event = sample_latency(itl_s=itl, ttft_s=ttft)
    app = make_app(session_with_latency(event))
    async with app.run_test(size=(160, 48)) as pilot:
        text = await shows(pilot, app, "<10 ms")
        assert re.search(r"ITL\s+<10 ms\s+<10 ms\s+<10 ms", text), text
        assert re.search(r"TTFT\s+>30\.0 s\s+>30\.0 s\s+>30\.0 s", text), text
        assert "9.0 ms" not in text and "5.0 ms" not in text
    line = latency_text(event)
    assert "ITL p50 <10 ms p90 <10 ms" in line and "TTFT p50 >30.0 s p90 >30.0 s" in line
    # a bound under 1 ms: watch rounded it to whole ms and said "<0 ms"
    fine = window_quantiles({0.0005: 900.0, 0.005: 900.0, math.inf: 900.0})
    assert "ITL p50 <500 µs p90 <500 µs" in latency_text(sample_latency(itl_s=fine))


def test_a_length_the_histogram_only_bounds_is_shown_as_a_bound() -> None:
    """The prompt and generation p50 come from the same kind of histogram: every prompt past
    the highest finite bucket (vLLM's 1-2-5 buckets stop at 20000 under a 32k context) reads
    ">20.0k tok", not a plain "20.0k tok"; every generation in the lowest bucket (up to 1
    token) reads "<1 tok", not the 0.5 Prometheus interpolates from 0."""
    from specmon.model.quantiles import window_quantiles

    prompt = window_quantiles({10_000.0: 0.0, 20_000.0: 0.0, math.inf: 6.0})
    generation = window_quantiles({1.0: 6.0, 2.0: 6.0, math.inf: 6.0})
    assert (prompt.p50, generation.p50) == (20_000.0, 0.5)  # Prometheus's figures
    event = sample_latency(prompt_tokens=prompt, generation_tokens=generation)
    text = render_latency(event, 100).plain
    assert "prompt p50 >20.0k tok" in text and "gen p50 <1 tok" in text, text

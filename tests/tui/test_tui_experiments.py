"""The console's Experiments screen against the real simulator (host session, local transport).

A sweep of two steps values plus the baseline runs from the form: the table fills in while the
points load and benchmark, ends ranked by tok/s with speed-ups against the baseline measured in
the sweep, and the plot gets one series with the baseline line. An invalid grid is refused
inline. A profile saved from the relaunch form can be launched at once.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from support.console import local_console, wait_until
from support.profiles import SIMBENCH_PROFILE_TOML
from support.sim import free_port
from textual.widgets import Button, Checkbox, Input, Select, Static, TextArea

from specmon.experiments.ledger import Ledger
from specmon.experiments.sweep import parse_grid
from specmon.launch.config import load_config
from specmon.tui.app import SpecmonApp
from specmon.tui.screens.confirm import ConfirmScreen
from specmon.tui.screens.experiments import ExperimentsScreen, console_grid_message
from specmon.tui.screens.relaunch import RelaunchScreen, field_id
from specmon.tui.widgets.load_sweep import LoadChart, LoadSweepTable
from specmon.tui.widgets.sweep_plot import SweepPlot, choose_x_axis
from specmon.tui.widgets.sweep_table import SweepTable, loading_status

TIME_SCALE = "0.002"
CONFIG = 'default_profile = "simbench"\n' + SIMBENCH_PROFILE_TOML


@pytest.fixture
def console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A SpecmonApp over a local HostSession, a private config file, ledger and state dir;
    every server the session started is killed by process group at teardown."""
    monkeypatch.setenv("SPECMON_SIM_TIME_SCALE", TIME_SCALE)
    monkeypatch.setenv("SPECMON_DATA_DIR", str(tmp_path / "data"))
    config_path = tmp_path / "specmon.toml"
    config_path.write_text(CONFIG.format(server_port=free_port(), time_scale=TIME_SCALE))
    config = load_config(config_path)
    with local_console(config, tmp_path / "state", gpu_agent="none") as app:
        yield app


async def wait_connected(pilot, app: SpecmonApp) -> None:
    store = app.controller.bus.store
    await wait_until(
        pilot,
        lambda: store.connection is not None and store.connection.state == "connected",
        15,
        "connected",
    )


def text_of(screen: ExperimentsScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


async def fill_form(pilot, screen: ExperimentsScreen, grid: str, **settings: str) -> None:
    screen.query_one("#grid", TextArea).text = grid
    for key, value in settings.items():
        screen.query_one("#" + key, Input).value = value
    await pilot.pause(0.1)


async def test_a_sweep_fills_the_table_ranks_it_against_the_measured_baseline_and_plots(
    console: SpecmonApp, tmp_path: Path
):
    app = console
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_connected(pilot, app)
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(app.screen, ExperimentsScreen), 5, "screen")
        screen = app.screen
        assert isinstance(screen, ExperimentsScreen)
        assert text_of(screen, "#baseline-line").startswith("no measured baseline")

        # Invalid grids are refused inline and cannot be started.
        await fill_form(pilot, screen, "speculative-num-steps=2,2")
        assert "a value is listed twice" in text_of(screen, "#grid-problem")
        assert screen.query_one("#start", Button).disabled
        await fill_form(pilot, screen, "speculative-num-draft-tokens=2")
        assert "invalid combinations" in text_of(screen, "#grid-problem")
        await fill_form(pilot, screen, "--speculative-num-steps=2")
        assert "without the leading '--'" in text_of(screen, "#grid-problem")
        await pilot.press("ctrl+s")
        await pilot.pause(0.1)
        assert not screen.running and screen.sweep_worker is None
        await fill_form(pilot, screen, "speculative-num-steps=2,3", requests="0")
        assert "requests must be an integer from 1" in text_of(screen, "#settings-problem")
        assert screen.query_one("#start", Button).disabled

        # The valid sweep: 2 points + the baseline, 1 request x 32 tokens.
        await fill_form(pilot, screen, "speculative-num-steps=2,3", requests="1", warmup="0")
        screen.query_one("#max-tokens", Input).value = "32"
        screen.query_one("#baseline", Checkbox).value = True
        await pilot.pause(0.1)
        assert not screen.query_one("#start", Button).disabled, screen.problems
        assert "2 grid points plus the baseline" in text_of(screen, "#sweep-state")
        await pilot.press("ctrl+s")
        table = screen.query_one(SweepTable)
        await wait_until(pilot, lambda: table.row_count == 3, 10, "three rows")
        seen: set[str] = set()

        def loading_or_done() -> bool:
            seen.update(table.statuses.values())
            return "loading" in seen

        await wait_until(pilot, loading_or_done, 30, "a loading point")
        assert screen.query_one("#grid", TextArea).disabled  # the form is locked meanwhile
        # Quitting mid-sweep asks first; "n" keeps everything running.
        await pilot.press("q")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5, "question")
        assert "sweep s1" in str(app.screen.query_one("#question", Static).render())
        await pilot.press("n")
        await pilot.pause(0.1)
        assert screen.running
        # Back on the main screen the sweep goes on (its loading shows there); `s` refuses.
        await pilot.press("escape")
        assert app.screen is app.main
        await pilot.press("s")
        await pilot.pause(0.1)
        assert not isinstance(app.screen, ConfirmScreen)
        await wait_until(pilot, lambda: 1 in screen.results, 30, "a point finished meanwhile")
        await pilot.press("e")
        assert app.screen is screen
        assert table.statuses[0] == "ok"

        def finished() -> bool:
            seen.update(table.statuses.values())
            return screen.finished is not None

        await wait_until(pilot, finished, 90, "the sweep to finish")
        assert not screen.running
        assert {"pending", "loading", "ok"} <= seen

        final = screen.finished
        assert final is not None
        results = final.results
        assert [r.status for r in results] == ["ok", "ok", "ok"], [r.error for r in results]
        measured_baseline = results[0]
        assert measured_baseline.is_baseline and measured_baseline.tok_s
        assert final.baseline is not None
        assert final.baseline.tok_s == pytest.approx(measured_baseline.tok_s)
        # The final table: ranked by tok/s, speed-ups against the measured baseline.
        ranked = table.ranked
        assert [r.tok_s for r in ranked] == sorted((r.tok_s for r in results), reverse=True)
        for number, result in enumerate(ranked):
            row = [str(cell) for cell in table.get_row(f"final-{number}")]
            assert row[2] == "ok"
            assert row[3] == f"{result.tok_s:.1f}"
            if result.is_baseline:
                assert row[1] == "(baseline)" and row[4] == "1.00x"
            else:
                expected = result.tok_s / measured_baseline.tok_s
                assert result.speedup_vs_baseline == pytest.approx(expected)
                assert row[4] == f"{expected:.2f}x"
        assert f"baseline b{final.baseline.benchmark_id}" in text_of(screen, "#baseline-line")
        assert "measured" in text_of(screen, "#baseline-line")
        # The plot: one series over the two steps values, and the baseline line.
        plot = screen.query_one(SweepPlot)
        assert list(plot.series) == ["tok/s"]
        assert [x for x, _ in plot.series["tok/s"]] == [2.0, 3.0]
        assert plot.baseline_tok_s == pytest.approx(measured_baseline.tok_s)
        # The ledger holds the finished sweep; the last server was stopped.
        with Ledger(tmp_path / "data" / "ledger.sqlite3") as ledger:
            sweep = ledger.get_sweep(final.sweep_id)
            assert sweep is not None and sweep.status == "finished"
            assert len(ledger.sweep_points(final.sweep_id)) == 3
        assert app.controller.bus.store.run_state == "stopped"
        await pilot.press("escape")
        assert app.screen is app.main


async def test_a_profile_saved_from_the_relaunch_form_launches_at_once(console: SpecmonApp):
    app = console
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_connected(pilot, app)
        await pilot.press("r")
        await wait_until(pilot, lambda: isinstance(app.screen, RelaunchScreen), 5, "the form")
        form = app.screen
        form.query_one("#" + field_id("speculative-num-steps"), Input).value = "2"
        form.query_one("#" + field_id("speculative-num-draft-tokens"), Input).value = "3"
        form.query_one("#save-name", Input).value = "sim-steps2"
        await pilot.pause(0.1)
        form.query_one("#save", Button).press()
        await pilot.pause(0.2)
        assert "sim-steps2" in app.controller.profiles()
        select = form.query_one("#profile", Select)
        select.value = "sim-steps2"  # offered by the same form, no restart
        await pilot.pause(0.1)
        assert not form.query_one("#launch", Button).disabled, form.problems
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5, "question")
        await pilot.press("y")
        store = app.controller.bus.store
        await wait_until(
            pilot,
            lambda: store.run is not None and store.run.profile == "sim-steps2",
            30,
            "a run of the saved profile",
        )
        await wait_until(pilot, lambda: store.run_state == "ready", 30, "ready")
        assert "--speculative-num-steps 2" in " ".join(store.run.argv)


def test_the_pure_parts_status_text_x_axis_and_grid_messages():
    assert (
        loading_status("target weights", 40.4, 12, 64) == "loading (target weights 12/64, ETA 40 s)"
    )
    assert loading_status(None, None, 0, None) == "loading (starting)"
    axes = parse_grid(["NCCL_PROTO=LL,Simple", "mem-fraction-static=0.8,0.9"])
    assert choose_x_axis(axes) == "mem-fraction-static"
    axes = parse_grid(["mem-fraction-static=0.8", "speculative-num-steps=1,2"])
    assert choose_x_axis(axes) == "speculative-num-steps"
    assert choose_x_axis(parse_grid(["NCCL_PROTO=LL,Simple"])) is None
    message = "--grid: a is given twice; list all its values in one --grid"
    assert (
        console_grid_message(message) == "grid: a is given twice; list all its values on one line"
    )
    assert (
        console_grid_message("--grid 'x': expected NAME=VALUE") == "line 'x': expected NAME=VALUE"
    )


async def test_cancel_asks_keeps_the_sweep_resumable_and_quit_interrupts_it(
    console: SpecmonApp, tmp_path: Path
):
    app = console
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_connected(pilot, app)
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(app.screen, ExperimentsScreen), 5, "screen")
        screen = app.screen
        assert isinstance(screen, ExperimentsScreen)
        await fill_form(pilot, screen, "speculative-num-steps=2,3", requests="1", warmup="0")
        screen.query_one("#max-tokens", Input).value = "16"
        await pilot.pause(0.1)
        await pilot.press("ctrl+s")
        table = screen.query_one(SweepTable)
        await wait_until(pilot, lambda: 0 in screen.results, 40, "the first point")
        sweep_id = screen.sweep_id
        await pilot.press("ctrl+x")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5, "question")
        assert "resumes the sweep" in str(app.screen.query_one("#question", Static).render())
        await pilot.press("y")
        await wait_until(pilot, lambda: not screen.running, 20, "the sweep to stop")
        assert "cancelled" in text_of(screen, "#sweep-state")
        with Ledger(tmp_path / "data" / "ledger.sqlite3") as ledger:
            assert ledger.get_sweep(sweep_id).status == "interrupted"
        # Start again: the finished point is skipped, the other one runs.
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: table.statuses.get(0) == "skipped", 10, "the skip")
        assert screen.sweep_id == sweep_id
        await wait_until(pilot, lambda: table.statuses.get(1) == "loading", 20, "point 2")
        # Quitting mid-sweep asks; yes stops the sweep (resumable) and leaves the app.
        await pilot.press("q")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5, "question")
        # Yes waits, inside the answer's handler, for point 2's launch to finish (a whole
        # load) and its stop before the app exits: pilot.press("y") would wait on that
        # screen for at most 30 s, which a fresh-clone run under load ran past. Answered
        # directly, and the exit waited for here, up to 90 s.
        confirm = app.screen
        assert isinstance(confirm, ConfirmScreen)
        confirm.action_answer(True)
        deadline = time.monotonic() + 90
        while app.return_code is None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert app.return_code == 0, "the app did not exit"
    with Ledger(tmp_path / "data" / "ledger.sqlite3") as ledger:
        assert ledger.get_sweep(sweep_id).status == "interrupted"
        assert [p.status for p in ledger.sweep_points(sweep_id)] == ["ok"]


async def test_a_sweep_at_two_loads_shows_each_load_ranked_and_charts_tok_s_and_itl(
    console: SpecmonApp, tmp_path: Path
):
    """Concurrency "1,2" in the form: a row per setting and load filled in live, ranked per
    load for the chosen objective at the end, and the tok/s and ITL p90 charts with a line per
    setting over the loads (issue 29 item 4). Which setting wins is not asserted."""
    app = console
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_connected(pilot, app)
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(app.screen, ExperimentsScreen), 5, "screen")
        screen = app.screen
        assert isinstance(screen, ExperimentsScreen)
        await fill_form(pilot, screen, "speculative-num-steps=2,3", concurrency="1,0")
        assert "'0' is not a whole number" in text_of(screen, "#settings-problem")
        assert screen.query_one("#start", Button).disabled
        await fill_form(
            pilot, screen, "speculative-num-steps=2,3", requests="1", warmup="0", concurrency="1,2"
        )
        screen.query_one("#max-tokens", Input).value = "16"
        screen.query_one("#objective", Select).value = "itl-p90"
        await pilot.pause(0.1)
        assert screen.plan is not None and screen.plan.loads == (1, 2), screen.problems
        assert "measured at loads 1, 2" in text_of(screen, "#sweep-state")
        assert "its own load" in text_of(screen, "#baseline-line")
        await pilot.press("ctrl+s")
        table = screen.query_one(LoadSweepTable)
        await wait_until(pilot, lambda: table.row_count == 4, 10, "four rows")
        assert table.display and not screen.query_one(SweepTable).display
        await wait_until(pilot, lambda: screen.finished is not None, 90, "the sweep to finish")
        results = screen.finished.results
        assert [(r.concurrency, r.status) for r in results] == [
            (1, "ok"), (2, "ok"), (1, "ok"), (2, "ok"),
        ], [r.error for r in results]  # fmt: skip
        # The final table: per load, ranked by ITL p90 (ties share a rank), the best kept.
        rows = [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]
        assert [row[0] for row in rows] == ["1", "1", "2", "2"]
        for load in (1, 2):
            here = [r for r in results if r.concurrency == load]
            lowest = min(here, key=lambda r: r.load.itl_p90_ms)
            label = f"speculative-num-steps={lowest.params['speculative-num-steps']}"
            assert label in table.best[load]
            first = next(row for row in rows if row[0] == str(load))
            assert first[1] in ("1", "=1") and first[2] == lowest.params["speculative-num-steps"]
        assert "best for itl-p90 at 1:" in text_of(screen, "#sweep-state")
        # The charts: a line per setting over the two loads, tok/s and ITL p90.
        charts = {chart.field: chart for chart in screen.query(LoadChart)}
        assert set(charts) == {"tok_s", "itl_p90_ms"}
        for field, chart in charts.items():
            assert set(chart.series) == {
                "speculative-num-steps=2",
                "speculative-num-steps=3",
            }
            for label, points in chart.series.items():
                assert [load for load, _ in points] == [1, 2]
                mine = [
                    r for r in results if label.endswith("=" + r.params["speculative-num-steps"])
                ]
                assert [value for _, value in points] == [
                    getattr(r.load, field) for r in sorted(mine, key=lambda r: r.concurrency)
                ]
    with Ledger(tmp_path / "data" / "ledger.sqlite3") as ledger:
        stored = ledger.sweep_points(screen.finished.sweep_id)
        assert sorted(p.concurrency for p in stored) == [1, 1, 2, 2]

"""The log pane follows the new run after a relaunch (it stayed at the old run's last line),
and stays put while the operator reads back."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.console import local_console, wait_until
from support.paths import REPO
from support.sim import free_port
from test_tui_sim import relaunch_from_form, store_of

from specmon.launch.config import load_config
from specmon.tui.app import SpecmonApp
from specmon.tui.widgets.log_pane import LogPane


@pytest.fixture
def console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SPECMON_SIM_TIME_SCALE", "0.003")
    config = load_config(REPO / "specmon.toml")
    with local_console(config, tmp_path / "state", gpu_agent="sim") as app:
        yield app


def at_bottom(app: SpecmonApp) -> bool:
    view = app.main.query_one(LogPane).log_view
    return view.scroll_y >= view.max_scroll_y - 1


async def test_the_log_pane_follows_the_new_run_unless_scrolled_up(console: SpecmonApp):
    app = console
    extra = f"--trust-remote-code --enable-metrics --port {free_port()}"
    async with app.run_test(size=(120, 40)) as pilot:
        connected = lambda: getattr(store_of(app).connection, "state", "") == "connected"  # noqa: E731
        await wait_until(pilot, connected, 15, "connected")
        await relaunch_from_form(pilot, app, {"extra-args": extra})
        await wait_until(pilot, lambda: store_of(app).run_state == "ready", 60, "ready")
        await pilot.pause(0.5)
        view = app.main.query_one(LogPane).log_view
        assert view.max_scroll_y > 0 and at_bottom(app)
        first = store_of(app).run.run_id
        await relaunch_from_form(pilot, app, {"extra-args": extra})
        await wait_until(pilot, lambda: store_of(app).run.run_id != first, 30, "the new run")
        await wait_until(pilot, lambda: store_of(app).loading.shards_done > 2, 30, "loading")
        await pilot.pause(0.6)
        assert at_bottom(app), ("while loading", view.scroll_y, view.max_scroll_y)
        await wait_until(pilot, lambda: store_of(app).run_state == "ready", 60, "ready again")
        await pilot.pause(0.6)
        assert at_bottom(app), (view.scroll_y, view.max_scroll_y)
        last = view.lines[-1].text
        assert last in {line.text for line in list(store_of(app).log)[-50:]}
        # read back: the pane stays where the operator put it while lines arrive
        view.scroll_to(y=0, animate=False)
        await pilot.pause(0.1)
        lines_before = len(view.lines)
        app.controller.bus.publish(store_of(app).log[-1])
        await pilot.pause(0.6)
        assert len(view.lines) > lines_before and view.scroll_y == 0

"""Issue 26 item 2: each empty state has its own words. Connecting, the demo starting, a host
that cannot be reached, no server, and a probe that waits for traffic are different things,
and "No server is running. Press r" or "Set probe = true" said in the wrong one misleads."""

from __future__ import annotations

from support.paths import REPO
from support.tui_replay import FROZEN_NOW, T0, ReplayController, recorded_session
from textual.widgets import Static

from specmon.launch.config import load_config
from specmon.model.events import ConnectionState, Decode, Event, ProbeTiming
from specmon.tui.app import SpecmonApp
from specmon.tui.widgets.loading import LoadingPanel
from specmon.tui.widgets.timing import TimingPanel

HOST = "root@gpu-box:22"


def app_over(events: list[tuple[float, Event]], *, autolaunch: str | None = None) -> SpecmonApp:
    controller = ReplayController(events)
    controller.autolaunch = autolaunch
    return SpecmonApp(controller, load_config(REPO / "specmon.toml"), clock=lambda: FROZEN_NOW)


def loading_words(app: SpecmonApp) -> tuple[str, str]:
    panel = app.main.query_one(LoadingPanel)
    return str(panel.border_title), str(panel.query_one("#load-stats", Static).render())


async def test_the_demo_says_it_is_starting_not_that_no_server_runs() -> None:
    app = app_over([], autolaunch="demo")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        title, words = loading_words(app)
        assert title == "Connecting"
        assert "Connecting to the host, then launching profile demo" in words
        assert "No server is running" not in words
        app.controller.bus.publish(ConnectionState(host=HOST, state="connected"), T0)
        await pilot.pause(0.3)
        title, words = loading_words(app)
        assert title == "Starting" and "launching profile demo" in words
        assert "Press r" not in words


async def test_an_unreachable_host_says_why_and_does_not_offer_a_launch() -> None:
    why = "connection refused; trying again in 30s"
    app = app_over([(T0, ConnectionState(host=HOST, state="reconnecting", attempt=2, detail=why))])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        title, words = loading_words(app)
        assert title == "Unreachable"
        assert "Cannot reach the host: connection refused" in words
        assert "No server is running" not in words and "Press r" not in words


async def test_a_url_whose_server_is_not_up_yet_says_the_console_waits_for_it() -> None:
    """`connect http://...` on a loading server: the watch waits, and the panel says why it is
    still connecting, where it said only "Connecting to the host…"."""
    detail = "no answer yet (connection refused or host unreachable): waiting for the server"
    app = app_over([(T0, ConnectionState(host=HOST, state="connecting", detail=detail))])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        title, words = loading_words(app)
        assert title == "Connecting"
        assert "Connecting: no answer yet (connection refused" in words
        assert "Press r" not in words


async def test_a_connected_host_without_a_run_still_offers_a_launch() -> None:
    app = app_over([(T0, ConnectionState(host=HOST, state="connected"))])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        title, words = loading_words(app)
        assert title == "Stopped"
        assert "No server is running. Press r to launch a profile." in words


async def test_with_the_probe_on_and_no_traffic_the_timing_panel_waits() -> None:
    quiet = [
        (at, event)
        for at, event in recorded_session(ready=True)
        if not isinstance(event, (ProbeTiming, Decode))
    ]
    app = app_over(quiet)  # profile kimi-eagle3-nccl, probe = true through kimi-eagle3
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.5)
        words = str(app.main.query_one(TimingPanel).render())
        assert "Waiting for traffic" in words
        assert "Set probe = true" not in words


async def test_the_shard_count_sits_beside_its_bar_not_on_the_kv_cache_row() -> None:
    """ "shards 64/64" led the stats text, whose first line is level with the phase list's
    second row, so it read as the KV cache's. It now ends the bar's own row."""
    app = app_over(recorded_session(ready=False))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.5)
        panel = app.main.query_one(LoadingPanel)
        loading = app.controller.bus.store.loading
        assert loading.shards_total
        count = str(panel.query_one("#shard-count", Static).render())
        assert count.strip() == f"{loading.shards_done}/{loading.shards_total} shards"
        _title, words = loading_words(app)
        assert "shards" not in words.splitlines()[0]
        bar = panel.query_one("#shards")
        assert bar.region.y == panel.query_one("#shard-count").region.y

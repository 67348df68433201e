"""The console against the real simulator through the host session's local transport.

Everything is real: the simulator process, its log tailed by the session, the GPU stand-in
agent, HTTP. The tests drive the app with keys and the relaunch form like an operator would.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
import pytest
from support.console import local_console, wait_until
from support.paths import REPO
from support.sim import free_port
from textual.widgets import Button, Input, Select

from specmon.launch.config import load_config
from specmon.state.store import StateStore
from specmon.tui.app import SpecmonApp
from specmon.tui.screens.relaunch import RelaunchScreen, field_id
from specmon.tui.widgets.banner import Banner
from specmon.tui.widgets.gpus import GpuPanel
from specmon.tui.widgets.loading import LoadingPanel

TIME_SCALE = "0.003"


@pytest.fixture
def console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A SpecmonApp over a local HostSession with a private state dir; every server it
    started is killed by process group at teardown, whatever the test did."""
    monkeypatch.setenv("SPECMON_SIM_TIME_SCALE", TIME_SCALE)
    config = load_config(REPO / "specmon.toml")
    with local_console(config, tmp_path / "state", gpu_agent="sim") as app:
        yield app


async def relaunch_from_form(pilot, app: SpecmonApp, changes: dict[str, str]) -> None:
    """Open the form with `r`, pick the demo profile, apply ``changes``, submit and confirm."""
    await pilot.press("r")
    await wait_until(pilot, lambda: isinstance(app.screen, RelaunchScreen), 5, "the form")
    form = app.screen
    form.query_one("#profile", Select).value = "demo"
    await pilot.pause(0.1)
    for name, value in changes.items():
        widget = form.query_one("#" + field_id(name))
        widget.value = value  # type: ignore[attr-defined]
    await pilot.pause(0.1)
    assert not form.query_one("#launch", Button).disabled, form.problems
    await pilot.press("ctrl+s")
    await pilot.pause(0.1)
    await pilot.press("y")


def store_of(app: SpecmonApp) -> StateStore:
    return app.controller.bus.store


async def test_relaunch_loads_to_ready_streams_panels_and_stops(console: SpecmonApp):
    app = console
    port = free_port()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(
            pilot,
            lambda: (
                store_of(app).connection is not None
                and store_of(app).connection.state == "connected"
            ),
            15,
            "connected",
        )
        # invalid first: topk 1 needs draft tokens == steps + 1
        await pilot.press("r")
        await wait_until(pilot, lambda: isinstance(app.screen, RelaunchScreen), 5, "the form")
        app.screen.query_one("#profile", Select).value = "demo"
        await pilot.pause(0.1)
        app.screen.query_one("#" + field_id("speculative-num-steps"), Input).value = "2"
        await pilot.pause(0.1)
        assert app.screen.query_one("#launch", Button).disabled
        await pilot.press("escape")
        extra = f"--trust-remote-code --enable-metrics --port {port} --decode-log-interval 4"
        await relaunch_from_form(
            pilot,
            app,
            {
                "speculative-num-steps": "2",
                "speculative-num-draft-tokens": "3",
                "NCCL_PROTO": "LL",
                "extra-args": extra,
            },
        )
        loading = app.main.query_one(LoadingPanel)
        await wait_until(pilot, lambda: store_of(app).loading.shards_done > 0, 30, "shards")
        assert loading.display and not app.main.has_class("-live")
        await wait_until(pilot, lambda: store_of(app).run_state == "ready", 60, "ready")
        await pilot.pause(0.3)
        assert app.main.has_class("-live") and not loading.display
        await wait_until(pilot, lambda: len(store_of(app).gpus) == 8, 15, "8 GPU rows")
        await pilot.pause(0.3)
        rows = str(app.main.query_one(GpuPanel).render()).splitlines()
        assert [row.split()[0] for row in rows] == [str(i) for i in range(8)]
        async with httpx.AsyncClient(timeout=30) as client:
            info = (await client.get(f"http://127.0.0.1:{port}/get_server_info")).json()
            assert info["speculative_num_steps"] == 2
            assert info["speculative_num_draft_tokens"] == 3
            request = client.post(
                f"http://127.0.0.1:{port}/generate",
                json={"text": "Hello", "sampling_params": {"max_new_tokens": 48}},
            )
            task = asyncio.ensure_future(request)
            spark = app.main.query_one("#tps-spark")
            await wait_until(pilot, lambda: len(spark.data) > 0, 30, "tok/s data")
            assert all(value > 0 for value in spark.data)
            await task
        assert "steps=2" in str(app.main.query_one("#header").render())
        run = store_of(app).run
        assert run is not None
        await pilot.press("s")
        await pilot.pause(0.1)
        await pilot.press("y")
        await wait_until(pilot, lambda: store_of(app).run_state == "stopped", 40, "stopped")
        loading = app.main.query_one(LoadingPanel)
        await wait_until(pilot, lambda: loading.stop_steps, 10, "stop steps in the panel")
        assert loading.display
        assert run.pgid is not None
        await wait_until(pilot, lambda: not group_alive(run.pgid), 15, "the group to be gone")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_simulated_oom_shows_the_banner_with_its_root_cause(console: SpecmonApp):
    app = console
    port = free_port()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: store_of(app).connection is not None, 15, "connected")
        await relaunch_from_form(
            pilot,
            app,
            {
                "extra-args": f"--trust-remote-code --port {port}",
                "extra-env": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 SPECMON_SIM_FAULT=oom",
            },
        )
        await wait_until(pilot, lambda: store_of(app).run_state == "failed", 60, "failed")
        banner = app.main.query_one(Banner)
        await wait_until(pilot, lambda: banner.has_class("-failed"), 5, "the banner")
        text = str(banner.render())
        assert "Server failed (OOM)" in text
        assert "CUDA out of memory" in text
        assert "command:" in text and "specmon.sim" in text

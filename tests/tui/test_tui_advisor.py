"""The console's advisor view against the real simulator (local transport): `a` shows the
prediction for the running server (chart with the measured point, table with the flags), and
`x` opens the Experiments screen pre-filled with the sweep that checks it."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.console import local_console, wait_until
from support.profiles import SIMBENCH_PROFILE_TOML, vllm_sim_profile_toml
from support.sim import free_port
from textual.widgets import Checkbox, Static, TextArea

from specmon.experiments.bench.runner import BenchSettings, run_benchmark
from specmon.experiments.sweep import session_base_url
from specmon.launch.config import load_config
from specmon.tui.app import SpecmonApp
from specmon.tui.commands import PALETTE_ACTIONS
from specmon.tui.screens.advisor import AdvisorScreen
from specmon.tui.screens.experiments import ExperimentsScreen
from specmon.tui.widgets.advisor_chart import AdvisorChart
from specmon.tui.widgets.advisor_table import AdvisorTable

TIME_SCALE = "0.002"
CONFIG = 'default_profile = "simbench"\n' + SIMBENCH_PROFILE_TOML  # 3 steps, topk 1


@pytest.fixture
def console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SPECMON_DATA_DIR", str(tmp_path / "data"))
    config_path = tmp_path / "specmon.toml"
    config_path.write_text(CONFIG.format(server_port=free_port(), time_scale=TIME_SCALE))
    with local_console(load_config(config_path), tmp_path / "state", gpu_agent="none") as app:
        yield app


async def test_advisor_view_predicts_and_prefills_the_experiments_screen(console: SpecmonApp):
    app = console
    store = app.controller.bus.store
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(
            pilot,
            lambda: store.connection is not None and store.connection.state == "connected",
            15,
            "connected",
        )
        # Before any cycle the view says why there is no prediction, in one line.
        await pilot.press("a")
        await wait_until(pilot, lambda: isinstance(app.screen, AdvisorScreen), 5, "advisor")
        screen = app.screen
        assert isinstance(screen, AdvisorScreen)
        assert str(screen.query_one("#advice-line", Static).render()).startswith("No prediction")
        await pilot.press("x")  # nothing to check yet: stays here
        await pilot.pause(0.1)
        assert app.screen is screen
        await pilot.press("escape")

        await app.controller.launch("simbench")
        await wait_until(pilot, lambda: store.run_state == "ready", 60, "ready server")
        base_url = await session_base_url(app.controller)
        load = BenchSettings(requests=2, max_tokens=160, warmup=0, concurrency=1)
        await run_benchmark(base_url, load)

        await pilot.press("a")
        await wait_until(pilot, lambda: isinstance(app.screen, AdvisorScreen), 5, "advisor")
        screen = app.screen
        assert isinstance(screen, AdvisorScreen)
        await wait_until(pilot, lambda: screen.advice is not None, 10, "a prediction")
        advice = screen.advice
        assert advice is not None and advice.inputs.num_steps == 3
        line = str(screen.query_one("#advice-line", Static).render())
        assert line.startswith("PREDICTION from") and "Recommended:" in line
        assert "measured (server log)" in line
        table = screen.query_one(AdvisorTable)
        assert table.row_count == 10
        chart = screen.query_one(AdvisorChart)
        assert [k for k, _ in chart.predicted] == list(range(1, 11))
        assert chart.measured is not None and chart.measured[0] == 3  # the running setting

        await pilot.press("x")
        await wait_until(pilot, lambda: isinstance(app.screen, ExperimentsScreen), 5, "screen")
        experiments = app.screen
        assert isinstance(experiments, ExperimentsScreen)
        await pilot.pause(0.1)
        k = advice.recommended.num_steps
        steps = sorted({s for s in (k - 1, k, k + 1, 3) if s >= 1})
        grid = experiments.query_one("#grid", TextArea).text
        assert grid == "speculative-num-steps=" + ",".join(map(str, steps))
        assert experiments.query_one("#baseline", Checkbox).value is True
        assert experiments.prediction is advice
        assert experiments.plan is not None and len(experiments.points) == len(steps) + 1
        assert not experiments.running  # nothing starts before the operator presses Start


@pytest.fixture
def vllm_console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SPECMON_DATA_DIR", str(tmp_path / "data"))
    config_path = tmp_path / "specmon.toml"
    text = vllm_sim_profile_toml("vsim", free_port(), k=4, time_scale=TIME_SCALE)
    config_path.write_text('default_profile = "vsim"\n' + text)
    with local_console(load_config(config_path), tmp_path / "state", gpu_agent="none") as app:
        yield app


async def test_on_a_vllm_run_the_view_prefills_a_sweep_over_num_speculative_tokens(
    vllm_console: SpecmonApp,
):
    """vLLM's step count is a key of --speculative-config: the pre-filled grid names it as
    the backend does, and the points it plans are valid vLLM launches."""
    app = vllm_console
    store = app.controller.bus.store
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(
            pilot,
            lambda: store.connection is not None and store.connection.state == "connected",
            15,
            "connected",
        )
        await app.controller.launch("vsim")
        await wait_until(pilot, lambda: store.run_state == "ready", 60, "ready server")
        base_url = await session_base_url(app.controller)
        load = BenchSettings(requests=2, max_tokens=160, warmup=0, concurrency=1)
        await run_benchmark(base_url, load, backend="vllm")

        await pilot.press("a")
        await wait_until(pilot, lambda: isinstance(app.screen, AdvisorScreen), 5, "advisor")
        screen = app.screen
        assert isinstance(screen, AdvisorScreen)
        await wait_until(pilot, lambda: screen.advice is not None, 10, "a prediction")
        advice = screen.advice
        assert advice is not None and advice.inputs.num_steps == 4
        assert advice.inputs.current_tokens == 5 and advice.inputs.extend_ms == 0.0

        await pilot.press("x")
        await wait_until(pilot, lambda: isinstance(app.screen, ExperimentsScreen), 5, "screen")
        experiments = app.screen
        assert isinstance(experiments, ExperimentsScreen)
        await pilot.pause(0.1)
        k = advice.recommended.num_steps
        steps = sorted({s for s in (k - 1, k, k + 1, 4) if s >= 1})
        grid = experiments.query_one("#grid", TextArea).text
        assert grid == "num_speculative_tokens=" + ",".join(map(str, steps))
        assert experiments.plan is not None and len(experiments.points) == len(steps) + 1
        planned = [p.spec.flag("num_speculative_tokens") for p in experiments.points[1:]]
        assert planned == [str(s) for s in steps]
        assert not experiments.running


def test_the_palette_offers_the_advisor():
    assert any(action == "advisor" for _title, _help, action in PALETTE_ACTIONS)

"""The console for a vLLM run: acceptance by position in the throughput panel (no "tokens
None"), the history chart's per-position series, vLLM's loading phases, and a relaunch form
saved as a vLLM profile."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Static

from specmon.backends import get_backend
from specmon.launch.config import parse_config_text
from specmon.launch.spec import form_values
from specmon.model.events import Decode, RunInfo, SpecDecode
from specmon.state.store import StateStore
from specmon.tui.history import SessionHistory
from specmon.tui.screens.relaunch import profile_from_form
from specmon.tui.widgets.loading import _phase_list
from specmon.tui.widgets.throughput import ThroughputPanel, position_acceptance_text

VLLM_PROFILE = """
[profiles.v]
command = ["vllm", "serve"]
model_path = "/m"
draft_model_path = "/d"
tp = 8

[profiles.v.speculative]
method = "eagle3"
num_speculative_tokens = 3
"""


def vllm_store() -> StateStore:
    store = StateStore()
    store.apply(RunInfo(run_id="r", backend="vllm"), at=0.0)
    store.apply(
        Decode(running_req=2, tokens=None, token_usage=0.25, gen_throughput=650.0, queue_req=0),
        at=1.0,
    )
    store.apply(SpecDecode(mean_accept_len=2.9, per_position=(0.82, 0.61, 0.47)), at=1.0)
    return store


def test_position_acceptance_text_has_a_bar_and_value_per_position():
    text = position_acceptance_text([1.0, 0.5, 0.0]).plain
    assert text == "acceptance by position  1 █ 1.00  2 ▄ 0.50  3   0.00"
    many = position_acceptance_text([0.5] * 10).plain
    assert many.endswith("(+2)") and "  8 " in many and "  9 " not in many


class PanelApp(App[None]):
    def compose(self) -> ComposeResult:
        yield ThroughputPanel()


@pytest.mark.asyncio
async def test_the_throughput_panel_shows_acceptance_by_position_for_vllm():
    app = PanelApp()
    async with app.run_test(size=(100, 20)) as pilot:
        panel = app.query_one(ThroughputPanel)
        store = StateStore()
        panel.update_from(store)
        await pilot.pause()
        assert not panel.has_class("-positions")
        assert not app.query_one("#positions", Static).display
        store = vllm_store()
        panel.update_from(store)
        await pilot.pause()
        assert panel.has_class("-positions")
        assert app.query_one("#positions", Static).display
        shown = str(app.query_one("#positions", Static).render())
        assert shown.startswith("acceptance by position  1 ")
        assert "0.82" in shown and "0.47" in shown
        load = str(app.query_one("#load-line", Static).render())
        assert "tokens" not in load and "usage 25%" in load
        accept = str(app.query_one("#accept-stats", Static).render())
        assert "accept len 2.90" in accept


def test_the_history_keeps_acceptance_per_position_over_time():
    history = SessionHistory()
    history.record(10.0, SpecDecode(mean_accept_len=2.0, per_position=(0.8, 0.4)))
    history.record(20.0, SpecDecode(mean_accept_len=2.5, per_position=(0.9, 0.6, 0.3)))
    history.flush()
    assert history.position_series() == [
        [(10.0, 0.8), (20.0, 0.9)],
        [(10.0, 0.4), (20.0, 0.6)],
        [(20.0, 0.3)],
    ]
    assert [value for _, value in history.accept_len] == [2.0, 2.5]


def test_the_loading_panel_lists_vllms_phases():
    store = vllm_store()
    listed = [line[2:] for line in _phase_list(store).plain.splitlines()]
    assert listed == list(get_backend("vllm").loading_phases)
    assert listed == [
        "weights",
        "draft weights",
        "torch.compile",
        "KV cache",
        "CUDA graphs",
        "HTTP server",
        "ready",
    ]


def test_a_relaunch_form_saves_a_vllm_profile_with_vllms_keys():
    profile = parse_config_text(VLLM_PROFILE, None).profiles["v"]
    backend = get_backend("vllm")
    values = form_values(profile.to_launch_spec())
    values["num_speculative_tokens"] = "5"
    values["NCCL_PROTO"] = "Simple"
    saved = profile_from_form(profile, "v5", values, backend)
    assert saved.speculative is not None
    assert saved.speculative.algorithm == "eagle3"
    assert saved.speculative.num_speculative_tokens == 5
    assert saved.draft_model_path == "/d" and saved.env["NCCL_PROTO"] == "Simple"
    assert saved.to_launch_spec().problems() == []

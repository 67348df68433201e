"""Issue 31 item 1: the draft/verify panel shows the draft's wiring in one line, red with the
reason when it cannot work, and nothing when no draft config was read."""

from __future__ import annotations

from support.paths import REPO
from support.tui_replay import FROZEN_NOW, ReplayController, recorded_session

from specmon.launch.config import load_config
from specmon.model.events import DraftInfo, RunInfo
from specmon.state.store import StateStore
from specmon.tui.app import SpecmonApp
from specmon.tui.widgets.timing import TimingPanel, render_wiring, shown_wiring

GOOD = DraftInfo(
    run_id="r",
    draft_architecture="LlamaForCausalLMEagle3",
    draft_hidden_size=4096,
    draft_fc_hidden_size=7168,
    target_hidden_size=7168,
    target_layers=61,
    aux_layer_ids=(2, 30, 58),
    aux_source="checkpoint",
    draft_config_sha256="c" * 64,
)


def test_the_line_and_a_mismatch_in_red() -> None:
    text = render_wiring(GOOD)
    assert text.plain == (
        "draft LlamaForCausalLMEagle3 h4096/h7168 (reads h7168) · aux [2, 30, 58] (checkpoint)"
        " · 61 layers"
    )
    assert "red" not in str(text.style)
    bad = render_wiring(
        DraftInfo(run_id="r", aux_layer_ids=(61,), problems=("ids [61] are at or past",))
    )
    assert bad.plain.startswith("✗ draft ?") and "ids [61] are at or past" in bad.plain
    assert "red" in str(bad.style)


def test_shown_only_when_a_config_was_read_or_it_cannot_work() -> None:
    store = StateStore()
    store.apply(RunInfo(run_id="r"))
    assert shown_wiring(store) is None
    store.apply(DraftInfo(run_id="r", errors=("draft: no such directory",)))
    assert shown_wiring(store) is None  # said by watch, not the panel
    store.apply(GOOD)
    assert shown_wiring(store) is GOOD


async def test_the_panel_shows_the_runs_wiring() -> None:
    events = recorded_session(ready=True)
    run_id = next(e.run_id for _, e in events if isinstance(e, RunInfo))
    at = events[-1][0]
    events.append((at, DraftInfo(**{**_fields(GOOD), "run_id": run_id})))
    app = SpecmonApp(
        ReplayController(events), load_config(REPO / "specmon.toml"), clock=lambda: FROZEN_NOW
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.5)
        panel = app.main.query_one(TimingPanel)
        words = str(panel.render())
        assert "aux [2, 30, 58] (checkpoint) · 61 layers" in words
        assert panel.outer_size.height == 8  # one line more than without a draft config


def _fields(info: DraftInfo) -> dict[str, object]:
    return {k: v for k, v in info.to_dict().items() if k != "kind"} | {
        "aux_layer_ids": info.aux_layer_ids
    }

"""The acceptance-collapse banner (issue 31 item 3) on the console: shown with the figures
and the likely causes when the session says the run collapsed, gone when it recovers; a
cause's text from a record cannot reach the terminal raw."""

from __future__ import annotations

from support.paths import REPO
from support.tui_replay import FROZEN_NOW, ReplayController, recorded_session

from specmon.launch.config import load_config
from specmon.model.diagnosis import Change, Diagnosis
from specmon.model.events import AcceptanceCollapse
from specmon.tui.app import SpecmonApp
from specmon.tui.widgets.collapse_banner import CollapseBanner
from specmon.tui.widgets.log_pane import LogPane


def collapse(run_id: str, **kw: object) -> AcceptanceCollapse:
    aux = Diagnosis(
        "aux_layers_changed",
        "auxiliary layers [2, 30, 58] -> [0, 2, 30, 58] "
        "(eagle_config.eagle_aux_hidden_state_layer_ids): the draft is fed other target layers",
        (Change("aux_layer_ids", [2, 30, 58], [0, 2, 30, 58]),),
    )
    hostile = Diagnosis("env_changed", "the environment changed: env X \x1b[2J\x07 -> 1")
    fields: dict = dict(
        run_id=run_id,
        measure="position_1",
        value=0.19,
        reference_value=0.68,
        reference_run="20261204-101500-ab12",
        cycles=640,
        message="acceptance 0.19 at position 1 against 0.68 ...",
        diagnoses=(aux, hostile),
    )
    fields.update(kw)
    return AcceptanceCollapse(**fields)


async def test_the_banner_shows_the_collapse_and_goes_when_it_clears() -> None:
    controller = ReplayController(recorded_session(ready=True))
    app = SpecmonApp(controller, load_config(REPO / "specmon.toml"), clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.3)
        banner = app.main.query_one(CollapseBanner)
        assert not banner.display
        run_id = controller.bus.store.run.run_id
        controller.bus.publish(collapse(run_id))
        await pilot.pause(0.3)
        assert banner.display
        text = str(banner.render())
        assert (
            "Acceptance collapse: 0.19 at position 1 against 0.68 in run 20261204-101500-ab12"
            in text
        )
        assert "640 drafts" in text
        assert "aux_layers_changed" in text and "[2, 30, 58] -> [0, 2, 30, 58]" in text
        assert "\x1b" not in text and "\x07" not in text
        assert app.main.query_one(LogPane).outer_size.height >= 3  # the log keeps its rows
        controller.bus.publish(collapse(run_id, cleared=True))
        await pilot.pause(0.3)
        assert not banner.display
        controller.bus.publish(collapse("another-run"))  # a replaced run's, late: not shown
        await pilot.pause(0.3)
        assert not banner.display

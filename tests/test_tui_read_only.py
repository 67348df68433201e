"""The console's read-only mode (`specmon serve --read-only`): relaunch, stop and sweeps are
hidden from the footer, the help and the palette, and refused however they are asked for."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from support.tui_replay import FROZEN_NOW, ReplayController, recorded_session

from specmon.config import load_config
from specmon.tui.app import READ_ONLY_REFUSAL, SpecmonApp
from specmon.tui.commands import ConsoleCommands
from specmon.tui.messages import RelaunchRequested
from specmon.tui.screens.confirm import ConfirmScreen
from specmon.tui.screens.relaunch import RelaunchScreen

REPO = Path(__file__).resolve().parents[1]


class CountingController(ReplayController):
    """A replayed session that counts the server-changing calls that reach it."""

    launches = 0
    stops = 0

    async def launch(
        self,
        profile: str,
        *,
        flags: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> str:
        self.launches += 1
        return "r2"

    async def stop(self) -> None:
        self.stops += 1


def make_app(read_only: bool) -> tuple[SpecmonApp, CountingController]:
    controller = CountingController(recorded_session(ready=True))
    config = load_config(REPO / "specmon.toml")
    app = SpecmonApp(controller, config, clock=lambda: FROZEN_NOW, read_only=read_only)
    return app, controller


async def test_read_only_refuses_relaunch_stop_and_sweeps() -> None:
    app, controller = make_app(read_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        for key in ("r", "s", "e"):
            await pilot.press(key)
            await pilot.pause()
            assert app.screen is app.main, key
        for action in ("relaunch", "stop", "experiments"):  # as the palette would run them
            await app.run_action(action)
            await pilot.pause()
            assert app.screen is app.main, action
        app.post_message(RelaunchRequested("kimi-eagle3", {"speculative-num-steps": "2"}, {}))
        await pilot.pause(0.2)
        assert controller.launches == 0 and controller.stops == 0
        assert any(n.message == READ_ONLY_REFUSAL for n in app._notifications)
        shown = {b.binding.action for b in app.active_bindings.values() if b.enabled}
        assert {"relaunch", "stop", "experiments"}.isdisjoint(shown)
        assert "gpu_detail" in shown
        offered = {item[2] for item in ConsoleCommands(app.screen)._offered()}
        assert {"relaunch", "stop", "experiments"}.isdisjoint(offered) and "history" in offered


async def test_without_read_only_the_same_keys_act() -> None:
    app, _ = make_app(read_only=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, RelaunchScreen)
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("s")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)

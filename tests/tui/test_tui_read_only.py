"""The console's read-only mode (`specmon serve --read-only`): relaunch, stop and sweeps are
hidden from the footer, the help and the palette, and refused however they are asked for."""

from __future__ import annotations

from collections.abc import Mapping

from support.paths import REPO
from support.tui_replay import FROZEN_NOW, ReplayController, recorded_session

from specmon.launch.config import load_config
from specmon.launch.spec import LaunchSpec
from specmon.tui.app import READ_ONLY_REFUSAL, SpecmonApp
from specmon.tui.commands import ConsoleCommands
from specmon.tui.messages import RelaunchRequested
from specmon.tui.screens.confirm import ConfirmScreen
from specmon.tui.screens.relaunch import RelaunchScreen
from specmon.tui.widgets.header import HeaderBar


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

    async def launch_spec(self, spec: LaunchSpec, *, profile: str | None = None) -> str:
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
        profile = load_config(REPO / "specmon.toml").profiles["kimi-eagle3"]
        spec = profile.to_launch_spec({"speculative-num-steps": "2"})
        app.post_message(RelaunchRequested("kimi-eagle3", spec))
        await pilot.pause(0.2)
        assert controller.launches == 0 and controller.stops == 0
        assert any(n.message == READ_ONLY_REFUSAL for n in app._notifications)
        shown = {b.binding.action for b in app.active_bindings.values() if b.enabled}
        assert {"relaunch", "stop", "experiments"}.isdisjoint(shown)
        assert "gpu_detail" in shown
        offered = {item[2] for item in ConsoleCommands(app.screen)._offered()}
        assert {"relaunch", "stop", "experiments"}.isdisjoint(offered) and "history" in offered


def refusals(app: SpecmonApp) -> int:
    return sum(n.message == READ_ONLY_REFUSAL for n in app._notifications)


async def test_read_only_shows_a_badge_and_a_refused_key_says_why() -> None:
    """Before: `r` in read-only did nothing, silently, and no badge was drawn."""
    app, controller = make_app(read_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        assert "READ-ONLY" in str(app.main.query_one(HeaderBar).render())
        for count, key in enumerate(("r", "s", "e"), start=1):
            await pilot.press(key)
            await pilot.pause()
            assert refusals(app) == count, key  # a toast for every refused key
            assert app.screen is app.main
        assert controller.launches == 0 and controller.stops == 0
        await pilot.press("question_mark")  # other keys are not refused ...
        await pilot.pause()
        await pilot.press("r")  # ... nor are the help's own keys
        await pilot.pause()
        assert refusals(app) == 3


async def test_the_fleet_console_shows_the_badge_and_says_why() -> None:
    from support.tui_replay import ReplayController as Replay

    from specmon.tui.fleet_app import FleetApp
    from specmon.tui.screens.fleet import FleetScreen

    hosts = [("alpha", Replay(recorded_session(), host_label="root@alpha:22"))]
    app = FleetApp(hosts, load_config(REPO / "specmon.toml"), clock=lambda: FROZEN_NOW)
    app.read_only = True
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.pause(0.2)
        assert isinstance(app.screen, FleetScreen)
        assert "READ-ONLY" in str(app.screen.query_one("#fleet-title").render())
        await pilot.press("r")
        await pilot.pause()
        assert any(n.message == READ_ONLY_REFUSAL for n in app._notifications)
        assert isinstance(app.screen, FleetScreen)


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

"""The fleet console: several hosts in one app, each with its own controller, session, event
queue, main screen and launch state (dolphie's tabs: one failing host does not stop the others).

The overview (specmon.tui.screens.fleet) comes first; `enter` opens a host's main screen (the
single-host console's, unchanged, bound to that host), `f` returns, `[`/`]` step through hosts.
Every action on a main screen targets the host in view.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import ClassVar

from textual import on
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches

from specmon.launch.config import Config
from specmon.model.errors import HostKeyError, SpecmonError, UsageError
from specmon.model.events import ConnectionState
from specmon.state.controller import BesideService, HostController
from specmon.state.fleet import FleetHost, HostOutcome, relaunch_fleet
from specmon.tui.app import CLOSE_TIMEOUT_S, SpecmonApp, run_until_quit
from specmon.tui.host_view import HostView
from specmon.tui.messages import FleetRelaunchAsked, FleetRelaunchRequested, HostChosen
from specmon.tui.screens.fleet import FleetScreen
from specmon.tui.screens.main import MainScreen
from specmon.tui.widgets.log_pane import LogPane

START_ATTEMPTS = 8  # connecting a host that is down: 2, 4, 8, 16, 30, 30, 30 s apart
START_BACKOFF_S = 2.0
START_BACKOFF_MAX_S = 30.0
# On the overview no host is in view: these act on one host's main screen only.
HOST_ONLY_ACTIONS = frozenset(
    {"stop", "experiments", "gpu_detail", "history", "focus_log", "filter_log", "toggle_pause"}
)


class FleetApp(SpecmonApp):
    """The console for several hosts; ``hosts`` pairs each name given with its controller."""

    BINDINGS: ClassVar[list[BindingType]] = [
        *SpecmonApp.BINDINGS,
        Binding("f", "overview", "Fleet"),
        Binding("left_square_bracket", "step_host(-1)", "Previous host", show=False),
        Binding("right_square_bracket", "step_host(1)", "Next host", show=False),
    ]

    def __init__(
        self,
        hosts: Sequence[tuple[str, HostController]],
        config: Config | None = None,
        *,
        clock: Callable[[], float] | None = None,
        start_controller: bool = True,
        read_only: bool = False,
        beside: Sequence[BesideService] = (),
    ) -> None:
        extra = {"clock": clock} if clock is not None else {}
        super().__init__(
            hosts[0][1],
            config,
            start_controller=start_controller,
            read_only=read_only,
            beside=beside,
            **extra,  # type: ignore[arg-type]
        )
        self.views = [
            HostView(name, c, MainScreen(f"{name} · {c.host_label}", screen_id=f"main-{i}"))
            for i, (name, c) in enumerate(hosts)
        ]
        self.view = self.views[0]
        self.fleet = [FleetHost(v.name, v.controller) for v in self.views]
        backends = (
            {name: p.backend for name, p in config.profiles.items()} if config is not None else {}
        )
        self.overview = FleetScreen(self.fleet, backends)
        self.last_fleet_outcomes: list[HostOutcome] = []

    def view_named(self, name: str) -> HostView:
        return next(v for v in self.views if v.name == name)

    # --- life cycle ----------------------------------------------------------------------------

    async def mount_console(self) -> None:
        self.handle_exit_signals()
        for view in self.views:
            # before start: no event missed; lossy as the one-host console (a marker for skips)
            view.queue = view.controller.bus.subscribe(lossy=True)
        if self.read_only:
            self.sub_title = "read-only"
        if not await self.start_beside():
            return
        if self.start_controller:
            for view in self.views:  # in parallel, each in its own worker
                self.run_worker(self._start_host(view), group=f"start:{view.name}")
        for view in self.views:
            # Installed: composed when first opened, then kept mounted when out of view.
            self.install_screen(view.main, name=view.main.id)
        await self.push_screen(self.overview)
        self.overview.refresh_from(self.clock())  # every host's row from the first paint
        self.tick()
        self.set_interval(1.0 / self.redraw_hz, self.tick)

    async def _start_host(self, view: HostView) -> None:
        """Connect one host; its failure is its row's (the store keeps why), not the console's.
        A host that cannot be reached yet (rebooting, network down) is tried again with backoff,
        a bounded number of times; a refused host key or a crash is not retried."""
        label = view.controller.host_label
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                await view.controller.start()
                return
            except (HostKeyError, UsageError) as exc:
                why, retry = str(exc), False
            except SpecmonError as exc:
                why, retry = str(exc), True
            except Exception as exc:  # a crash of one host's controller leaves the others be
                why, retry = f"{type(exc).__name__}: {exc}", False
            if not retry or attempt == START_ATTEMPTS:
                if retry:
                    why += f" (gave up after {attempt} attempts)"
                state = ConnectionState(host=label, state="disconnected", detail=why)
                view.controller.bus.publish(state)
                return
            delay = min(START_BACKOFF_MAX_S, START_BACKOFF_S * 2 ** (attempt - 1))
            view.controller.bus.publish(
                ConnectionState(
                    host=label,
                    state="reconnecting",
                    attempt=attempt,
                    detail=f"{why}; trying again in {delay:.0f}s",
                )
            )
            await asyncio.sleep(delay)

    async def close_sessions(self) -> None:
        await asyncio.gather(*(self._close_host(v) for v in self.views))

    async def _close_host(self, view: HostView) -> None:
        try:
            await asyncio.wait_for(view.controller.close(), CLOSE_TIMEOUT_S)
        except (SpecmonError, asyncio.TimeoutError, OSError) as exc:
            self.log.warning(f"closing the session of {view.name}: {exc}")

    # --- the redraw timer ----------------------------------------------------------------------

    def _tick(self) -> None:
        now = self.clock()
        for view in self.views:
            self.drain(view, now, prefix=self.host_prefix(view))
        self.flush_toasts()
        self._ticks += 1
        live_due = self._ticks % self._live_every == 0
        if self.screen is self.overview:
            if live_due:
                self.overview.refresh_from(now)
        elif self.view.main in self.screen_stack:
            self.refresh_host_screen(self.view, now, live_due=live_due)

    def refresh_host_screen(self, view: HostView, now: float, *, live_due: bool) -> None:
        """Redraw the host in view; the first time, its whole kept log. A screen opened a
        moment ago may still be composing its panels: it is drawn on the next tick."""
        try:
            if not view.panels_ready:
                self.show_kept_log(view.main.query_one(LogPane), view.controller)
                view.pending_lines = []
                view.panels_ready = True
            self.refresh_view(view, now, live_due=live_due)
        except NoMatches:
            view.panels_ready = False

    # --- moving between the overview and the hosts -------------------------------------------

    def _on_console_screen(self) -> bool:
        return self.screen is self.overview or any(self.screen is v.main for v in self.views)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        on_overview = self.screen is self.overview
        if action in HOST_ONLY_ACTIONS and on_overview:
            return False
        if action in ("overview", "step_host") and on_overview:
            return False
        return super().check_action(action, parameters)

    def action_help(self) -> None:
        """On the overview: its own keys first, then the app's that act there."""
        from specmon.tui.screens.help import HelpScreen

        if self.screen is not self.overview:
            super().action_help()
            return
        keys = [
            b
            for b in (*FleetScreen.BINDINGS, *self.BINDINGS)
            if isinstance(b, Binding)
            and (b.action != "relaunch" or not self.read_only)
            and self.check_action(b.action.partition("(")[0], ()) is not False
        ]
        self.push_screen(HelpScreen(keys))

    @on(HostChosen)
    async def _host_chosen(self, message: HostChosen) -> None:
        await self.open_host(message.name)

    async def open_host(self, name: str) -> None:
        """Show ``name``'s main screen (from the overview, or in place of another host's)."""
        view = self.view_named(name)
        if self.screen is not self.overview and not isinstance(self.screen, MainScreen):
            return  # a form or dialog is open on a host: finish it first
        self.view = view
        if self.screen is self.overview:
            await self.push_screen(view.main)
        else:
            await self.switch_screen(view.main)
        # The whole kept log at once (lines that came while the host was out of view too).
        view.panels_ready = False
        self.refresh_host_screen(view, self.clock(), live_due=True)

    async def action_overview(self) -> None:
        if isinstance(self.screen, MainScreen):
            await self.pop_screen()
            self.overview.refresh_from(self.clock())

    async def action_step_host(self, step: int) -> None:
        if not isinstance(self.screen, MainScreen):
            return
        index = self.views.index(self.view)
        await self.open_host(self.views[(index + step) % len(self.views)].name)

    # --- one relaunch on several hosts ---------------------------------------------------------

    @on(FleetRelaunchAsked)
    def _fleet_relaunch_asked(self, message: FleetRelaunchAsked) -> None:
        from specmon.tui.screens.fleet_relaunch import FleetRelaunchScreen

        if self._refused_read_only():
            return
        if self.config is None:
            self.notify("No launch profiles: this console has no config.", severity="warning")
            return
        targets = [h for h in self.fleet if h.name in message.names]
        self.push_screen(FleetRelaunchScreen(targets, self.config))

    @on(FleetRelaunchRequested)
    def _fleet_relaunch_requested(self, message: FleetRelaunchRequested) -> None:
        if self._refused_read_only():
            return
        self.run_worker(self._relaunch_fleet(message), group="fleet-relaunch")

    async def _relaunch_fleet(self, message: FleetRelaunchRequested) -> None:
        views = [self.view_named(n) for n in message.specs]
        busy = [
            HostOutcome(v.name, refusal="a relaunch or sweep of this console is in progress there")
            for v in views
            if v.relaunch_in_progress or v.sweep_running
        ]
        if busy and message.all_or_none:
            outcomes = busy + [
                HostOutcome(v.name, skipped=True)
                for v in views
                if v.name not in {b.name for b in busy}
            ]
        else:
            free = [v for v in views if v.name not in {b.name for b in busy}]
            for v in free:
                v.relaunch_in_progress = True
            self.notify(f"Relaunching {message.profile} on {', '.join(v.name for v in free)}…")
            try:
                outcomes = busy + await relaunch_fleet(
                    [FleetHost(v.name, v.controller) for v in free],
                    message.profile,
                    message.specs,
                    all_or_none=message.all_or_none,
                )
            finally:
                for v in free:
                    v.relaunch_in_progress = False
        self.last_fleet_outcomes = outcomes
        self.report_fleet_outcomes(outcomes)

    def report_fleet_outcomes(self, outcomes: Sequence[HostOutcome]) -> None:
        launched = [f"{o.name} ({o.run_id})" for o in outcomes if o.run_id]
        refused = [o for o in outcomes if o.refusal]
        skipped = [o.name for o in outcomes if o.skipped]
        if launched:
            self.notify("Launched on " + ", ".join(launched), title="Fleet relaunch")
        for outcome in refused:
            self.notify(
                f"{outcome.name} refused: {outcome.refusal}",
                title="Fleet relaunch",
                severity="error",
                timeout=30,
            )
        if skipped:
            self.notify(
                "Not launched (a host refused, all or none): " + ", ".join(skipped),
                title="Fleet relaunch",
                severity="warning",
                timeout=30,
            )


def run_fleet_console(
    hosts: Sequence[tuple[str, HostController]],
    config: Config | None = None,
    *,
    read_only: bool = False,
    beside: Sequence[BesideService] = (),
) -> int:
    """Run the fleet console until the operator quits; returns the process exit code."""
    return run_until_quit(lambda: FleetApp(hosts, config, read_only=read_only, beside=beside))

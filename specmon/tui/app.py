"""The console app: keyboard-first, reading only the controller's event bus and state store.

Nothing here does I/O itself: the host session (behind ``HostController``) runs in workers, and
the panels are redrawn by one timer at ``ui.redraw_hz`` that reads the store and drains a
bounded event queue, so a flood of events costs a batch per tick, never a redraw per event.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from textual import events, on, work
from textual.app import App
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Input

from specmon.launch.config import Config
from specmon.launch.spec import LaunchSpec
from specmon.model.errors import SpecmonError
from specmon.model.events import (
    AgentStatus,
    Dropped,
    LogLine,
    Notice,
    ProbeTiming,
    Ready,
    RunInfo,
    StopProgress,
)
from specmon.model.run_end import who_of
from specmon.model.terminal_text import safe_text
from specmon.state.controller import BesideService, HostController
from specmon.state.store import StateStore
from specmon.tui.commands import ConsoleCommands
from specmon.tui.formatting import format_duration
from specmon.tui.history import SessionHistory
from specmon.tui.host_view import HostView
from specmon.tui.messages import (
    RelaunchRequested,
    SweepRequested,
    TakeOverAsked,
    TakeOverChecked,
    TakeOverRequested,
)
from specmon.tui.screens.advisor import AdvisorScreen
from specmon.tui.screens.confirm import ConfirmScreen
from specmon.tui.screens.experiments import ExperimentsScreen
from specmon.tui.screens.gpu_detail import GpuDetailScreen
from specmon.tui.screens.help import HelpScreen
from specmon.tui.screens.history_charts import HistoryScreen
from specmon.tui.screens.main import MainScreen
from specmon.tui.screens.run_diff import RunDiffScreen
from specmon.tui.themes import load_themes, resolve_theme_name
from specmon.tui.widgets.gpus import GpuPanel
from specmon.tui.widgets.header import HeaderBar
from specmon.tui.widgets.loading import LoadingPanel
from specmon.tui.widgets.log_pane import FilterInput, LogPane

DEFAULT_REDRAW_HZ = 10.0
LIVE_PANEL_HZ = 5.0
GC_GEN0_THRESHOLD = 50_000
MAX_EVENTS_PER_TICK = 20_000  # the lossy bus queue holds 10,000 (plus state changes)
CLOSE_TIMEOUT_S = 10.0
MAX_LOG_APPEND = 2000  # lines written to the log pane per tick; older ones are in the store
# Actions that change a server (relaunch, stop, a sweep's relaunches): none in read-only mode.
TOAST_BATCH_S = 0.5  # how long a Ready or Reattached toast waits for the other hosts' own
TOAST_HEADLINES = {"Ready": "{count} servers ready", "Reattached": "Reattached {count} hosts"}
SERVER_CHANGING_ACTIONS = frozenset({"relaunch", "stop", "experiments"})
READ_ONLY_REFUSAL = "Read-only console: relaunch, stop and sweeps are not available here."


def ledger_sampling(run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Each run's benchmark sampling from this machine's ledger (none when it cannot be
    read: the diff then says sampling was not compared)."""
    from specmon.experiments.ledger import recorded_sampling

    try:
        return recorded_sampling(run_ids)
    except (SpecmonError, OSError):
        return {}


class SpecmonApp(App[int]):
    """The console for one host. ``clock`` is injectable so snapshots show no wall time."""

    TITLE = "specmon"
    CSS_PATH = "app.tcss"
    COMMANDS = App.COMMANDS | {ConsoleCommands}
    ENABLE_COMMAND_PALETTE = True

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
        Binding("r", "relaunch", "Relaunch"),
        Binding("e", "experiments", "Experiments"),
        Binding("s", "stop", "Stop"),
        Binding("l", "focus_log", "Focus the server log", show=False),
        Binding("slash", "filter_log", "Filter the server log", show=False),
        Binding("g", "gpu_detail", "GPUs"),
        Binding("h", "history", "History"),
        Binding("d", "compare_runs", "Compare two runs (what changed)", show=False),
        Binding("c", "toggle_latency", "Latency panel", show=False),
        Binding("a", "advisor", "Advisor", show=False),
        Binding("t", "cycle_theme", "Theme"),
        Binding("p", "toggle_pause", "Pause"),
    ]

    def __init__(
        self,
        controller: HostController,
        config: Config | None = None,
        *,
        clock: Callable[[], float] = time.time,
        start_controller: bool = True,
        read_only: bool = False,
        beside: Sequence[BesideService] = (),
        attach_profile: str | None = None,
    ) -> None:
        super().__init__()
        # The profile whose `attach` key this console follows (`connect HOST -p P`): the
        # take-over form starts on it.
        self.attach_profile = attach_profile
        self.view = HostView(controller.host_label, controller, MainScreen(controller.host_label))
        self.views: list[HostView] = [self.view]  # the fleet console has one per host
        self.read_only = read_only  # hides and refuses every action that changes a server
        self.beside = tuple(beside)
        self.config = config
        self.clock = clock
        self.start_controller = start_controller
        self.exit_on_signals = False  # run_until_quit turns it on; tests keep their loop's handlers
        self.paused = False
        self._closed = False
        self._ticks = 0
        # Ready and Reattached toasts held a moment so a fleet's come as one per kind.
        self._pending_toasts: dict[str, list[tuple[str, str, str]]] = {}
        self._toast_batch_started: dict[str, float] = {}
        ui = config.ui if config is not None else None
        self.redraw_hz = float(ui.redraw_hz if ui is not None else DEFAULT_REDRAW_HZ)
        # GPU, throughput and timing panels redraw at most LIVE_PANEL_HZ (samples come at 4 Hz)
        self._live_every = max(1, round(self.redraw_hz / LIVE_PANEL_HZ))
        self._themes = load_themes()
        for theme in self._themes:
            self.register_theme(theme)
        self.theme = resolve_theme_name(
            ui.theme if ui is not None else None, [t.name for t in self._themes]
        )

    # --- the host in view (the fleet console switches it) ----------------------------------

    @property
    def controller(self) -> HostController:
        return self.view.controller

    @property
    def main(self) -> MainScreen:
        return self.view.main

    @property
    def session_history(self) -> SessionHistory:
        return self.view.history

    @property
    def experiments(self) -> ExperimentsScreen | None:
        return self.view.experiments

    @property
    def relaunch_in_progress(self) -> bool:
        return self.view.relaunch_in_progress

    @relaunch_in_progress.setter
    def relaunch_in_progress(self, value: bool) -> None:
        self.view.relaunch_in_progress = value

    # --- life cycle ----------------------------------------------------------------------------

    async def on_mount(self) -> None:
        await self.mount_console()

    async def mount_console(self) -> None:
        """Signals, the first screen, subscriptions, the redraw timer, the session."""
        self.handle_exit_signals()
        await self.push_screen(self.main)
        # Subscribe and show the kept log in one synchronous step: no line is lost or doubled.
        # Lossy: when the console falls behind, log lines and samples are skipped with a marker
        # (the store has them all); state changes always arrive.
        self.view.queue = self.controller.bus.subscribe(lossy=True)
        self.show_kept_log(self.main.query_one(LogPane), self.controller)
        self.tick()
        self.set_interval(1.0 / self.redraw_hz, self.tick)
        if self.read_only:
            self.sub_title = "read-only"
        if await self.start_beside() and self.start_controller:
            self._start_controller()

    def show_kept_log(self, pane: LogPane, controller: HostController) -> None:
        """The log pane sized as ``[ui] log_lines`` says, showing the lines the store kept."""
        if self.config is not None:
            pane.keep_lines(self.config.ui.log_lines)
        pane.show_all(controller.bus.store.log)

    async def start_beside(self) -> bool:
        """Start the services beside the console; False (and the app exits) if one fails."""
        for service in self.beside:
            try:
                await service.start()
            except SpecmonError as exc:
                self.exit(return_code=1, message=f"specmon: {exc}")
                return False
        return True

    def handle_exit_signals(self) -> None:
        if self.exit_on_signals:
            # A closed terminal (SIGHUP) or a kill (SIGTERM) quits like `q`: the session
            # closes and the caller's clean-up runs (the demo stops its simulator).
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGHUP):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(signum, self.exit)

    @work(exclusive=True, group="session")
    async def _start_controller(self) -> None:
        try:
            await self.controller.start()
        except SpecmonError as exc:
            self.exit(return_code=1, message=f"specmon: {exc}")

    async def close_controller(self) -> None:
        if self._closed:
            return
        self._closed = True
        for view in self.views:
            if view.queue is not None:
                view.controller.bus.unsubscribe(view.queue)
        for service in self.beside:
            await service.close()
        if self.start_controller:
            await self.close_sessions()

    async def close_sessions(self) -> None:
        """Close the host session this console started (the fleet console: each host's)."""
        try:
            await asyncio.wait_for(self.controller.close(), CLOSE_TIMEOUT_S)
        except (SpecmonError, asyncio.TimeoutError, OSError) as exc:
            self.log.warning(f"closing the host session: {exc}")

    async def on_unmount(self) -> None:
        await self.close_controller()

    # --- the redraw timer ----------------------------------------------------------------------

    def tick(self) -> None:
        """Drain the events that arrived since the last tick, then redraw from the store."""
        if self._exit or not self._running:
            return  # shutting down: the panels are being removed
        try:
            self._tick()
        except NoMatches:
            if not (self._exit or not self._running):
                raise

    def _tick(self) -> None:
        now = self.clock()
        self.drain(self.view, now)
        self.flush_toasts()
        self._ticks += 1
        self.refresh_view(self.view, now, live_due=self._ticks % self._live_every == 0)

    def drain(self, view: HostView, now: float, *, prefix: str = "") -> None:
        """Take the events that arrived for ``view``'s host into its history and panels;
        ``prefix`` names the host in notifications (the fleet console)."""
        store = view.controller.bus.store
        queue = view.queue
        shown = view.main.is_mounted and (len(self.views) == 1 or view.panels_ready)
        drained = 0
        last_probe_at: float | None = None
        while queue is not None and drained < MAX_EVENTS_PER_TICK and not queue.empty():
            at, event = queue.get_nowait()
            drained += 1
            view.history.record(at, event)
            if isinstance(event, ProbeTiming):
                last_probe_at = at
            if isinstance(event, (LogLine, Dropped)):
                view.pending_lines.append(event)
            elif isinstance(event, StopProgress) and shown:
                view.main.query_one(LoadingPanel).note_stop(event)
            elif isinstance(event, AgentStatus) and shown:
                problem = (event.detail or "error") if event.state == "error" else None
                view.main.query_one(GpuPanel).set_agent_problem(problem)
                note = event.detail if event.state == "stopped" else None
                view.main.query_one(GpuPanel).set_agent_note(note)
            elif isinstance(event, Ready):
                seconds = event.load_seconds
                if seconds is None:
                    seconds = store.loading.load_seconds
                loaded = (
                    f"loaded in {format_duration(seconds)}"
                    if seconds is not None
                    else "load time unknown"
                )
                self.batch_toast("Ready", prefix, f"Server ready ({loaded})", loaded)
            elif isinstance(event, RunInfo) and event.replaces:
                self.notify(
                    f"{prefix}Run {event.replaces} was replaced by run {event.run_id} "
                    f"(profile {event.profile or '-'}, by {who_of(event.owner) or 'another client'}); "
                    "following it",
                    title="Replaced",
                )
            elif isinstance(event, RunInfo) and event.foreign:
                self.batch_toast(
                    "Attached",
                    prefix,
                    f"Attached to pid {event.pid} ({event.backend}): specmon did not launch it "
                    "and only watches it",
                    f"pid {event.pid}",
                )
            elif isinstance(event, RunInfo) and event.reattached:
                self.batch_toast(
                    "Reattached", prefix, f"Reattached to run {event.run_id}", f"run {event.run_id}"
                )
            elif isinstance(event, Notice):  # said once per run and source: worth a toast
                self.notify(f"{prefix}{event.message}", title="Left out", severity="warning")
        if last_probe_at is not None:  # the probe's per-position counts (SGLang), for `h`
            view.history.sample_positions(last_probe_at, store.accept_by_position.ratios())
        if len(view.pending_lines) > MAX_LOG_APPEND:  # a host out of view: the store has them
            del view.pending_lines[:-MAX_LOG_APPEND]

    def batch_toast(self, title: str, prefix: str, message: str, short: str) -> None:
        """Hold a Ready or Reattached toast for TOAST_BATCH_S: hosts of a fleet reattach or get
        ready within moments of each other, and six stacked toasts covered half the screen.
        ``short`` is what the collapsed toast says of this host ("run R", "loaded in 35s")."""
        pending = self._pending_toasts.setdefault(title, [])
        if not pending:
            self._toast_batch_started.setdefault(title, time.monotonic())
        pending.append((prefix, message, short))

    def flush_toasts(self, *, force: bool = False) -> None:
        """One toast per kind whose window has passed: the message itself for one host,
        "Reattached 3 hosts: a (run R), ..." for several."""
        now = time.monotonic()
        for title in list(self._pending_toasts):
            started = self._toast_batch_started.get(title, now)
            if not force and now - started < TOAST_BATCH_S:
                continue
            pending = self._pending_toasts.pop(title)
            self._toast_batch_started.pop(title, None)
            if len(pending) == 1 or not pending[0][0]:  # one host, or a one-host console
                for prefix, message, _ in pending:
                    self.notify(f"{prefix}{message}", title=title)
                continue
            hosts = "; ".join(
                f"{prefix.removesuffix(': ')} ({short})" for prefix, _, short in pending
            )
            headline = TOAST_HEADLINES.get(title, title + " {count} hosts")
            self.notify(f"{headline.format(count=len(pending))}: {hosts}", title=title)

    def refresh_view(self, view: HostView, now: float, *, live_due: bool) -> None:
        """Redraw ``view``'s main screen from its store (and the GPU detail over it)."""
        store = view.controller.bus.store
        if view.pending_lines and live_due:  # the log scrolls at the live panels' rate
            view.main.query_one(LogPane).append_lines(view.pending_lines)
            view.pending_lines = []
        view.main.autolaunch = view.controller.autolaunch
        view.main.probe_on = self.probe_on(store)
        view.main.refresh_from(store, now, self.paused, live_due)
        if isinstance(self.screen, GpuDetailScreen):
            self.screen.refresh_from(store)

    def probe_on(self, store: StateStore) -> bool | None:
        """Whether the followed run's profile (in this console's config) has the probe on."""
        run = store.run
        if self.config is None or run is None or run.profile not in self.config.profiles:
            return None
        return self.config.profiles[run.profile].probe

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: Any = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """Every toast (screens' and widgets' too, which call this) carries text that may come
        from a server (an error's root cause): shown without escape sequences and, unless a
        caller asks, without interpreting ``[...]`` as markup."""
        super().notify(
            safe_text(message),
            title=safe_text(title),
            severity=severity,
            timeout=timeout,
            markup=markup,
        )

    # --- actions -------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Read-only: the server-changing actions are hidden from the footer and never run."""
        return not (self.read_only and action in SERVER_CHANGING_ACTIONS)

    def _say_read_only(self, event: events.Key) -> None:
        """Read-only: the key of a hidden server-changing action says why nothing happens (its
        binding is hidden and refused, so the key would otherwise do nothing, silently)."""
        if self.read_only and self._on_console_screen() and event.key in self._refused_keys():
            event.stop()
            self._refused_read_only()

    def _refused_keys(self) -> set[str]:
        return {
            b.key
            for b in self.BINDINGS
            if isinstance(b, Binding) and b.action in SERVER_CHANGING_ACTIONS
        }

    def _on_console_screen(self) -> bool:
        """On the console itself (not a dialog, a form or the help, which have keys of their
        own)."""
        return self.screen is self.main

    def _refused_read_only(self) -> bool:
        if self.read_only:
            self.notify(self.controller.read_only_reason or READ_ONLY_REFUSAL, severity="warning")
        return self.read_only

    @property
    def sweep_running(self) -> bool:
        return self.view.sweep_running

    async def action_quit(self) -> None:
        sweeping = [v for v in self.views if v.sweep_running and v.experiments is not None]
        if sweeping:
            running = "; ".join(v.experiments.describe_running() for v in sweeping)  # type: ignore[union-attr]
            question = (
                f"A {running} is running. Quit anyway? The sweep "
                "stops now and stays resumable: start the same grid again."
            )
            self.push_screen(ConfirmScreen(question, "Quit"), self._quit_if)
            return
        if any(v.relaunch_in_progress for v in self.views):
            self.push_screen(
                ConfirmScreen("A relaunch is in progress. Quit anyway?", "Quit"),
                self._quit_if,
            )
            return
        await self._quit()

    async def _quit_if(self, answer: bool | None) -> None:
        if answer:
            await self._quit()

    async def _quit(self) -> None:
        for view in self.views:
            if view.experiments is not None:
                await view.experiments.stop_sweep()  # marked interrupted before the session closes
        await self.close_controller()
        self.exit(return_code=0)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            bindings = [
                b
                for b in self.BINDINGS
                if not isinstance(b, Binding) or self.check_action(b.action, ()) is not False
            ]
            self.push_screen(HelpScreen(bindings))  # type: ignore[arg-type]

    def action_relaunch(self) -> None:
        from specmon.tui.screens.relaunch import RelaunchScreen

        if self._refused_read_only():
            return
        if self.relaunch_in_progress:
            self.notify("A relaunch is already in progress.", severity="warning")
            return
        if self._sweep_blocks("relaunch"):
            return
        if isinstance(self.screen, RelaunchScreen):
            return
        take_over = self._attached_foreign()
        if take_over and len(self.views) > 1 and self._refused_foreign("relaunch"):
            return  # the fleet console: a take-over is one host's console's
        if self.config is None:
            self.notify("No launch profiles: this console has no config.", severity="warning")
            return
        preselect = self.attach_profile if take_over else None
        if take_over and preselect not in self.config.profiles:
            self.run_worker(self._take_over_from_running(), exclusive=True, group="take-over")
            return
        self.push_screen(
            RelaunchScreen(self.controller, self.config, take_over=take_over, preselect=preselect)
        )

    async def _take_over_from_running(self) -> None:
        """The take-over form when no profile names the attached server: it starts from the
        server's own command line and environment (an in-memory profile, as `specmon adopt`
        reads them), so a take-over changes only what the operator edits. If they cannot be
        read, the form starts on a profile of the config, saying why."""
        from specmon.tui.screens.relaunch import RelaunchScreen

        run = self.controller.bus.store.run
        name = f"running-pid-{run.pid}" if run is not None and run.pid is not None else ""
        preselect = None
        if name and self.config is not None:
            self.notify(
                safe_text(f"Reading pid {name.rsplit('-', 1)[-1]}'s command line on the host…"),
                title="Take over",
                timeout=3,
            )
            try:
                profile = await self.controller.running_profile(name)
            except SpecmonError as exc:
                self.notify(
                    safe_text(
                        f"Its command line could not be read ({exc}); the form starts on "
                        "a profile of the config."
                    ),
                    title="Take over",
                    severity="warning",
                )
            else:
                self.config.profiles[name] = profile
                self.controller.add_profile(name, profile)  # the session keeps its own copy
                preselect = name
        if self.config is None or isinstance(self.screen, RelaunchScreen):
            return
        self.push_screen(
            RelaunchScreen(
                self.controller,
                self.config,
                take_over=True,
                preselect=preselect,
                from_running=preselect is not None,
            )
        )

    def _attached_foreign(self) -> bool:
        """Whether the console follows a live server specmon did not launch (``--attach``):
        its relaunch is a take-over; once it ended, a relaunch is a plain launch."""
        store = self.controller.bus.store
        run = store.run
        return run is not None and run.foreign and store.run_state not in ("stopped", "failed")

    def _refused_foreign(self, action: str) -> bool:
        """A server specmon did not launch (``--attach``) is never stopped from here (nor
        relaunched from the fleet console): said in one line naming the take-over key."""
        if not self._attached_foreign():
            return False
        from specmon.state.foreign import TAKE_OVER_KEY_WAY, TAKE_OVER_WAY, foreign_refusal

        run = self.controller.bus.store.run
        assert run is not None
        what = f"pid {run.pid}" if run.pid is not None else run.run_id
        way = TAKE_OVER_KEY_WAY if len(self.views) == 1 else TAKE_OVER_WAY
        self.notify(
            foreign_refusal(what, self.controller.host_label, action, way),
            title="Not specmon's run",
            severity="warning",
            timeout=15,
        )
        return True

    def _sweep_blocks(self, what: str) -> bool:
        """A sweep relaunches the server itself; a manual relaunch or stop would spoil a point."""
        if self.sweep_running:
            self.notify(
                f"A sweep is running; cancel it on the Experiments screen (e) before you {what}.",
                severity="warning",
            )
            return True
        return False

    def action_experiments(self) -> None:
        if self._refused_read_only():
            return
        if self.screen is not self.main:
            return
        if self.config is None:
            self.notify("No launch profiles: this console has no config.", severity="warning")
            return
        view = self.view
        name = "experiments" if len(self.views) == 1 else f"experiments:{view.name}"
        if view.experiments is None:
            view.experiments = ExperimentsScreen(
                view.controller, self.config, relaunch_busy=lambda: view.relaunch_in_progress
            )
            self.install_screen(view.experiments, name=name)
        self.push_screen(name)

    def action_advisor(self) -> None:
        if self.screen is self.main:
            self.push_screen(AdvisorScreen(self.controller))

    @on(SweepRequested)
    def _on_sweep_requested(self, message: SweepRequested) -> None:
        """The advisor's "sweep to check it": back to the main screen, then Experiments with
        the grid filled in (nothing starts until the operator presses Start)."""
        if self._refused_read_only():
            return
        if self.experiments is not None and self.experiments.running:
            self.notify("A sweep is running; the advisor's grid waits for it.", severity="warning")
            return
        while self.screen is not self.main and len(self.screen_stack) > 1:
            self.pop_screen()
        self.action_experiments()
        if self.experiments is not None:
            self.experiments.prefill(
                message.grid, baseline=message.baseline, prediction=message.prediction
            )

    def action_stop(self) -> None:
        if self._refused_read_only() or self._sweep_blocks("stop the server"):
            return
        if self._refused_foreign("stop"):
            return
        store = self.controller.bus.store
        if store.run is None or store.run_state in ("stopped", "stopping"):
            self.notify("No server run to stop.", severity="warning")
            return
        run = store.run
        question = (
            f"Stop run {run.run_id} (profile {run.profile or '-'}, pid {run.pid or '-'})?\n"
            "SIGTERM to its process group, SIGKILL after the grace period. "
            "A restart takes minutes on a real host."
        )
        self.push_screen(ConfirmScreen(question, "Stop"), self._stop_if)

    def _stop_if(self, answer: bool | None) -> None:
        if answer and not self._refused_read_only():
            view = self.view  # the host in view when the operator confirmed
            self.run_worker(self._stop_server(view), group=f"launch:{view.name}", exclusive=True)

    def host_prefix(self, view: HostView) -> str:
        """How notifications name a host: nothing when the console has one."""
        return "" if len(self.views) == 1 else f"{view.name}: "

    async def _stop_server(self, view: HostView) -> None:
        prefix = self.host_prefix(view)
        self.notify(f"{prefix}Stopping the server…")
        try:
            await view.controller.stop()
        except SpecmonError as exc:
            self.notify(f"{prefix}{exc}", title="Stop failed", severity="error", timeout=20)
            return
        self.notify(f"{prefix}Server stopped.")

    @on(RelaunchRequested)
    def _on_relaunch(self, message: RelaunchRequested) -> None:
        if self._refused_read_only():
            return
        view = self.view  # each host's launches are a worker group of their own
        self.run_worker(
            self._relaunch(view, message.profile, message.spec),
            group=f"launch:{view.name}",
            exclusive=True,
        )

    async def _relaunch(
        self,
        view: HostView,
        profile: str,
        spec: LaunchSpec,
    ) -> None:
        prefix = self.host_prefix(view)
        view.relaunch_in_progress = True
        try:
            self.notify(f"{prefix}Stopping the run, then launching {profile}…")
            run_id = await view.controller.launch_spec(spec, profile=profile)
            self.notify(f"{prefix}Launched run {run_id}; loading…", title="Relaunch")
        except SpecmonError as exc:
            self.notify(f"{prefix}{exc}", title="Relaunch failed", severity="error", timeout=30)
        finally:
            view.relaunch_in_progress = False

    @on(TakeOverAsked)
    def _on_take_over_asked(self, message: TakeOverAsked) -> None:
        """The form (on top now) asked whether the attached server may be taken over: the
        host's checks run in a worker, and their answer goes back to that form."""
        if self._refused_read_only():
            return
        view = self.view
        self.run_worker(
            self._check_take_over(view, self.screen, message),
            group=f"take-over-check:{view.name}",
            exclusive=True,
        )

    async def _check_take_over(
        self, view: HostView, form: Screen[Any], message: TakeOverAsked
    ) -> None:
        answer = TakeOverChecked(message.profile, message.spec)
        try:
            answer.plan = await view.controller.take_over_plan(message.profile)
        except SpecmonError as exc:
            answer.refusal = str(exc)
            prefix = self.host_prefix(view)
            self.notify(f"{prefix}{exc}", title="Not taken over", severity="warning", timeout=20)
        form.post_message(answer)

    @on(TakeOverRequested)
    def _on_take_over(self, message: TakeOverRequested) -> None:
        if self._refused_read_only():
            return
        view = self.view
        self.run_worker(self._take_over(view, message), group=f"launch:{view.name}", exclusive=True)

    async def _take_over(self, view: HostView, message: TakeOverRequested) -> None:
        prefix = self.host_prefix(view)
        plan = message.plan
        what = f"pid {plan.server.pid}"
        view.relaunch_in_progress = True
        try:
            self.notify(f"{prefix}Taking over {what}: stopping it, then launching {plan.profile}…")
            run_id = await view.controller.take_over_spec(plan, message.spec)
            self.notify(
                f"{prefix}Took over {what}: launched run {run_id}; loading…", title="Taken over"
            )
        except SpecmonError as exc:
            self.notify(f"{prefix}{exc}", title="Take-over failed", severity="error", timeout=30)
        finally:
            view.relaunch_in_progress = False

    def action_focus_log(self) -> None:
        if self.screen is self.main:
            self.main.query_one(LogPane).log_view.focus()

    def action_filter_log(self) -> None:
        if self.screen is self.main:
            self.main.query_one(LogPane).open_filter()

    @on(Input.Changed, "#log-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        pane = self.main.query_one(LogPane)
        pane.filter_text = event.value
        pane.show_all(self.controller.bus.store.log)

    @on(Input.Submitted, "#log-filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        self.main.query_one(LogPane).close_filter(keep=True)

    @on(FilterInput.Cleared)
    def _filter_cleared(self, event: FilterInput.Cleared) -> None:
        pane = self.main.query_one(LogPane)
        if pane.has_class("-filtering"):
            pane.close_filter(keep=False)
            pane.show_all(self.controller.bus.store.log)

    def on_key(self, event: events.Key) -> None:
        self._say_read_only(event)

    def action_gpu_detail(self) -> None:
        if self.screen is self.main:
            screen = GpuDetailScreen()
            self.push_screen(screen)
            self.call_after_refresh(screen.refresh_from, self.controller.bus.store)

    def action_history(self) -> None:
        if self.screen is self.main:
            self.push_screen(HistoryScreen(self.session_history))

    def action_compare_runs(self) -> None:
        """`d`: the host's runs, the latest two compared (docs/run-diff.md)."""
        if self.screen is self.main or isinstance(self.screen, HistoryScreen):
            self.run_worker(self._compare_runs(), group="compare", exclusive=True)

    async def _compare_runs(self) -> None:
        try:
            runs = await self.controller.status()
        except SpecmonError as exc:
            self.notify(f"Cannot list the host's runs: {safe_text(str(exc))}", severity="error")
            return
        if len(runs) < 2:
            self.notify(f"Two runs are needed to compare; the host has {len(runs)}.", timeout=4)
            return
        self.push_screen(RunDiffScreen(runs, ledger_sampling([r.run_id for r in runs])))

    def action_toggle_latency(self) -> None:
        """Show or hide the Latency & capacity panel (shown by default where it fits)."""
        if self.screen is not self.main:
            return
        shown = self.main.toggle_latency()
        store = self.controller.bus.store
        if shown and store.run_state != "ready":
            self.notify("The Latency & capacity panel shows once the server is ready.", timeout=4)
        self.refresh_view(self.view, self.clock(), live_due=True)

    def action_cycle_theme(self) -> None:
        names = [theme.name for theme in self._themes]
        position = names.index(self.theme) if self.theme in names else -1
        following = names[(position + 1) % len(names)]
        self.theme = following
        self.notify(f"Theme: {following}", timeout=2)

    def action_toggle_pause(self) -> None:
        """Only the header is redrawn now (quick feedback); the panels follow on the timer."""
        self.paused = not self.paused
        store = self.controller.bus.store
        self.main.query_one(HeaderBar).update_from(store, self.clock(), self.paused)


def tune_gc_for_console() -> None:
    """Fewer, cheaper garbage collections while events flood in.

    Events are frozen, cycle-free dataclasses arriving by the thousand per second, so the
    default thresholds run a collection every few hundred allocations and, now and then, a
    full one walking every ring buffer: measured, that was the main source of keypress-to-paint
    outliers (benchmarks/tui_load.py). Objects alive at start-up are frozen out of the walk,
    and the youngest generation is collected per 50,000 allocations instead of 700.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, 20, 100)


def run_console(
    controller: HostController,
    config: Config | None = None,
    *,
    read_only: bool = False,
    beside: Sequence[BesideService] = (),
    attach_profile: str | None = None,
) -> int:
    """Run the console until the operator quits; returns the process exit code."""
    return run_until_quit(
        lambda: SpecmonApp(
            controller,
            config,
            read_only=read_only,
            beside=beside,
            attach_profile=attach_profile,
        )
    )


def run_until_quit(make_app: Callable[[], SpecmonApp]) -> int:
    """Run a console (one host's or the fleet's) until the operator quits, SIGTERM and SIGHUP
    ending it as a quit does; returns the process exit code. The garbage collector is tuned
    before the app is made, so the app itself is not frozen out of the collector's walk."""
    tune_gc_for_console()
    app = make_app()
    app.exit_on_signals = True
    result = app.run()
    return int(app.return_code if app.return_code is not None else (result or 0))

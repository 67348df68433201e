"""The `e` screen: run a sweep (the grid of `specmon sweep`) from the console and watch it fill in.

The form is checked on every change with the sweep's own rules (``parse_grid``,
``plan_points``, ``BenchSettings.validate``); an invalid grid cannot be started. Start runs
``SweepRunner`` in a worker on the app's event loop (the ledger's sqlite connection lives on
that thread), so the UI never blocks; the host session relaunches the server per point and the
main screen's panels keep showing the loading and live state meanwhile. The app installs this
screen once, so leaving it with Esc does not stop a running sweep; a cancelled or interrupted
sweep stays resumable: starting the same grid again skips the finished points.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Button, Checkbox, Footer, Input, Label, Select, Static, TextArea
from textual.worker import Worker, WorkerCancelled, WorkerFailed

from specmon.experiments.advisor import Advice
from specmon.experiments.bench.runner import BenchSettings
from specmon.experiments.ledger import Baseline, Ledger
from specmon.experiments.load import DEFAULT_OBJECTIVE, OBJECTIVES, parse_loads
from specmon.experiments.sweep import (
    SweepFinished,
    SweepPlan,
    SweepPoint,
    SweepPointResult,
    SweepRunner,
    parse_grid,
    plan_points,
)
from specmon.launch.config import Config
from specmon.model.errors import SpecmonError
from specmon.model.terminal_text import safe_text
from specmon.state.controller import HostController
from specmon.tui.messages import (
    SweepBaselineFound,
    SweepBegan,
    SweepEnded,
    SweepPointBenchmarking,
    SweepPointFinished,
    SweepPointLoading,
    SweepPointRetrying,
    SweepPointSkipped,
    SweepPointStarted,
    sweep_message,
)
from specmon.tui.screens.confirm import ConfirmScreen
from specmon.tui.widgets.load_sweep import LoadPlots, LoadSweepTable
from specmon.tui.widgets.sweep_plot import SweepPlot, choose_x_axis
from specmon.tui.widgets.sweep_table import SweepTable, loading_status

GRID_PLACEHOLDER = "speculative-num-steps=1,2,3\nNCCL_PROTO=LL,Simple"
SETTING_FIELDS: tuple[tuple[str, str, int], ...] = (
    ("requests", "requests", 5),
    ("max-tokens", "max tokens", 256),
    ("concurrency", "concurrency", 1),
    ("warmup", "warm-up", 2),
)
SAFE_CANCEL_WAIT_S = 600.0  # quitting waits this long for a launch or stop to finish
UNMOUNT_WAIT_S = 5.0  # an app ending otherwise gives the sweep this long to mark itself
NO_BASELINE = (
    "no measured baseline for this host, model, prompt set and concurrency: speed-ups are not "
    "shown (tick “baseline first”)"
)


def grid_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def console_grid_message(message: str) -> str:
    """The sweep's messages speak of ``--grid`` options; the form has lines instead."""
    message = re.sub(r"^--grid (?=['\"])", "line ", message)
    message = message.replace(
        "list all its values in one --grid", "list all its values on one line"
    )
    message = message.replace("--grid: ", "grid: ")
    return message.replace("give at least one --grid", "enter at least one line")


class ExperimentsScreen(Screen[None]):
    """Form, live point table and tok/s plot of one sweep at a time."""

    CSS_PATH = "experiments.tcss"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("ctrl+s", "start", "Start sweep"),
        Binding("ctrl+x", "cancel_sweep", "Cancel sweep…"),
    ]

    def __init__(
        self,
        controller: HostController,
        config: Config,
        *,
        relaunch_busy: Callable[[], bool] = lambda: False,
    ) -> None:
        super().__init__()
        self.controller = controller
        self.config = config
        self._relaunch_busy = relaunch_busy  # the console's relaunch, which a sweep must wait for
        self.plan: SweepPlan | None = None
        self.points: list[SweepPoint] = []
        self.problems: dict[str, str] = {}
        self.running = False
        self.sweep_id: int | None = None
        self.current_index: int | None = None
        self.results: dict[int, SweepPointResult] = {}
        # A sweep at several loads (concurrency "1,8,32"): its results by (index, load).
        self.loads: tuple[int, ...] = ()
        self.load_results: dict[tuple[int, int], SweepPointResult] = {}
        self.baseline: Baseline | None = None  # the one this sweep's speed-ups are against
        self.header_baseline: Baseline | None = None  # the one the header names now
        self.finished: SweepFinished | None = None
        self.x_name: str | None = None
        self.sweep_worker: Worker[None] | None = None
        self.runner: SweepRunner | None = None  # the running sweep (it owns cancelling)
        self._ledger: Ledger | None = None
        self.prediction: Advice | None = None  # the advisor's, stored when the sweep starts
        self._prefill: tuple[list[str], bool] | None = None

    def prefill(self, grid: list[str], *, baseline: bool, prediction: Advice | None) -> None:
        """Fill the form with a grid (one NAME=V1,V2 per line) and the baseline box; the
        advisor's entry point. Applied now if the form exists, else when it mounts."""
        self.prediction = prediction
        self._prefill = (list(grid), baseline)
        if self.is_mounted:
            self._apply_prefill()

    def _apply_prefill(self) -> None:
        if self._prefill is None or self.running:
            return
        grid, baseline = self._prefill
        self._prefill = None
        self.query_one("#grid", TextArea).text = "\n".join(grid)
        self.query_one("#baseline", Checkbox).value = baseline
        self.revalidate()

    # --- layout ------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        profiles = [p for p in self.controller.profiles() if p in self.config.profiles]
        yield Static(id="baseline-line")
        with Horizontal(id="top"):
            with Vertical(id="form") as form:
                form.border_title = f"Sweep on {self.controller.host_label}"
                with Horizontal(classes="row"):
                    yield Label("profile", classes="name")
                    yield Select(
                        [(name, name) for name in profiles],
                        value=self._initial_profile(profiles) or Select.NULL,
                        allow_blank=not profiles,
                        compact=True,
                        id="profile",
                    )
                yield Label("grid: NAME=V1,V2 per line (UPPERCASE: env)")
                yield TextArea(id="grid", placeholder=GRID_PLACEHOLDER, compact=True)
                yield Static("", id="grid-problem", classes="problem")
                yield Checkbox("baseline first (speculation off)", id="baseline")
                for pair in (SETTING_FIELDS[:2], SETTING_FIELDS[2:]):
                    with Horizontal(classes="row settings"):
                        for key, label, default in pair:
                            yield Label(label, classes="setting")
                            kind = "text" if key == "concurrency" else "integer"
                            yield Input(str(default), id=key, type=kind, compact=True)
                with Horizontal(classes="row settings"):
                    yield Label("several loads (1,8,32): rank by", classes="setting")
                    yield Select(
                        [(name, name) for name in OBJECTIVES],
                        value=DEFAULT_OBJECTIVE,
                        allow_blank=False,
                        compact=True,
                        id="objective",
                    )
                yield Static("", id="settings-problem", classes="problem")
                with Horizontal(id="buttons"):
                    yield Button("Start ^s", id="start", variant="success", compact=True)
                    yield Button("Cancel sweep… ^x", id="cancel-sweep", compact=True)
                yield Static("", id="sweep-state")
            yield SweepPlot(id="plot")
            yield LoadPlots(id="load-plots")
        yield SweepTable(id="points")
        yield LoadSweepTable(id="load-points")
        yield Footer()

    def _initial_profile(self, profiles: list[str]) -> str | None:
        run = self.controller.bus.store.run
        if run is not None and run.profile in profiles:
            return run.profile
        default = self.config.default_profile
        if default in profiles:
            return default
        return profiles[0] if profiles else None

    def on_mount(self) -> None:
        self._show_load_widgets(False)
        self.revalidate()
        self._apply_prefill()
        self.query_one("#grid", TextArea).focus()

    async def on_unmount(self) -> None:
        worker = self.sweep_worker  # still running only if the app ended without `q`
        if worker is not None and not worker.is_finished:
            worker.cancel()
            with contextlib.suppress(
                WorkerCancelled, WorkerFailed, asyncio.CancelledError, asyncio.TimeoutError
            ):
                await asyncio.wait_for(worker.wait(), UNMOUNT_WAIT_S)
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None

    # --- validation --------------------------------------------------------------------------

    def settings(self) -> BenchSettings:
        """The benchmark settings from the inputs; UsageError naming the field at fault."""
        numbers: dict[str, int] = {}
        for key, label, _ in SETTING_FIELDS:
            text = self.query_one("#" + key, Input).value.strip()
            if key == "concurrency":  # one load, or several: 1,8,32
                loads = parse_loads(text)
                self.loads = loads if len(loads) > 1 else ()
                numbers[key] = loads[0]
                continue
            try:
                numbers[key] = int(text)
            except ValueError:
                raise SpecmonError(f"{label}: enter a whole number") from None
        settings = BenchSettings(
            requests=numbers["requests"],
            max_tokens=numbers["max-tokens"],
            concurrency=numbers["concurrency"],
            warmup=numbers["warmup"],
        )
        settings.validate()
        return settings

    def revalidate(self) -> None:
        """Rebuild the plan from the form; problems go under their field, Start follows."""
        problems: dict[str, str] = {}
        settings: BenchSettings | None = None
        try:
            settings = self.settings()
        except SpecmonError as exc:
            problems["settings"] = str(exc).replace("--", "")
        profile = self.query_one("#profile", Select).value
        lines = grid_lines(self.query_one("#grid", TextArea).text)
        plan: SweepPlan | None = None
        points: list[SweepPoint] = []
        if not isinstance(profile, str):
            problems["grid"] = "no launch profile of this host is in the config"
        elif not lines:
            problems["grid"] = (
                "enter at least one line NAME=V1,V2 (e.g. speculative-num-steps=1,2,3)"
            )
        else:
            try:
                axes = parse_grid(lines)
                plan = SweepPlan(
                    host=self.controller.host_label,
                    profile=profile,
                    axes=axes,
                    baseline=self.query_one("#baseline", Checkbox).value,
                    bench=settings or BenchSettings(),
                    loads=self.loads if settings is not None else (),
                )
                points = plan_points(self.config, plan, python=self.controller.host_python)
            except SpecmonError as exc:
                problems["grid"] = console_grid_message(str(exc))
                plan, points = None, []
        self.problems = problems
        self.plan = plan if not problems else None
        self.points = points if not problems else []
        for name in ("grid", "settings"):
            label = self.query_one(f"#{name}-problem", Static)
            label.update(problems.get(name, ""))
            label.set_class(name not in problems, "-ok")
        self._update_controls()
        if not self.running:
            self._describe_plan()
            if settings is not None:
                self.refresh_baseline_line(settings)
            if self.plan is not None and not self.results:  # nothing measured yet: the axes
                plot = self.query_one(SweepPlot)
                plot.show([], self.header_baseline, choose_x_axis(self.plan.axes))

    def _describe_plan(self) -> None:
        state = self.query_one("#sweep-state", Static)
        if self.plan is None:
            state.update("Fix the fields marked in red to start.")
            return
        grid_points = len(self.points) - (1 if self.plan.baseline else 0)
        baseline = " plus the baseline, first" if self.plan.baseline else ""
        notes = sorted({note for point in self.points for note in point.notes})
        text = f"{grid_points} grid points{baseline}; each is a relaunch of {self.plan.profile}."
        if self.plan.loads:
            text += f" Each is measured at loads {', '.join(map(str, self.plan.loads))}."
        if notes:
            text += "\n" + "; ".join(notes)
        state.update(text)

    def _update_controls(self) -> None:
        for selector in (
            "#profile",
            "#grid",
            "#baseline",
            "#objective",
            *(f"#{k}" for k, _, _ in SETTING_FIELDS),
        ):
            self.query_one(selector).disabled = self.running
        self.query_one("#start", Button).disabled = self.running or self.plan is None
        self.query_one("#cancel-sweep", Button).disabled = not self.running

    @on(Input.Changed)
    @on(Select.Changed)
    @on(Checkbox.Changed)
    @on(TextArea.Changed)
    def _form_changed(self) -> None:
        if not self.running:
            self.revalidate()

    # --- the baseline line -------------------------------------------------------------------

    def ledger(self) -> Ledger:
        """Opened on first use, on the event loop's thread (sqlite connections stay there)."""
        if self._ledger is None:
            self._ledger = Ledger()
        return self._ledger

    def refresh_baseline_line(self, settings: BenchSettings | None = None) -> None:
        """Which measured baseline speed-ups are against, with its age; never an estimate."""
        line = self.query_one("#baseline-line", Static)
        baseline = self.baseline
        if settings is not None:  # the form changed: the baseline the planned sweep would use
            model = self._planned_model()
            try:
                baseline = self.ledger().find_baseline(
                    host=self.controller.host_label,
                    model=model,
                    prompt_set=settings.prompt_set,
                    concurrency=settings.concurrency,
                )
            except SpecmonError as exc:
                line.update(f"ledger: {exc}")
                return
        self.header_baseline = baseline
        if self.loads:
            line.update(
                "several loads: each speed-up is against the baseline measured at its own load "
                "(tick “baseline first”)"
            )
        elif baseline is not None:
            line.update(f"speed-ups vs {baseline.describe()}")
        else:
            line.update(NO_BASELINE)

    def _planned_model(self) -> str | None:
        """The model the profile's server will report: the profile's model, whichever flag or
        argument its backend renders it as."""
        profile = self.query_one("#profile", Select).value
        if not isinstance(profile, str) or profile not in self.config.profiles:
            return None
        return self.config.profiles[profile].model_path or None

    # --- running -----------------------------------------------------------------------------

    @on(Button.Pressed, "#start")
    def action_start(self) -> None:
        if self.running:
            self.notify("A sweep is already running.", severity="warning")
            return
        self.revalidate()
        if self.plan is None:
            self.notify(
                "The sweep form has problems; fix the fields marked in red.", severity="error"
            )
            return
        if not self.controller.can_launch:
            self.notify("This console's host cannot launch servers.", severity="error")
            return
        if self._relaunch_busy():
            self.notify(
                "A relaunch is in progress; start the sweep when it is done.", severity="warning"
            )
            return
        try:
            ledger = self.ledger()
        except SpecmonError as exc:
            self.notify(str(exc), title="Ledger", severity="error", timeout=20)
            return
        self.running = True  # from now: a second Start or a quit sees the sweep at once
        self._update_controls()
        self.sweep_worker = self.run_sweep(self.plan, list(self.points), ledger)

    @work(exclusive=True, group="sweep", exit_on_error=False)
    async def run_sweep(self, plan: SweepPlan, points: list[SweepPoint], ledger: Ledger) -> None:
        self.running = True
        self.results = {}
        self.load_results = {}
        self.finished = None
        self.baseline = None
        self.sweep_id = None
        self.x_name = choose_x_axis(plan.axes)
        self._update_controls()
        prediction, self.prediction = self.prediction, None  # for this sweep only
        runner = SweepRunner(
            self.controller,
            ledger,
            plan,
            points,
            on_event=lambda event: self.post_message(sweep_message(event)),
            prediction=prediction,
        )
        self.runner = runner
        # The demo's simulated clients would share the server with the benchmark: pause them.
        traffic = self.controller.traffic
        if traffic is not None:
            await traffic.stop()
        try:
            await runner.run()
        except asyncio.CancelledError:
            self._say(
                f"Sweep s{runner.sweep_id} cancelled; start the same grid again to resume it "
                "(finished points are kept)."
            )
            raise
        except (SpecmonError, OSError) as exc:
            self._say(f"Sweep stopped: {exc}")
            self.notify(str(exc), title="Sweep stopped", severity="error", timeout=30)
        except Exception as exc:  # a bug must not pass silently: the sweep stays resumable
            self.log.error(f"sweep s{runner.sweep_id} crashed: {exc!r}")
            self._say(f"Sweep stopped by an internal error: {type(exc).__name__}: {exc}")
            self.notify(f"{type(exc).__name__}: {exc}", title="Sweep stopped", severity="error")
        finally:
            if traffic is not None:
                traffic.start()
            self.running = False
            self.runner = None
            self.current_index = None
            if self.is_mounted:
                self._update_controls()

    # --- the running sweep's progress (messages posted by its runner) ---------------------

    @on(SweepBegan)
    def _sweep_began(self, message: SweepBegan) -> None:
        event = message.event
        self.sweep_id = event.sweep_id
        names = [axis.name for axis in self.plan.axes] if self.plan else []
        loads = self.plan.loads if self.plan else ()
        self._show_load_widgets(bool(loads))
        if loads:
            self.query_one(LoadSweepTable).show_points(event.points, names, loads)
            self.query_one(LoadPlots).show([], loads)
        else:
            self.query_one(SweepTable).show_points(event.points, names)
        done = f", resuming: {len(event.done_keys)} already done" if event.resumed else ""
        self._say(f"Sweep s{event.sweep_id}: {len(event.points)} points{done}.")

    @on(SweepPointSkipped)
    def _point_skipped(self, message: SweepPointSkipped) -> None:
        event = message.event
        self._finish_point(event.index, event.result, event.baseline, skipped=True)

    @on(SweepPointStarted)
    def _point_started(self, message: SweepPointStarted) -> None:
        event = message.event
        self.current_index = event.index
        self._table().set_status(event.index, "loading", "launching")
        notes = f" ({'; '.join(event.point.notes)})" if event.point.notes else ""
        self._say(
            f"Sweep s{self.sweep_id}: point {event.index + 1}/{len(self.points)}, "
            f"{event.point.label()}{notes}"
        )

    @on(SweepPointLoading)
    def _point_loading(self, message: SweepPointLoading) -> None:
        event = message.event
        detail = loading_status(event.phase, event.eta_s, event.shards_done, event.shards_total)
        self._table().set_status(event.index, "loading", detail)

    @on(SweepPointBenchmarking)
    def _point_benchmarking(self, message: SweepPointBenchmarking) -> None:
        progress = message.event.progress
        detail = f"benchmarking ({progress.phase} {progress.done}/{progress.total})"
        self._table().set_status(message.event.index, "benchmarking", detail)

    @on(SweepPointRetrying)
    def _point_retrying(self, message: SweepPointRetrying) -> None:
        event = message.event
        self._table().set_status(
            event.index, "retrying", f"connection lost, retrying (attempt {event.attempt})"
        )

    @on(SweepPointFinished)
    def _point_finished(self, message: SweepPointFinished) -> None:
        event = message.event
        self._finish_point(event.index, event.result, event.baseline, skipped=False)

    @on(SweepBaselineFound)
    def _baseline_found(self, message: SweepBaselineFound) -> None:
        if self._load_sweep():  # a baseline at one load: those rows gain their speed-ups
            for index, result in message.event.results:
                self._finish_load_point(index, result, skipped=False)
            return
        self.baseline = message.event.baseline
        for index, result in message.event.results:  # earlier rows gain their speed-ups
            self.results[index] = result
            self._show_result(index, result, skipped=False)
        self.refresh_baseline_line()

    @on(SweepEnded)
    def _sweep_ended(self, message: SweepEnded) -> None:
        event = message.event
        self.finished = event
        if self._load_sweep():
            self._load_sweep_ended(event)
            return
        self.baseline = event.baseline
        self.query_one(SweepTable).show_final(event.results, event.baseline is not None)
        self.query_one(SweepPlot).show(event.results, event.baseline, self.x_name)
        self.refresh_baseline_line()
        ok = sum(r.status == "ok" for r in event.results)
        self._say(
            f"Sweep s{event.sweep_id} finished: {ok} of {len(event.results)} points ok; "
            "ranked by tok/s."
        )
        self.notify(f"Sweep s{event.sweep_id} finished", title="Experiments")

    # --- a sweep at several loads ------------------------------------------------------------

    def _load_sweep(self) -> bool:
        return self.plan is not None and bool(self.plan.loads)

    def _table(self) -> SweepTable | LoadSweepTable:
        return self.query_one(LoadSweepTable) if self._load_sweep() else self.query_one(SweepTable)

    def _show_load_widgets(self, loads: bool) -> None:
        """The per-load table and charts for a sweep at several loads, else the usual ones."""
        self.query_one(SweepPlot).display = not loads
        self.query_one(SweepTable).display = not loads
        self.query_one(LoadPlots).display = loads
        self.query_one(LoadSweepTable).display = loads

    def _finish_load_point(self, index: int, result: SweepPointResult, *, skipped: bool) -> None:
        if result.concurrency is None or self.plan is None:
            return
        self.load_results[index, result.concurrency] = result
        table = self.query_one(LoadSweepTable)
        was_skipped = table.statuses.get((index, result.concurrency)) == "skipped"
        table.set_result(index, result, skipped=skipped or was_skipped)
        ordered = [self.load_results[key] for key in sorted(self.load_results)]
        self.query_one(LoadPlots).show(ordered, self.plan.loads)

    def _load_sweep_ended(self, event: SweepFinished) -> None:
        assert self.plan is not None
        objective = OBJECTIVES[str(self.query_one("#objective", Select).value)]
        table = self.query_one(LoadSweepTable)
        table.show_final(event.results, objective)
        self.query_one(LoadPlots).show(event.results, self.plan.loads)
        ok = sum(r.status == "ok" for r in event.results)
        best = "; ".join(
            f"at {load}: {' ~ '.join(labels) or '-'}" for load, labels in table.best.items()
        )
        self._say(
            f"Sweep s{event.sweep_id} finished: {ok} of {len(event.results)} points ok; "
            f"best for {objective.name} {best}."
        )
        self.notify(f"Sweep s{event.sweep_id} finished", title="Experiments")

    def _finish_point(
        self, index: int, result: SweepPointResult, baseline: Baseline | None, *, skipped: bool
    ) -> None:
        if self._load_sweep():
            self._finish_load_point(index, result, skipped=skipped)
            return
        self.baseline = baseline
        self.results[index] = result
        self._show_result(index, result, skipped=skipped)
        ordered = [self.results[i] for i in sorted(self.results)]
        self.query_one(SweepPlot).show(ordered, self.baseline, self.x_name)
        self.refresh_baseline_line()

    def _show_result(self, index: int, result: SweepPointResult, *, skipped: bool) -> None:
        table = self.query_one(SweepTable)
        was_skipped = table.statuses.get(index) == "skipped"
        table.set_result(
            index, result, skipped=skipped or was_skipped, has_baseline=self.baseline is not None
        )

    def _say(self, text: str) -> None:
        """Sweep progress and errors (which quote server lines): plain text, never markup."""
        if self.is_mounted:
            self.query_one("#sweep-state", Static).update(Text(safe_text(text)))

    # --- cancelling --------------------------------------------------------------------------

    @on(Button.Pressed, "#cancel-sweep")
    def action_cancel_sweep(self) -> None:
        if not self.running:
            self.notify("No sweep is running.", severity="warning")
            return
        question = (
            f"Cancel sweep s{self.sweep_id or '?'}? The point in progress is abandoned (its "
            "server keeps running; `s` on the main screen stops it). Finished points stay in "
            "the ledger: starting the same grid again resumes the sweep."
        )
        self.app.push_screen(ConfirmScreen(question, "Cancel sweep"), self._cancel_if)

    def _cancel_if(self, answer: bool | None) -> None:
        if answer:
            self.request_cancel()

    def request_cancel(self) -> bool:
        """Ask the runner to cancel (it knows when that is safe); True when done at once."""
        worker = self.sweep_worker
        if worker is None or worker.is_finished:
            return True
        if self.runner is None:  # not started yet: nothing launched
            worker.cancel()
            return True
        if self.runner.request_cancel():
            return True
        self._say("Cancelling once the launch or stop in progress is done…")
        return False

    async def stop_sweep(self) -> None:
        """Cancel a running sweep and wait until it has marked itself interrupted (for quit)."""
        worker = self.sweep_worker
        if worker is None or worker.is_finished:
            return
        if not self.request_cancel():
            self.notify("Waiting for the launch or stop in progress, then quitting…")
        with contextlib.suppress(WorkerCancelled, WorkerFailed, asyncio.CancelledError):
            try:
                await asyncio.wait_for(worker.wait(), SAFE_CANCEL_WAIT_S)
            except asyncio.TimeoutError:
                worker.cancel()  # the launch hangs: give up on it rather than on quitting
                await worker.wait()

    def describe_running(self) -> str:
        """e.g. "sweep s3, point 2 of 5" for the quit question."""
        where = ""
        if self.current_index is not None:
            where = f", point {self.current_index + 1} of {len(self.points)}"
        return f"sweep s{self.sweep_id or '?'}{where}"

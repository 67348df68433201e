"""The `a` screen: the tuning advisor's prediction for the running server (a chart with the
measured point beside it, and the table), and one action that opens the Experiments screen
with a sweep that checks it. The prediction itself is specmon.experiments.advisor's; this screen shows it.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Static

from specmon.experiments.advisor import Advice, AdvisorError, sweep_steps
from specmon.experiments.advisor_inputs import advise_from_store, steps_setting
from specmon.experiments.ledger import Ledger
from specmon.model.errors import SpecmonError
from specmon.state.controller import HostController
from specmon.tui.messages import SweepRequested
from specmon.tui.widgets.advisor_chart import AdvisorChart
from specmon.tui.widgets.advisor_table import AdvisorTable

REFRESH_S = 2.0


class AdvisorScreen(Screen[None]):
    """Recomputed when opened and every two seconds while the server decodes."""

    DEFAULT_CSS = """
    AdvisorScreen #advice-line { height: auto; padding: 0 1; background: $panel; }
    AdvisorScreen #advisor-top { height: 1fr; }
    AdvisorScreen AdvisorChart { width: 1fr; }
    AdvisorScreen AdvisorTable { width: auto; max-width: 60%; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("a", "app.pop_screen", "Back", show=False),
        Binding("x", "sweep_it", "Sweep to check it"),
    ]

    def __init__(self, controller: HostController) -> None:
        super().__init__()
        self.controller = controller
        self.advice: Advice | None = None
        self.problem: str | None = None
        self._ledger: Ledger | None = None
        self._ledger_problem: str | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="advice-line")
        with Horizontal(id="advisor-top"):
            yield AdvisorChart(id="advisor-chart")
            yield AdvisorTable(id="advisor-table")
        yield Footer()

    def on_mount(self) -> None:
        try:
            self._ledger = Ledger()
        except SpecmonError as exc:  # advise without the ledger's verify points, and say so
            self._ledger_problem = str(exc)
        self.refresh_advice()
        self.set_interval(REFRESH_S, self.refresh_advice)

    def on_unmount(self) -> None:
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None

    def refresh_advice(self) -> None:
        store = self.controller.bus.store
        try:
            self.advice, _model = advise_from_store(store, self._ledger, self.controller.host_label)
            self.problem = None
        except AdvisorError as exc:
            self.advice, self.problem = None, str(exc)
        self.query_one(AdvisorChart).show(self.advice, store.throughput_stats()[1])
        self.query_one(AdvisorTable).show(self.advice)
        self.query_one("#advice-line", Static).update(self.describe())

    def describe(self) -> str:
        if self.advice is None:
            return f"No prediction: {self.problem}"
        advice, inputs = self.advice, self.advice.inputs
        best = advice.recommended
        slope = (
            "this host's ledger" if advice.verify_slope_source == "ledger" else "a default slope"
        )
        measured = self.controller.bus.store.throughput_stats()[1]
        setting = steps_setting(self.controller.bus.store) or "steps"
        now = f"{advice.current.tok_s:.1f} predicted" + (
            f", {measured:.1f} measured (server log)" if measured else ""
        )
        verdict = (
            "the running setting is the best predicted"
            if best.num_steps == inputs.num_steps
            else f"{best.tok_s:.1f} tok/s predicted"
        )
        lines = [
            f"PREDICTION from {inputs.cycles} probe cycles at {inputs.num_steps} steps "
            f"({inputs.requests_per_cycle:.1f} requests per cycle; verify growth from {slope}): "
            f"now {now}.",
            f"Recommended: {best.num_steps} steps ({setting}={best.num_steps}, "
            f"{best.num_draft_tokens} tokens per verify), "
            f"{verdict}.",
            "x: open Experiments with a sweep over "
            + ", ".join(map(str, sweep_steps(advice)))
            + " steps and the baseline, to measure it.",
        ]
        if self._ledger_problem:
            lines.append(f"ledger: {self._ledger_problem}")
        return "\n".join(lines)

    def action_sweep_it(self) -> None:
        if self.advice is None:
            self.notify(f"No prediction to check: {self.problem}", severity="warning")
            return
        setting = steps_setting(self.controller.bus.store)
        if setting is None:
            self.notify("This server has no step-count setting to sweep", severity="warning")
            return
        grid = [f"{setting}={','.join(map(str, sweep_steps(self.advice)))}"]
        self.app.post_message(SweepRequested(grid, baseline=True, prediction=self.advice))

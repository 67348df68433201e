"""The `d` screen (from the history, `h`): the host's runs, newest first; two marked with
space, and every recorded difference between them under its likely cause, the same text as
`specmon diff` (``DiffReport.lines``, docs/run-diff.md). The latest two are marked on open:
"what changed since the previous launch" is one key away."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from specmon.model.terminal_text import safe_text
from specmon.state.run_diff import DiffReport, RunFacts
from specmon.state.run_status import RunStatus

MARK = "●"
STATE_WIDTH = 36  # "replaced by run … (profile …, by …)" is cut here: the diff is the point


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


class RunDiffScreen(Screen[None]):
    DEFAULT_CSS = """
    RunDiffScreen DataTable { height: auto; max-height: 12; }
    RunDiffScreen #diff-scroll { height: 1fr; border-top: solid $primary; padding: 0 1; }
    RunDiffScreen #hint { height: 1; padding: 0 1; color: $text-muted; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("space", "toggle_mark", "Mark"),
    ]

    def __init__(
        self, runs: Sequence[RunStatus], sampling: Mapping[str, Mapping[str, Any]] | None = None
    ) -> None:
        super().__init__()
        self.runs = sorted(runs, key=lambda r: (r.started_at or 0.0, r.run_id), reverse=True)
        self.sampling = dict(sampling or {})
        self.marked: list[str] = [r.run_id for r in self.runs[:2]]  # the latest two

    def compose(self) -> ComposeResult:
        yield Static("space marks a run; the two marked are compared, the older first", id="hint")
        yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        with VerticalScroll(id="diff-scroll"):
            yield Static(id="diff")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns(" ", "run", "profile", "started", "state", "draft aux layers")
        for run in self.runs:
            table.add_row(*self._cells(run), key=run.run_id)
        self._show()

    def _cells(self, run: RunStatus) -> list[Any]:
        started = (
            datetime.fromtimestamp(run.started_at).strftime("%m-%d %H:%M:%S")
            if run.started_at
            else "-"
        )
        aux = (run.fingerprint or {}).get("aux_layer_ids")
        return [
            MARK if run.run_id in self.marked else "",
            safe_text(run.run_id),
            safe_text(run.profile or "-"),
            started,
            _cut(safe_text(run.state), STATE_WIDTH),
            safe_text(str(aux)) if aux else "-",
        ]

    def action_toggle_mark(self) -> None:
        table = self.query_one(DataTable)
        if not self.runs:
            return
        run_id = self.runs[table.cursor_row].run_id
        if run_id in self.marked:
            self.marked.remove(run_id)
        else:
            self.marked = [*self.marked, run_id][-2:]  # the earliest mark gives way
        for run in self.runs:
            table.update_cell(run.run_id, table.ordered_columns[0].key, self._cells(run)[0])
        self._show()

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        self.action_toggle_mark()

    def _show(self) -> None:
        self.query_one("#diff", Static).update(self.diff_text())

    def diff_text(self) -> Text:
        """The two marked runs' report, the older first; a hint while fewer are marked."""
        chosen = [r for r in reversed(self.runs) if r.run_id in self.marked]
        if len(chosen) < 2:
            return Text("mark two runs to compare them", style="dim italic")
        a, b = (RunFacts.from_status(r, self.sampling.get(r.run_id)) for r in chosen)
        text = Text()
        for index, line in enumerate(DiffReport.of(a, b).lines()):
            style = "bold" if index == 0 or not line.startswith("      ") else ""
            text.append(safe_text(line) + "\n", style=style)
        return text

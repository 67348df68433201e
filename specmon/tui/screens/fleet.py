"""The fleet overview: one row per host (specmon.state.fleet computes them), sortable, filterable;
`enter` opens a host's full console, `space` selects hosts for a relaunch on several."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Static

from specmon.state.fleet import (
    SORT_COLUMNS,
    FleetHost,
    filter_rows,
    fleet_rows,
    next_sort_column,
    sort_rows,
)
from specmon.tui.messages import FleetRelaunchAsked, HostChosen
from specmon.tui.widgets.fleet_table import FleetTable


class FleetScreen(Screen[None]):
    DEFAULT_CSS = """
    FleetScreen #fleet-title { height: 1; width: 1fr; background: $primary-background;
        padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    FleetScreen FleetTable { height: 1fr; }
    FleetScreen #fleet-filter { display: none; }
    FleetScreen.-filtering #fleet-filter { display: block; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_host", "Open host", priority=True),
        Binding("o", "cycle_sort", "Sort"),
        Binding("slash", "filter", "Filter"),
        Binding("space", "toggle_select", "Select"),
        Binding("r", "relaunch", "Relaunch selected"),
        Binding("left_square_bracket", "step(-1)", "Previous host", show=False),
        Binding("right_square_bracket", "step(1)", "Next host", show=False),
        Binding("escape", "close_filter", "Clear filter", show=False),
    ]

    def __init__(self, hosts: Sequence[FleetHost], backends: Mapping[str, str]) -> None:
        super().__init__(id="fleet")
        self.hosts = list(hosts)
        self.backends = dict(backends)
        self.sort_column = SORT_COLUMNS[0]
        self.filter_text = ""
        self.selected: set[str] = set()
        self.now = 0.0

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-title", markup=False)
        yield FleetTable(id="fleet-table")
        yield Input(placeholder="filter hosts (host, backend, profile, state)", id="fleet-filter")
        yield Footer()

    @property
    def table(self) -> FleetTable:
        return self.query_one(FleetTable)

    @property
    def cursor_host(self) -> str | None:
        return self.table.cursor_host

    def refresh_from(self, now: float) -> None:
        """Recompute every host's row from its store and redraw the table."""
        self.now = now
        rows = sort_rows(fleet_rows(self.hosts, now, self.backends), self.sort_column)
        shown = filter_rows(rows, self.filter_text)
        self.table.show(shown, self.selected)
        connected = sum(1 for row in rows if row.state not in ("connecting", "unreachable"))
        title = (
            ("READ-ONLY · " if getattr(self.app, "read_only", False) else "")
            + f"fleet · hosts: {len(self.hosts)}, connected: {connected}"
            f" · sorted by {self.sort_column} (o)"
        )
        if self.filter_text:
            title += f" · filter {self.filter_text!r}: {len(shown)} shown"
        if self.selected:
            title += f" · selected: {', '.join(sorted(self.selected))}"
        # One fixed-size line: no layout pass (a keypress is painted sooner under load).
        self.query_one("#fleet-title", Static).update(title, layout=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A read-only console hides the relaunch from the footer (the app refuses it too)."""
        return not (action == "relaunch" and getattr(self.app, "read_only", False))

    def action_cycle_sort(self) -> None:
        self.sort_column = next_sort_column(self.sort_column)
        self.refresh_from(self.now)

    def action_filter(self) -> None:
        self.add_class("-filtering")
        self.query_one("#fleet-filter", Input).focus()

    def action_close_filter(self) -> None:
        if self.has_class("-filtering"):
            self.remove_class("-filtering")
            self.table.focus()

    @on(Input.Changed, "#fleet-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self.refresh_from(self.now)

    @on(Input.Submitted, "#fleet-filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        self.remove_class("-filtering")
        self.table.focus()

    def action_open_host(self) -> None:
        if self.has_class("-filtering"):
            self._filter_submitted(Input.Submitted(self.query_one("#fleet-filter", Input), ""))
            return
        if self.cursor_host is not None:
            self.post_message(HostChosen(self.cursor_host))

    @on(DataTable.RowSelected)
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.post_message(HostChosen(str(event.row_key.value)))

    def action_toggle_select(self) -> None:
        name = self.cursor_host
        if name is not None:
            self.selected.symmetric_difference_update({name})
            self.refresh_from(self.now)

    def action_relaunch(self) -> None:
        names = sorted(self.selected) if self.selected else [self.cursor_host or ""]
        if names != [""]:
            self.post_message(FleetRelaunchAsked(names))

    def action_step(self, step: int) -> None:
        self.table.move_host(step)

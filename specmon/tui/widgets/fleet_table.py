"""The fleet overview's table: one row per host, drawn from rows that specmon.state.fleet computed."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from rich.text import Text
from textual.widgets import DataTable

from specmon.state.fleet import FleetRow
from specmon.state.saturation import PREEMPT_BADGE
from specmon.tui.formatting import format_duration, format_latency, format_number, mini_sparkline

COLUMNS: tuple[str, ...] = (
    " ",
    "host",
    "backend",
    "profile",
    "state",
    "detail",
    "tok/s",
    "trend",
    "accept",
    "verify ms",
    "ITL p90",
    "saturation",
    "GPUs busy",
    "memory GB",
    "last event",
)
SPARK_WIDTH = 12
DETAIL_WIDTH = 48
STATE_STYLES = {
    "ready": "bold green",
    "loading": "bold yellow",
    "failed": "bold red",
    "unreachable": "bold red",
    "connecting": "dim",
}


class FleetTable(DataTable[object]):
    """Keeps the cursor on the same host across redraws, sorts and filters."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self.host_order: list[str] = []
        self._shown: dict[str, tuple[str, ...]] = {}  # each row's cells as last drawn

    def on_mount(self) -> None:
        self._host_column = self.add_columns(*COLUMNS)[COLUMNS.index("host")]

    @property
    def cursor_host(self) -> str | None:
        if not self.host_order:
            return None
        return self.host_order[min(self.cursor_row, len(self.host_order) - 1)]

    def show(self, rows: Sequence[FleetRow], selected: Collection[str]) -> None:
        keep = self.cursor_host
        names = [row.name for row in rows]
        if names != self.host_order and set(names) == set(self.host_order):
            # The same hosts in a new order (a sort): rows move, nothing is rebuilt.
            position = {name: index for index, name in enumerate(names)}
            self.sort(self._host_column, key=lambda cell: position[str(cell)])
            self.host_order = names
            if keep in names:
                self.move_cursor(row=names.index(keep), animate=False)
        if names != self.host_order:
            self.clear()
            self._shown = {}
            for row in rows:
                cells = self._cells(row, row.name in selected)
                self.add_row(*cells, key=row.name)
                self._shown[row.name] = tuple(map(str, cells))
            self.host_order = names
            if keep in names:
                self.move_cursor(row=names.index(keep), animate=False)
            return
        for index, row in enumerate(rows):  # only the cells that changed: no full redraw
            cells = self._cells(row, row.name in selected)
            before = self._shown.get(row.name, ())
            for column, cell in enumerate(cells):
                if column >= len(before) or before[column] != str(cell):
                    self.update_cell_at((index, column), cell)
            self._shown[row.name] = tuple(map(str, cells))

    def move_host(self, step: int) -> None:
        if self.host_order:
            self.move_cursor(row=(self.cursor_row + step) % len(self.host_order), animate=False)

    @staticmethod
    def _cells(row: FleetRow, selected: bool) -> tuple[object, ...]:
        detail = (
            row.detail if len(row.detail) <= DETAIL_WIDTH else row.detail[: DETAIL_WIDTH - 1] + "…"
        )
        memory = (
            f"{row.mem_used_gb:.0f}/{row.mem_total_gb:.0f}"
            if row.mem_used_gb is not None and row.mem_total_gb is not None
            else "-"
        )
        return (
            "●" if selected else " ",
            Text(row.name, style="bold"),
            row.backend or "-",
            row.profile or "-",
            Text(row.state, style=STATE_STYLES.get(row.state, "")),
            Text(detail),  # root causes come from server logs: never parsed as markup
            format_number(row.tokens_per_s),
            mini_sparkline(row.throughput_recent, SPARK_WIDTH) if row.throughput_recent else "",
            format_number(row.accept_len, 2),
            format_number(row.verify_ms, 2),
            row.itl_window.shown("p90", format_latency)
            if row.itl_window is not None and row.itl_p90_s is not None
            else "-",
            saturation_cell(row),
            f"{row.gpus_busy}/{row.gpus_total}" if row.gpus_total else "-",
            memory,
            format_duration(row.last_event_age_s) if row.last_event_age_s is not None else "-",
        )


def saturation_cell(row: FleetRow) -> Text:
    """The header's saturation badges for the host; "none" when its figures say so, "-"
    when it has none (not ready, or no /metrics)."""
    if not row.latency_known:
        return Text("-")
    if not row.saturation:
        return Text("none", style="dim")
    text = Text()
    for index, badge in enumerate(row.saturation):
        if index:
            text.append(" ")
        text.append(badge, style="bold red" if badge == PREEMPT_BADGE else "bold yellow")
    return text

"""The `g` view: every field the GPU agent reports, one row per GPU, refreshed twice a second."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from specmon.model.events import GpuReading
from specmon.state.store import StateStore

COLUMNS: tuple[tuple[str, str], ...] = (
    ("GPU", "index"),
    ("name", "name"),
    ("util %", "util_gpu"),
    ("mem util %", "util_mem"),
    ("mem used MiB", "mem_used_mb"),
    ("mem total MiB", "mem_total_mb"),
    ("power W", "power_w"),
    ("limit W", "power_limit_w"),
    ("temp °C", "temp_c"),
    ("SM MHz", "sm_clock_mhz"),
    ("mem MHz", "mem_clock_mhz"),
    ("PCIe tx KB/s", "pcie_tx_kbs"),
    ("PCIe rx KB/s", "pcie_rx_kbs"),
    ("NVLink tx KB/s", "nvlink_tx_kbs"),
    ("NVLink rx KB/s", "nvlink_rx_kbs"),
    ("throttle", "throttle_reasons"),
    ("processes", "processes"),
    ("error", "error"),
)


def cell(reading: GpuReading, field_name: str) -> str:
    value = getattr(reading, field_name)
    if value is None:
        return "-"
    if field_name == "processes":
        return " ".join(f"{pid}:{mb:.0f}M" if mb is not None else str(pid) for pid, mb in value)
    if field_name == "throttle_reasons":
        return ",".join(value) or "none"
    if isinstance(value, float):
        return f"{value:.0f}"
    return str(value)


class GpuDetailScreen(Screen[None]):
    """A DataTable of ``store.gpus``; the app calls ``refresh_from`` on its timer."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("g", "app.pop_screen", "Back"),
    ]

    def compose(self) -> ComposeResult:
        yield Static("GPU detail — every field the agent reports (esc to go back)", id="title")
        yield DataTable(id="gpu-table", zebra_stripes=True, cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for label, key in COLUMNS:
            table.add_column(label, key=key)

    def refresh_from(self, store: StateStore) -> None:
        tables = self.query(DataTable)
        if not tables:
            return  # current, but not composed yet (just pushed) or torn down (the console exits)
        table = tables.first()
        if len(table.columns) != len(COLUMNS):
            return  # the app's timer can fire between compose and on_mount: no columns yet
        for index in sorted(store.gpus):
            reading = store.gpus[index]
            row_key = str(index)
            values = [cell(reading, key) for _, key in COLUMNS]
            if row_key in table.rows:
                for (_, column), value in zip(COLUMNS, values, strict=True):
                    table.update_cell(row_key, column, value)
            else:
                table.add_row(*values, key=row_key)

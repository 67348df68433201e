"""The GPU panel: one row per GPU with util and memory bars, power, temperature and a sparkline.

Compact below 100 columns (8 GPUs fit an 80x24 terminal); clocks and limits appear when wider.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from specmon.model.events import GpuReading
from specmon.model.terminal_text import safe_text
from specmon.state.store import StateStore
from specmon.tui.formatting import bar, mini_sparkline

WIDE_AT = 100


def _pct_style(value: float | None) -> str:
    if value is None:
        return "dim"
    if value >= 90:
        return "bold green"
    if value >= 40:
        return "green"
    return "yellow"


class GpuPanel(Static):
    """Per-GPU state from ``store.gpus`` and ``store.gpu_util``; agent errors shown in place."""

    DEFAULT_CSS = """
    GpuPanel { height: auto; min-height: 3; border: round $primary; padding: 0 1;
               border-title-color: $primary; }
    GpuPanel:focus { border: round $accent; }
    """

    can_focus = True

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.border_title = "GPUs"
        self.agent_problem: str | None = None
        self.agent_note: str | None = None  # why no sample will come (no agent runs)
        self._last: tuple[object, ...] | None = None

    def set_agent_problem(self, message: str | None) -> None:
        self.agent_problem = message
        self._last = None

    def set_agent_note(self, message: str | None) -> None:
        """Why no GPU sample will come (e.g. "GPUs: not visible over HTTP"), shown in place
        of the wait for the agent's first sample."""
        self.agent_note = message
        self._last = None

    def update_from(self, store: StateStore) -> None:
        width = max(20, self.size.width - 4)
        # readings are replaced per sample, so their identities change only when a sample came
        key = (tuple(map(id, store.gpus.values())), width, self.agent_problem, self.agent_note)
        if key == self._last:
            return
        self._last = key
        self.update(
            render_gpu_rows(store, width, self.agent_problem, self.agent_note), layout=False
        )


def render_gpu_rows(
    store: StateStore, width: int, agent_problem: str | None = None, agent_note: str | None = None
) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    if agent_problem:
        text.append(f"GPU agent: {safe_text(agent_problem)}", style="bold red")
        if store.gpus:
            text.append("\n")
    if not store.gpus:
        if not agent_problem:
            waiting = (
                safe_text(agent_note) if agent_note else "waiting for the GPU agent's first sample…"
            )
            text.append(waiting, style="dim italic")
        return text
    wide = width >= WIDE_AT
    indices = sorted(store.gpus)
    node: int | None = None
    for row, index in enumerate(indices):
        if store.gpu_nodes and store.gpu_nodes.get(index) != node:
            node = store.gpu_nodes.get(index)  # a server over several nodes: grouped by node
            _node_header(text, store, node)
        reading = store.gpus[index]
        history = [p.value for p in store.gpu_util.get(index, ())]
        _gpu_row(text, reading, history, width, wide)
        if row < len(indices) - 1:
            text.append("\n")
    return text


def _node_header(text: Text, store: StateStore, node: int | None) -> None:
    status = store.loading.nodes.get(node) if node is not None else None
    host = f" {status.host}" if status is not None else ""
    text.append(f"node {node if node is not None else '?'}{host}\n", style="bold underline")


def _gpu_row(text: Text, r: GpuReading, util_history: list[float], width: int, wide: bool) -> None:
    text.append(f"{r.index:>2} ", style="bold")
    if r.error:
        text.append(f"error: {safe_text(r.error)}", style="bold red")
        return
    fixed = 3 + 6 + 14 + 12 + (28 if wide else 0)
    room = max(12, width - fixed)
    bar_width = max(4, min(20, room // 3))
    spark_width = max(0, room - 2 * bar_width - 2)
    util = r.util_gpu
    text.append(bar(None if util is None else util / 100, bar_width), style=_pct_style(util))
    text.append(f" {util:3.0f}% " if util is not None else "   -% ")
    mem_fraction = None
    if r.mem_used_mb is not None and r.mem_total_mb:
        mem_fraction = r.mem_used_mb / r.mem_total_mb
    text.append(bar(mem_fraction, bar_width), style="cyan")
    if r.mem_used_mb is not None:
        total = f"/{r.mem_total_mb / 1024:.0f}" if r.mem_total_mb else ""
        text.append(f" {r.mem_used_mb / 1024:5.1f}{total}G ".ljust(14))
    else:
        text.append(" mem -".ljust(14))
    power = f"{r.power_w:4.0f}W" if r.power_w is not None else "   -W"
    if wide and r.power_limit_w:
        power += f"/{r.power_limit_w:.0f}"
    text.append(power.ljust(10 if wide else 6))
    temp = f"{r.temp_c:3.0f}°C " if r.temp_c is not None else "  -°C "
    text.append(temp, style="red" if (r.temp_c or 0) >= 85 else "")
    if wide:
        sm = f"{r.sm_clock_mhz:.0f}" if r.sm_clock_mhz is not None else "-"
        mem = f"{r.mem_clock_mhz:.0f}" if r.mem_clock_mhz is not None else "-"
        text.append(f"SM {sm:>4} mem {mem:>4}MHz ".ljust(24), style="dim")
    if spark_width:
        text.append(mini_sparkline(util_history, spark_width, top=100.0), style="green")

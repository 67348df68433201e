"""The Latency & capacity panel: what a request waits (TTFT, ITL, TPOT, e2e, queue at
p50/p90/p99) and how full the server is (requests, KV cache, preemptions), from the server's
own /metrics through the store's latest ``latency`` event.

The throughput panel says what the GPUs produce; this one says whether the server keeps up
with its load, per data-parallel rank or engine where the server splits.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from specmon.model.events import Latency, LatencyGroup
from specmon.model.quantiles import WindowQuantiles
from specmon.model.terminal_text import safe_text
from specmon.state.store import StateStore
from specmon.tui.formatting import ABSENT, bar, format_latency, format_tokens

TITLE = "Latency & capacity"
QUANTILE_ROWS: tuple[tuple[str, str], ...] = (
    ("TTFT", "ttft_s"),
    ("ITL", "itl_s"),
    ("TPOT", "tpot_s"),
    ("e2e", "e2e_s"),
    ("queue", "queue_s"),
)
LABEL_WIDTH = 6
CELL_WIDTH = 8
LEFT_WIDTH = LABEL_WIDTH + 3 * CELL_WIDTH + 2  # the quantile table and its gap
KV_BAR_WIDTH = 12
LINES = 6  # the quantile table's header and five rows
BASE_ROWS = LINES + 2  # and the border
GROUP_COLUMNS: tuple[tuple[str, int], ...] = (
    ("run", 4),
    ("wait", 5),
    ("KV", 5),
    ("ITL p90", 9),
    ("TTFT p90", 9),
    ("req/s", 7),
    ("pre", 5),
)
GROUP_NAME_WIDTH = 8
GROUP_WIDTH = GROUP_NAME_WIDTH + sum(width for _, width in GROUP_COLUMNS)
RIGHT_WIDTH = 46  # rates and capacity, when the group table sits beside them
BESIDE_AT = LEFT_WIDTH + RIGHT_WIDTH + 2 + GROUP_WIDTH  # inner width from which it does
GROUPS_BELOW = 4  # group rows under the figures on a narrower panel (then "+N more")

NOT_SERVED = "not served"
NONE_IN_WINDOW = "none in window"


def absent_why(figures: WindowQuantiles | None) -> str | None:
    """Why a histogram's quantiles are absent: its family is not served, or nothing was
    observed in the window; None when they are there."""
    if figures is None:
        return NOT_SERVED
    if figures.count <= 0 or figures.p50 is None:
        return NONE_IN_WINDOW
    return None


def rows_below(count: int, room: int | None) -> tuple[int, bool]:
    """(group rows, whether "+N more" follows) under the figures of a narrow panel, in at
    most GROUPS_BELOW lines after the table's header and at most ``room`` lines with it."""
    cap = GROUPS_BELOW if room is None else min(GROUPS_BELOW, room - 1)
    if count <= cap:
        return count, False
    if cap >= 2:
        return cap - 1, True
    return 0, False  # no room for a table: the figures say how many groups there are


def panel_rows(latency: Latency | None, inner_width: int, room: int | None = None) -> int:
    """The panel's height with its border, at most ``room`` rows where it can shrink: the
    group rows go below the figures when the panel is too narrow to hold them beside."""
    if latency is None or len(latency.groups) < 2 or inner_width >= BESIDE_AT:
        return BASE_ROWS
    below = None if room is None else room - BASE_ROWS
    shown, more = rows_below(len(latency.groups), below)
    return BASE_ROWS + (1 + shown + more if shown else 0)


class LatencyPanel(Static):
    """Request latency and capacity from ``store.latency``; "—" and why for absent figures."""

    DEFAULT_CSS = """
    LatencyPanel { height: 8; border: round $primary; border-title-color: $primary;
                   padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    LatencyPanel:focus { border: round $accent; }
    """

    can_focus = True

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.border_title = TITLE
        self.rows_allowed: int | None = None  # set by the screen: its height with the border
        self._last: tuple[object, ...] | None = None

    def update_from(self, store: StateStore) -> None:
        width = max(20, self.size.width - 4)
        latency = store.latency
        run = store.run
        rows = self.rows_allowed
        key = (id(latency), width, rows, run.backend if run is not None else None)
        if key == self._last:
            return
        self._last = key
        self.border_subtitle = latency_subtitle(latency)
        hint = metrics_hint(store) if latency is None else ""
        lines = None if rows is None else rows - 2
        self.update(render_latency(latency, width, metrics_hint=hint, lines=lines), layout=False)


def metrics_hint(store: StateStore) -> str:
    """How the followed run's server is made to serve /metrics (its backend's words), said
    while no figure came."""
    if store.run is None:
        return ""
    from specmon.backends import DEFAULT_BACKEND, get_backend

    return get_backend(store.run.backend or DEFAULT_BACKEND).metrics_hint


def latency_subtitle(latency: Latency | None) -> str:
    """Where the figures come from and the window they cover (less while it fills)."""
    if latency is None:
        return "/metrics"
    window = f"{latency.window_s:.0f} s"
    if latency.span_s is not None and latency.span_s < latency.window_s - 0.5:
        return f"/metrics · window filling: {latency.span_s:.0f} of {window}"
    return f"/metrics · last {window}"


def render_latency(
    latency: Latency | None, width: int, *, metrics_hint: str = "", lines: int | None = None
) -> Text:
    """Six lines: the quantile table on the left, rates and capacity on the right; the
    per-rank (or per-engine) table beside them on a wide panel, else below in what is left of
    ``lines`` (none: how many there are, on the last line)."""
    if latency is None:
        return _waiting(width, metrics_hint)
    left = _quantile_lines(latency)
    right = _capacity_lines(latency)
    split = len(latency.groups) >= 2
    beside = split and width >= BESIDE_AT
    if beside:
        groups = _group_lines(latency)
    elif split:
        groups = group_rows_below(latency, None if lines is None else lines - LINES)
    else:
        groups = []
    if split and not groups:
        label = safe_text(latency.group_label or "rank")
        right[-1].append(f"  · {len(latency.groups)} by {label} hidden", style="dim")
    text = Text(no_wrap=True, overflow="ellipsis")
    for index in range(LINES):
        line = Text(no_wrap=True)
        line.append_text(_fit(left[index], LEFT_WIDTH))
        if beside:
            line.append_text(_fit(right[index], RIGHT_WIDTH))
            line.append("  ")
            line.append_text(groups[index] if index < len(groups) else Text())
        else:
            line.append_text(right[index])
        if index:
            text.append("\n")
        text.append_text(line)
    if groups and not beside:
        for line in groups:
            text.append("\n")
            text.append_text(line)
    return text


def _waiting(width: int, metrics_hint: str) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append("No latency figures yet.\n", style="bold")
    text.append("They are read from the server's own /metrics at each scrape,\n", style="dim")
    text.append("from the second on: a window needs two samples.", style="dim")
    if metrics_hint:
        text.append("\nStill none? ", style="dim")
        text.append(safe_text(metrics_hint), style="dim")
        text.append(".", style="dim")
    return text


def _fit(line: Text, width: int) -> Text:
    """``line`` cut or padded to exactly ``width`` cells."""
    line = line.copy()
    line.truncate(width, overflow="ellipsis", pad=True)
    return line


def _quantile_lines(latency: Latency) -> list[Text]:
    header = Text(" " * LABEL_WIDTH, style="dim")
    for name in ("p50", "p90", "p99"):
        header.append(name.rjust(CELL_WIDTH), style="bold" if name == "p90" else "dim")
    lines = [header]
    for label, field in QUANTILE_ROWS:
        figures: WindowQuantiles | None = getattr(latency, field)
        line = Text(label.ljust(LABEL_WIDTH), style="bold")
        why = absent_why(figures)
        if why is not None or figures is None:
            line.append(ABSENT.rjust(CELL_WIDTH))
            line.append(f"  {why}", style="dim")
        else:
            for name in ("p50", "p90", "p99"):
                value = figures.shown(name, format_latency).rjust(CELL_WIDTH)
                line.append(value, style="bold" if name == "p90" else "")
        lines.append(line)
    return lines


def _absent(line: Text, why: str) -> None:
    line.append(ABSENT)
    line.append(f" ({why})", style="dim")


def _capacity_lines(latency: Latency) -> list[Text]:
    lines = [Text(no_wrap=True) for _ in range(LINES)]
    rate, load, kv, lengths, cache, preempt = lines
    # requests per second and how they finished, in the window
    rate.append("req/s ", style="bold")
    if latency.requests_per_s is None:
        _absent(rate, NOT_SERVED)
    else:
        rate.append(f"{latency.requests_per_s:.2f}")
    rate.append("   done ", style="bold")
    if latency.finished is None:
        _absent(rate, NOT_SERVED)
    else:
        reasons = sorted(
            ((reason, count) for reason, count in latency.finished if count > 0),
            key=lambda item: -item[1],
        )
        if not reasons:
            rate.append(NONE_IN_WINDOW, style="dim")
        rate.append("  ".join(f"{safe_text(r)} {count:.0f}" for r, count in reasons))
    # running against the server's limit, and waiting (with its rise while it grows)
    load.append("running ", style="bold")
    load.append(ABSENT if latency.running is None else str(latency.running))
    load.append("/")
    if latency.max_running is None:
        _absent(load, "limit unknown")
    else:
        load.append(str(latency.max_running))
    load.append("  waiting ", style="bold")
    if latency.waiting is None:
        _absent(load, NOT_SERVED)
    else:
        load.append(str(latency.waiting), style="bold yellow" if latency.queue_growing else "")
        if latency.queue_growing:
            rise = latency.waiting_change
            load.append(f" ↑{rise:.0f}" if rise else " ↑", style="bold yellow")
    # the KV cache
    kv.append("KV ", style="bold")
    if latency.kv_usage is None:
        _absent(kv, NOT_SERVED)
    else:
        style = "bold red" if latency.kv_near_full else "green"
        kv.append(bar(latency.kv_usage, KV_BAR_WIDTH), style=style)
        kv.append(f" {latency.kv_usage * 100:.0f}%", style=style if latency.kv_near_full else "")
        kv.append("  ")
        used, total = latency.kv_used_tokens, latency.kv_total_tokens
        if total is None:
            kv.append(f"{format_tokens(used)}/")
            _absent(kv, "size unknown")
        else:
            kv.append(f"{format_tokens(used)}/{format_tokens(total)} tok")
    # per-request lengths
    _length(lengths, "prompt p50 ", latency.prompt_tokens)
    lengths.append("  ")
    _length(lengths, "gen p50 ", latency.generation_tokens)
    cache.append("prefix cache hit ", style="bold")
    if latency.prefix_cache_hit_rate is None:
        _absent(cache, NOT_SERVED)
    else:
        cache.append(f"{latency.prefix_cache_hit_rate * 100:.0f}%")
    preempt.append("preempted ", style="bold")
    if latency.preemptions is None:
        _absent(preempt, NOT_SERVED)
    else:
        style = "bold red" if latency.preempting else ""
        preempt.append(f"{latency.preemptions:.0f}", style=style)
        preempt.append(" in window", style="dim")
    return lines


def _length(line: Text, label: str, figures: WindowQuantiles | None) -> None:
    line.append(label, style="bold")
    why = absent_why(figures)
    if why is not None or figures is None:
        _absent(line, why or NOT_SERVED)
    else:
        line.append(f"{figures.shown('p50', format_tokens)} tok")  # "<100", ">20.0k": a bound


def _group_lines(latency: Latency) -> list[Text]:
    """A compact table, one row per rank or engine: the first rows when there are more than
    fit, then how many were left out (``watch --json`` has them all)."""
    groups: Sequence[LatencyGroup] = latency.groups
    header = Text(
        safe_text(latency.group_label or "rank")[: GROUP_NAME_WIDTH - 1].ljust(GROUP_NAME_WIDTH),
        style="bold",
    )
    for name, width in GROUP_COLUMNS:
        header.append(name.rjust(width), style="bold")
    limit = LINES - 1
    shown = list(groups) if len(groups) <= limit else list(groups[: limit - 1])
    lines = [header]
    for group in shown:
        lines.append(_group_row(group))
    if len(shown) < len(groups):
        lines.append(Text(f"+{len(groups) - len(shown)} more (watch --json)", style="dim"))
    return lines


def group_rows_below(latency: Latency, room: int | None) -> list[Text]:
    """The group table for a narrow panel in at most ``room`` lines (see ``rows_below``)."""
    groups = latency.groups
    count, more = rows_below(len(groups), room)
    if not count:
        return []
    lines = _group_lines(latency)[:1] + [_group_row(group) for group in groups[:count]]
    if more:
        lines.append(Text(f"+{len(groups) - count} more (watch --json)", style="dim"))
    return lines


def _group_row(group: LatencyGroup) -> Text:
    def p90(figures: WindowQuantiles | None) -> str:
        return figures.shown("p90", format_latency) if figures is not None else ABSENT

    cells = (
        ABSENT if group.running is None else str(group.running),
        ABSENT if group.waiting is None else str(group.waiting),
        ABSENT if group.kv_usage is None else f"{group.kv_usage * 100:.0f}%",
        p90(group.itl_s),
        p90(group.ttft_s),
        ABSENT if group.requests_per_s is None else f"{group.requests_per_s:.2f}",
        ABSENT if group.preemptions is None else f"{group.preemptions:.0f}",
    )
    row = Text(safe_text(group.name)[: GROUP_NAME_WIDTH - 1].ljust(GROUP_NAME_WIDTH))
    for (_, width), cell in zip(GROUP_COLUMNS, cells, strict=True):
        row.append(cell.rjust(width))
    return row

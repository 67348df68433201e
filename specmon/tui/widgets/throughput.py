"""The throughput panel: tok/s and accept-length sparklines with current/mean/max and load."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.visual import VisualType
from textual.widgets import Sparkline, Static

from specmon.state.store import StateStore
from specmon.tui.formatting import format_number

SPARK_POINTS = 120
POSITIONS_SHOWN = 8
_BARS = " ▁▂▃▄▅▆▇█"
POSITION_LABEL = "acceptance by position"


def position_acceptance_text(ratios: list[float]) -> Text:
    """``acceptance by position  1 █ 0.82  2 ▅ 0.61 ...``: a small bar and the rate per
    draft position (position 1 first)."""
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(POSITION_LABEL, style="bold")
    for position, ratio in enumerate(ratios[:POSITIONS_SHOWN], start=1):
        clamped = min(1.0, max(0.0, ratio))
        bar = _BARS[round(clamped * (len(_BARS) - 1))]
        text.append(f"  {position} ")
        text.append(bar, style="green")
        text.append(f" {clamped:.2f}")
    if len(ratios) > POSITIONS_SHOWN:
        text.append(f"  (+{len(ratios) - POSITIONS_SHOWN})", style="dim")
    return text


def floored_levels(values: list[float], width: int) -> list[float]:
    """Each column's height in 0..1 for the last ``width`` values (the max of those a column
    holds when there are more), scaled from zero, not from the minimum: 68.5 -> 69.5 tok/s is
    noise and draws as two near-equal bars, not as a jump from empty to full."""
    if width <= 0 or not values:
        return []
    step = len(values) / width  # below 1: a value spans several columns, as Sparkline's do
    summaries = [
        max(values[int(i * step) : max(int(i * step) + 1, int((i + 1) * step))])
        for i in range(width)
    ]
    ceiling = max(summaries)
    if ceiling <= 0:
        return [0.0] * width
    return [max(0.0, value) / ceiling for value in summaries]


class FlooredSparkline(Sparkline):
    """A one-row Sparkline whose bars rise from zero (see ``floored_levels``); the colours
    are the Sparkline's own min/max component colours, blended by height."""

    def render(self) -> VisualType:
        levels = floored_levels([float(v) for v in self.data or []], self.size.width)
        _, base = self.background_colors
        low = base + self.get_component_styles("sparkline--min-color").color
        high = base + self.get_component_styles("sparkline--max-color").color
        text = Text(no_wrap=True)
        for level in levels:
            bar = _BARS[max(1, round(level * (len(_BARS) - 1)))]
            colour = low.blend(high, level).rich_color
            text.append(bar, style=Style(color=colour))
        return text


class ThroughputPanel(Vertical):
    """Decode statistics from ``store.throughput``, ``store.accept_len`` and the last decode."""

    DEFAULT_CSS = """
    ThroughputPanel { height: 7; border: round $primary; border-title-color: $primary; padding: 0 1; }
    ThroughputPanel:focus { border: round $accent; }
    ThroughputPanel Static { height: 1; }
    ThroughputPanel Sparkline { height: 1; }
    ThroughputPanel #tps-spark > .sparkline--max-color { color: $success; }
    ThroughputPanel #tps-spark > .sparkline--min-color { color: $primary; }
    ThroughputPanel.-positions { height: 8; }
    ThroughputPanel #positions { display: none; }
    ThroughputPanel.-positions #positions { display: block; }
    ThroughputPanel.-positions.-compact #positions { display: none; }
    """

    can_focus = True

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.border_title = "Throughput"
        self._last: tuple[object, ...] | None = None

    @property
    def wanted_rows(self) -> int:
        """Its height with the border: a row more for acceptance by position, unless the
        screen is short of rows (``-compact``: the positions stay in the history, `h`)."""
        return 8 if self.has_class("-positions") and not self.has_class("-compact") else 7

    def compose(self) -> ComposeResult:
        yield Static(id="tps-stats")
        yield FlooredSparkline([], id="tps-spark")
        yield Static(id="accept-stats")
        yield FlooredSparkline([], id="accept-spark")
        yield Static(id="load-line")
        yield Static(id="positions")

    def update_from(self, store: StateStore) -> None:
        # The server's own per-position rates (vLLM), else the run's counts from the probe's
        # per-request accepted lengths (SGLang): the same view for either server.
        ratios = store.accept_by_position.ratios()
        key = (len(store.throughput), store.last_decode, len(store.accept_len), tuple(ratios))
        if key == self._last:
            return
        self._last = key
        current, mean, peak = store.throughput_stats()
        stats = Text(no_wrap=True, overflow="ellipsis")
        stats.append("tok/s ", style="bold")
        stats.append(format_number(current), style="bold")
        stats.append(f"  mean {format_number(mean)}  max {format_number(peak)}")
        self.query_one("#tps-stats", Static).update(stats, layout=False)
        tps = [p.value for p in list(store.throughput)[-SPARK_POINTS:]]
        self.query_one("#tps-spark", Sparkline).data = tps
        decode = store.last_decode
        accept = Text(no_wrap=True, overflow="ellipsis")
        accept.append("accept len ", style="bold")
        accept_len = decode.accept_len if decode else None
        if accept_len is None and store.accept_len:
            accept_len = store.accept_len[-1].value  # a server that reports it on its own line
        accept.append(format_number(accept_len, 2))
        if decode is not None and decode.accept_rate is not None:
            accept.append(f"  rate {decode.accept_rate:.2f}")
        self.query_one("#accept-stats", Static).update(accept, layout=False)
        lengths = [p.value for p in list(store.accept_len)[-SPARK_POINTS:]]
        self.query_one("#accept-spark", Sparkline).data = lengths
        line = Text(no_wrap=True, overflow="ellipsis")
        if decode is None:
            line.append("no decode batches yet", style="dim italic")
        else:
            line.append(f"running {decode.running_req}  queued {decode.queue_req}  ")
            if decode.tokens is not None:
                line.append(f"tokens {decode.tokens}  ")
            line.append(f"usage {decode.token_usage * 100:.0f}%")
        self.query_one("#load-line", Static).update(line, layout=False)
        self.set_class(bool(ratios), "-positions")
        if ratios:
            self.query_one("#positions", Static).update(
                position_acceptance_text(ratios), layout=False
            )

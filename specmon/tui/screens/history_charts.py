"""The `h` screen: whole-session charts of tok/s, accept length, verify ms, GPU util, ITL and
TTFT p90 (from the server's /metrics) and acceptance by draft position (one line per position,
where the server reports it).

Each launch is a marked segment (its own colour and a vertical line labelled with its flags),
so the before/after of a flag change is visible at a glance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid
from textual.screen import Screen
from textual.widgets import Footer, Static
from textual_plotext import PlotextPlot

from specmon.tui.history import LaunchMark, SessionHistory

# In reading order: three to a row on a wide screen (ITL and TTFT p90 in the third column),
# two on a narrow one (ITL and TTFT p90 side by side); the position chart spans the last row.
CHARTS: tuple[tuple[str, str, str], ...] = (
    ("tok_s", "gen throughput (tok/s)", "tok/s"),
    ("accept_len", "accept length", "tokens"),
    ("itl_p90_ms", "inter-token latency p90 (ms)", "ms"),
    ("verify_ms", "verify ms per cycle", "ms"),
    ("gpu_util", "mean GPU util (%)", "%"),
    ("ttft_p90_ms", "time to first token p90 (ms)", "ms"),
    ("accept_by_position", "acceptance by position", "rate"),
)
POSITION_CHART = "accept_by_position"
NARROW_BELOW = 120  # columns under which two charts share a row, not three
POSITIONS_CHARTED = 8
SEGMENT_COLOURS = ("cyan", "orange", "green", "magenta", "yellow", "blue", "red")


def split_segments(
    points: Sequence[tuple[float, float]], launches: Sequence[LaunchMark]
) -> list[list[tuple[float, float]]]:
    """Points grouped by the launch they follow (points before the first launch first)."""
    starts = [mark.at for mark in launches]
    segments: list[list[tuple[float, float]]] = [[] for _ in range(len(starts) + 1)]
    index = 0
    for at, value in points:
        while index < len(starts) and at >= starts[index]:
            index += 1
        segments[index].append((at, value))
    return segments


def position_key(count: int) -> str:
    """``■ 1  ■ 2 ...`` in each position's line colour (Rich markup for the legend)."""
    return "  ".join(
        f"[{SEGMENT_COLOURS[(position - 1) % len(SEGMENT_COLOURS)]}]■[/] {position}"
        for position in range(1, count + 1)
    )


class HistoryScreen(Screen[None]):
    """Five plotext charts over the session, redrawn when opened and every two seconds."""

    DEFAULT_CSS = """
    HistoryScreen Grid { grid-size: 3 3; grid-gutter: 0 1; }
    HistoryScreen #chart-accept_by_position { column-span: 3; }
    HistoryScreen.-narrow Grid { grid-size: 2 4; }
    HistoryScreen.-narrow #chart-accept_by_position { column-span: 2; }
    HistoryScreen #legend { height: auto; max-height: 4; padding: 0 1; background: $panel; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("h", "app.pop_screen", "Back"),
        Binding("d", "app.compare_runs", "Compare two runs"),
    ]

    def __init__(self, history: SessionHistory) -> None:
        super().__init__()
        self.history = history

    def compose(self) -> ComposeResult:
        yield Static(id="legend")
        with Grid():
            for key, _, _ in CHARTS:
                yield PlotextPlot(id=f"chart-{key}")
        yield Footer()

    def on_mount(self) -> None:
        self.set_class(self.app.size.width < NARROW_BELOW, "-narrow")
        self.redraw()
        self.set_interval(2.0, self.redraw)

    def redraw(self) -> None:
        history = self.history
        history.flush()
        launches = list(history.launches)
        origin = self._origin(launches)
        legend = [
            f"[{SEGMENT_COLOURS[(i + 1) % len(SEGMENT_COLOURS)]}]■[/] launch {i + 1}: {m.label}"
            for i, m in enumerate(launches)
        ]
        lines = legend[-3:] or ["No launch seen in this session yet (x axis: minutes)."]
        positions = len(history.position_series()[:POSITIONS_CHARTED])
        if positions:  # the position chart's key here, not over its lines
            lines.append("acceptance by position: " + position_key(positions))
        self.query_one("#legend", Static).update("\n".join(lines))
        for key, title, unit in CHARTS:
            widget = self.query_one(f"#chart-{key}", PlotextPlot)
            plt = widget.plt
            plt.clear_data()
            plt.clear_figure()
            plt.title(title)
            plt.xlabel("minutes")
            plt.ylabel(unit)
            if key == POSITION_CHART:
                self._plot_positions(plt, origin)
                for mark in launches:
                    plt.vline((mark.at - origin) / 60, "white")
                widget.refresh()
                continue
            points = list(getattr(history, key))
            for number, segment in enumerate(split_segments(points, launches)):
                if not segment:
                    continue
                xs = [(at - origin) / 60 for at, _ in segment]
                ys = [value for _, value in segment]
                colour = SEGMENT_COLOURS[number % len(SEGMENT_COLOURS)]
                plt.plot(xs, ys, color=colour, marker="braille")
            for mark in launches:
                plt.vline((mark.at - origin) / 60, "white")
            widget.refresh()

    def _plot_positions(self, plt: Any, origin: float) -> None:
        series = self.history.position_series()[:POSITIONS_CHARTED]
        for position, points in enumerate(series, start=1):
            xs = [(at - origin) / 60 for at, _ in points]
            ys = [value for _, value in points]
            colour = SEGMENT_COLOURS[(position - 1) % len(SEGMENT_COLOURS)]
            # No plotext label: its legend box overprinted the lines; the key is in #legend.
            plt.plot(xs, ys, color=colour, marker="braille")

    def _origin(self, launches: list[LaunchMark]) -> float:
        firsts = [series[0][0] for series in self._series() if series]
        firsts += [mark.at for mark in launches]
        return min(firsts) if firsts else 0.0

    def on_resize(self) -> None:
        self.set_class(self.app.size.width < NARROW_BELOW, "-narrow")

    def _series(self) -> list[list[tuple[float, float]]]:
        return [list(getattr(self.history, key)) for key, _, _ in CHARTS if key != POSITION_CHART]

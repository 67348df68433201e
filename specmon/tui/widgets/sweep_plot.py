"""tok/s against a numeric grid parameter (the steps), one line per setting of the others
(e.g. per NCCL_PROTO), and the measured baseline as a horizontal line: `ledger plot`'s chart,
drawn with textual-plotext so it resizes with the screen.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textual_plotext import PlotextPlot

from specmon.experiments.ledger import Baseline
from specmon.experiments.report import sweep_series
from specmon.experiments.sweep import GridAxis, SweepPointResult, steps_axis

SERIES_COLOURS = ("cyan", "orange", "green", "magenta", "yellow", "blue", "red")
BASELINE_COLOUR = "white"


def choose_x_axis(axes: Sequence[GridAxis]) -> str | None:
    """The step count if the grid varies it (the server's setting for it, ``steps_axis``),
    else the first axis whose values are all numbers."""
    numeric = [axis.name for axis in axes if all(_is_number(v) for v in axis.values)]
    return steps_axis(numeric) or (numeric[0] if numeric else None)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class SweepPlot(PlotextPlot):
    """Redrawn from the results so far; keeps what it drew in ``series`` and ``baseline_tok_s``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.series: dict[str, list[tuple[float, float]]] = {}
        self.baseline_tok_s: float | None = None

    def show(
        self,
        results: Sequence[SweepPointResult],
        baseline: Baseline | None,
        x_name: str | None,
    ) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.ylabel("tok/s")
        self.series = sweep_series(results, x_name) if x_name else {}
        self.baseline_tok_s = baseline.tok_s if baseline is not None else None
        if x_name is None:
            plt.title("no numeric grid parameter to plot tok/s against")
            self.refresh()
            return
        plt.xlabel(x_name)
        for number, (label, points) in enumerate(self.series.items()):
            plt.plot(
                [x for x, _ in points],
                [y for _, y in points],
                label=label,
                color=SERIES_COLOURS[number % len(SERIES_COLOURS)],
                marker="braille",
            )
        values = [y for points in self.series.values() for _, y in points]
        if baseline is not None:
            values.append(baseline.tok_s)
            plt.hline(baseline.tok_s, BASELINE_COLOUR)
            plt.title(
                f"tok/s vs {x_name}; line: baseline b{baseline.benchmark_id} "
                f"{baseline.tok_s:.1f} tok/s"
            )
        else:
            plt.title(f"tok/s vs {x_name} (no measured baseline)")
        if values:
            low, high = min(values), max(values)
            margin = max(1.0, (high - low) * 0.1)
            plt.ylim(max(0.0, low - margin), high + margin)  # the baseline stays off the frame
        xs = [x for points in self.series.values() for x, _ in points]
        if xs:
            plt.xticks(sorted(set(xs)))
        self.refresh()

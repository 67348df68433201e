"""The advisor's chart: predicted tok/s against the draft step count, the recommended point,
and the measured tok/s at the running setting beside it (textual-plotext, as the sweep plot)."""

from __future__ import annotations

from typing import Any

from textual_plotext import PlotextPlot

from specmon.experiments.advisor import Advice

PREDICTION_COLOUR = "cyan"
RECOMMENDED_COLOUR = "green"
MEASURED_COLOUR = "orange"


class AdvisorChart(PlotextPlot):
    """Redrawn from one Advice; keeps what it drew in ``predicted`` and ``measured``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.predicted: list[tuple[int, float]] = []
        self.measured: tuple[int, float] | None = None

    def show(self, advice: Advice | None, measured_tok_s: float | None) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        if advice is None:
            self.predicted, self.measured = [], None
            plt.title("no prediction yet")
            self.refresh()
            return
        self.predicted = [(p.num_steps, p.tok_s) for p in advice.predictions]
        current = advice.inputs.num_steps
        self.measured = (current, measured_tok_s) if measured_tok_s else None
        plt.xlabel("draft steps")
        plt.ylabel("tok/s")
        plt.plot(
            [k for k, _ in self.predicted],
            [v for _, v in self.predicted],
            label="predicted",
            color=PREDICTION_COLOUR,
            marker="braille",
        )
        best = advice.recommended
        plt.scatter([best.num_steps], [best.tok_s], label="recommended", color=RECOMMENDED_COLOUR)
        if self.measured is not None:
            plt.scatter([current], [self.measured[1]], label="measured", color=MEASURED_COLOUR)
        plt.xticks([k for k, _ in self.predicted])
        plt.title(
            f"PREDICTED tok/s by draft steps (from {advice.inputs.cycles} cycles at {current})"
        )
        self.refresh()

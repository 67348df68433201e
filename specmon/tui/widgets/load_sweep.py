"""The Experiments screen for a sweep at several loads: a table of every setting at every load
(filled in live, ranked per load with ties at the end) and two charts, tok/s and ITL p90
against the load, one line per setting. The same figures, ranking and tie rule as
`specmon sweep --concurrency` (specmon.experiments.load, docs/experiments.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable
from textual_plotext import PlotextPlot

from specmon.experiments.load import Objective, best_per_load, ranks_at_load
from specmon.experiments.report import load_series, order_key, setting_label
from specmon.experiments.sweep import SweepPoint, SweepPointResult
from specmon.tui.widgets.sweep_plot import SERIES_COLOURS
from specmon.tui.widgets.sweep_table import STATUS_STYLES, failure_note

LOAD_COLUMNS: tuple[str, ...] = (
    "status",
    "tok/s",
    "tok/s/req",
    "TTFT p90 ms",
    "ITL p90 ms",
    "speed-up",
    "note",
)
_DONE = ("ok", "failed", "skipped")


def _number(value: float | None, digits: int = 1, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


class LoadSweepTable(DataTable[Text | str]):
    """Rows keyed ``"<point index>@<load>"``; ``show_final`` ranks each load for the
    objective (tied points share a rank, "=1") and keeps the best per load in ``best``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.param_names: list[str] = []
        self.loads: tuple[int, ...] = ()
        self.statuses: dict[tuple[int, int], str] = {}  # (index, load) -> status word
        self.best: dict[int, list[str]] = {}  # load -> the best tie group's settings

    def show_points(
        self, points: Sequence[SweepPoint], param_names: Sequence[str], loads: Sequence[int]
    ) -> None:
        """One pending row per setting and load, in the order the sweep measures them."""
        self.clear(columns=True)
        self.param_names, self.loads = list(param_names), tuple(loads)
        self.statuses, self.best = {}, {}
        for key in ("load", "#", *(f"param:{n}" for n in self.param_names), *LOAD_COLUMNS):
            self.add_column(key.removeprefix("param:"), key=key)
        for index, point in enumerate(points):
            for load in self.loads:
                self.add_row(
                    str(load),
                    "",
                    *self._params(point.params, point.is_baseline),
                    Text("pending", style=STATUS_STYLES["pending"]),
                    *[""] * (len(LOAD_COLUMNS) - 1),
                    key=f"{index}@{load}",
                )
                self.statuses[index, load] = "pending"

    def set_status(self, index: int, word: str, detail: str | None = None) -> None:
        """The status of a running setting, on each of its loads not measured yet."""
        for (at, load), status in list(self.statuses.items()):
            if at == index and status not in _DONE:
                self.statuses[at, load] = word
                cell = Text(detail or word, style=STATUS_STYLES.get(word, ""))
                self.update_cell(f"{at}@{load}", "status", cell, update_width=True)

    def set_result(self, index: int, result: SweepPointResult, *, skipped: bool = False) -> None:
        load = result.concurrency
        if load is None or (index, load) not in self.statuses:
            return
        word = "skipped" if skipped else result.status
        self.statuses[index, load] = word
        cells = self._cells(result)
        cells[0] = Text(
            f"skipped (done earlier: {result.status})" if skipped else result.status,
            style=STATUS_STYLES.get(word, ""),
        )
        for column, cell in zip(LOAD_COLUMNS, cells, strict=True):
            self.update_cell(f"{index}@{load}", column, cell, update_width=True)

    def show_final(self, results: Sequence[SweepPointResult], objective: Objective) -> None:
        """Rebuild per load: the baseline, then the settings by rank, failures last."""
        ranks = ranks_at_load(results, objective)
        self.clear()
        self.best = {
            entry.concurrency: [setting_label(p) for p in entry.best]
            for entry in best_per_load(results, objective)
        }
        for load in sorted({r.concurrency for r in results if r.concurrency is not None}):
            here = [r for r in results if r.concurrency == load]
            here.sort(key=lambda r: order_key(r, ranks, objective, len(here)))
            for number, result in enumerate(here):
                rank = ranks.get(id(result))
                tied = rank is not None and sum(ranks.get(id(r)) == rank for r in here) > 1
                label = "-" if rank is None else f"{'=' if tied else ''}{rank}"
                cells = self._cells(result)
                cells[0] = Text(result.status, style=STATUS_STYLES.get(result.status, ""))
                self.add_row(
                    str(load),
                    label,
                    *self._params(result.params, result.is_baseline),
                    *cells,
                    key=f"final-{load}-{number}",
                )

    def _params(self, params: dict[str, str], is_baseline: bool) -> list[Text | str]:
        if is_baseline:
            rest: list[Text | str] = [""] * (len(self.param_names) - 1)
            return [Text("(baseline)", style="italic"), *rest] if self.param_names else []
        return [params.get(name, "") for name in self.param_names]

    @staticmethod
    def _cells(result: SweepPointResult) -> list[Text | str]:
        figures = result.load
        if result.is_baseline:
            speedup = "1.00x" if result.status == "ok" else "-"
        else:
            speedup = _number(result.speedup_vs_baseline, 2, "x")
        note = failure_note(result) if result.status != "ok" else ""
        return [
            result.status,
            _number(figures.tok_s if figures else result.tok_s),
            _number(figures.tok_s_per_request if figures else None),
            _number(figures.ttft_p90_ms if figures else None),
            _number(figures.itl_p90_ms if figures else None, 2),
            speedup,
            Text(note, style="red") if note else "",
        ]


class LoadChart(PlotextPlot):
    """One figure against the load (categorical: the loads as given), a line per setting."""

    def __init__(self, field: str, label: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.field = field
        self.label = label
        self.series: dict[str, list[tuple[int, float]]] = {}

    def show(self, results: Sequence[SweepPointResult], loads: Sequence[int]) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        self.series = load_series(results, self.field)
        positions = {load: number for number, load in enumerate(loads)}
        plt.title(f"{self.label} per load")
        plt.xlabel("concurrent requests")
        plt.ylabel(self.label)
        for number, (label, points) in enumerate(self.series.items()):
            xs = [positions[load] for load, _ in points if load in positions]
            ys = [value for load, value in points if load in positions]
            plt.plot(
                xs,
                ys,
                label=label,
                color=SERIES_COLOURS[number % len(SERIES_COLOURS)],
                marker="braille",
            )
        if loads:
            plt.xticks(list(range(len(loads))), [str(load) for load in loads])
        self.refresh()


class LoadPlots(Vertical):
    """tok/s (aggregate) and ITL p90 against the load, one line per setting (and the
    baseline), redrawn as points finish."""

    def compose(self) -> ComposeResult:
        yield LoadChart("tok_s", "tok/s", id="load-tok-s")
        yield LoadChart("itl_p90_ms", "ITL p90 ms", id="load-itl")

    def show(self, results: Sequence[SweepPointResult], loads: Sequence[int]) -> None:
        for chart in self.query(LoadChart):
            chart.show(results, loads)

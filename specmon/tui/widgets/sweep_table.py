"""The Experiments screen's table: one row per sweep point, filled in live, ranked at the end.

While the sweep runs the rows keep the plan's order (baseline first) and each status cell
says what the point is doing; when it finishes the table is rebuilt fastest first, with the
speed-up against the measured baseline only (``SweepPointResult.speedup_vs_baseline``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from specmon.experiments.report import SWEEP_RESULT_COLUMNS
from specmon.experiments.sweep import SweepPoint, SweepPointResult, rank_results
from specmon.model.terminal_text import safe_text

STATUS_STYLES: dict[str, str] = {
    "ok": "bold green",
    "failed": "bold red",
    "loading": "yellow",
    "benchmarking": "cyan",
    "retrying": "yellow",
    "skipped": "dim",
    "pending": "dim",
}


def _number(value: float | None, digits: int = 1, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def loading_status(
    phase: str | None, eta_s: float | None, shards_done: int, shards_total: int | None
) -> str:
    """e.g. "loading (target weights 12/64, ETA 40 s)"."""
    parts = [phase or "starting"]
    if shards_total:
        parts[0] += f" {shards_done}/{shards_total}"
    if eta_s is not None:
        parts.append(f"ETA {eta_s:.0f} s")
    return f"loading ({', '.join(parts)})"


def failure_note(result: SweepPointResult) -> str:
    """The error of a failed point: its message names the root cause (the first error line)."""
    note = result.error or "failed"
    if result.root_cause and result.root_cause[0] not in note:
        note += f" | {result.root_cause[0]}"
    return safe_text(note)


class SweepTable(DataTable[Text | str]):
    """Rows keyed by point index; ``show_points`` resets it, ``show_final`` ranks it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.param_names: list[str] = []
        self.statuses: dict[int, str] = {}  # point index -> the status word (for tests, too)
        self.ranked: list[SweepPointResult] = []

    def show_points(self, points: Sequence[SweepPoint], param_names: Sequence[str]) -> None:
        """One pending row per point, in the order the sweep will run them."""
        self.clear(columns=True)
        self.param_names = list(param_names)
        self.statuses = {}
        self.ranked = []
        self.add_column("#", key="rank")
        for name in self.param_names:
            self.add_column(name, key="param:" + name)
        for column in SWEEP_RESULT_COLUMNS:
            self.add_column(column, key=column)
        for index, point in enumerate(points):
            self.add_row(
                str(index + 1),
                *self._param_cells(point.params, point.is_baseline),
                *self._empty_result("pending", "; ".join(point.notes)),
                key=str(index),
            )
            self.statuses[index] = "pending"

    def set_status(self, index: int, word: str, detail: str | None = None) -> None:
        """The status cell of a running point, e.g. ("loading", "loading (... ETA 40 s)")."""
        self.statuses[index] = word
        cell = self._status_text(word, detail or word)
        self.update_cell(str(index), "status", cell, update_width=True)

    def set_result(
        self, index: int, result: SweepPointResult, *, skipped: bool = False, has_baseline: bool
    ) -> None:
        """A finished point's figures; ``skipped`` marks one done by an earlier, resumed run."""
        word = "skipped" if skipped else result.status
        detail = f"skipped (done earlier: {result.status})" if skipped else result.status
        self.statuses[index] = word
        cells = self._result_cells(result, has_baseline)
        cells[0] = self._status_text(word, detail)
        for column, cell in zip(SWEEP_RESULT_COLUMNS, cells, strict=True):
            self.update_cell(str(index), column, cell, update_width=True)

    def show_final(self, results: Sequence[SweepPointResult], has_baseline: bool) -> None:
        """Rebuild ranked: fastest first, failed points last, the speed-ups as computed."""
        self.ranked = rank_results(results)
        self.clear()
        rank = 0
        for number, result in enumerate(self.ranked):
            if result.status == "ok" and not result.is_baseline:
                rank += 1
                label = str(rank)
            else:
                label = "-"
            cells = self._result_cells(result, has_baseline)
            cells[0] = self._status_text(result.status, result.status)
            self.add_row(
                label,
                *self._param_cells(result.params, result.is_baseline),
                *cells,
                key=f"final-{number}",
            )

    # --- cells ---------------------------------------------------------------------------------

    def _param_cells(self, params: dict[str, str], is_baseline: bool) -> list[Text | str]:
        if is_baseline:
            rest: list[Text | str] = [""] * (len(self.param_names) - 1)
            return [Text("(baseline)", style="italic"), *rest] if self.param_names else []
        return [params.get(name, "") for name in self.param_names]

    def _empty_result(self, word: str, note: str) -> list[Text | str]:
        return [self._status_text(word, word), "", "", "", "", "", note]

    def _result_cells(self, result: SweepPointResult, has_baseline: bool) -> list[Text | str]:
        if result.is_baseline:
            speedup = "1.00x" if result.status == "ok" and has_baseline else "-"
        else:
            speedup = _number(result.speedup_vs_baseline, 2, "x")
        note = failure_note(result) if result.status != "ok" else ""
        return [
            result.status,
            _number(result.tok_s),
            speedup,
            _number(result.accept_len, 2),
            _number(result.verify_ms, 2),
            _number(result.load_seconds),
            Text(note, style="red") if note else "",
        ]

    @staticmethod
    def _status_text(word: str, detail: str) -> Text:
        return Text(detail, style=STATUS_STYLES.get(word, ""))

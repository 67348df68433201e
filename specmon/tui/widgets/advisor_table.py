"""The advisor's prediction table: one row per step count, the flags of each prediction."""

from __future__ import annotations

from typing import Any

from textual.widgets import DataTable

from specmon.experiments.advisor import Advice, prediction_flags

COLUMNS = ("steps", "draft tokens", "accept len", "cycle ms", "tok/s (predicted)", "flags")


class AdvisorTable(DataTable[str]):
    """Filled from one Advice; the recommended row is the cursor's."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)

    def on_mount(self) -> None:
        self.add_columns(*COLUMNS)

    def show(self, advice: Advice | None) -> None:
        self.clear()
        if advice is None:
            return
        for p in advice.predictions:
            self.add_row(
                str(p.num_steps),
                str(p.num_draft_tokens),
                f"{p.accept_len:.2f}",
                f"{p.cycle_ms:.2f}",
                f"{p.tok_s:.1f}",
                ", ".join(prediction_flags(p, advice)),
                key=str(p.num_steps),
            )
        self.move_cursor(row=advice.recommended.num_steps - 1)

"""The acceptance-collapse banner: the run's acceptance far below the best earlier run with
the same draft, and what changed since, most likely cause first (docs/run-diff.md)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from specmon.model.events import AcceptanceCollapse
from specmon.model.terminal_text import safe_text
from specmon.state.collapse import MEASURE_WORDS
from specmon.state.store import StateStore

CAUSE_LINES = 4  # the likeliest causes shown; `specmon diff` lists every difference


class CollapseBanner(Static):
    """Hidden until the session says the followed run's acceptance collapsed; gone when it
    recovers or another run is followed."""

    DEFAULT_CSS = """
    CollapseBanner { display: none; height: auto; max-height: 7; padding: 0 1; }
    CollapseBanner.-shown {
        display: block; background: $warning 25%; border-left: thick $warning;
    }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._last: AcceptanceCollapse | None = None

    def update_from(self, store: StateStore) -> None:
        collapse = store.collapse
        if collapse is self._last:
            return
        self._last = collapse
        self.set_class(collapse is not None, "-shown")
        self.update(collapse_text(collapse) if collapse is not None else "")


def collapse_text(collapse: AcceptanceCollapse) -> Text:
    """The banner's lines: the figures, then one line per likely cause."""
    text = Text(overflow="ellipsis")
    text.append("Acceptance collapse: ", style="bold")
    text.append(
        f"{collapse.value:.2f} {MEASURE_WORDS.get(collapse.measure, '')} against "
        f"{collapse.reference_value:.2f} in run {safe_text(collapse.reference_run)} "
        f"(same draft, {collapse.cycles} "
        f"{'drafts' if collapse.measure == 'position_1' else 'windows'})"
    )
    text.append("\nchanged since:", style="bold")
    for diagnosis in collapse.diagnoses[:CAUSE_LINES]:
        text.append(f"\n  {safe_text(diagnosis.code)}", style="bold")
        text.append(f"  {safe_text(diagnosis.message)}")
    left = len(collapse.diagnoses) - CAUSE_LINES
    if left > 0:
        text.append(f"\n  and {left} more (specmon diff)")
    return text

"""The `?` screen: every key binding of the console, generated from the bindings themselves,
and what each header badge means."""

from __future__ import annotations

import re
from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from specmon.state.saturation import SATURATION_LEGEND
from specmon.tui.commands import PALETTE_ACTIONS

EXTRA_KEYS: tuple[tuple[str, str], ...] = (
    ("tab / shift+tab", "move between panels"),
    ("ctrl+p", "command palette: every action by name"),
    ("esc", "close a screen or the log filter"),
)


def key_label(key: str) -> str:
    return {"question_mark": "?", "slash": "/", "escape": "esc"}.get(key, key)


class HelpScreen(ModalScreen[None]):
    """Lists the bindings passed in (the app's), plus the keys Textual itself provides."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90; max-width: 95%; height: auto; max-height: 90%;
                                  border: thick $primary; background: $panel; padding: 0 1; }
    HelpScreen #badge-legend { margin-top: 1; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close"),
        Binding("q", "dismiss", "Close"),
    ]

    def __init__(self, bindings: list[Binding]) -> None:
        super().__init__()
        self.bindings = bindings

    def rows(self) -> list[tuple[str, str]]:
        """(key, what it does) for every binding, then Textual's own keys."""
        details = {action: re.sub(r" \([^)]*\)$", "", text) for _, text, action in PALETTE_ACTIONS}
        rows = []
        for binding in self.bindings:
            detail = details.get(str(binding.action))
            text = f"{binding.description}: {detail}" if detail else binding.description
            rows.append((key_label(binding.key), text))
        return rows + list(EXTRA_KEYS)

    def compose(self) -> ComposeResult:
        self.table = Table(box=None, show_header=False, padding=(0, 2), expand=True)
        self.table.add_column(style="bold", no_wrap=True)
        self.table.add_column()
        for key, description in self.rows():
            self.table.add_row(key, description)
        self.badges = Table(
            box=None, show_header=False, padding=(0, 2), expand=True, title_justify="left"
        )
        self.badges.title = "Header badges (the server saturates; from its /metrics)"
        self.badges.title_style = "bold"
        self.badges.add_column(style="bold reverse", no_wrap=True)
        self.badges.add_column()
        for badge, meaning in SATURATION_LEGEND:
            self.badges.add_row(f" {badge} ", meaning)
        with VerticalScroll() as scroll:
            scroll.border_title = "Keys (esc closes)"
            yield Static(self.table)
            yield Static(self.badges, id="badge-legend")

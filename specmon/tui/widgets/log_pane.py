"""The server log pane: follows the tail, filters on `/`, highlights errors and warnings."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, RichLog

from specmon.model.events import Dropped, LogLine
from specmon.model.terminal_text import safe_text

MAX_LINES = 2000
ERROR_PATTERN = re.compile(
    r"Traceback|Error|error:|out of memory|NCCL WARN|Exception|is dead|sigquit|Killed",
)
WARNING_PATTERN = re.compile(r"Warning|WARNING|WARN")
# A tqdm redraw ("...:  36% Completed | 23/64 [00:05<00:10, ...]"): the loading panel shows
# its progress, so the pane keeps only each bar's first and last state instead of 64 lines.
PROGRESS_PATTERN = re.compile(r"\d+%.*?(\d+)/(\d+) \[")


def is_intermediate_progress(line: str) -> bool:
    match = PROGRESS_PATTERN.search(line)
    return match is not None and match.group(1) not in ("0", match.group(2))


def style_line(line: str) -> Text:
    """Errors red and bold, warnings yellow, HTTP access lines dim, the rest plain; escape
    sequences and control characters removed (a server's log is untrusted text)."""
    line = safe_text(line)
    if ERROR_PATTERN.search(line):
        return Text(line, style="bold red")
    if WARNING_PATTERN.search(line):
        return Text(line, style="yellow")
    if '" 200 OK' in line:
        return Text(line, style="dim")
    return Text(line)


def dropped_marker(count: int) -> str:
    return f"--- {count} log lines and samples skipped here to keep up ---"


class FollowingLog(RichLog):
    """A RichLog that follows the tail unless the operator scrolled away from it.

    Whether to follow is decided when the view scrolls, not when lines arrive: a layout
    change (the loading panel appearing on a relaunch shrinks the pane) moves the bottom away
    from the view without the operator doing anything, and must not stop the tail; the view
    goes back to the tail on such a resize rather than waiting for the server's next line.
    """

    following = True

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self.following = new_value >= self.max_scroll_y - 1

    def on_resize(self, event: events.Resize) -> None:
        if self.following:
            self.call_after_refresh(self._back_to_tail)

    def _back_to_tail(self) -> None:
        if self.following:
            self.scroll_end(animate=False, immediate=True)


class FilterInput(Input):
    """The filter box. Its own Enter and Esc bindings are shown in the footer: while it has
    focus the console's single-letter keys go into the box (and the footer hides them), so the
    footer says how to leave instead of going blank."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "submit", "Keep filter"),
        Binding("escape", "clear_filter", "Clear filter"),
    ]

    class Cleared(Message):
        """Esc in the filter box: the filter is dropped and every kept line shows again."""

    def action_clear_filter(self) -> None:
        self.post_message(self.Cleared())


class LogPane(Vertical):
    """A RichLog of raw server lines; the filter is a plain case-insensitive substring."""

    DEFAULT_CSS = """
    LogPane { height: 1fr; min-height: 3; border: round $primary; border-title-color: $primary; }
    LogPane:focus-within { border: round $accent; }
    LogPane FilterInput, LogPane FilterInput:focus {
        display: none; height: 1; border: none; padding: 0 1;
    }
    LogPane.-filtering FilterInput { display: block; }
    LogPane RichLog { height: 1fr; background: $surface; scrollbar-size-vertical: 1; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.border_title = "Server log"
        self.filter_text = ""
        self.max_lines = MAX_LINES

    def keep_lines(self, count: int) -> None:
        """Keep the last ``count`` lines (``[ui] log_lines``) instead of MAX_LINES."""
        self.max_lines = count
        self.log_view.max_lines = count

    def compose(self) -> ComposeResult:
        yield FilterInput(placeholder="filter (Enter keeps it, Esc clears)", id="log-filter")
        yield FollowingLog(max_lines=MAX_LINES, wrap=False, markup=False, id="log")

    @property
    def log_view(self) -> FollowingLog:
        return self.query_one("#log", FollowingLog)

    def matches(self, line: str) -> bool:
        if is_intermediate_progress(line):
            return False
        return not self.filter_text or self.filter_text.lower() in line.lower()

    def append_lines(self, lines: Iterable[LogLine | Dropped]) -> None:
        """One write per batch: RichLog renders a multi-line Text in one pass. A ``Dropped``
        event shows as a marker line where the console skipped lines to keep up."""
        batch = Text()
        count = 0
        for line in lines:
            if isinstance(line, Dropped):
                if count:
                    batch.append("\n")
                batch.append(dropped_marker(line.count), style="reverse")
                count += 1
            elif self.matches(line.text):
                if count:
                    batch.append("\n")
                batch.append_text(style_line(line.text))
                count += 1
        if count:
            view = self.log_view
            view.write(batch, scroll_end=view.following)  # reading back stays put

    def show_all(self, lines: Iterable[LogLine]) -> None:
        """Redraw from the store's kept lines under the current filter (the last max_lines)."""
        view = self.log_view
        view.clear()
        kept = [line for line in lines if self.matches(line.text)][-self.max_lines :]
        for line in kept:
            view.write(style_line(line.text))
        self.border_title = (
            f"Server log — filter: {self.filter_text!r}" if self.filter_text else "Server log"
        )

    def open_filter(self) -> None:
        self.add_class("-filtering")
        box = self.query_one("#log-filter", Input)
        box.value = self.filter_text
        box.focus()

    def close_filter(self, keep: bool) -> None:
        box = self.query_one("#log-filter", Input)
        if not keep:
            box.value = ""
            self.filter_text = ""
        self.remove_class("-filtering")
        self.log_view.focus()

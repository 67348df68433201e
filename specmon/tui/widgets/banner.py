"""A banner above the panels for what must not be missed: a failed server or a lost link."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from specmon.model.terminal_text import safe_text
from specmon.state.store import StateStore

ROOT_CAUSE_LINES = 4


class Banner(Static):
    """Shows the failure (root cause and failing command), the reconnect attempt, or how the
    run ended when no failure did (stopped or replaced by some client); else hidden."""

    DEFAULT_CSS = """
    Banner { display: none; height: auto; max-height: 8; padding: 0 1; }
    Banner.-failed { display: block; background: $error 30%; border-left: thick $error; }
    Banner.-reconnecting { display: block; background: $warning 25%; border-left: thick $warning; }
    Banner.-info { display: block; background: $primary 20%; border-left: thick $primary; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._last: tuple[object, ...] | None = None

    def update_from(self, store: StateStore) -> None:
        connection = store.connection
        reconnecting = connection is not None and connection.state in (
            "reconnecting",
            "disconnected",
        )
        failure = store.failure if store.run_state in ("failed", "hung") else None
        # A stop or a replacement by any client: information, in the banner's calm colour.
        notice = store.end_notice() if failure is None and not reconnecting else None
        key = (failure, connection if reconnecting else None, notice)
        if key == self._last:
            return
        self._last = key
        self.set_class(failure is not None, "-failed")
        self.set_class(reconnecting and failure is None, "-reconnecting")
        self.set_class(notice is not None, "-info")
        text = Text(overflow="ellipsis")
        if notice is not None:
            text.append(safe_text(notice[0].upper() + notice[1:]))
        if failure is not None:
            what = "hung" if failure.hung else "failed"
            text.append(f"Server {what}", style="bold")
            if failure.category != "other":
                text.append(f" ({failure.category.upper()})", style="bold")
            if failure.exit_code is not None:
                text.append(f" exit code {failure.exit_code}")
            if failure.signal is not None:
                text.append(f" signal {failure.signal}")
            if failure.last_phase:
                text.append(f" during {failure.last_phase}")
            for line in failure.root_cause[-ROOT_CAUSE_LINES:]:
                text.append("\n  " + safe_text(line))
            if failure.command:
                text.append("\ncommand: ", style="bold")
                text.append(safe_text(failure.command))
        elif reconnecting and connection is not None:
            text.append(f"Connection to {connection.host} lost: ", style="bold")
            text.append(f"{connection.state} (attempt {connection.attempt})")
            if connection.detail:
                text.append(f" — {safe_text(connection.detail)}")
        self.update(text)

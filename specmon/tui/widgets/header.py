"""The one-line header: host, profile, run state, saturation badges, uptime and the launch's
key flags."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from specmon.model.terminal_text import safe_text
from specmon.state.saturation import PREEMPT_BADGE, saturation_badges
from specmon.state.store import StateStore
from specmon.tui.formatting import format_duration, key_flags

# Run state as an operator reads it, with the CSS-ish style the header paints it in.
STATE_STYLES: dict[str, str] = {
    "loading": "bold $warning",
    "ready": "bold $success",
    "failed": "bold $error",
    "hung": "bold $error",
    "stopping": "bold $warning",
    "stopped": "bold $text-muted",
    "reconnecting": "bold $warning",
}


def with_live_steps(flags: list[tuple[str, str]], live_steps: int | None) -> list[tuple[str, str]]:
    """The key flags with adaptive speculation's live step count: ``steps=3→5`` once the
    server changed it from the launched 3 (SGLang `--speculative-adaptive`)."""
    if live_steps is None:
        return flags
    for index, (name, value) in enumerate(flags):
        if name == "steps":
            if value == str(live_steps):
                return flags
            return [*flags[:index], (name, f"{value}→{live_steps}"), *flags[index + 1 :]]
    return [*flags, ("steps", f"→{live_steps}")]


def display_state(store: StateStore) -> str:
    """Reconnecting overrides the run state: the last known state may be stale."""
    connection = store.connection
    if connection is not None and connection.state in ("reconnecting", "disconnected"):
        return connection.state
    return store.run_state


def header_badges(store: StateStore, state: str) -> tuple[str, ...]:
    """The saturation badges of a serving run (a stopped or lost one's figures are stale)."""
    return saturation_badges(store.latency) if state == "ready" else ()


class HeaderBar(Static):
    """Who and what is running, at a glance; rebuilt at most once a second or on change."""

    DEFAULT_CSS = """
    HeaderBar { height: 1; background: $panel; color: $foreground; padding: 0 1; }
    """

    def __init__(self, host_label: str, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.host_label = host_label
        self._last: tuple[object, ...] | None = None

    def update_from(self, store: StateStore, now: float, paused: bool = False) -> None:
        run = store.run
        state = display_state(store)
        uptime = None
        if run is not None and run.started_at is not None and state not in ("stopped", "failed"):
            uptime = now - run.started_at
        flags = with_live_steps(list(key_flags(run)), store.spec_steps)
        attempt = store.connection.attempt if store.connection is not None else 0
        run_id = run.run_id if run else None
        badges = header_badges(store, state)
        key = (state, attempt, run_id, format_duration(uptime), paused, store.spec_steps, badges)
        if key == self._last:
            return
        self._last = key
        theme = self.app.current_theme
        colours = {
            "$warning": theme.warning or "yellow",
            "$success": theme.success or "green",
            "$error": theme.error or "red",
            "$text-muted": "grey50",
        }
        style = STATE_STYLES.get(state, "bold")
        for var, colour in colours.items():
            style = style.replace(var, colour)
        label = state if state != "reconnecting" else f"reconnecting #{attempt}"
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(self.host_label, style="bold")
        text.append("  ")
        if getattr(self.app, "read_only", False):  # `specmon serve --read-only`: said at once
            text.append(" READ-ONLY ", style=f"bold reverse {colours['$warning']}")
            text.append("  ")
        if run is not None and run.foreign:  # a server specmon did not launch: said at once
            text.append(
                f" ATTACHED pid {run.pid or '-'} ", style=f"bold reverse {colours['$warning']}"
            )
        else:
            text.append(safe_text(run.profile or "-") if run else "no run", style="italic")
        text.append("  ")
        text.append(f" {label} ", style=style + " reverse")
        for badge in badges:  # the server saturates: said before anything else of the run
            colour = colours["$error"] if badge == PREEMPT_BADGE else colours["$warning"]
            text.append(" ")
            text.append(f" {badge} ", style=f"bold reverse {colour}")
        if uptime is not None:
            text.append(f"  up {format_duration(uptime)}")
        text.append("  ")
        text.append("PAUSED" if paused else "live", style="bold reverse" if paused else "dim")
        if flags:
            text.append("  ")
            shown = "  ".join(f"{name}={value}" for name, value in flags)
            text.append(safe_text(shown), style="dim")  # from the run's argv: the host's text
        self.update(text, layout=False)

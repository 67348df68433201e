"""The loading panel: phase ticks, shard progress, elapsed/ETA, the last log line, stop steps.

It stands in for the live panels while a server starts (10-15 minutes on a real host), so an
operator sees that something moves and when it will be done.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import ProgressBar, Static

from specmon.model.events import StopProgress
from specmon.model.terminal_text import safe_text
from specmon.state.fleet import UNREACHABLE_STATES
from specmon.state.store import StateStore
from specmon.tui.formatting import format_duration

STOP_STEPS_KEPT = 6


class LoadingPanel(Vertical):
    """Start-up progress read from ``store.loading``; stop steps come from the event stream."""

    DEFAULT_CSS = """
    LoadingPanel { height: 9; border: round $primary; border-title-color: $primary; }
    LoadingPanel:focus { border: round $accent; }
    LoadingPanel > Horizontal { height: 1fr; }
    LoadingPanel #phases { width: 24; height: 1fr; }
    LoadingPanel #progress-side { width: 1fr; height: 1fr; }
    LoadingPanel #shard-row { height: 1; }
    LoadingPanel ProgressBar { height: 1; width: auto; }
    LoadingPanel #shard-count { width: 1fr; height: 1; }
    LoadingPanel #load-stats { height: 1fr; }
    LoadingPanel.-compact { height: 6; }
    LoadingPanel.-compact #phases { width: 42; }
    """

    can_focus = True

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.border_title = "Loading"
        self.stop_steps: list[StopProgress] = []
        self.autolaunch: str | None = None
        self._last: tuple[object, ...] | None = None

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield Static(id="phases")
            with Vertical(id="progress-side"):
                # the shard count beside its bar: on the line below it sat level with the
                # KV cache row and read as that phase's ("KV cache ... shards 64/64")
                with Horizontal(id="shard-row"):
                    yield ProgressBar(total=None, show_eta=False, id="shards")
                    yield Static(id="shard-count")
                yield Static(id="load-stats")

    def note_stop(self, event: StopProgress) -> None:
        """Keep the current stop's steps (a new run_id starts a fresh list)."""
        if self.stop_steps and self.stop_steps[-1].run_id != event.run_id:
            self.stop_steps.clear()
        self.stop_steps.append(event)
        del self.stop_steps[:-STOP_STEPS_KEPT]
        self._last = None

    def update_from(self, store: StateStore, now: float, *, autolaunch: str | None = None) -> None:
        """``autolaunch``: the profile the session launches on start when no run is live (the
        demo's), so the first frames say "starting" instead of "no server is running"."""
        loading = store.loading
        self.autolaunch = autolaunch
        last_line = store.log[-1].text if store.log else ""
        elapsed = loading.elapsed(now)
        eta = loading.eta_seconds(now)
        key = (
            self.has_class("-compact"),
            store.run_state,
            loading.phase,
            len(loading.done_phases),
            loading.shards_done,
            loading.shards_total,
            format_duration(elapsed) if store.run_state == "loading" else None,
            format_duration(eta) if store.run_state == "loading" else None,
            last_line,
            len(self.stop_steps),
            tuple(loading.nodes.values()),
            store.connection,
            store.run is None,
            autolaunch,
        )
        if key == self._last:
            return
        self._last = key
        self.border_title = _title(store, autolaunch)
        columns = 2 if self.has_class("-compact") else 1
        self.query_one("#phases", Static).update(_phase_list(store, columns), layout=False)
        progress = self.query_one("#shards", ProgressBar)
        count = self.query_one("#shard-count", Static)
        if loading.shards_total:
            progress.update(total=loading.shards_total, progress=loading.shards_done)
            count.update(f" {loading.shards_done}/{loading.shards_total} shards", layout=False)
        else:
            progress.update(total=None)
            count.update("", layout=False)
        self.query_one("#load-stats", Static).update(
            self._stats(store, elapsed, eta, last_line), layout=False
        )

    def _stats(
        self, store: StateStore, elapsed: float | None, eta: float | None, last_line: str
    ) -> Text:
        loading = store.loading
        text = Text(no_wrap=True, overflow="ellipsis")
        if store.run_state == "loading":
            text.append(f"elapsed {format_duration(elapsed)}  ")
            text.append(f"ETA {format_duration(eta)}" if eta is not None else "ETA estimating")
        text.append("\n")
        if len(loading.nodes) > 1:  # a server over several nodes: a lagging node shows here
            text.append_text(node_line(store))
            text.append("\n")
        if self.stop_steps:
            text.append("stop: ", style="bold")
            text.append(
                "  ".join(f"{s.step} {s.seconds:.1f}s" for s in self.stop_steps), style="italic"
            )
            text.append("\n")
        idle = idle_words(store, self.autolaunch)
        if idle is not None:
            text.append(idle, style="italic")
        elif last_line:
            text.append(safe_text(last_line[-400:]), style="dim")  # a server's text
        return text


def node_line(store: StateStore) -> Text:
    """Each node's phase and shards, e.g. ``node0 gpu-a ready  node1 gpu-b 5/8 target
    weights``; a node whose link is down says so."""
    text = Text(no_wrap=True, overflow="ellipsis")
    for rank in sorted(store.loading.nodes):
        node = store.loading.nodes[rank]
        text.append(f"node{rank} {node.host} ", style="bold")
        if node.connection not in (None, "connected"):
            text.append(f"{node.connection}  ", style="bold red")
            continue
        if node.state == "ready":
            text.append("ready  ", style="green")
            continue
        if node.shards_total:
            text.append(f"{node.shards_done}/{node.shards_total} ")
        text.append(f"{node.phase or node.state or 'starting'}  ", style="dim")
    return text


def idle_words(store: StateStore, autolaunch: str | None = None) -> str | None:
    """What the panel says while no run is known: each state its own words, since "no server
    is running, press r" is wrong while connecting, while the demo launches, and for a host
    that cannot be reached (its server's state is unknown); None once a run is known."""
    if store.run is not None or store.run_state != "stopped":
        return None
    connection = store.connection
    if connection is not None and connection.state in UNREACHABLE_STATES:
        why = safe_text(connection.detail or "no answer")
        return f"Cannot reach the host: {why}. Whether a server runs there is not known yet."
    if connection is None or connection.state == "connecting":
        if connection is not None and connection.detail:  # e.g. a URL whose server is loading
            return f"Connecting: {safe_text(connection.detail)}"
        then = f", then launching profile {autolaunch}" if autolaunch else ""
        return f"Connecting to the host{then}…"
    if autolaunch:
        return f"Starting: launching profile {autolaunch}…"
    return "No server is running. Press r to launch a profile."


def _title(store: StateStore, autolaunch: str | None = None) -> str:
    state = store.run_state
    if store.run is None and state == "stopped":
        connection = store.connection
        if connection is not None and connection.state in UNREACHABLE_STATES:
            return "Unreachable"
        if connection is None or connection.state == "connecting":
            return "Connecting"
        if autolaunch:
            return "Starting"
    if state == "stopping":
        return "Stopping"
    if state == "stopped":
        return "Stopped"
    if state in ("failed", "hung"):
        return f"Start-up {state}"
    return f"Loading: {store.loading.phase or 'starting'}"


PHASE_COLUMN_WIDTH = 21  # "▶ target CUDA graphs" and a space


def _phase_list(store: StateStore, columns: int = 1) -> Text:
    """The phases with ticks, top to bottom; in ``columns`` columns on a short terminal."""
    loading = store.loading
    failed = store.run_state in ("failed", "hung")
    cells: list[Text] = []
    for phase in store.phases:
        cell = Text()
        if phase in loading.done_phases:
            cell.append("✓ ", style="green")
            cell.append(phase)
        elif phase == loading.phase:
            cell.append("✗ " if failed else "▶ ", style="red" if failed else "bold yellow")
            cell.append(phase, style="bold")
        else:
            cell.append("· ", style="dim")
            cell.append(phase, style="dim")
        cells.append(cell)
    rows = -(-len(cells) // columns)
    text = Text(no_wrap=True, overflow="ellipsis")
    for row in range(rows):
        if row:
            text.append("\n")
        for column in range(columns):
            index = column * rows + row
            if index >= len(cells):
                break
            cell = cells[index]
            if column < columns - 1:
                cell.pad_right(PHASE_COLUMN_WIDTH - cell.cell_len)
            text.append_text(cell)
    return text

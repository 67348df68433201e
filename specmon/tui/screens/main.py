"""The main screen: header, banner, loading panel (until ready), GPUs, throughput, timing,
latency & capacity (where it fits, or on `c`), log."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer

from specmon.state.store import StateStore
from specmon.tui.widgets.banner import Banner
from specmon.tui.widgets.collapse_banner import CollapseBanner
from specmon.tui.widgets.gpus import GpuPanel
from specmon.tui.widgets.header import HeaderBar
from specmon.tui.widgets.latency import BASE_ROWS, LatencyPanel, panel_rows
from specmon.tui.widgets.loading import LoadingPanel
from specmon.tui.widgets.log_pane import LogPane
from specmon.tui.widgets.throughput import ThroughputPanel
from specmon.tui.widgets.timing import TimingPanel

# Run states in which the live panels replace the loading panel.
LIVE_STATES = ("ready",)
LIVE_ROW_ROWS = 7
LOADING_ROWS = 9
COMPACT_LOADING_ROWS = 6  # the phase list in two columns, when the GPUs would not fit
LOG_MIN_ROWS = 4
MIN_GPU_ROWS = 3  # one GPU row and the border


class MainScreen(Screen[None]):
    """Lays the panels out; ``refresh_from`` redraws them from the store (called on a timer)."""

    DEFAULT_CSS = """
    MainScreen #live-row { height: 7; display: none; }
    MainScreen.-live #live-row { display: block; }
    MainScreen.-live LoadingPanel { display: none; }
    MainScreen #live-row > ThroughputPanel { width: 1fr; }
    MainScreen #live-row > TimingPanel { width: 1fr; }
    MainScreen #latency { display: none; }
    MainScreen.-live.-latency #latency { display: block; }
    """

    def __init__(self, host_label: str, *, screen_id: str = "main") -> None:
        super().__init__(id=screen_id)  # the fleet console has one per host
        self.host_label = host_label
        # Set by the app from the controller and the config: the profile launched on start
        # (the demo's) and whether the followed run's profile has the probe on (None: unknown).
        self.autolaunch: str | None = None
        self.probe_on: bool | None = None
        # The Latency & capacity panel: None shows it where it fits beside every GPU row and
        # LOG_MIN_ROWS of log; `c` sets it shown or hidden whatever the size.
        self.show_latency: bool | None = None

    def compose(self) -> ComposeResult:
        yield HeaderBar(self.host_label, id="header")
        yield Banner(id="banner")
        yield CollapseBanner(id="collapse")
        yield LoadingPanel(id="loading")
        yield GpuPanel(id="gpus")
        with Horizontal(id="live-row"):
            yield ThroughputPanel(id="throughput")
            yield TimingPanel(id="timing")
        yield LatencyPanel(id="latency")
        yield LogPane(id="log-pane")
        yield Footer()

    def refresh_from(
        self, store: StateStore, now: float, paused: bool, live_due: bool = True
    ) -> None:
        """Header, banner and loading every call; the live panels only when ``live_due``."""
        live = store.run_state in LIVE_STATES
        self.set_class(live, "-live")
        self._fit_gpu_panel(store, live)
        self.query_one(HeaderBar).update_from(store, now, paused)
        self.query_one(Banner).update_from(store)
        self.query_one(CollapseBanner).update_from(store)
        if not live:
            self.query_one(LoadingPanel).update_from(store, now, autolaunch=self.autolaunch)
        if paused or not live_due:
            return
        self.query_one(GpuPanel).update_from(store)
        if live:
            self.query_one(ThroughputPanel).update_from(store)
            self.query_one(TimingPanel).update_from(store, probe_on=self.probe_on)
            if self._size_live_row():
                self._fit_gpu_panel(store, live)  # a row came or went: the rest re-fit now
            if self.latency_shown:
                self.query_one(LatencyPanel).update_from(store)

    @property
    def latency_shown(self) -> bool:
        return self.has_class("-latency")

    def toggle_latency(self) -> bool:
        """`c`: show the panel if hidden, hide it if shown, from now on whatever the size;
        returns whether it is shown."""
        self.show_latency = not self.latency_shown
        self.set_class(self.show_latency, "-latency")
        return self.show_latency

    def _fit_gpu_panel(self, store: StateStore, live: bool) -> None:
        """Give the GPU panel a row per GPU, but leave the log pane at least LOG_MIN_ROWS."""
        used = 2 + sum(
            banner.outer_size.height
            for banner in (self.query_one(Banner), self.query_one(CollapseBanner))
            if banner.display
        )
        wanted = max(1, len(store.gpus)) + 2
        loading_rows = LOADING_ROWS
        if not live and self.size.height - used - LOADING_ROWS - LOG_MIN_ROWS < wanted:
            loading_rows = COMPACT_LOADING_ROWS  # 8 GPUs while loading on an 80x24 terminal
        self.query_one(LoadingPanel).set_class(loading_rows == COMPACT_LOADING_ROWS, "-compact")
        throughput = self.query_one(ThroughputPanel)
        throughput.set_class(False, "-compact")
        if live:
            fixed = used
            used = fixed + self._live_rows()
            used += self._fit_latency_panel(store, used, wanted)
            if self.size.height - used - LOG_MIN_ROWS < MIN_GPU_ROWS and throughput.wanted_rows > 7:
                # Short of rows: acceptance by position gives way (it stays in the history)
                throughput.set_class(True, "-compact")
                used = fixed + self._live_rows()
                used += self._fit_latency_panel(store, used, wanted)
            self._size_live_row()
        else:
            used += loading_rows
        room = self.size.height - used - LOG_MIN_ROWS
        height = max(MIN_GPU_ROWS, min(wanted, room))
        panel = self.query_one(GpuPanel)
        if panel.styles.height is None or panel.styles.height.value != height:
            panel.styles.height = height

    def _live_rows(self) -> int:
        """The live row's height: its taller panel's (acceptance by position adds a row to
        the throughput panel, the draft's wiring one to the draft/verify panel)."""
        return max(
            LIVE_ROW_ROWS,
            self.query_one(ThroughputPanel).wanted_rows,
            self.query_one(TimingPanel).wanted_rows,
        )

    def _size_live_row(self) -> bool:
        """Size the live row and both its panels alike, so neither bottom border is cut and
        they stay aligned; whether anything changed."""
        rows = self._live_rows()
        row = self.query_one("#live-row")
        if row.styles.height is not None and row.styles.height.value == rows:
            return False
        for widget in (row, self.query_one(ThroughputPanel), self.query_one(TimingPanel)):
            widget.styles.height = rows
        return True

    def _fit_latency_panel(self, store: StateStore, used: int, gpu_rows: int) -> int:
        """Show the latency panel where the operator asked (`c`), else where its figures fit
        beside every GPU row and LOG_MIN_ROWS of log; short of rows, its per-rank table gives
        way first, then the GPU rows. Returns the rows it takes."""
        panel = self.query_one(LatencyPanel)
        left = self.size.height - used - LOG_MIN_ROWS
        fits = left - gpu_rows >= BASE_ROWS
        shown = fits if self.show_latency is None else self.show_latency
        self.set_class(shown, "-latency")
        if not shown:
            return 0
        width = max(20, self.size.width - 4)
        rows = panel_rows(store.latency, width, max(BASE_ROWS, left - gpu_rows))
        panel.rows_allowed = rows
        if panel.styles.height is None or panel.styles.height.value != rows:
            panel.styles.height = rows
        return rows

"""What the history charts plot: bounded series kept by the UI across relaunches.

The store clears its throughput series when a new run starts (the live panels show the current
run); the charts need the whole session, so the console records its own downsampled copy from
the event stream, one point per second of arrival time per series, with every launch marked.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from specmon.model.events import (
    Decode,
    Event,
    GpuSample,
    Latency,
    ProbeTiming,
    RunInfo,
    SpecDecode,
)
from specmon.tui.formatting import key_flags

SESSION_POINTS = 6 * 3600  # one point a second, the last 6 hours per series (~2.5 MB each)


@dataclass(slots=True)
class LaunchMark:
    at: float
    label: str


@dataclass(slots=True)
class _SecondMean:
    """Averages values that arrive within the same wall-clock second into one point."""

    second: int | None = None
    total: float = 0.0
    count: int = 0

    def add(self, at: float, value: float, out: deque[tuple[float, float]]) -> None:
        second = int(at)
        if self.second is not None and second != self.second and self.count:
            out.append((float(self.second), self.total / self.count))
            self.total, self.count = 0.0, 0
        self.second = second
        self.total += value
        self.count += 1

    def flush(self, out: deque[tuple[float, float]]) -> None:
        if self.count and self.second is not None:
            out.append((float(self.second), self.total / self.count))
            self.total, self.count = 0.0, 0


@dataclass
class SessionHistory:
    """tok/s, accept length, verify ms, mean GPU util, ITL and TTFT p90 (from the server's
    /metrics) and (where the server reports it) acceptance by draft position, for the whole
    console session."""

    limit: int = SESSION_POINTS
    tok_s: deque[tuple[float, float]] = field(init=False)
    accept_len: deque[tuple[float, float]] = field(init=False)
    verify_ms: deque[tuple[float, float]] = field(init=False)
    gpu_util: deque[tuple[float, float]] = field(init=False)
    itl_p90_ms: deque[tuple[float, float]] = field(init=False)
    ttft_p90_ms: deque[tuple[float, float]] = field(init=False)
    launches: deque[LaunchMark] = field(init=False)
    accept_by_position: deque[tuple[float, tuple[float, ...]]] = field(init=False)
    _tok_s: _SecondMean = field(default_factory=_SecondMean)
    _accept: _SecondMean = field(default_factory=_SecondMean)
    _verify: _SecondMean = field(default_factory=_SecondMean)
    _util: _SecondMean = field(default_factory=_SecondMean)
    _itl: _SecondMean = field(default_factory=_SecondMean)
    _ttft: _SecondMean = field(default_factory=_SecondMean)
    _server_positions: bool = False  # the server reported per-position rates itself (vLLM)

    def __post_init__(self) -> None:
        self.tok_s = deque(maxlen=self.limit)
        self.accept_len = deque(maxlen=self.limit)
        self.verify_ms = deque(maxlen=self.limit)
        self.gpu_util = deque(maxlen=self.limit)
        self.itl_p90_ms = deque(maxlen=self.limit)
        self.ttft_p90_ms = deque(maxlen=self.limit)
        self.launches = deque(maxlen=256)
        self.accept_by_position = deque(maxlen=self.limit)

    def record(self, at: float, event: Event) -> None:
        if isinstance(event, Decode):
            self._tok_s.add(at, event.gen_throughput, self.tok_s)
            if event.accept_len is not None:
                self._accept.add(at, event.accept_len, self.accept_len)
        elif isinstance(event, SpecDecode):
            if event.mean_accept_len is not None:
                self._accept.add(at, event.mean_accept_len, self.accept_len)
            if event.per_position:
                self._server_positions = True
                self.accept_by_position.append((at, tuple(event.per_position)))
        elif isinstance(event, ProbeTiming):
            self._verify.add(at, event.verify_ms, self.verify_ms)
        elif isinstance(event, GpuSample):
            utils = [g.util_gpu for g in event.gpus if g.util_gpu is not None]
            if utils:
                self._util.add(at, sum(utils) / len(utils), self.gpu_util)
        elif isinstance(event, Latency):
            # a window with no token (or no such family) has no p90: no point, never 0
            if event.itl_s is not None and event.itl_s.p90 is not None:
                self._itl.add(at, event.itl_s.p90 * 1000.0, self.itl_p90_ms)
            if event.ttft_s is not None and event.ttft_s.p90 is not None:
                self._ttft.add(at, event.ttft_s.p90 * 1000.0, self.ttft_p90_ms)
        elif isinstance(event, RunInfo) and not event.reattached:
            self._server_positions = False  # the new run's server says again
            flags = " ".join(f"{k}={v}" for k, v in key_flags(event)[:3])
            label = f"{event.profile or 'run'} {flags}".strip()
            if event.took_over:  # a take-over: the server it replaced, on the chart's line
                label += f" (took over {event.took_over})"
            self.launches.append(LaunchMark(at, label))

    def sample_positions(self, at: float, ratios: Sequence[float]) -> None:
        """The run's acceptance by position so far as the store counts it from the probe
        (SGLang reports no per-position rates of its own): at most one point a second, and
        none once the server reported its own (they would count the same drafts twice)."""
        if self._server_positions or not ratios:
            return
        if self.accept_by_position and int(self.accept_by_position[-1][0]) == int(at):
            self.accept_by_position[-1] = (at, tuple(ratios))
            return
        self.accept_by_position.append((at, tuple(ratios)))

    def position_series(self) -> list[list[tuple[float, float]]]:
        """Acceptance over time, one series per draft position (position 1 first)."""
        series: list[list[tuple[float, float]]] = []
        for at, rates in self.accept_by_position:
            while len(series) < len(rates):
                series.append([])
            for position, rate in enumerate(rates):
                series[position].append((at, rate))
        return series

    def flush(self) -> None:
        """Close the current second's averages (before drawing)."""
        self._tok_s.flush(self.tok_s)
        self._accept.flush(self.accept_len)
        self._verify.flush(self.verify_ms)
        self._util.flush(self.gpu_util)
        self._itl.flush(self.itl_p90_ms)
        self._ttft.flush(self.ttft_p90_ms)

"""The state store: what the console shows, derived from the event stream alone.

The store is synchronous and UI-free; the host session feeds it, and the TUI (or `specmon
watch`) reads it. Every history is a bounded ring buffer, so a run of days stays flat in memory.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate
from typing import TYPE_CHECKING

from specmon.model.events import (
    AcceptanceCollapse,
    CompileBegin,
    CompileEnd,
    ConnectionState,
    Decode,
    DraftInfo,
    Dropped,
    Event,
    GpuReading,
    GpuSample,
    GraphBegin,
    GraphEnd,
    HealthStatus,
    HttpUp,
    KvCache,
    Latency,
    LoadBegin,
    LoadEnd,
    LoadTimes,
    LogLine,
    MetricsSnapshot,
    NodeStatus,
    Prefill,
    ProbeTiming,
    Ready,
    RunInfo,
    RunState,
    ServerError,
    ServerFailed,
    ServerInfo,
    ShardProgress,
    SpecDecode,
    SpecParams,
    WeightsLoaded,
)
from specmon.model.run_end import RunEnd

if TYPE_CHECKING:
    from specmon.backends import Backend

# The loading phases an operator sees ticking, in order: the default backend's (each backend
# names its own, ``Backend.loading_phases``; ``StateStore.phases`` is the followed run's).
PHASES: tuple[str, ...] = (
    "target weights",
    "KV cache",
    "target CUDA graphs",
    "draft weights",
    "draft CUDA graphs",
    "HTTP server",
    "ready",
)

HISTORY = 3600  # samples kept per series (e.g. 15 min of 4 Hz GPU ticks)
# Upper bounds (ms) of the per-cycle timing histograms: sub-ms drafts to second-long verifies.
CYCLE_BUCKETS_MS: tuple[float, ...] = (
    0.25,
    0.5,
    1,
    2,
    3,
    5,
    7.5,
    10,
    15,
    20,
    30,
    50,
    75,
    100,
    150,
    250,
    500,
    1000,
    2500,
)
LOG_LINES = 5000
ERRORS = 200


@dataclass(slots=True)
class LoadingState:
    """Progress through start-up, with an ETA from the shard rate or earlier loads."""

    phase: str | None = None
    done_phases: list[str] = field(default_factory=list)
    shards_done: int = 0
    shards_total: int | None = None
    started_at: float | None = None  # arrival time of the first load_begin
    shards_started_at: float | None = None
    shard_rate_s: float | None = None  # seconds per shard, from the bar or measured
    ready_at: float | None = None
    loads_seen: int = 0
    target_loaded: bool = False  # the target's weights are read (later bars are the draft's)
    previous_load_seconds: float | None = None  # from an earlier load of the same profile
    # This run's start-to-ready time once ready, None while unknown (a reattach that saw the
    # ready line only in its replay, of a run whose record holds no ready time).
    load_seconds: float | None = None
    nodes: dict[int, NodeStatus] = field(default_factory=dict)  # per node of a multi-node run
    # A reattach: its start-up lines arrive replayed, all at once, so their arrival times say
    # nothing of when they happened until the run record's times (LoadTimes) have come.
    replayed: bool = False

    def elapsed(self, now: float) -> float | None:
        if self.ready_at is not None:
            return self.load_seconds  # None: the load time is unknown
        if self.started_at is None:
            return None
        return max(0.0, now - self.started_at)

    def eta_seconds(self, now: float) -> float | None:
        """Seconds to ready, over the whole start-up: what an earlier load of the profile
        leaves, and while the target's shards are read at a known rate, at least the shards
        left x that rate. None where neither is known: once the shards are read, only an
        earlier load says how long the rest (KV cache, CUDA graphs, the draft) takes."""
        if self.ready_at is not None:
            return 0.0
        from_history = None
        if self.previous_load_seconds is not None and self.started_at is not None:
            from_history = max(0.0, self.previous_load_seconds - (now - self.started_at))
        reading = not self.target_loaded and self.loads_seen <= 1
        if reading and self.shards_total and self.shard_rate_s:
            left = max(0, self.shards_total - self.shards_done)
            if left:
                by_shards = left * self.shard_rate_s
                return by_shards if from_history is None else max(by_shards, from_history)
        return from_history


@dataclass(slots=True)
class CycleHistogram:
    """Cumulative counts of one probe phase's per-cycle times since specmon started, so
    percentiles over any window can be computed downstream (e.g. by Prometheus)."""

    bounds_ms: tuple[float, ...] = CYCLE_BUCKETS_MS
    counts: list[int] = field(default_factory=lambda: [0] * (len(CYCLE_BUCKETS_MS) + 1))
    count: int = 0
    sum_ms: float = 0.0

    def observe(self, ms: float) -> None:
        self.counts[bisect_left(self.bounds_ms, ms)] += 1  # last slot: above every bound
        self.count += 1
        self.sum_ms += ms

    def cumulative(self) -> list[int]:
        """Counts of cycles at or under each bound, then the total (the +Inf bucket)."""
        return list(accumulate(self.counts))


@dataclass(slots=True)
class PositionTally:
    """Drafts that reached each position, and how many had it accepted."""

    cycles: list[int] = field(default_factory=list)  # drafts that reached position i + 1
    accepted: list[int] = field(default_factory=list)  # ... and had it accepted

    def grow(self, positions: int) -> None:
        while len(self.cycles) < positions:
            self.cycles.append(0)
            self.accepted.append(0)

    @property
    def drafts(self) -> int:
        return self.cycles[0] if self.cycles else 0

    def ratios(self) -> list[float]:
        return [a / c for a, c in zip(self.accepted, self.cycles, strict=True) if c]


@dataclass(slots=True)
class PositionAcceptance:
    """How often each draft position was accepted over the current run: the same view from
    either server. From the probe, each request's accepted count in a verify (a chain draft
    accepts positions 1..a in a row, so positions 1..a were accepted and the rest not); from
    the server's own periodic per-position rates (vLLM), weighted by their drafts. A cycle with
    no per-request counts is used only when it held one request (its sum is that request's).

    The two sources count the same drafts, so they are kept apart and never added: the
    server's own counts win (they cover every engine, the probe only rank 0's), the probe's
    serve while the server has counted none."""

    probe: PositionTally = field(default_factory=PositionTally)
    server: PositionTally = field(default_factory=PositionTally)
    reported: list[float] | None = None  # the server's own per-position rates, when it has them

    def observe(self, accepted_tokens: int, positions: int) -> None:
        """One request's verify (from the probe): ``accepted_tokens`` of its ``positions``."""
        tally = self.probe
        tally.grow(positions)
        for i in range(positions):
            tally.cycles[i] += 1
            if accepted_tokens > i:
                tally.accepted[i] += 1

    def observe_rates(self, rates: tuple[float, ...], drafts: int) -> None:
        """``drafts`` drafts (the server's count) whose share accepted at position i + 1 was
        ``rates[i]``."""
        tally = self.server
        tally.grow(len(rates))
        for i, rate in enumerate(rates):
            tally.cycles[i] += drafts
            tally.accepted[i] += round(max(0.0, min(1.0, rate)) * drafts)

    def set_rates(self, rates: list[float]) -> None:
        """The server's own latest acceptance rate per draft position (vLLM's SpecDecoding
        line or its per-position counters): the view while no drafts were counted."""
        self.reported = [min(1.0, max(0.0, float(rate))) for rate in rates]

    @property
    def counted(self) -> PositionTally:
        """The tally the view comes from: the server's once it has counted drafts."""
        return self.server if self.server.drafts else self.probe

    @property
    def drafts(self) -> int:
        """How many drafts (request-verifies) the first position's share comes from."""
        return self.counted.drafts

    def ratios(self) -> list[float]:
        """Accepted share per position (1-based position = index + 1), P(accepted >= i), over
        the run: its counted drafts (the server's rate lines weighted by their drafts, else
        the probe's cycles), else the server's latest reported rates (e.g. its counters)."""
        counted = self.counted.ratios()
        if counted:
            return counted
        return list(self.reported) if self.reported is not None else []


@dataclass(slots=True)
class Point:
    at: float
    value: float


class StateStore:
    """Applies events; keeps the latest state and bounded histories of every series."""

    def __init__(self, history: int = HISTORY) -> None:
        self.history = history
        self.connection: ConnectionState | None = None
        self.run: RunInfo | None = None
        self.draft_info: DraftInfo | None = None  # the run's draft wiring (latest read)
        self.run_state: str = "stopped"
        # How the latest ended run ended (a stop, a replacement, a crash), kept after a new
        # run starts: "run A replaced by run B" stays known while B loads.
        self.run_end: RunEnd | None = None
        self.run_end_id: str | None = None  # the run whose end run_end is
        self.loading = LoadingState()
        # Start-to-ready of the latest load whose times are known, this run's or an earlier
        # one's (kept across relaunches: the exporter's last load duration).
        self.last_load_seconds: float | None = None
        self.failure: ServerFailed | None = None
        self.last_decode: Decode | None = None
        self.last_decode_at: float | None = None  # arrival time of last_decode
        self.spec_steps: int | None = None
        """Draft steps in force after adaptive speculation changed them; None: as launched."""
        self.server_info: dict[str, str] = {}  # the latest fields the server reported itself
        self.throughput: deque[Point] = deque(maxlen=history)
        self.accept_len: deque[Point] = deque(maxlen=history)
        # Acceptance per draft position over time (one list per report), for the history chart.
        self.accept_by_position_history: deque[tuple[float, tuple[float, ...]]] = deque(
            maxlen=history
        )
        self.decode_engines: dict[int, float] = {}  # engine -> its latest gen throughput
        # Request latency and capacity from /metrics (the latest, and each one over time for
        # the history charts), of the current run.
        self.latency: Latency | None = None
        self.latency_history: deque[tuple[float, Latency]] = deque(maxlen=history)
        self.probe: deque[ProbeTiming] = deque(maxlen=history)
        self.gpus: dict[int, GpuReading] = {}
        self.gpu_nodes: dict[int, int] = {}  # GPU id -> node rank, for a multi-node run
        self.gpu_util: dict[int, deque[Point]] = {}
        self.gpu_mem: dict[int, deque[Point]] = {}
        self.log: deque[LogLine] = deque(maxlen=LOG_LINES)
        self.errors: deque[ServerError] = deque(maxlen=ERRORS)
        self.launch_marks: deque[Point] = deque(maxlen=256)  # when each launch began
        self.events_applied = 0
        # Since specmon started (never cleared by a relaunch): what counters are made of.
        self.error_counts: dict[str, int] = {}  # category -> errors seen
        self.cycle_histograms: dict[str, CycleHistogram] = {
            phase: CycleHistogram() for phase in ("draft", "verify", "extend", "cycle")
        }
        self.accept_by_position = PositionAcceptance()  # of the current run
        self.accept_len_sum, self.accept_len_windows = 0.0, 0  # of the current run
        # The current run's acceptance collapse against an earlier run (None: none shown).
        self.collapse: AcceptanceCollapse | None = None
        self.last_event_at: float | None = None  # arrival time of the latest event
        # Arrival minus the source's own wall clock for the latest GPU sample or probe cycle:
        # how far behind the host the store runs (transport, parsing, queueing).
        self.event_lag_s: float | None = None
        self._clock: Callable[[], float] = time.time

    # --- derived figures ---------------------------------------------------------------------

    def _backend(self) -> Backend:
        """The followed run's server (the default backend before a run is seen)."""
        from specmon.backends import DEFAULT_BACKEND, get_backend

        backend = self.run.backend if self.run is not None and self.run.backend else None
        return get_backend(backend or DEFAULT_BACKEND)

    @property
    def has_extend_phase(self) -> bool:
        """Whether the followed run's server has an extend phase (vLLM has none)."""
        return self._backend().has_extend_phase

    @property
    def phases(self) -> tuple[str, ...]:
        """The loading phases of the followed run's server, in order."""
        return self._backend().loading_phases

    def _phase(self, *names: str) -> str | None:
        """The first of ``names`` that the server's phase list has."""
        phases = self.phases
        return next((name for name in names if name in phases), None)

    def set_accept_by_position(self, rates: list[float], at: float | None = None) -> None:
        """The server's acceptance rate per draft position (position 1 first)."""
        self.accept_by_position.set_rates(rates)
        now = self._clock() if at is None else at
        self.accept_by_position_history.append((now, tuple(self.accept_by_position.ratios())))

    def end_notice(self) -> str | None:
        """What the console says of a run's end that is no failure: "run A stopped by u@h
        (specmon stop); no server is running" while nothing runs, or "run A replaced by run
        B (...)" while B, another client's run followed now, runs (the operator learns who
        changed the server; a relaunch of this console's own is not told). None otherwise."""
        end, run = self.run_end, self.run
        if end is None or run is None:
            return None
        if self.run_state == "stopped" and self.run_end_id == run.run_id and not end.failed:
            return f"run {run.run_id} {end.text()}; no server is running"
        replaced = end.kind == "replaced" and end.replaced_by == run.run_id
        if replaced and run.replaces is not None and run.replaces == self.run_end_id:
            return f"run {self.run_end_id} {end.text()}; following run {run.run_id}"
        return None

    def throughput_stats(self) -> tuple[float | None, float | None, float | None]:
        """(current, mean, max) gen throughput of the current run."""
        if not self.throughput:
            return None, None, None
        values = [p.value for p in self.throughput]
        return values[-1], sum(values) / len(values), max(values)

    def phase_means(self, last: int = 200) -> tuple[float, float, float] | None:
        """Mean (draft, verify, extend) ms over the last cycles."""
        if not self.probe:
            return None
        recent = list(self.probe)[-last:]
        n = len(recent)
        return (
            sum(r.draft_ms for r in recent) / n,
            sum(r.verify_ms for r in recent) / n,
            sum(r.extend_ms for r in recent) / n,
        )

    # --- applying events ---------------------------------------------------------------------

    def apply(self, event: Event, at: float | None = None) -> None:
        now = self._clock() if at is None else at
        self.events_applied += 1
        self.last_event_at = now
        if event.rank not in (None, 0) and isinstance(event, _RANK0_ONLY):
            return  # every TP rank prints its own copy of start-up lines; TP0 speaks for all
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event, now)

    def _on_connection(self, e: ConnectionState, now: float) -> None:
        self.connection = e

    def _on_draft_info(self, e: DraftInfo, now: float) -> None:
        if self.run is None or self.run.run_id == e.run_id:  # not a replaced run's, late
            self.draft_info = e

    def _on_collapse(self, e: AcceptanceCollapse, now: float) -> None:
        if self._is_other_run(e.run_id):
            return
        self.collapse = None if e.cleared else e

    def _on_run(self, e: RunInfo, now: float) -> None:
        fresh = self.run is None or self.run.run_id != e.run_id
        self.run = e
        if fresh:
            self.draft_info = None
            previous = self.loading.previous_load_seconds
            self.loading = LoadingState(previous_load_seconds=previous, replayed=e.reattached)
            self.failure = None
            self.last_decode = None
            self.last_decode_at = None
            self.spec_steps = None
            self.server_info = {}
            self.throughput.clear()
            self.accept_len.clear()
            self.accept_len_sum, self.accept_len_windows = 0.0, 0
            self.collapse = None
            self.accept_by_position_history.clear()
            self.decode_engines.clear()
            self.latency = None
            self.latency_history.clear()
            self.probe.clear()
            self.accept_by_position = PositionAcceptance()
            self.launch_marks.append(Point(now, 0.0))
            if not e.reattached:
                self.run_state = "loading"

    def _is_other_run(self, run_id: str | None) -> bool:
        """Whether an event names a run other than the followed one: a late word about a run
        that was replaced must not change the state of the run that replaced it."""
        return run_id is not None and self.run is not None and run_id != self.run.run_id

    def _on_run_state(self, e: RunState, now: float) -> None:
        if e.end is not None:
            self.run_end, self.run_end_id = e.end, e.run_id
        if self._is_other_run(e.run_id):
            return  # an earlier run's end, told after the next run began
        self.run_state = e.state
        loading = self.loading
        if e.state == "ready" and loading.ready_at is None and loading.started_at is not None:
            # Health said ready before the log's ready line (or a server that writes none):
            # the load is over now, or its elapsed time counted on under "ready".
            self._became_ready(now, None, replayed=False)

    def _enter(self, phase: str | None) -> None:
        if phase is None:
            return
        loading = self.loading
        previous = loading.phase
        if previous is not None and previous != phase and previous not in loading.done_phases:
            loading.done_phases.append(previous)
        loading.phase = phase

    def _on_load_begin(self, e: LoadBegin, now: float) -> None:
        loading = self.loading
        if loading.started_at is None:
            loading.started_at = now
        if self.run_state in ("stopped", "failed"):
            self.run_state = "loading"
        target_phase = self._phase("target weights", "weights")
        if loading.phase == target_phase and loading.shards_total is None:
            return  # the same load announced twice (vLLM: `Starting to load model`, then
            # `Loading model from scratch`), before any shard was read
        loading.loads_seen += 1
        draft = loading.loads_seen > 1 or loading.target_loaded
        self._enter(self._phase("draft weights") if draft else target_phase)

    def _on_weights_loaded(self, e: WeightsLoaded, now: float) -> None:
        loading = self.loading
        if e.role == "draft":
            self._enter(self._phase("draft weights"))
            return
        loading.target_loaded = True
        if loading.shards_total:
            loading.shards_done = loading.shards_total

    def _on_compile_begin(self, e: CompileBegin, now: float) -> None:
        self._enter(self._phase("torch.compile"))

    def _on_compile(self, e: CompileEnd, now: float) -> None:
        self._enter(self._phase("torch.compile"))

    def _on_shards(self, e: ShardProgress, now: float) -> None:
        loading = self.loading
        if loading.loads_seen > 1 or loading.target_loaded:
            return  # the draft's own one-shard bar says nothing about the target's ETA
        if loading.shards_started_at is None:
            loading.shards_started_at = now
        loading.shards_done = e.done
        loading.shards_total = e.total
        if e.seconds_per_shard:
            loading.shard_rate_s = e.seconds_per_shard
        elif e.done > 0 and not loading.replayed:  # replayed lines arrive all at once
            loading.shard_rate_s = (now - loading.shards_started_at) / e.done

    def _on_load_end(self, e: LoadEnd, now: float) -> None:
        if self.loading.loads_seen <= 1 and self.loading.shards_total:
            self.loading.shards_done = self.loading.shards_total

    def _on_kv(self, e: KvCache, now: float) -> None:
        if self.loading.loads_seen <= 1:
            self._enter(self._phase("KV cache"))

    def _on_graph_begin(self, e: GraphBegin, now: float) -> None:
        if e.role in (None, "target"):
            self._enter(self._phase("target CUDA graphs", "CUDA graphs"))
        else:
            self._enter(self._phase("draft CUDA graphs", "CUDA graphs"))

    def _on_graph_end(self, e: GraphEnd, now: float) -> None:
        pass

    def _on_http(self, e: HttpUp, now: float) -> None:
        self._enter(self._phase("HTTP server"))

    def _on_ready(self, e: Ready, now: float) -> None:
        loading = self.loading
        if loading.ready_at is not None and loading.phase == "ready" and e.load_seconds is None:
            return  # health said so first: the earlier time stands (the log line comes late)
        self._became_ready(now, e.load_seconds, replayed=e.replayed)
        self.run_state = "ready"

    def _became_ready(self, now: float, load_seconds: float | None, *, replayed: bool) -> None:
        """The load ended at ``now`` (the log's ready line, or health first): the ready phase,
        the ready time, and the load time, the server's own, else since the first load line
        unless either came replayed (long after the fact: unknown)."""
        loading = self.loading
        self._enter("ready")
        if "ready" not in loading.done_phases:
            loading.done_phases.append("ready")
        loading.ready_at = now
        if load_seconds is not None:
            self._loaded_in(load_seconds)
        elif not replayed and not loading.replayed and loading.started_at is not None:
            self._loaded_in(now - loading.started_at)
        else:
            loading.load_seconds = None

    def _loaded_in(self, seconds: float) -> None:
        """This run's load time is known: the last load's, and the next load's ETA basis."""
        self.loading.load_seconds = seconds
        self.loading.previous_load_seconds = seconds
        self.last_load_seconds = seconds

    def _on_load_times(self, e: LoadTimes, now: float) -> None:
        loading = self.loading
        # Seen no start-up line (a reattach whose replay began after them): the run record's
        # times are all there is, so they are taken as they are.
        unseen = loading.started_at is None and loading.ready_at is None
        if e.started_at is not None and (loading.started_at is not None or unseen):
            loading.started_at = e.started_at
        if e.ready_at is not None and (loading.ready_at is not None or unseen):
            loading.ready_at = e.ready_at
            if e.started_at is not None:  # both from the run record: its load time
                loading.load_seconds = e.ready_at - e.started_at
        if e.previous_load_seconds is not None:
            loading.previous_load_seconds = e.previous_load_seconds
        if e.run_id is None or self.run is None or e.run_id != self.run.run_id:
            return
        loading.replayed = False  # the run record's times are in: what follows is live
        if e.started_at is not None and e.ready_at is not None:
            self._loaded_in(max(0.0, e.ready_at - e.started_at))

    def _on_decode(self, e: Decode, now: float) -> None:
        """Throughput is the server's total: a log with several engines (vLLM's data
        parallel `Engine 000:`, `Engine 001:`) adds each engine's latest figure."""
        self.last_decode = e
        self.last_decode_at = now
        engine = e.engine
        if engine is None:
            self.throughput.append(Point(now, e.gen_throughput))
        else:
            self.decode_engines[engine] = e.gen_throughput
            self.throughput.append(Point(now, sum(self.decode_engines.values())))
        if e.accept_len is not None:
            self._note_accept_len(now, e.accept_len)

    def _note_accept_len(self, now: float, value: float) -> None:
        """One window's accept length: the series, and the run's running mean (its windows
        all count, however long the run; state/collapse.py compares runs by it)."""
        self.accept_len.append(Point(now, value))
        self.accept_len_sum += value
        self.accept_len_windows += 1

    def _on_spec_decode(self, e: SpecDecode, now: float) -> None:
        if e.mean_accept_len is not None:
            self._note_accept_len(now, e.mean_accept_len)
        if not e.per_position:
            return
        # The server's list, never longer than the deepest draft read (its parser cuts it
        # already; any other source is cut here, so no list or series is sized by a server).
        rates = e.per_position[: self._backend().max_draft_positions]
        if e.drafted:  # the run's counts, weighted by drafts (vLLM counts k tokens per draft)
            drafts = e.drafted // len(e.per_position)
            if drafts > 0:
                self.accept_by_position.observe_rates(rates, drafts)
        self.set_accept_by_position(list(rates), now)

    def _on_latency(self, e: Latency, now: float) -> None:
        self.latency = e
        self.latency_history.append((now, e))

    def _on_spec_params(self, e: SpecParams, now: float) -> None:
        self.spec_steps = e.steps

    def _on_server_info(self, e: ServerInfo, now: float) -> None:
        self.server_info = dict(e.values)

    def _on_error(self, e: ServerError, now: float) -> None:
        self.errors.append(e)
        self.error_counts[e.category] = self.error_counts.get(e.category, 0) + 1

    def _on_failed(self, e: ServerFailed, now: float) -> None:
        if self._is_other_run(e.run_id):
            return
        self.failure = e
        self.run_state = "hung" if e.hung else "failed"

    def _on_node(self, e: NodeStatus, now: float) -> None:
        self.loading.nodes[e.node_rank] = e
        for gpu in e.gpus:
            self.gpu_nodes[gpu] = e.node_rank

    def _on_log(self, e: LogLine, now: float) -> None:
        self.log.append(e)

    def _on_probe(self, e: ProbeTiming, now: float) -> None:
        self.probe.append(e)
        histograms = self.cycle_histograms
        histograms["draft"].observe(e.draft_ms)
        histograms["verify"].observe(e.verify_ms)
        histograms["extend"].observe(e.extend_ms)
        histograms["cycle"].observe(e.cycle_ms)
        self.event_lag_s = now - e.wall
        if not e.batch_size or not e.draft_tokens:
            return
        # what draft_tokens counts is the server's (SGLang adds each request's root, vLLM not)
        backend = self._backend()
        positions = backend.probe_draft_positions(e.draft_tokens, e.batch_size)
        if not 1 <= positions <= backend.max_draft_positions:
            return  # a record claiming deeper drafts is not a real cycle: no tally sized by it
        if e.accepted_per_request is not None and len(e.accepted_per_request) == e.batch_size:
            for accepted in e.accepted_per_request:
                self.accept_by_position.observe(accepted, positions)
        elif e.batch_size == 1 and e.accepted_tokens is not None:
            self.accept_by_position.observe(e.accepted_tokens, positions)

    def _on_gpu(self, e: GpuSample, now: float) -> None:
        self.event_lag_s = now - e.wall
        for reading in e.gpus:
            self.gpus[reading.index] = reading
            util = self.gpu_util.setdefault(reading.index, deque(maxlen=self.history))
            mem = self.gpu_mem.setdefault(reading.index, deque(maxlen=self.history))
            if reading.util_gpu is not None:
                util.append(Point(e.wall, reading.util_gpu))
            if reading.mem_used_mb is not None:
                mem.append(Point(e.wall, reading.mem_used_mb))


_RANK0_ONLY = (
    LoadBegin,
    LoadEnd,
    KvCache,
    GraphBegin,
    GraphEnd,
    ShardProgress,
    WeightsLoaded,
    CompileBegin,
    CompileEnd,
)

_HANDLERS: dict[type, Callable[[StateStore, Event, float], None]] = {
    ConnectionState: StateStore._on_connection,
    RunInfo: StateStore._on_run,
    DraftInfo: StateStore._on_draft_info,
    AcceptanceCollapse: StateStore._on_collapse,
    RunState: StateStore._on_run_state,
    LoadBegin: StateStore._on_load_begin,
    ShardProgress: StateStore._on_shards,
    LoadEnd: StateStore._on_load_end,
    KvCache: StateStore._on_kv,
    GraphBegin: StateStore._on_graph_begin,
    GraphEnd: StateStore._on_graph_end,
    HttpUp: StateStore._on_http,
    Ready: StateStore._on_ready,
    LoadTimes: StateStore._on_load_times,
    Decode: StateStore._on_decode,
    SpecDecode: StateStore._on_spec_decode,
    Latency: StateStore._on_latency,
    WeightsLoaded: StateStore._on_weights_loaded,
    CompileBegin: StateStore._on_compile_begin,
    CompileEnd: StateStore._on_compile,
    SpecParams: StateStore._on_spec_params,
    ServerInfo: StateStore._on_server_info,
    ServerError: StateStore._on_error,
    ServerFailed: StateStore._on_failed,
    LogLine: StateStore._on_log,
    NodeStatus: StateStore._on_node,
    ProbeTiming: StateStore._on_probe,
    GpuSample: StateStore._on_gpu,
}  # type: ignore[dict-item]


# What a lossy subscriber may lose when it falls behind: high-rate samples and log lines. Every
# other event (phase, ready, failure, run state, connection, stop steps, errors) changes state
# and always reaches every subscriber.
DROPPABLE: tuple[type[Event], ...] = (
    LogLine,
    Decode,
    Prefill,
    GpuSample,
    ProbeTiming,
    HealthStatus,
    MetricsSnapshot,
    Latency,
    ShardProgress,
)


class Subscription(asyncio.Queue[tuple[float, Event]]):
    """One subscriber's queue of ``(arrival time, event)``.

    Lossless (the default: `watch`, `launch --wait`, sweeps, tests): every event is queued, and
    past ``limit`` the bus's log follower pauses (``EventBus.wait_for_room``), so a slow
    reader slows the tail and loses nothing. Lossy (the console's live view, which redraws
    from the store anyway): past ``limit`` droppable events are counted, not queued, and a
    ``Dropped`` event takes their place once there is room; state changes are always queued.
    ``limit=None``: lossless and never pausing the follower (a reader that drains only later,
    e.g. `launch --wait` while the launch itself runs; its growth is bounded by the replay).
    """

    def __init__(self, bus: EventBus, limit: int | None, lossy: bool) -> None:
        super().__init__()
        self.bus = bus
        self.limit = limit
        self.lossy = lossy
        self.dropped = 0  # dropped since the last Dropped marker

    @property
    def full_for_follower(self) -> bool:
        return not self.lossy and self.limit is not None and self.qsize() >= self.limit

    def offer(self, at: float, event: Event) -> None:
        if self.lossy and self.limit is not None:
            if self.qsize() >= self.limit and isinstance(event, DROPPABLE):
                self.dropped += 1
                self.bus.dropped += 1
                return
            if self.dropped:
                self.put_nowait((at, Dropped(count=self.dropped)))
                self.dropped = 0
        self.put_nowait((at, event))

    def _get(self) -> tuple[float, Event]:  # asyncio.Queue's hook under get()/get_nowait()
        item = super()._get()
        if self.limit is None:
            return item
        if not self.lossy and self.qsize() < self.limit:
            self.bus.room.set()
        elif self.lossy and self.dropped and self.qsize() == 0:
            # Caught up after a burst with nothing new since: the marker comes now, not later.
            self._put((time.time(), Dropped(count=self.dropped)))
            self.dropped = 0
        return item


class EventBus:
    """Fan-out of events to async subscribers; the store is applied synchronously on publish,
    so it never misses anything. No subscriber loses an event silently (see Subscription)."""

    def __init__(self, store: StateStore | None = None, queue_size: int = 10_000) -> None:
        self.store = store if store is not None else StateStore()
        self.queue_size = queue_size
        self._subscribers: list[Subscription] = []
        self.dropped = 0  # by lossy subscribers, each reported to them as a Dropped event
        self.room = asyncio.Event()

    def publish(self, event: Event, at: float | None = None) -> None:
        now = time.time() if at is None else at
        self.store.apply(event, now)
        for queue in self._subscribers:
            queue.offer(now, event)

    async def wait_for_room(self) -> None:
        """Back-pressure for the log follower: return once no lossless subscriber holds
        ``queue_size`` events or more."""
        while any(queue.full_for_follower for queue in self._subscribers):
            self.room.clear()
            await self.room.wait()

    @property
    def lossless(self) -> bool:
        """Whether a subscriber takes every event (a reattach then replays its log in full)."""
        return any(not queue.lossy for queue in self._subscribers)

    def subscribe(self, *, lossy: bool = False, bounded: bool = True) -> Subscription:
        queue = Subscription(self, self.queue_size if bounded else None, lossy)
        self._subscribers.append(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[tuple[float, Event]]) -> None:
        if queue in self._subscribers:
            self._subscribers.remove(queue)  # type: ignore[arg-type]
            self.room.set()  # a follower waiting on this queue goes on

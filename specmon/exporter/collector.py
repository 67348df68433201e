"""A prometheus-client Collector that reads each host's StateStore when Prometheus scrapes.

Nothing is computed between scrapes: every family is built from the stores' latest state (and
their cumulative counters and histograms) in ``collect``, on the event loop's thread, so a
scrape never races the store. Names follow Prometheus conventions (base units, ``_ratio``,
``_seconds``, ``_bytes``, ``_total``); every family carries a ``host`` label.

Only the present is exported. The run's own gauges (ready, loading, tok/s, acceptance, token
flow, requests, KV cache) carry its ``run_id`` and exist only while the run lives (loading, ready,
stopping): when it ends they leave the scrape, so Prometheus marks them stale at once, and a
new run's series start under its own ``run_id`` with nothing of the old run's. The run's
state (``specmon_run_state``, one table of states below), its info and its launch time stay
until another run is followed; the host's series (GPUs, errors, histograms, connection) carry no run.

A host's series are bounded whatever its server or agent sends: at most MAX_SERIES_PER_HOST
per scrape (the fixed families take about 130, draft positions at most 64, each GPU 6), the
families in the order below with the per-GPU ones last, a family's labelled series (a
histogram with its buckets) kept or left out whole; ``specmon_exporter_series_dropped`` says
how many were left out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from specmon.backends import RUN_INFO_LABELS, backend_for_command, get_backend
from specmon.model.errors import UsageError
from specmon.model.events import Decode
from specmon.state.store import CycleHistogram, EventBus, StateStore

CONNECTION_STATES = ("connecting", "connected", "reconnecting", "disconnected", "closed")
# The run's state as the store has it (or how the run ended: the run status's end kind) ->
# the ``state`` label it is exported under. The states a live run is in come first.
RUN_STATE_LABELS: dict[str, str] = {
    "loading": "loading",
    "ready": "ready",
    "stopping": "stopping",
    "hung": "hung",  # alive, but neither logging nor answering: its gauges would be stale
    "stopped": "stopped",  # stopped by specmon (by whom: the run status)
    "replaced": "replaced",  # another client launched a run in its place
    "exited": "exited",  # exited on its own with a code
    "crashed": "crashed",  # died of a signal or an error (root cause in the log)
    "killed": "killed",  # killed after the stop's grace period
    "failed": "failed",  # ended badly, how not told
}
RUN_STATES = tuple(dict.fromkeys(RUN_STATE_LABELS.values()))
LIVE_RUN_STATES = frozenset({"loading", "ready", "stopping"})
ERROR_CATEGORIES = ("oom", "nccl", "other", "unknown")
SPEC_PHASES = ("draft", "verify", "extend")
MB = 1024 * 1024
# Series one host may add to a scrape: room for 650 GPUs (a 64-node run of 8 each needs about
# 3300 series), while a host reporting a million GPUs or positions costs a bounded scrape
# (some 75 bytes a series: about 300 KB).
MAX_SERIES_PER_HOST = 4096

RUN_INFO_ENV = (
    ("nccl_proto", "NCCL_PROTO"),
    ("nccl_algo", "NCCL_ALGO"),
    ("nccl_p2p_level", "NCCL_P2P_LEVEL"),
)


@dataclass(frozen=True, slots=True)
class WatchedHost:
    """One exported host: its name (the ``host`` label, as given on the command line) and the
    event bus of its session, whose store is read at scrape time."""

    name: str
    bus: EventBus


class SpecmonCollector(Collector):
    """Metric families for every watched host, built from its store at scrape time."""

    def __init__(
        self,
        hosts: Callable[[], Sequence[WatchedHost]],
        *,
        backend_of_profile: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._hosts = hosts
        self._backends = dict(backend_of_profile or {})
        self._clock = clock

    def describe(self) -> Iterable[Metric]:
        """Every family this collector can expose (without samples): the names are fixed."""
        return list(self._families().values())

    def collect(self) -> Iterable[Metric]:
        families = self._families()
        now = self._clock()
        for host in self._hosts():
            own = self._families()
            self._add_host(own, host, now)
            dropped = _merge_within(families, own, MAX_SERIES_PER_HOST)
            families.series_dropped.add_metric([host.name], float(dropped))
        return list(families.values())

    # --- building ------------------------------------------------------------------------

    def _families(self) -> _Families:
        g, c, h = GaugeMetricFamily, CounterMetricFamily, HistogramMetricFamily
        host = ["host"]
        run = ["host", "run_id"]  # a run's own series: they end with it
        return _Families(
            up=g(
                "specmon_host_up", "1 while specmon's session to the host is connected", labels=host
            ),
            connection=g(
                "specmon_connection_state",
                "specmon's session to the host: 1 for the current state",
                labels=[*host, "state"],
            ),
            events=c("specmon_events", "Events specmon has applied from the host", labels=host),
            dropped=c(
                "specmon_events_dropped",
                "Events dropped by slow subscribers of the host's bus (the store keeps all)",
                labels=host,
            ),
            lag=g(
                "specmon_event_lag_seconds",
                "Arrival in specmon minus the host's wall time for the latest GPU or probe sample",
                labels=host,
            ),
            last_event=g(
                "specmon_last_event_timestamp_seconds",
                "When specmon last received an event from the host (Unix time)",
                labels=host,
            ),
            run=InfoMetricFamily(
                "specmon_run",
                "The server run specmon follows on the host: backend, profile, model, "
                "speculative settings and NCCL environment",
            ),
            run_start=g(
                "specmon_run_start_time_seconds",
                "When the followed run was launched (Unix time), as its run record says",
                labels=run,
            ),
            run_state=g(
                "specmon_run_state",
                "The followed run's state, or how it ended: 1 for the current one",
                labels=[*run, "state"],
            ),
            ready=g(
                "specmon_ready", "1 while the server is ready to serve (live runs)", labels=run
            ),
            loading_phase=g(
                "specmon_loading_phase",
                "Start-up phase: 1 for the current one (phase 'ready' once loaded)",
                labels=[*run, "phase"],
            ),
            loading_progress=g(
                "specmon_loading_progress_ratio",
                "Start-up progress: phases done, the target-weights phase counted by shards",
                labels=run,
            ),
            shards_done=g(
                "specmon_loading_shards_loaded", "Target weight shards loaded", labels=run
            ),
            shards_total=g("specmon_loading_shards", "Target weight shards in all", labels=run),
            loading_eta=g(
                "specmon_loading_eta_seconds",
                "Estimated seconds to ready, while loading (absent where nothing says)",
                labels=run,
            ),
            loading_elapsed=g(
                "specmon_loading_elapsed_seconds",
                "Seconds since the start-up began (up to ready once ready)",
                labels=run,
            ),
            last_load=g(
                "specmon_last_load_duration_seconds",
                "Start-to-ready duration of the latest load whose times are known (this run's "
                "or an earlier one's)",
                labels=host,
            ),
            throughput=g(
                "specmon_generation_tokens_per_second",
                "Generation throughput the server reported in its latest decode line",
                labels=run,
            ),
            accept_length=g(
                "specmon_spec_accept_length",
                "Mean tokens accepted per speculative cycle (latest decode line)",
                labels=run,
            ),
            accept_rate=g(
                "specmon_spec_accept_rate_ratio",
                "Accepted share of drafted tokens (latest decode line)",
                labels=run,
            ),
            drafts_rate=g(
                "specmon_spec_drafts_per_second",
                "Draft-verify cycles per second over the running requests (latest decode line: "
                "tok/s over accept length)",
                labels=run,
            ),
            draft_tokens_rate=g(
                "specmon_spec_draft_tokens_per_second",
                "Drafted tokens sent to verification per second (drafts/s x the launch's "
                "drafted tokens per cycle)",
                labels=run,
            ),
            accepted_tokens_rate=g(
                "specmon_spec_accepted_tokens_per_second",
                "Drafted tokens accepted per second (drafts/s x (accept length - 1))",
                labels=run,
            ),
            position_acceptance=g(
                "specmon_spec_position_acceptance_ratio",
                "Share of single-request cycles that accepted each draft position (current run)",
                labels=[*run, "position"],
            ),
            running=g("specmon_running_requests", "Requests being decoded", labels=run),
            queued=g("specmon_queued_requests", "Requests waiting in the queue", labels=run),
            kv_usage=g("specmon_kv_cache_usage_ratio", "Share of the KV cache in use", labels=run),
            phase_seconds=h(
                "specmon_spec_phase_seconds",
                "Per-cycle time of each speculative phase (draft, verify, extend) from the probe",
                labels=[*host, "phase"],
            ),
            cycle_seconds=h(
                "specmon_spec_cycle_seconds",
                "Per-cycle time of a whole speculative cycle from the probe",
                labels=host,
            ),
            gpu_util=g(
                "specmon_gpu_utilization_ratio", "GPU busy share (NVML)", labels=[*host, "gpu"]
            ),
            gpu_mem_used=g(
                "specmon_gpu_memory_used_bytes", "GPU memory in use", labels=[*host, "gpu"]
            ),
            gpu_mem_total=g("specmon_gpu_memory_total_bytes", "GPU memory", labels=[*host, "gpu"]),
            gpu_power=g("specmon_gpu_power_watts", "GPU power draw", labels=[*host, "gpu"]),
            gpu_temp=g("specmon_gpu_temperature_celsius", "GPU temperature", labels=[*host, "gpu"]),
            gpu_sm_clock=g("specmon_gpu_sm_clock_hertz", "GPU SM clock", labels=[*host, "gpu"]),
            errors=c(
                "specmon_server_errors",
                "Error lines the server logged, by category, since specmon started",
                labels=[*host, "category"],
            ),
            series_dropped=g(
                "specmon_exporter_series_dropped",
                f"Series of the host left out of this scrape: past {MAX_SERIES_PER_HOST} a host",
                labels=host,
            ),
        )

    def _add_host(self, f: _Families, watched: WatchedHost, now: float) -> None:
        name = watched.name
        store = watched.bus.store
        state = store.connection.state if store.connection is not None else "connecting"
        f.up.add_metric([name], 1.0 if state == "connected" else 0.0)
        for option in CONNECTION_STATES:
            f.connection.add_metric([name, option], 1.0 if option == state else 0.0)
        f.events.add_metric([name], float(store.events_applied))
        f.dropped.add_metric([name], float(watched.bus.dropped))
        _maybe(f.lag, [name], store.event_lag_s)
        _maybe(f.last_event, [name], store.last_event_at)
        for category in _with_known(ERROR_CATEGORIES, store.error_counts):
            f.errors.add_metric([name, category], float(store.error_counts.get(category, 0)))
        self._add_gpus(f, name, store)
        self._add_histograms(f, name, store.cycle_histograms)
        _maybe(f.last_load, [name], store.last_load_seconds)
        run = store.run
        if run is None:
            return
        info = self._add_run(f, name, store)
        state = RUN_STATE_LABELS.get(store.run_state, store.run_state)
        labels = [name, run.run_id]
        _maybe(f.run_start, labels, run.started_at)
        for option in _with_known(RUN_STATES, {state: 1}):
            f.run_state.add_metric([*labels, option], 1.0 if option == state else 0.0)
        if state not in LIVE_RUN_STATES:
            return  # an ended (or hung) run's gauges are not the present: none are exported
        loading = store.loading
        f.ready.add_metric(labels, 1.0 if state == "ready" else 0.0)
        if loading.phase is not None:
            for phase in store.phases:
                f.loading_phase.add_metric([*labels, phase], 1.0 if phase == loading.phase else 0.0)
        f.loading_progress.add_metric(labels, loading_progress(store))
        if loading.shards_total:
            f.shards_done.add_metric(labels, float(loading.shards_done))
            f.shards_total.add_metric(labels, float(loading.shards_total))
        if state == "loading":
            _maybe(f.loading_eta, labels, loading.eta_seconds(now))
        _maybe(f.loading_elapsed, labels, loading.elapsed(now))
        for position, ratio in enumerate(store.accept_by_position.ratios(), start=1):
            f.position_acceptance.add_metric([*labels, str(position)], ratio)
        decode = store.last_decode
        if decode is not None:
            f.throughput.add_metric(labels, decode.gen_throughput)
            _maybe(f.accept_length, labels, decode.accept_len)
            _maybe(f.accept_rate, labels, decode.accept_rate)
            flow = token_flow(decode, _positive_int(info.get("spec_draft_tokens", "")))
            if flow is not None:
                drafts, accepted, drafted = flow
                f.drafts_rate.add_metric(labels, drafts)
                f.accepted_tokens_rate.add_metric(labels, accepted)
                _maybe(f.draft_tokens_rate, labels, drafted)
            f.running.add_metric(labels, float(decode.running_req))
            f.queued.add_metric(labels, float(decode.queue_req))
            f.kv_usage.add_metric(labels, decode.token_usage)

    def _add_run(self, f: _Families, name: str, store: StateStore) -> dict[str, str]:
        """Adds the run's info series; returns its labels."""
        run = store.run
        assert run is not None
        backend = run.backend or self._backends.get(run.profile or "", "") or _backend_of(run.argv)
        values = {
            "host": name,
            "run_id": run.run_id,
            "backend": backend,
            "profile": run.profile or "",
        }
        values.update(run_info_labels(backend, run.argv))
        env = dict(run.env)
        values.update((label, env.get(variable, "")) for label, variable in RUN_INFO_ENV)
        f.run.add_metric([], values)
        return values

    def _add_gpus(self, f: _Families, name: str, store: StateStore) -> None:
        for index, reading in sorted(store.gpus.items()):
            labels = [name, str(index)]
            if reading.util_gpu is not None:
                f.gpu_util.add_metric(labels, reading.util_gpu / 100.0)
            if reading.mem_used_mb is not None:
                f.gpu_mem_used.add_metric(labels, reading.mem_used_mb * MB)
            if reading.mem_total_mb is not None:
                f.gpu_mem_total.add_metric(labels, reading.mem_total_mb * MB)
            _maybe(f.gpu_power, labels, reading.power_w)
            _maybe(f.gpu_temp, labels, reading.temp_c)
            if reading.sm_clock_mhz is not None:
                f.gpu_sm_clock.add_metric(labels, reading.sm_clock_mhz * 1e6)

    def _add_histograms(
        self, f: _Families, name: str, histograms: Mapping[str, CycleHistogram]
    ) -> None:
        for phase in (*SPEC_PHASES, "cycle"):
            histogram = histograms[phase]
            if histogram.count == 0:
                continue
            cumulative = histogram.cumulative()
            buckets = [
                (_le(bound), float(n))
                for bound, n in zip(histogram.bounds_ms, cumulative[:-1], strict=True)
            ]
            buckets.append(("+Inf", float(cumulative[-1])))
            total = histogram.sum_ms / 1000.0
            if phase == "cycle":
                f.cycle_seconds.add_metric([name], buckets, total)
            else:
                f.phase_seconds.add_metric([name, phase], buckets, total)


def run_info_labels(backend: str, argv: Sequence[str]) -> dict[str, str]:
    """The run-info labels the launch decides (model, draft, speculative settings, TP), as
    the run's server reads its command line; all "" for a server this build does not know."""
    try:
        return get_backend(backend).run_info_labels(argv)
    except UsageError:
        return dict.fromkeys(RUN_INFO_LABELS, "")


def token_flow(
    decode: Decode, draft_tokens: int | None
) -> tuple[float, float, float | None] | None:
    """(drafts, accepted draft tokens, drafted tokens) per second from a decode line, the same
    rule for every server: each running request's cycle emits ``accept_len`` tokens (the
    accepted drafts and the bonus token) and verifies ``draft_tokens`` - 1 drafted tokens
    (the run-info label: SGLang's ``--speculative-num-draft-tokens``, vLLM's k + 1). The
    servers' accept rates are not used: SGLang's changed meaning between versions. None
    without speculation; drafted None where the launch does not say."""
    length = decode.accept_len
    if length is None or not length >= 1.0 or not math.isfinite(decode.gen_throughput):
        return None
    drafts = max(decode.gen_throughput, 0.0) / length
    drafted = drafts * (draft_tokens - 1) if draft_tokens is not None else None
    return drafts, drafts * (length - 1.0), drafted


def _positive_int(text: str) -> int | None:
    return int(text) if text.isdigit() and int(text) > 0 else None


def _backend_of(argv: Sequence[str]) -> str:
    """The server a command line runs, for a run whose record and profile do not say."""
    try:
        return backend_for_command(argv) or ""
    except UsageError:
        return ""


def loading_progress(store: StateStore) -> float:
    """Start-up progress in [0, 1]: each of the server's phases counts as one step, the
    first (the target's weights) by its share of shards loaded (the step that takes most of a
    start-up)."""
    loading = store.loading
    if loading.ready_at is not None:
        return 1.0
    phases = store.phases
    done = sum(1 for phase in phases if phase in loading.done_phases)
    if loading.phase == phases[0] and loading.shards_total:
        done += min(1.0, loading.shards_done / loading.shards_total)
    return min(1.0, done / len(phases))


@dataclass(slots=True)
class _Families:
    up: GaugeMetricFamily
    connection: GaugeMetricFamily
    events: CounterMetricFamily
    dropped: CounterMetricFamily
    lag: GaugeMetricFamily
    last_event: GaugeMetricFamily
    run: InfoMetricFamily
    run_start: GaugeMetricFamily
    run_state: GaugeMetricFamily
    ready: GaugeMetricFamily
    loading_phase: GaugeMetricFamily
    loading_progress: GaugeMetricFamily
    shards_done: GaugeMetricFamily
    shards_total: GaugeMetricFamily
    loading_eta: GaugeMetricFamily
    loading_elapsed: GaugeMetricFamily
    last_load: GaugeMetricFamily
    throughput: GaugeMetricFamily
    accept_length: GaugeMetricFamily
    accept_rate: GaugeMetricFamily
    drafts_rate: GaugeMetricFamily
    draft_tokens_rate: GaugeMetricFamily
    accepted_tokens_rate: GaugeMetricFamily
    position_acceptance: GaugeMetricFamily
    running: GaugeMetricFamily
    queued: GaugeMetricFamily
    kv_usage: GaugeMetricFamily
    phase_seconds: HistogramMetricFamily
    cycle_seconds: HistogramMetricFamily
    gpu_util: GaugeMetricFamily
    gpu_mem_used: GaugeMetricFamily
    gpu_mem_total: GaugeMetricFamily
    gpu_power: GaugeMetricFamily
    gpu_temp: GaugeMetricFamily
    gpu_sm_clock: GaugeMetricFamily
    errors: CounterMetricFamily
    series_dropped: GaugeMetricFamily  # outside the cap: says what the cap left out

    def values(self) -> Iterator[Metric]:
        for name in self.__dataclass_fields__:
            yield getattr(self, name)


def _merge_within(into: _Families, host: _Families, limit: int) -> int:
    """Move ``host``'s samples into ``into``, family by family, while they fit in ``limit``
    samples; a series (one label set, a histogram's buckets, sum and count together) is kept
    or left out whole. Returns how many samples were left out."""
    room, dropped = limit, 0
    pairs = zip(into.values(), host.values(), strict=True)
    # Per-GPU families last: a host reporting thousands of GPUs keeps its fixed series.
    for target, source in sorted(pairs, key=lambda pair: pair[1].name.startswith("specmon_gpu_")):
        if source is host.series_dropped:
            continue
        series: dict[tuple[tuple[str, str], ...], list[Sample]] = {}
        for sample in source.samples:
            key = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            series.setdefault(key, []).append(sample)
        for samples in series.values():
            if len(samples) <= room:
                target.samples.extend(samples)
                room -= len(samples)
            else:
                dropped += len(samples)
    return dropped


def _maybe(family: GaugeMetricFamily, labels: list[str], value: float | None) -> None:
    if value is not None:
        family.add_metric(labels, float(value))


def _le(bound_ms: float) -> str:
    return repr(bound_ms / 1000.0)


def _with_known(known: Sequence[str], seen: Mapping[str, int]) -> list[str]:
    return [*known, *sorted(set(seen) - set(known))]

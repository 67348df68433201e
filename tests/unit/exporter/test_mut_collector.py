"""The exporter's interface as Prometheus and Grafana see it: every family's name, type and
HELP text, the label names of every series, and the states of a host and run no event has
named yet. A changed HELP text or a lost label breaks dashboards without failing a value
check (docs/testing.md, "Mutation testing", found these holes)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specmon.exporter.collector import SpecmonCollector, WatchedHost
from specmon.model.events import (
    ConnectionState,
    Decode,
    GpuSample,
    LoadBegin,
    ProbeTiming,
    Ready,
    RunInfo,
    RunState,
    ServerError,
    ShardProgress,
)
from specmon.remote.agent import GpuReading
from specmon.state.store import EventBus

FAMILIES = [
    ("specmon_host_up", "gauge", "1 while specmon's session to the host is connected"),
    ("specmon_connection_state", "gauge", "specmon's session to the host: 1 for the current state"),
    ("specmon_events", "counter", "Events specmon has applied from the host"),
    (
        "specmon_events_dropped",
        "counter",
        "Events dropped by slow subscribers of the host's bus (the store keeps all)",
    ),
    (
        "specmon_event_lag_seconds",
        "gauge",
        "Arrival in specmon minus the host's wall time for the latest GPU or probe sample",
    ),
    (
        "specmon_last_event_timestamp_seconds",
        "gauge",
        "When specmon last received an event from the host (Unix time)",
    ),
    (
        "specmon_run",
        "info",
        "The server run specmon follows on the host: backend, profile, model, speculative settings and NCCL environment",
    ),
    (
        "specmon_run_start_time_seconds",
        "gauge",
        "When the followed run was launched (Unix time), as its run record says",
    ),
    (
        "specmon_run_state",
        "gauge",
        "The followed run's state, or how it ended: 1 for the current one",
    ),
    ("specmon_ready", "gauge", "1 while the server is ready to serve (live runs)"),
    (
        "specmon_loading_phase",
        "gauge",
        "Start-up phase: 1 for the current one (phase 'ready' once loaded)",
    ),
    (
        "specmon_loading_progress_ratio",
        "gauge",
        "Start-up progress: phases done, the target-weights phase counted by shards",
    ),
    ("specmon_loading_shards_loaded", "gauge", "Target weight shards loaded"),
    ("specmon_loading_shards", "gauge", "Target weight shards in all"),
    (
        "specmon_loading_eta_seconds",
        "gauge",
        "Estimated seconds to ready, while loading (absent where nothing says)",
    ),
    (
        "specmon_loading_elapsed_seconds",
        "gauge",
        "Seconds since the start-up began (up to ready once ready)",
    ),
    (
        "specmon_last_load_duration_seconds",
        "gauge",
        "Start-to-ready duration of the latest load whose times are known (this run's or an earlier one's)",
    ),
    (
        "specmon_generation_tokens_per_second",
        "gauge",
        "Generation throughput the server reported in its latest decode line",
    ),
    (
        "specmon_spec_accept_length",
        "gauge",
        "Mean tokens accepted per speculative cycle (latest decode line)",
    ),
    (
        "specmon_spec_accept_rate_ratio",
        "gauge",
        "Accepted share of drafted tokens (latest decode line)",
    ),
    (
        "specmon_spec_drafts_per_second",
        "gauge",
        "Draft-verify cycles per second over the running requests (latest decode line: tok/s over accept length)",
    ),
    (
        "specmon_spec_draft_tokens_per_second",
        "gauge",
        "Drafted tokens sent to verification per second (drafts/s x the launch's drafted tokens per cycle)",
    ),
    (
        "specmon_spec_accepted_tokens_per_second",
        "gauge",
        "Drafted tokens accepted per second (drafts/s x (accept length - 1))",
    ),
    (
        "specmon_spec_position_acceptance_ratio",
        "gauge",
        "Share of single-request cycles that accepted each draft position (current run)",
    ),
    ("specmon_running_requests", "gauge", "Requests being decoded"),
    ("specmon_queued_requests", "gauge", "Requests waiting in the queue"),
    ("specmon_kv_cache_usage_ratio", "gauge", "Share of the KV cache in use"),
    (
        "specmon_spec_phase_seconds",
        "histogram",
        "Per-cycle time of each speculative phase (draft, verify, extend) from the probe",
    ),
    (
        "specmon_spec_cycle_seconds",
        "histogram",
        "Per-cycle time of a whole speculative cycle from the probe",
    ),
    ("specmon_gpu_utilization_ratio", "gauge", "GPU busy share (NVML)"),
    ("specmon_gpu_memory_used_bytes", "gauge", "GPU memory in use"),
    ("specmon_gpu_memory_total_bytes", "gauge", "GPU memory"),
    ("specmon_gpu_power_watts", "gauge", "GPU power draw"),
    ("specmon_gpu_temperature_celsius", "gauge", "GPU temperature"),
    ("specmon_gpu_sm_clock_hertz", "gauge", "GPU SM clock"),
    (
        "specmon_server_errors",
        "counter",
        "Error lines the server logged, by category, since specmon started",
    ),
    (
        "specmon_exporter_series_dropped",
        "gauge",
        "Series of the host left out of this scrape: past 4096 a host",
    ),
]

LABELS = {
    "specmon_host_up": ["host"],
    "specmon_connection_state": ["host", "state"],
    "specmon_events_total": ["host"],
    "specmon_events_dropped_total": ["host"],
    "specmon_event_lag_seconds": ["host"],
    "specmon_last_event_timestamp_seconds": ["host"],
    "specmon_run_info": [
        "backend",
        "draft_model",
        "host",
        "model",
        "nccl_algo",
        "nccl_p2p_level",
        "nccl_proto",
        "profile",
        "run_id",
        "spec_algorithm",
        "spec_draft_tokens",
        "spec_steps",
        "spec_topk",
        "tp",
    ],
    "specmon_run_start_time_seconds": ["host", "run_id"],
    "specmon_run_state": ["host", "run_id", "state"],
    "specmon_ready": ["host", "run_id"],
    "specmon_loading_phase": ["host", "phase", "run_id"],
    "specmon_loading_progress_ratio": ["host", "run_id"],
    "specmon_loading_shards_loaded": ["host", "run_id"],
    "specmon_loading_shards": ["host", "run_id"],
    "specmon_loading_elapsed_seconds": ["host", "run_id"],
    "specmon_last_load_duration_seconds": ["host"],
    "specmon_generation_tokens_per_second": ["host", "run_id"],
    "specmon_spec_accept_length": ["host", "run_id"],
    "specmon_spec_accept_rate_ratio": ["host", "run_id"],
    "specmon_spec_drafts_per_second": ["host", "run_id"],
    "specmon_spec_draft_tokens_per_second": ["host", "run_id"],
    "specmon_spec_accepted_tokens_per_second": ["host", "run_id"],
    "specmon_spec_position_acceptance_ratio": ["host", "position", "run_id"],
    "specmon_running_requests": ["host", "run_id"],
    "specmon_queued_requests": ["host", "run_id"],
    "specmon_kv_cache_usage_ratio": ["host", "run_id"],
    "specmon_spec_phase_seconds_bucket": ["host", "le", "phase"],
    "specmon_spec_phase_seconds_count": ["host", "phase"],
    "specmon_spec_phase_seconds_sum": ["host", "phase"],
    "specmon_spec_cycle_seconds_bucket": ["host", "le"],
    "specmon_spec_cycle_seconds_count": ["host"],
    "specmon_spec_cycle_seconds_sum": ["host"],
    "specmon_gpu_utilization_ratio": ["gpu", "host"],
    "specmon_gpu_memory_used_bytes": ["gpu", "host"],
    "specmon_gpu_memory_total_bytes": ["gpu", "host"],
    "specmon_gpu_power_watts": ["gpu", "host"],
    "specmon_gpu_temperature_celsius": ["gpu", "host"],
    "specmon_gpu_sm_clock_hertz": ["gpu", "host"],
    "specmon_server_errors_total": ["category", "host"],
    "specmon_exporter_series_dropped": ["host"],
}


def full_bus() -> EventBus:
    """A host with a run through start-up, a decode, a probe cycle, an error and a GPU."""
    bus = EventBus()
    argv = ("python3", "-m", "sglang.launch_server", "--model-path", "m/K", "--tp", "8")
    argv += ("--speculative-num-draft-tokens", "4")
    bus.publish(ConnectionState(host="h", state="connected"), at=1.0)
    bus.publish(RunInfo(run_id="r1", profile="p", argv=argv, started_at=0.5), at=1.0)
    bus.publish(LoadBegin(), at=2.0)
    bus.publish(ShardProgress(done=16, total=64), at=3.0)
    bus.publish(Ready(), at=10.0)
    bus.publish(
        Decode(
            running_req=3,
            tokens=10,
            token_usage=0.25,
            accept_len=2.5,
            accept_rate=0.6,
            gen_throughput=100.0,
            queue_req=1,
        ),
        at=11.0,
    )
    bus.publish(
        ProbeTiming(
            wall=11.0,
            draft_ms=2,
            verify_ms=20,
            extend_ms=1,
            cycle_ms=23,
            batch_size=1,
            draft_tokens=4,
            accepted_tokens=2,
        ),
        at=11.5,
    )
    bus.publish(ServerError(category="oom", message="x"), at=12.0)
    bus.publish(
        GpuSample(
            wall=12.0,
            gpus=(
                GpuReading(
                    index=0,
                    util_gpu=50.0,
                    mem_used_mb=1000.0,
                    mem_total_mb=80000.0,
                    power_w=300.0,
                    temp_c=60.0,
                    sm_clock_mhz=1500.0,
                ),
            ),
        ),
        at=12.0,
    )
    return bus


def scrape(bus: EventBus, now: float) -> list[tuple[str, dict[str, str], float]]:
    registry = CollectorRegistry()
    registry.register(SpecmonCollector(lambda: [WatchedHost("gpu-a", bus)], clock=lambda: now))
    return [
        (s.name, s.labels, s.value)
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    ]


def test_every_family_has_its_name_type_and_help_text() -> None:
    described = SpecmonCollector(lambda: []).describe()
    assert [(f.name, f.type, f.documentation) for f in described] == FAMILIES


def test_every_series_has_its_label_names() -> None:
    labels: dict[str, list[str]] = {}
    for name, series_labels, _ in scrape(full_bus(), 13.0):
        labels.setdefault(name, sorted(series_labels))
    assert labels == LABELS


def test_a_host_not_yet_connected_is_connecting_and_a_run_shows_its_state() -> None:
    bus = EventBus()
    bus.publish(RunInfo(run_id="r1", profile="p"), at=1.0)
    bus.publish(RunState(run_id="r1", state="failed"), at=2.0)
    samples = scrape(bus, 3.0)
    current = {
        name: series["state"]
        for name, series, value in samples
        if name in ("specmon_connection_state", "specmon_run_state") and value == 1.0
    }
    assert current == {"specmon_connection_state": "connecting", "specmon_run_state": "failed"}
    assert ("specmon_host_up", {"host": "gpu-a"}, 0.0) in samples

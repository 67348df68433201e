"""The exporter's collector and the store counters it reads, from events fed to a store: no
processes, so each family's value is checked against what the events said."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specmon.agent import GpuReading
from specmon.errors import UsageError
from specmon.events import (
    ConnectionState,
    Decode,
    GpuSample,
    LoadBegin,
    ProbeTiming,
    Ready,
    RunInfo,
    ServerError,
    ShardProgress,
)
from specmon.exporter.collector import SpecmonCollector, WatchedHost, loading_progress
from specmon.listen import is_loopback, parse_listen
from specmon.store import CycleHistogram, EventBus


def samples(bus: EventBus) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    collector = SpecmonCollector(
        lambda: [WatchedHost("gpu-a", bus)], backend_of_profile={"p": "sglang"}
    )
    registry.register(collector)
    text = generate_latest(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_cycle_histogram_counts_each_time_in_its_bucket() -> None:
    histogram = CycleHistogram(bounds_ms=(1.0, 10.0), counts=[0, 0, 0])
    for ms in (0.5, 1.0, 5.0, 10.0, 11.0, 500.0):
        histogram.observe(ms)
    assert histogram.cumulative() == [2, 4, 6]  # <=1 ms, <=10 ms, all
    assert histogram.count == 6 and histogram.sum_ms == 527.5


def test_store_counters_survive_a_relaunch() -> None:
    bus = EventBus()
    bus.publish(RunInfo(run_id="r1", profile="p"), at=100.0)
    bus.publish(ServerError(category="oom", message="CUDA out of memory"), at=101.0)
    bus.publish(
        ProbeTiming(wall=101.5, draft_ms=2, verify_ms=20, extend_ms=1, cycle_ms=23), at=102.0
    )
    bus.publish(RunInfo(run_id="r2", profile="p"), at=103.0)  # the ring buffers are cleared
    store = bus.store
    assert not store.probe and store.error_counts == {"oom": 1}
    assert store.cycle_histograms["verify"].count == 1
    assert store.event_lag_s == 0.5 and store.last_event_at == 103.0


def test_collector_exports_what_the_events_said() -> None:
    bus = EventBus()
    argv = ("python3", "-m", "sglang.launch_server", "--model-path", "m/K", "--tp", "8")
    argv += ("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3")
    bus.publish(ConnectionState(host="h", state="connected"), at=1.0)
    bus.publish(RunInfo(run_id="r1", profile="p", argv=argv, env=(("NCCL_PROTO", "LL"),)), at=1.0)
    bus.publish(LoadBegin(), at=2.0)
    bus.publish(ShardProgress(done=16, total=64), at=3.0)
    mid = samples(bus)
    assert mid[("specmon_loading_progress_ratio", (("host", "gpu-a"),))] == (16 / 64) / 7
    assert mid[("specmon_loading_phase", (("host", "gpu-a"), ("phase", "target weights")))] == 1
    assert mid[("specmon_loading_shards_loaded", (("host", "gpu-a"),))] == 16
    assert mid[("specmon_ready", (("host", "gpu-a"),))] == 0
    bus.publish(Ready(), at=12.0)
    bus.publish(
        Decode(
            running_req=3,
            tokens=900,
            token_usage=0.25,
            accept_len=3.5,
            gen_throughput=512.0,
            queue_req=1,
        ),
        at=13.0,
    )
    reading = GpuReading(
        index=0, util_gpu=87.0, mem_used_mb=1024.0, mem_total_mb=2048.0, sm_clock_mhz=1980.0
    )
    bus.publish(GpuSample(wall=13.0, gpus=(reading,)), at=13.25)
    for verify_ms in (9.0, 21.0):
        bus.publish(
            ProbeTiming(wall=13.0, draft_ms=2, verify_ms=verify_ms, extend_ms=1, cycle_ms=30),
            at=14.0,
        )
    bus.publish(ServerError(category="nccl", message="NCCL error"), at=14.0)
    got = samples(bus)
    host = (("host", "gpu-a"),)
    gpu = (("gpu", "0"), ("host", "gpu-a"))
    assert got[("specmon_host_up", host)] == 1
    assert got[("specmon_ready", host)] == 1
    assert got[("specmon_loading_progress_ratio", host)] == 1
    assert got[("specmon_last_load_duration_seconds", host)] == 10.0
    assert got[("specmon_generation_tokens_per_second", host)] == 512.0
    assert got[("specmon_spec_accept_length", host)] == 3.5
    assert got[("specmon_kv_cache_usage_ratio", host)] == 0.25
    assert (
        got[("specmon_running_requests", host)] == 3 and got[("specmon_queued_requests", host)] == 1
    )
    assert got[("specmon_gpu_utilization_ratio", gpu)] == 0.87
    assert got[("specmon_gpu_memory_used_bytes", gpu)] == 1024 * 1024 * 1024
    assert got[("specmon_gpu_sm_clock_hertz", gpu)] == 1.98e9
    assert got[("specmon_event_lag_seconds", host)] == 1.0
    verify = (("host", "gpu-a"), ("le", "0.01"), ("phase", "verify"))
    assert got[("specmon_spec_phase_seconds_bucket", verify)] == 1  # 9 ms <= 10 ms; 21 ms not
    assert got[("specmon_spec_phase_seconds_count", (("host", "gpu-a"), ("phase", "verify")))] == 2
    assert got[("specmon_server_errors_total", (("category", "nccl"), ("host", "gpu-a")))] == 1
    assert got[("specmon_server_errors_total", (("category", "oom"), ("host", "gpu-a")))] == 0
    info = next(labels for (name, labels) in got if name == "specmon_run_info")
    assert ("spec_algorithm", "EAGLE3") in info and ("nccl_proto", "LL") in info
    assert ("model", "m/K") in info and ("tp", "8") in info and ("backend", "sglang") in info


def test_acceptance_by_position_from_single_request_cycles() -> None:
    bus = EventBus()
    bus.publish(RunInfo(run_id="r1", profile="p"), at=1.0)
    # draft_tokens 4 = the root + 3 draft positions; accepted 0, 1, 3 and 2 tokens
    for accepted in (0, 1, 3, 2):
        bus.publish(
            ProbeTiming(
                wall=2.0, draft_ms=1, verify_ms=9, extend_ms=1, cycle_ms=11,
                batch_size=1, draft_tokens=4, accepted_tokens=accepted,
            ),
            at=2.0,
        )  # fmt: skip
    bus.publish(  # a batch of 3 sums its sequences' counts: not counted per position
        ProbeTiming(
            wall=2.0, draft_ms=1, verify_ms=9, extend_ms=1, cycle_ms=11,
            batch_size=3, draft_tokens=12, accepted_tokens=9,
        ),
        at=2.0,
    )  # fmt: skip
    assert bus.store.accept_by_position.ratios() == [0.75, 0.5, 0.25]
    got = samples(bus)
    for position, ratio in (("1", 0.75), ("2", 0.5), ("3", 0.25)):
        labels = (("host", "gpu-a"), ("position", position))
        assert got[("specmon_spec_position_acceptance_ratio", labels)] == ratio
    bus.publish(RunInfo(run_id="r2", profile="p"), at=3.0)  # a new run starts afresh
    assert bus.store.accept_by_position.ratios() == []


def test_loading_progress_before_any_run_phase() -> None:
    assert loading_progress(EventBus().store) == 0.0


def test_listen_addresses() -> None:
    assert parse_listen("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_listen("[::1]:80") == ("::1", 80)
    assert parse_listen(":9") == ("127.0.0.1", 9)
    assert is_loopback("127.0.0.2") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1") and not is_loopback("gpu-box")
    for bad in ("9464", "host:port", "1.2.3.4:70000", "a b:1"):
        with pytest.raises(UsageError, match="--listen"):
            parse_listen(bad)


def test_host_error_text_reaches_the_terminal_as_one_clean_line() -> None:
    from specmon.exporter.hosts import _one_line

    text = _one_line("refused\x1b[2J\x07 by\nhost" + "x" * 500)
    assert text.startswith("refused [2J  by | host") and text.isprintable()
    assert len(text) == 300

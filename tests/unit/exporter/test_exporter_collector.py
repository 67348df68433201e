"""The exporter's collector and the store counters it reads, from events fed to a store: no
processes, so each family's value is checked against what the events said."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specmon.exporter.collector import SpecmonCollector, WatchedHost, loading_progress
from specmon.model.errors import UsageError
from specmon.model.events import (
    ConnectionState,
    Decode,
    GpuSample,
    KvCache,
    LoadBegin,
    LoadTimes,
    ProbeTiming,
    Ready,
    RunInfo,
    RunState,
    ServerError,
    ServerFailed,
    ShardProgress,
)
from specmon.model.listen import is_loopback, parse_listen
from specmon.remote.agent import GpuReading
from specmon.state.store import CycleHistogram, EventBus

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(bus: EventBus, now: float | None = None) -> Samples:
    registry = CollectorRegistry()
    collector = SpecmonCollector(
        lambda: [WatchedHost("gpu-a", bus)],
        backend_of_profile={"p": "sglang"},
        **({"clock": lambda: now} if now is not None else {}),
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
    run = (("host", "gpu-a"), ("run_id", "r1"))  # a run's own series carry its id
    assert mid[("specmon_loading_progress_ratio", run)] == (16 / 64) / 7
    phase = (("host", "gpu-a"), ("phase", "target weights"), ("run_id", "r1"))
    assert mid[("specmon_loading_phase", phase)] == 1
    assert mid[("specmon_loading_shards_loaded", run)] == 16
    assert mid[("specmon_ready", run)] == 0
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
    assert got[("specmon_ready", run)] == 1
    assert got[("specmon_loading_progress_ratio", run)] == 1
    assert got[("specmon_last_load_duration_seconds", host)] == 10.0
    assert got[("specmon_generation_tokens_per_second", run)] == 512.0
    assert got[("specmon_spec_accept_length", run)] == 3.5
    assert got[("specmon_kv_cache_usage_ratio", run)] == 0.25
    assert (
        got[("specmon_running_requests", run)] == 3 and got[("specmon_queued_requests", run)] == 1
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


def test_histograms_are_in_seconds_bucket_by_bucket_with_their_sum_and_count() -> None:
    """Every bucket, the sum and the count of a phase and the whole cycle for known probe
    times: the store keeps milliseconds, the exposition is in seconds (a ``_sum`` written in
    ms survived the other tests, issue 30 item 3)."""
    bus = EventBus()
    bus.publish(RunInfo(run_id="r1", profile="p"), at=1.0)
    for verify_ms, cycle_ms in ((0.2, 12.5), (9.0, 31.0), (21.0, 31.0), (3000.0, 4000.0)):
        bus.publish(
            ProbeTiming(wall=2.0, draft_ms=2, verify_ms=verify_ms, extend_ms=1, cycle_ms=cycle_ms),
            at=2.0,
        )
    got = samples(bus)
    host = (("host", "gpu-a"),)
    verify = (*host, ("phase", "verify"))

    def buckets(name: str, labels: tuple[tuple[str, str], ...]) -> dict[str, float]:
        return {
            dict(key)["le"]: value
            for (family, key), value in got.items()
            if family == name and tuple(kv for kv in key if kv[0] != "le") == labels
        }

    # le in seconds -> verify times at or under it (0.2, 9, 21 ms; 3 s only in +Inf)
    assert buckets("specmon_spec_phase_seconds_bucket", verify) == {
        "0.00025": 1, "0.0005": 1, "0.001": 1, "0.002": 1, "0.003": 1, "0.005": 1,
        "0.0075": 1, "0.01": 2, "0.015": 2, "0.02": 2, "0.03": 3, "0.05": 3, "0.075": 3,
        "0.1": 3, "0.15": 3, "0.25": 3, "0.5": 3, "1.0": 3, "2.5": 3, "+Inf": 4,
    }  # fmt: skip
    assert got[("specmon_spec_phase_seconds_count", verify)] == 4
    assert got[("specmon_spec_phase_seconds_sum", verify)] == pytest.approx(3.0302, abs=1e-9)
    cycle = buckets("specmon_spec_cycle_seconds_bucket", host)
    assert (cycle["0.01"], cycle["0.015"], cycle["0.03"], cycle["0.05"]) == (0, 1, 1, 3)
    assert (cycle["2.5"], cycle["+Inf"]) == (3, 4)
    assert got[("specmon_spec_cycle_seconds_count", host)] == 4
    assert got[("specmon_spec_cycle_seconds_sum", host)] == pytest.approx(4.0745, abs=1e-9)
    draft = (*host, ("phase", "draft"))
    assert got[("specmon_spec_phase_seconds_sum", draft)] == pytest.approx(0.008, abs=1e-12)
    assert buckets("specmon_spec_phase_seconds_bucket", draft)["0.002"] == 4  # 2 ms <= 2 ms


def decode(tok_s: float) -> Decode:
    return Decode(
        running_req=2,
        tokens=500,
        token_usage=0.5,
        accept_len=3.0,
        gen_throughput=tok_s,
        queue_req=0,
    )


def run_of(got: Samples, name: str) -> set[str]:
    """The run ids the scrape's ``name`` series carry."""
    return {dict(labels).get("run_id", "") for (family, labels) in got if family == name}


LIVE_GAUGES = (
    "specmon_ready",
    "specmon_generation_tokens_per_second",
    "specmon_spec_accept_length",
    "specmon_running_requests",
    "specmon_kv_cache_usage_ratio",
    "specmon_loading_progress_ratio",
    "specmon_loading_elapsed_seconds",
    "specmon_spec_position_acceptance_ratio",
    "specmon_spec_drafts_per_second",
    "specmon_spec_accepted_tokens_per_second",
)


def serving_run(bus: EventBus, run_id: str, at: float) -> None:
    bus.publish(RunInfo(run_id=run_id, profile="p"), at=at)
    bus.publish(LoadBegin(), at=at + 1)
    bus.publish(Ready(), at=at + 5)
    bus.publish(decode(143.6), at=at + 6)
    bus.publish(
        ProbeTiming(
            wall=at + 6, draft_ms=1, verify_ms=9, extend_ms=1, cycle_ms=11,
            batch_size=1, draft_tokens=4, accepted_tokens=2,
        ),
        at=at + 6,
    )  # fmt: skip


@pytest.mark.parametrize(
    "end",
    [
        RunState(run_id="r1", state="stopped", detail="stopped by specmon"),
        ServerFailed(run_id="r1", signal=9),
        RunState(run_id="r1", state="stopped", detail="exited 0"),
    ],
)
def test_an_ended_run_keeps_its_state_and_no_live_gauge(end: RunState | ServerFailed) -> None:
    bus = EventBus()
    serving_run(bus, "r1", 100.0)
    live = samples(bus, now=107.0)
    assert all(run_of(live, name) == {"r1"} for name in LIVE_GAUGES)
    bus.publish(end, at=108.0)
    got = samples(bus, now=108.5)
    for name in LIVE_GAUGES:  # gone from the scrape: Prometheus marks them stale at once
        assert not run_of(got, name), name
    state = "failed" if isinstance(end, ServerFailed) else "stopped"
    labels = (("host", "gpu-a"), ("run_id", "r1"), ("state", state))
    assert got[("specmon_run_state", labels)] == 1
    assert run_of(got, "specmon_run_info") == {"r1"}  # which run the state is of
    assert got[("specmon_last_load_duration_seconds", (("host", "gpu-a"),))] == 4.0


def test_a_new_run_has_its_own_series_at_once_and_nothing_of_the_old_run() -> None:
    bus = EventBus()
    serving_run(bus, "r1", 100.0)
    bus.publish(RunInfo(run_id="r2", profile="p"), at=110.0)  # followed at once: replaced
    got = samples(bus, now=110.2)
    for name in (*LIVE_GAUGES, "specmon_run_state", "specmon_run_info"):
        assert "r1" not in run_of(got, name), name
    run = (("host", "gpu-a"), ("run_id", "r2"))
    assert got[("specmon_ready", run)] == 0
    assert got[("specmon_run_state", (*run, ("state", "loading")))] == 1
    assert not run_of(got, "specmon_generation_tokens_per_second")  # r2 decoded nothing yet
    # The old run's end, told late, is the old run's: the new run is still loading.
    bus.publish(ServerFailed(run_id="r1", signal=9), at=110.5)
    bus.publish(RunState(run_id="r1", state="stopped"), at=110.6)
    got = samples(bus, now=111.0)
    assert got[("specmon_run_state", (*run, ("state", "loading")))] == 1
    assert bus.store.failure is None
    bus.publish(LoadBegin(), at=111.0)
    bus.publish(Ready(), at=113.5)
    bus.publish(decode(90.0), at=114.0)
    got = samples(bus, now=114.1)
    assert got[("specmon_ready", run)] == 1
    assert got[("specmon_generation_tokens_per_second", run)] == 90.0
    assert got[("specmon_last_load_duration_seconds", (("host", "gpu-a"),))] == 2.5


def test_a_state_table_names_how_a_run_ended() -> None:
    """The end kinds of the run status map to states of their own; a store state the table
    does not hold is still exported, under its own name."""
    from specmon.exporter.collector import LIVE_RUN_STATES, RUN_STATE_LABELS, RUN_STATES

    for kind in ("stopped", "replaced", "exited", "crashed", "killed"):
        assert RUN_STATE_LABELS[kind] == kind and kind not in LIVE_RUN_STATES
    assert set(LIVE_RUN_STATES) <= set(RUN_STATES)
    bus = EventBus()
    serving_run(bus, "r1", 100.0)
    bus.store.run_state = "vanished"
    got = samples(bus, now=107.0)
    labels = (("host", "gpu-a"), ("run_id", "r1"))
    assert got[("specmon_run_state", (*labels, ("state", "vanished")))] == 1
    assert got[("specmon_run_state", (*labels, ("state", "ready")))] == 0
    assert not run_of(got, "specmon_ready")


def test_last_load_duration_of_a_reattached_run_is_its_recorded_load() -> None:
    """A reattach replays the start-up lines all at once (arrival times 0 s apart): the load
    time is the run record's, never the replay's 0."""
    bus = EventBus()
    bus.publish(RunInfo(run_id="r1", profile="p", started_at=1000.0, reattached=True), at=2000.0)
    bus.publish(RunState(run_id="r1", state="ready"), at=2000.0)
    bus.publish(LoadBegin(), at=2000.1)  # replayed
    bus.publish(ShardProgress(done=8, total=8), at=2000.1)
    bus.publish(Ready(), at=2000.1)
    host = (("host", "gpu-a"),)
    assert ("specmon_last_load_duration_seconds", host) not in samples(bus, now=2000.2)
    bus.publish(LoadTimes(run_id="r1", started_at=1000.0, ready_at=1005.25), at=2000.2)
    assert samples(bus, now=2001.0)[("specmon_last_load_duration_seconds", host)] == 5.25
    # ...and the next run's ETA is measured against it (the record's, not 0)
    bus.publish(RunInfo(run_id="r2", profile="p"), at=2100.0)
    bus.publish(LoadBegin(), at=2100.0)
    got = samples(bus, now=2102.0)
    assert got[("specmon_loading_eta_seconds", (*host, ("run_id", "r2")))] == 3.25


def test_loading_eta_is_there_through_the_whole_load() -> None:
    """Shards left x their rate while the target's shards are read (at least what the earlier
    load leaves), then what the earlier load leaves: not 0 once the shards are read."""
    bus = EventBus()
    bus.publish(LoadTimes(previous_load_seconds=20.0), at=0.0)
    bus.publish(RunInfo(run_id="r1", profile="p"), at=0.0)
    bus.publish(LoadBegin(), at=0.0)
    eta = ("specmon_loading_eta_seconds", (("host", "gpu-a"), ("run_id", "r1")))
    bus.publish(ShardProgress(done=2, total=8, seconds_per_shard=3.0), at=6.0)
    assert samples(bus, now=6.0)[eta] == 18.0  # 6 shards x 3 s, more than 20 - 6
    bus.publish(ShardProgress(done=8, total=8, seconds_per_shard=1.0), at=12.0)
    bus.publish(KvCache(tokens=1000), at=12.5)
    assert samples(bus, now=13.0)[eta] == 7.0  # the earlier load's 20 s, 13 s in
    bus.publish(LoadBegin(), at=14.0)  # the draft's weights
    assert samples(bus, now=15.0)[eta] == 5.0
    bus.publish(Ready(), at=21.0)
    assert eta not in samples(bus, now=21.0)


def test_loading_eta_without_an_earlier_load_is_absent_once_the_shards_are_read() -> None:
    bus = EventBus()
    bus.publish(RunInfo(run_id="r1", profile="p"), at=0.0)
    bus.publish(LoadBegin(), at=0.0)
    eta = ("specmon_loading_eta_seconds", (("host", "gpu-a"), ("run_id", "r1")))
    bus.publish(ShardProgress(done=4, total=8, seconds_per_shard=0.5), at=2.0)
    assert samples(bus, now=2.0)[eta] == 2.0
    bus.publish(ShardProgress(done=8, total=8, seconds_per_shard=0.5), at=4.0)
    assert eta not in samples(bus, now=4.5)  # not "0 s to ready": the rest is unknown


def test_run_info_of_a_vllm_run_has_its_model_and_speculative_labels() -> None:
    bus = EventBus()
    config = '{"method":"eagle3","model":"yuhuili/EAGLE3-LLaMA3.3-Instruct-70B","num_speculative_tokens":3}'
    argv = ("python3", "-m", "specmon.sim.vllm", "serve", "meta-llama/Llama-3.3-70B-Instruct")
    argv += ("--tensor-parallel-size", "8", "--speculative-config", config)
    bus.publish(RunInfo(run_id="r1", profile="v", backend="vllm", argv=argv), at=1.0)
    info = dict(next(labels for (name, labels) in samples(bus) if name == "specmon_run_info"))
    assert info["backend"] == "vllm" and info["model"] == "meta-llama/Llama-3.3-70B-Instruct"
    assert info["draft_model"] == "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"
    assert info["spec_algorithm"] == "eagle3" and info["tp"] == "8"
    # k = 3 chained draft steps, the 3 drafts and the bonus token verified
    assert (info["spec_steps"], info["spec_topk"], info["spec_draft_tokens"]) == ("3", "1", "4")


@pytest.mark.parametrize(
    "backend, spec_args",
    [
        ("sglang", ("--speculative-num-steps", "3", "--speculative-num-draft-tokens", "4")),
        ("vllm", ("--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 3}')),
    ],
)
def test_token_flow_is_one_rule_for_every_server(backend: str, spec_args: tuple[str, ...]) -> None:
    """500 tok/s at 2.5 tokens a cycle: 200 drafts/s, each accepting 1.5 of its 3 drafted
    tokens (SGLang's 4 draft tokens, vLLM's k = 3, both the bonus token and 3 drafts)."""
    argv = ("python3", "-m", "sglang.launch_server", "--model-path", "m/K", *spec_args)
    if backend == "vllm":
        argv = ("vllm", "serve", "m/K", *spec_args)
    bus = EventBus()
    bus.publish(RunInfo(run_id="r1", profile="p", backend=backend, argv=argv), at=1.0)
    bus.publish(Ready(), at=2.0)
    flow = Decode(
        running_req=4, tokens=None, token_usage=0.1, accept_len=2.5, gen_throughput=500.0,
        queue_req=0,
    )  # fmt: skip
    bus.publish(flow, at=3.0)
    got = samples(bus, now=3.0)
    run = (("host", "gpu-a"), ("run_id", "r1"))
    assert got[("specmon_spec_drafts_per_second", run)] == 200.0
    assert got[("specmon_spec_accepted_tokens_per_second", run)] == 300.0
    assert got[("specmon_spec_draft_tokens_per_second", run)] == 600.0


def test_token_flow_only_where_a_decode_line_says() -> None:
    """No speculation (no accept length), or a launch that does not say how many tokens a
    cycle drafts: no drafted tokens, never a made-up figure."""
    bus = EventBus()
    bus.publish(RunInfo(run_id="r1", profile="p"), at=1.0)  # a launch that says nothing
    bus.publish(Ready(), at=2.0)
    bus.publish(decode(90.0), at=3.0)  # accept length 3.0
    got = samples(bus, now=3.0)
    assert run_of(got, "specmon_spec_drafts_per_second") == {"r1"}
    assert (
        got[("specmon_spec_accepted_tokens_per_second", (("host", "gpu-a"), ("run_id", "r1")))]
        == 60.0
    )
    assert not run_of(got, "specmon_spec_draft_tokens_per_second")
    plain = Decode(running_req=1, tokens=9, token_usage=0.1, gen_throughput=50.0, queue_req=0)
    bus.publish(plain, at=4.0)
    got = samples(bus, now=4.0)
    for name in ("drafts", "accepted_tokens", "draft_tokens"):
        assert not run_of(got, f"specmon_spec_{name}_per_second"), name


def test_run_start_time_stays_with_the_run_until_the_next() -> None:
    """The launch time (the dashboard's launch annotations) of the followed run, kept once
    it ended, replaced by the next run's; absent where the run record does not say."""
    bus = EventBus()
    serving_run(bus, "r0", 50.0)  # no start time in its record
    assert not run_of(samples(bus, now=60.0), "specmon_run_start_time_seconds")
    bus.publish(RunInfo(run_id="r1", profile="p", started_at=1000.0), at=1000.5)
    bus.publish(RunState(run_id="r1", state="stopped", detail="stopped by specmon"), at=1010.0)
    got = samples(bus, now=1011.0)
    assert got[("specmon_run_start_time_seconds", (("host", "gpu-a"), ("run_id", "r1")))] == 1000.0
    bus.publish(RunInfo(run_id="r2", profile="p", started_at=1020.0), at=1020.5)
    assert run_of(samples(bus, now=1021.0), "specmon_run_start_time_seconds") == {"r2"}


def test_run_info_labels_mean_the_same_for_every_server() -> None:
    from specmon.backends import RUN_INFO_LABELS, all_backends, get_backend

    for backend in all_backends():
        assert set(backend.run_info_labels(())) == set(RUN_INFO_LABELS)
        assert set(backend.run_info_labels(("serve",))) == set(RUN_INFO_LABELS)
    vllm = get_backend("vllm")
    plain = vllm.run_info_labels(("vllm", "serve", "--model", "m/x", "--spec-method", "ngram"))
    assert plain["model"] == "m/x" and plain["spec_algorithm"] == "ngram"
    assert vllm.run_info_labels(("vllm", "serve", "m/y"))["spec_algorithm"] == ""
    sglang = get_backend("sglang").run_info_labels(
        ("python3", "-m", "sglang.launch_server", "--model", "m/z", "--tp-size", "2")
    )
    assert (sglang["model"], sglang["tp"], sglang["spec_steps"]) == ("m/z", "2", "")


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
        labels = (("host", "gpu-a"), ("position", position), ("run_id", "r1"))
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

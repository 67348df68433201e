"""The store's state machine, exactly: loading phases in order for both servers, the shard
rate and the ETA, the load time from each source, throughput over engines, the probe's
histograms and per-position tallies, and what a lossy or lossless subscriber gets. Typed
events in, state out; every figure here is what the console and the exporter show
(docs/testing.md, "Mutation testing", found these holes)."""

from __future__ import annotations

import asyncio

import pytest

from specmon.model.events import (
    CompileBegin,
    CompileEnd,
    Decode,
    Dropped,
    GpuSample,
    GraphBegin,
    HttpUp,
    KvCache,
    LoadBegin,
    LoadEnd,
    LoadTimes,
    LogLine,
    ProbeTiming,
    Ready,
    RunInfo,
    RunState,
    ServerError,
    ServerFailed,
    ShardProgress,
    SpecDecode,
    SpecParams,
    WeightsLoaded,
)
from specmon.remote.agent import GpuReading
from specmon.state.store import (
    ERRORS,
    LOG_LINES,
    CycleHistogram,
    EventBus,
    LoadingState,
    PositionAcceptance,
    StateStore,
)


def decode(throughput: float, *, engine: int | None = None, accept_len: float | None = None):
    return Decode(
        running_req=1,
        tokens=10,
        token_usage=0.1,
        gen_throughput=throughput,
        queue_req=0,
        engine=engine,
        accept_len=accept_len,
    )


def probe(draft: float, verify: float, extend: float, **more: object) -> ProbeTiming:
    return ProbeTiming(
        wall=more.pop("wall", 100.0),  # type: ignore[arg-type]
        draft_ms=draft,
        verify_ms=verify,
        extend_ms=extend,
        cycle_ms=draft + verify + extend,
        **more,  # type: ignore[arg-type]
    )


def test_an_sglang_start_up_walks_the_phases_in_order_and_reads_the_shard_rate() -> None:
    store = StateStore()
    store.apply(RunInfo(run_id="r1", backend="sglang"), at=1000.0)
    assert store.run_state == "loading"
    store.apply(LoadBegin(), at=1001.0)
    loading = store.loading
    assert (loading.phase, loading.started_at, loading.loads_seen) == ("target weights", 1001, 1)
    store.apply(ShardProgress(done=0, total=8), at=1002.0)
    assert (loading.shards_done, loading.shards_total, loading.shards_started_at) == (0, 8, 1002)
    assert loading.shard_rate_s is None
    store.apply(ShardProgress(done=2, total=8), at=1006.0)
    assert loading.shard_rate_s == 2.0  # 4 s for 2 shards, measured
    assert loading.eta_seconds(1006.0) == 12.0  # 6 shards left at 2 s
    store.apply(ShardProgress(done=4, total=8, seconds_per_shard=3.0), at=1007.0)
    assert loading.shard_rate_s == 3.0  # the bar's own rate wins
    assert loading.elapsed(1010.0) == 9.0
    store.apply(LoadEnd(), at=1010.0)
    assert loading.shards_done == 8
    store.apply(WeightsLoaded(role="target"), at=1010.0)
    assert loading.target_loaded
    store.apply(KvCache(tokens=1000), at=1011.0)
    store.apply(GraphBegin(role="target"), at=1012.0)
    store.apply(LoadBegin(), at=1013.0)  # the draft
    assert (loading.phase, loading.loads_seen) == ("draft weights", 2)
    store.apply(ShardProgress(done=0, total=1), at=1013.5)  # the draft's bar: not the target's
    assert (loading.shards_done, loading.shards_total) == (8, 8)
    store.apply(KvCache(tokens=5), at=1014.0)  # the draft's KV cache: no phase change
    assert loading.phase == "draft weights"
    store.apply(GraphBegin(role="draft"), at=1014.0)
    store.apply(HttpUp(port=30000), at=1015.0)
    store.apply(Ready(), at=1021.0)
    assert loading.done_phases == [
        "target weights",
        "KV cache",
        "target CUDA graphs",
        "draft weights",
        "draft CUDA graphs",
        "HTTP server",
        "ready",
    ]
    assert (loading.phase, loading.ready_at, loading.load_seconds) == ("ready", 1021, 20.0)
    assert (store.run_state, store.last_load_seconds, loading.previous_load_seconds) == (
        "ready",
        20.0,
        20.0,
    )
    assert loading.eta_seconds(2000.0) == 0.0
    assert loading.elapsed(5000.0) == 20.0


def test_a_vllm_start_up_names_its_own_phases_and_counts_a_double_announcement_once() -> None:
    store = StateStore()
    store.apply(RunInfo(run_id="v1", backend="vllm"), at=0.0)
    store.apply(LoadBegin(), at=1.0)
    store.apply(LoadBegin(), at=2.0)  # `Loading model from scratch` after `Starting to load`
    assert (store.loading.phase, store.loading.loads_seen, store.loading.started_at) == (
        "weights",
        1,
        1.0,
    )
    store.apply(WeightsLoaded(role="draft"), at=3.0)
    assert store.loading.phase == "draft weights"
    store.apply(CompileBegin(), at=4.0)
    assert store.loading.phase == "torch.compile"
    store.apply(CompileEnd(seconds=1.0), at=5.0)
    store.apply(KvCache(tokens=9), at=6.0)
    store.apply(GraphBegin(), at=7.0)
    assert store.loading.done_phases == ["weights", "draft weights", "torch.compile", "KV cache"]
    assert store.loading.phase == "CUDA graphs"
    assert not store.has_extend_phase
    assert store.phases[0] == "weights"


def test_phases_a_server_does_not_have_leave_the_phase_alone() -> None:
    store = StateStore()  # SGLang by default: no torch.compile phase
    store.apply(LoadBegin(), at=1.0)
    store.apply(CompileBegin(), at=2.0)
    store.apply(CompileEnd(), at=2.5)
    assert store.loading.phase == "target weights"
    assert store.loading.done_phases == []
    assert store.has_extend_phase


def test_start_up_lines_of_other_ranks_are_ignored_and_counted() -> None:
    store = StateStore()
    store.apply(LoadBegin(rank=3), at=1.0)
    store.apply(ShardProgress(done=1, total=4, rank=1), at=1.0)
    assert store.loading.phase is None and store.loading.shards_total is None
    assert store.events_applied == 2 and store.last_event_at == 1.0
    store.apply(LoadBegin(rank=0), at=2.0)
    assert store.loading.phase == "target weights"


def test_the_eta_takes_the_larger_of_the_shards_left_and_an_earlier_load() -> None:
    loading = LoadingState(previous_load_seconds=100.0, started_at=0.0)
    loading.shards_total, loading.shards_done, loading.shard_rate_s = 10, 2, 5.0
    assert loading.eta_seconds(10.0) == 90.0  # history: 100 - 10 > 8 shards x 5 s
    assert loading.eta_seconds(70.0) == 40.0  # shards: 40 > 100 - 70
    assert loading.eta_seconds(500.0) == 40.0
    loading.shards_done = 10  # all read: only history speaks (and never below zero)
    assert loading.eta_seconds(70.0) == 30.0
    assert loading.eta_seconds(500.0) == 0.0
    loading.target_loaded = True
    loading.shards_done = 2
    assert loading.eta_seconds(70.0) == 30.0
    alone = LoadingState(shards_total=4, shards_done=1, shard_rate_s=2.0)
    assert alone.eta_seconds(0.0) == 6.0
    alone.loads_seen = 2  # the draft's load: the target's rate says nothing of it
    assert alone.eta_seconds(0.0) is None
    assert LoadingState(previous_load_seconds=5.0).eta_seconds(0.0) is None  # not started
    assert LoadingState().elapsed(5.0) is None
    assert LoadingState(started_at=10.0).elapsed(5.0) == 0.0


def test_a_replayed_start_up_has_no_load_time_until_the_run_records_times() -> None:
    store = StateStore()
    store.apply(RunInfo(run_id="r", reattached=True), at=50.0)
    assert store.run_state == "stopped"  # a reattach: its state comes from the record
    store.apply(LoadBegin(), at=50.0)
    store.apply(ShardProgress(done=0, total=4), at=50.0)
    store.apply(ShardProgress(done=4, total=4), at=50.5)
    assert store.loading.shard_rate_s is None  # replayed lines arrive all at once
    store.apply(Ready(), at=51.0)
    assert store.loading.load_seconds is None
    assert store.last_load_seconds is None
    store.apply(LoadTimes(run_id="r", started_at=10.0, ready_at=40.0), at=52.0)
    assert (store.loading.started_at, store.loading.ready_at) == (10.0, 40.0)
    assert store.loading.load_seconds == 30.0 and store.last_load_seconds == 30.0
    assert not store.loading.replayed


def test_load_times_of_another_run_set_only_what_is_unseen() -> None:
    store = StateStore()
    store.apply(RunInfo(run_id="r"), at=0.0)
    store.apply(LoadTimes(run_id="old", started_at=1.0, ready_at=9.0, previous_load_seconds=7.0))
    assert (store.loading.started_at, store.loading.ready_at, store.loading.load_seconds) == (
        1.0,
        9.0,
        8.0,
    )
    assert store.loading.previous_load_seconds == 7.0
    assert store.last_load_seconds is None  # not this run's
    later = StateStore()
    later.apply(LoadBegin(), at=5.0)
    later.apply(LoadTimes(ready_at=9.0), at=6.0)  # started seen, ready not: ready stays unset
    assert (later.loading.started_at, later.loading.ready_at) == (5.0, None)
    later.apply(LoadTimes(started_at=4.0), at=6.0)
    assert later.loading.started_at == 4.0


def test_ready_takes_the_servers_own_load_time_or_the_time_since_the_first_load() -> None:
    store = StateStore()
    store.apply(Ready(load_seconds=12.5), at=99.0)
    assert store.loading.load_seconds == 12.5 and store.run_state == "ready"
    fresh = StateStore()
    fresh.apply(Ready(), at=10.0)  # no start seen: unknown
    assert fresh.loading.load_seconds is None
    replay = StateStore()
    replay.apply(LoadBegin(), at=1.0)
    replay.apply(Ready(replayed=True), at=9.0)
    assert replay.loading.load_seconds is None


def test_a_new_run_starts_clean_but_keeps_the_last_load_time() -> None:
    store = StateStore()
    store.apply(RunInfo(run_id="a"), at=0.0)
    store.apply(LoadBegin(), at=0.0)
    store.apply(Ready(), at=30.0)
    store.apply(decode(10.0, engine=0), at=31.0)
    store.apply(SpecParams(steps_before=3, steps=5), at=31.0)
    store.apply(probe(1, 2, 3), at=31.0)
    store.apply(RunInfo(run_id="a", pid=5), at=32.0)  # the same run again: nothing reset
    assert store.spec_steps == 5 and len(store.throughput) == 1
    store.apply(RunInfo(run_id="b"), at=40.0)
    assert store.loading.previous_load_seconds == 30.0 and store.last_load_seconds == 30.0
    assert store.loading.phase is None and store.run_state == "loading"
    assert (store.last_decode, store.last_decode_at, store.spec_steps) == (None, None, None)
    assert not store.throughput and not store.probe and not store.decode_engines
    assert [m.at for m in store.launch_marks] == [0.0, 40.0]
    assert store.phase_means() is None


def test_throughput_sums_the_latest_figure_of_each_engine() -> None:
    store = StateStore()
    assert store.throughput_stats() == (None, None, None)
    store.apply(decode(10.0, engine=0, accept_len=2.5), at=1.0)
    store.apply(decode(20.0, engine=1), at=2.0)
    store.apply(decode(30.0, engine=0), at=3.0)
    assert [p.value for p in store.throughput] == [10.0, 30.0, 50.0]
    assert [(p.at, p.value) for p in store.accept_len] == [(1.0, 2.5)]
    assert store.throughput_stats() == (50.0, 30.0, 50.0)
    assert store.last_decode_at == 3.0
    single = StateStore()
    single.apply(decode(7.0), at=1.0)
    single.apply(decode(9.0), at=2.0)
    assert single.throughput_stats() == (9.0, 8.0, 9.0)


def test_phase_means_average_the_last_cycles_and_histograms_bucket_each_phase() -> None:
    store = StateStore()
    for i in range(4):
        store.apply(probe(1.0 + i, 10.0 * (i + 1), 0.5, wall=90.0), at=100.0)
    assert store.phase_means() == (2.5, 25.0, 0.5)
    assert store.phase_means(last=2) == (3.5, 35.0, 0.5)
    assert store.event_lag_s == 10.0
    verify = store.cycle_histograms["verify"]
    assert (verify.count, verify.sum_ms) == (4, 100.0)
    assert store.cycle_histograms["extend"].sum_ms == 2.0
    assert store.cycle_histograms["cycle"].count == 4
    hist = CycleHistogram()
    for ms in (0.25, 0.3, 5000.0):
        hist.observe(ms)
    cumulative = hist.cumulative()
    assert cumulative[0] == 1  # at or under 0.25 ms
    assert cumulative[1] == 2
    assert cumulative[-2] == 2 and cumulative[-1] == 3  # above every bound: only +Inf


def test_probe_cycles_tally_acceptance_by_position_per_request() -> None:
    store = StateStore()  # SGLang: draft_tokens counts each request's root
    store.apply(probe(1, 1, 1, batch_size=2, draft_tokens=8, accepted_per_request=(3, 1)))
    store.apply(probe(1, 1, 1, batch_size=1, draft_tokens=4, accepted_tokens=2))
    store.apply(probe(1, 1, 1, batch_size=2, draft_tokens=8, accepted_tokens=4))  # no split
    store.apply(probe(1, 1, 1, batch_size=1, draft_tokens=400, accepted_tokens=2))  # too deep
    acceptance = store.accept_by_position
    assert acceptance.drafts == 3
    assert acceptance.ratios() == [1.0, 2 / 3, 1 / 3]
    vllm = StateStore()
    vllm.apply(RunInfo(run_id="v", backend="vllm"))
    vllm.apply(probe(1, 1, 1, batch_size=1, draft_tokens=2, accepted_tokens=1))
    assert vllm.accept_by_position.ratios() == [1.0, 0.0]


def test_the_servers_own_rates_win_over_the_probe_and_are_weighted_by_drafts() -> None:
    acceptance = PositionAcceptance()
    assert acceptance.ratios() == []
    acceptance.set_rates([1.5, 0.5, -1.0])
    assert acceptance.ratios() == [1.0, 0.5, 0.0]
    acceptance.observe(2, 3)
    assert acceptance.ratios() == [1.0, 1.0, 0.0]
    acceptance.observe_rates((1.0, 0.5), drafts=10)
    acceptance.observe_rates((0.5, 2.0), drafts=30)
    assert acceptance.drafts == 40
    assert acceptance.ratios() == [25 / 40, 35 / 40]
    store = StateStore()
    store.apply(SpecDecode(mean_accept_len=2.0, drafted=20, per_position=(0.8, 0.4)), at=5.0)
    assert [(p.at, p.value) for p in store.accept_len] == [(5.0, 2.0)]
    assert store.accept_by_position.drafts == 10
    assert store.accept_by_position_history[-1] == (5.0, (0.8, 0.4))
    store.apply(SpecDecode(per_position=(0.6,)), at=6.0)  # rates alone: the view, no drafts
    assert store.accept_by_position.drafts == 10
    assert store.accept_by_position.reported == [0.6]


def test_failures_errors_and_ends_of_other_runs() -> None:
    store = StateStore()
    store.apply(RunInfo(run_id="b"))
    store.apply(ServerFailed(run_id="a"))  # the replaced run's late failure
    assert store.failure is None and store.run_state == "loading"
    store.apply(RunState(run_id="a", state="stopped"))
    assert store.run_state == "loading"
    store.apply(ServerFailed(run_id="b", hung=True))
    assert store.run_state == "hung"
    store.apply(ServerFailed(run_id=None))
    assert store.run_state == "failed"
    store.apply(ServerError(category="oom", message="x"))
    store.apply(ServerError(category="oom", message="y"))
    assert store.error_counts == {"oom": 2} and len(store.errors) == 2
    store.apply(LoadBegin())  # a failed run loading again
    assert store.run_state == "loading"


async def test_a_lossy_subscriber_drops_samples_past_its_limit_and_says_how_many() -> None:
    bus = EventBus(queue_size=2)
    lossy = bus.subscribe(lossy=True)
    lossless = bus.subscribe()
    for i in range(5):
        bus.publish(LogLine(text=str(i)), at=float(i))
    bus.publish(ServerError(category="other", message="kept"), at=9.0)
    assert bus.dropped == 3
    assert lossy.dropped == 0  # told, in a Dropped event, before the state change
    assert lossless.full_for_follower and not lossy.full_for_follower
    got = [lossy.get_nowait()[1] for _ in range(lossy.qsize())]
    assert [getattr(e, "text", None) for e in got[:2]] == ["0", "1"]
    assert got[2:] == [Dropped(count=3), ServerError(category="other", message="kept")]
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(bus.wait_for_room(), 0.05)
    for _ in range(5):
        lossless.get_nowait()
    assert bus.room.is_set()
    await asyncio.wait_for(bus.wait_for_room(), 1.0)
    bus.unsubscribe(lossless)
    assert not bus.lossless
    assert bus.store.events_applied == 6


def test_a_lossy_subscriber_that_catches_up_gets_the_drop_marker_at_once() -> None:
    bus = EventBus(queue_size=1)
    lossy = bus.subscribe(lossy=True)
    unbounded = bus.subscribe(bounded=False)
    for i in range(3):
        bus.publish(LogLine(text=str(i)), at=float(i))
    assert lossy.get_nowait() == (0.0, LogLine(text="0"))
    assert lossy.get_nowait()[1] == Dropped(count=2)
    assert lossy.qsize() == 0 and lossy.dropped == 0
    assert unbounded.qsize() == 3 and not unbounded.full_for_follower
    assert unbounded.get_nowait() == (0.0, LogLine(text="0"))


def test_every_history_is_bounded() -> None:
    store = StateStore(history=2)
    for wall in (1.0, 2.0, 3.0):
        store.apply(GpuSample(wall=wall, gpus=(GpuReading(index=0, util_gpu=50.0),)), at=9.0)
    assert [(p.at, p.value) for p in store.gpu_util[0]] == [(2.0, 50.0), (3.0, 50.0)]
    for i in range(LOG_LINES + 1):
        store.apply(LogLine(text=str(i)))
    for i in range(ERRORS + 1):
        store.apply(ServerError(category="other", message=str(i)))
    assert len(store.log) == LOG_LINES and store.log[0].text == "1"
    assert len(store.errors) == ERRORS and store.error_counts == {"other": ERRORS + 1}


def test_a_compile_end_alone_enters_the_compile_phase() -> None:
    store = StateStore()
    store.apply(RunInfo(run_id="v", backend="vllm"))
    store.apply(LoadBegin())
    store.apply(CompileEnd(seconds=3.0))
    assert store.loading.phase == "torch.compile"


def test_the_drafts_load_end_does_not_complete_the_targets_shards() -> None:
    store = StateStore()
    store.apply(LoadBegin(), at=1.0)
    store.apply(ShardProgress(done=4, total=8), at=2.0)
    store.apply(LoadBegin(), at=3.0)  # the draft's load, the target's shards still short
    store.apply(LoadEnd(), at=4.0)
    assert (store.loading.shards_done, store.loading.shards_total) == (4, 8)


def test_health_saying_ready_before_the_log_ends_the_load_and_its_elapsed_time() -> None:
    """A server whose health endpoint answers before its ready line is read (or that writes
    none) was ready with no ready time: loading's elapsed counted on for as long as it ran."""
    store = StateStore()
    store.apply(RunInfo(run_id="r"), at=0.0)
    store.apply(LoadBegin(), at=10.0)
    store.apply(RunState(run_id="r", state="ready"), at=40.0)
    loading = store.loading
    assert store.run_state == "ready" and loading.phase == "ready"
    assert loading.elapsed(500.0) == 30.0 and loading.eta_seconds(500.0) == 0.0
    assert store.last_load_seconds == 30.0
    store.apply(Ready(), at=41.5)  # the log's line, read late: the earlier time stands
    assert (loading.ready_at, loading.load_seconds) == (40.0, 30.0)
    assert loading.done_phases.count("ready") == 1
    store.apply(Ready(load_seconds=29.0), at=42.0)  # the server's own figure wins
    assert loading.load_seconds == 29.0
    replay = StateStore()
    replay.apply(RunInfo(run_id="r", reattached=True), at=0.0)
    replay.apply(LoadBegin(), at=1.0)
    replay.loading.replayed = True
    replay.apply(RunState(run_id="r", state="ready"), at=2.0)
    assert replay.loading.ready_at == 2.0 and replay.loading.load_seconds is None
    stopped = StateStore()  # health of a run never seen loading sets nothing
    stopped.apply(RunState(run_id="r", state="ready"), at=5.0)
    assert stopped.loading.ready_at is None

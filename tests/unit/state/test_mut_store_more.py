"""More of the store's state machine, pinned by what it holds and reports after a sequence of
typed events: a fresh store's state, the bounded histories, GPU and node samples, the start-up
edge cases (a draft load, a relaunch from a stopped state, the run record's times), the probe's
position limits, and the console's end-of-run notice (docs/testing.md, "Mutation testing",
found these holes)."""

from __future__ import annotations

import time

from specmon.model.events import (
    Decode,
    GpuSample,
    GraphBegin,
    LoadBegin,
    LoadTimes,
    LogLine,
    NodeStatus,
    ProbeTiming,
    RunInfo,
    RunState,
    ServerError,
    ServerFailed,
    ServerInfo,
    ShardProgress,
    SpecDecode,
    WeightsLoaded,
)
from specmon.model.run_end import RunEnd
from specmon.remote.agent import GpuReading
from specmon.state.store import EventBus, PositionTally, StateStore


def probe(draft: float, **more: object) -> ProbeTiming:
    return ProbeTiming(
        wall=more.pop("wall", 100.0),  # type: ignore[arg-type]
        draft_ms=draft,
        verify_ms=2.0,
        extend_ms=1.0,
        cycle_ms=draft + 3.0,
        **more,  # type: ignore[arg-type]
    )


def decode(throughput: float, *, engine: int | None = None) -> Decode:
    return Decode(
        running_req=1,
        tokens=10,
        token_usage=0.1,
        gen_throughput=throughput,
        queue_req=0,
        engine=engine,
        accept_len=2.0,
    )


def test_a_fresh_store_knows_nothing_yet() -> None:
    store = StateStore()
    assert store.failure is None
    assert store.last_decode is None and store.last_decode_at is None
    assert store.server_info == {} and store.gpu_nodes == {}
    assert store.last_event_at is None
    assert store.run_end is None and store.run_end_id is None
    assert store.end_notice() is None


def test_every_series_of_a_run_is_bounded_by_the_history() -> None:
    store = StateStore(history=3)
    for i in range(5):
        at = float(i)
        store.apply(decode(10.0 + i), at=at)
        store.apply(SpecDecode(per_position=(0.5,)), at=at)
        store.apply(probe(1.0, wall=at), at=at)
        store.apply(GpuSample(wall=at, gpus=(GpuReading(index=0, mem_used_mb=i),)), at=at)
    assert [p.value for p in store.throughput] == [12.0, 13.0, 14.0]
    assert len(store.accept_len) == 3  # two a tick (decode and spec line), the last three kept
    assert [at for at, _ in store.accept_by_position_history] == [2.0, 3.0, 4.0]
    assert [p.wall for p in store.probe] == [2.0, 3.0, 4.0]
    assert [(p.at, p.value) for p in store.gpu_mem[0]] == [(2.0, 2.0), (3.0, 3.0), (4.0, 4.0)]


def test_launch_marks_keep_the_latest_256_launches() -> None:
    store = StateStore()
    for i in range(300):
        store.apply(RunInfo(run_id=f"r{i}"), at=float(i))
    assert len(store.launch_marks) == 256
    assert (store.launch_marks[0].at, store.launch_marks[0].value) == (44.0, 0.0)
    assert (store.launch_marks[-1].at, store.launch_marks[-1].value) == (299.0, 0.0)


def test_throughput_points_carry_their_arrival_time() -> None:
    store = StateStore()
    store.apply(decode(50.0), at=7.0)
    store.apply(decode(20.0, engine=0), at=8.0)
    store.apply(decode(30.0, engine=1), at=9.0)
    assert [(p.at, p.value) for p in store.throughput] == [(7.0, 50.0), (8.0, 20.0), (9.0, 50.0)]
    assert store.last_decode_at == 9.0


def test_errors_and_failures_keep_the_event_itself() -> None:
    store = StateStore()
    store.apply(RunInfo(run_id="r1"), at=1.0)
    error = ServerError(category="oom", message="CUDA out of memory")
    failed = ServerFailed(run_id="r1", category="oom", exit_code=1)
    store.apply(error, at=2.0)
    store.apply(failed, at=3.0)
    assert list(store.errors) == [error]
    assert store.failure is failed and store.run_state == "failed"


def test_gpu_samples_keep_memory_per_gpu_at_the_hosts_time_and_the_lag() -> None:
    store = StateStore()
    sample = GpuSample(
        wall=100.0,
        gpus=(
            GpuReading(index=0, util_gpu=10.0, mem_used_mb=1000.0),
            GpuReading(index=1, util_gpu=20.0),  # no memory figure: no memory point
        ),
    )
    store.apply(sample, at=100.25)
    assert store.event_lag_s == 0.25
    assert {i: [(p.at, p.value) for p in mem] for i, mem in store.gpu_mem.items()} == {
        0: [(100.0, 1000.0)],
        1: [],
    }
    assert store.gpus[1].util_gpu == 20.0


def test_a_node_status_is_kept_and_names_the_node_of_each_of_its_gpus() -> None:
    store = StateStore()
    node = NodeStatus(node_rank=1, host="gpu-b", gpus=(8, 9))
    store.apply(node, at=1.0)
    assert store.loading.nodes == {1: node}
    assert store.gpu_nodes == {8: 1, 9: 1}


def test_server_info_is_the_latest_report_and_a_new_run_clears_it() -> None:
    store = StateStore()
    store.apply(RunInfo(run_id="r1"), at=1.0)
    store.apply(ServerInfo(values=(("version", "0.4"), ("model", "m"))), at=2.0)
    assert store.server_info == {"version": "0.4", "model": "m"}
    store.apply(RunInfo(run_id="r2"), at=3.0)
    assert store.server_info == {}


def test_a_vllm_draft_cuda_graph_capture_enters_its_single_cuda_graphs_phase() -> None:
    store = StateStore()
    store.apply(RunInfo(run_id="r1", backend="vllm"), at=1.0)
    store.apply(GraphBegin(role="draft"), at=2.0)
    assert store.loading.phase == "CUDA graphs"


def test_a_load_after_the_targets_weights_are_read_is_the_drafts() -> None:
    store = StateStore()
    store.apply(RunInfo(run_id="r1"), at=1.0)
    store.apply(WeightsLoaded(role="target"), at=2.0)
    store.apply(LoadBegin(), at=3.0)
    assert store.loading.phase == "draft weights"


def test_a_second_load_is_the_drafts_and_its_shard_bar_leaves_the_targets_alone() -> None:
    store = StateStore()
    store.apply(RunInfo(run_id="r1"), at=0.0)
    store.apply(LoadBegin(), at=0.0)
    store.apply(ShardProgress(done=0, total=4), at=0.0)
    store.apply(ShardProgress(done=1, total=4), at=10.0)
    assert store.loading.shard_rate_s == 10.0  # measured from the first shard on
    store.apply(LoadBegin(), at=11.0)
    assert store.loading.phase == "draft weights"
    store.apply(ShardProgress(done=1, total=1), at=12.0)
    assert (store.loading.shards_done, store.loading.shards_total) == (1, 4)


def test_a_load_after_a_stop_means_the_server_is_loading_again() -> None:
    store = StateStore()
    assert store.run_state == "stopped"
    store.apply(LoadBegin(), at=1.0)
    assert store.run_state == "loading"


def test_load_times_without_a_followed_run_or_without_a_ready_time() -> None:
    store = StateStore()
    store.apply(LoadTimes(run_id="r1", started_at=10.0, ready_at=10.5), at=20.0)
    assert store.loading.load_seconds == 0.5
    store = StateStore()
    store.apply(RunInfo(run_id="r1", reattached=True), at=1.0)
    assert store.loading.replayed is True
    store.apply(LoadTimes(run_id="r1", started_at=10.0), at=2.0)
    assert store.loading.replayed is False
    assert store.loading.started_at == 10.0 and store.last_load_seconds is None
    store.apply(LoadTimes(run_id="r1", started_at=10.0, ready_at=10.5), at=3.0)
    assert store.loading.load_seconds == 0.5 and store.last_load_seconds == 0.5


def test_a_probe_record_without_a_batch_size_counts_no_position() -> None:
    store = StateStore()
    store.apply(probe(1.0, draft_tokens=4, accepted_tokens=2), at=1.0)
    assert len(store.probe) == 1 and store.accept_by_position.drafts == 0


def test_probe_drafts_of_one_position_and_of_the_deepest_are_tallied() -> None:
    store = StateStore()  # SGLang: draft_tokens counts each request's root
    store.apply(probe(1.0, batch_size=1, draft_tokens=2, accepted_tokens=1), at=1.0)
    assert store.accept_by_position.ratios() == [1.0]
    store = StateStore()
    deepest = store._backend().max_draft_positions
    store.apply(probe(1.0, batch_size=1, draft_tokens=deepest + 1, accepted_tokens=1), at=1.0)
    ratios = store.accept_by_position.ratios()
    assert len(ratios) == deepest and ratios[:2] == [1.0, 0.0]


def test_a_position_tally_grows_to_exactly_the_positions_asked() -> None:
    tally = PositionTally()
    tally.grow(3)
    assert tally.cycles == [0, 0, 0] and tally.accepted == [0, 0, 0]
    tally.grow(2)
    assert len(tally.cycles) == 3


def test_a_rate_line_of_one_draft_is_counted() -> None:
    store = StateStore()
    store.apply(RunInfo(run_id="r1", backend="vllm"), at=1.0)
    store.apply(SpecDecode(per_position=(1.0, 0.0), drafted=2), at=2.0)
    assert store.accept_by_position.drafts == 1
    assert store.accept_by_position.ratios() == [1.0, 0.0]


def test_phase_means_default_to_the_last_200_cycles() -> None:
    store = StateStore()
    store.apply(probe(1000.0), at=0.0)
    for i in range(200):
        store.apply(probe(1.0), at=float(i + 1))
    assert store.phase_means() == (1.0, 2.0, 1.0)


def test_server_rates_without_a_time_are_stamped_now() -> None:
    store = StateStore()
    before = time.time()
    store.set_accept_by_position([0.75])
    after = time.time()
    at, rates = store.accept_by_position_history[-1]
    assert before <= at <= after and rates == (0.75,)


def test_a_bus_applies_to_the_given_store_and_stamps_events_now() -> None:
    store = StateStore()
    bus = EventBus(store)
    assert bus.store is store
    queue = bus.subscribe()
    before = time.time()
    bus.publish(LogLine(text="hello"))
    after = time.time()
    assert [line.text for line in store.log] == ["hello"]
    at, event = queue.get_nowait()
    assert before <= at <= after and event == LogLine(text="hello")


def test_a_lossless_subscriber_holds_10000_events_before_the_follower_waits() -> None:
    bus = EventBus()
    queue = bus.subscribe()
    for i in range(9_999):
        bus.publish(LogLine(text="x"), at=float(i))
    assert not queue.full_for_follower
    bus.publish(LogLine(text="x"), at=10_000.0)
    assert queue.full_for_follower


def test_a_run_end_is_kept_with_its_run() -> None:
    store = StateStore()
    store.apply(RunInfo(run_id="A"), at=1.0)
    end = RunEnd("stopped", by="u@h", command="specmon stop")
    store.apply(RunState(run_id="A", state="stopped", end=end), at=2.0)
    assert store.run_end == end and store.run_end_id == "A"


def stopped_store(end: RunEnd) -> StateStore:
    """Run A followed, then ended with ``end``."""
    store = StateStore()
    store.apply(RunInfo(run_id="A"), at=1.0)
    store.apply(RunState(run_id="A", state="stopped", end=end), at=2.0)
    return store


def test_end_notice_of_a_stop_while_nothing_runs() -> None:
    store = StateStore()
    store.apply(RunInfo(run_id="A"), at=1.0)
    assert store.end_notice() is None  # no end yet
    store = stopped_store(RunEnd("stopped", by="u@h", command="specmon stop"))
    assert store.end_notice() == "run A stopped by u@h (specmon stop); no server is running"


def test_end_notice_says_nothing_of_a_crash_or_of_a_run_other_than_the_ended_one() -> None:
    assert stopped_store(RunEnd("crashed", signal=11)).end_notice() is None
    store = stopped_store(RunEnd("stopped", by="u@h", command="specmon stop"))
    store.apply(RunInfo(run_id="B", reattached=True), at=3.0)  # B followed, still "stopped"
    assert store.run_state == "stopped" and store.end_notice() is None


def test_end_notice_of_a_replacement_names_both_runs() -> None:
    end = RunEnd("replaced", replaced_by="B", replaced_by_profile="p")
    store = stopped_store(end)
    store.apply(RunInfo(run_id="B", replaces="A"), at=3.0)
    assert store.run_state == "loading"
    assert store.end_notice() == "run A replaced by run B (profile p); following run B"


def test_end_notice_says_nothing_while_a_run_other_than_the_replacement_runs() -> None:
    store = stopped_store(RunEnd("replaced", replaced_by="B", replaced_by_profile="p"))
    store.apply(RunInfo(run_id="C", replaces="A"), at=3.0)
    assert store.end_notice() is None
    store = stopped_store(RunEnd("replaced", replaced_by="B", replaced_by_profile="p"))
    store.apply(RunInfo(run_id="B"), at=3.0)  # its record names no replaced run
    assert store.end_notice() is None
    store = stopped_store(RunEnd("stopped", by="u@h", command="specmon stop"))
    store.apply(RunInfo(run_id="B", replaces="A"), at=3.0)  # A was stopped, not replaced
    assert store.end_notice() is None

"""SGLang's ``/metrics`` -> ``latency`` events (specmon/backends/sglang/metrics.py), on pages
in the real server's names and labels (sglang.md section 4; 0.5.9's collector: scheduler
gauges labelled model_name, engine_type, tp_rank, pp_rank, moe_ep_rank[, dp_rank]; tokenizer
histograms and counters labelled model_name[, is_streaming]). Figures are hand-computed."""

from __future__ import annotations

import pytest
from support.metrics_pages import counter, gauge, histogram, scaled

from specmon.backends import get_backend
from specmon.backends.latency import LatencyReader
from specmon.model.events import Latency

MODEL = ("model_name", "moonshotai/Kimi-K2.5")
TTFT = [("0.1", 10.0), ("0.5", 40.0), ("1.0", 50.0), ("+Inf", 50.0)]  # p50 .3, p90 .75
ITL = [("0.01", 80.0), ("0.02", 100.0), ("+Inf", 100.0)]
E2E = [("1.0", 10.0), ("2.0", 50.0), ("+Inf", 50.0)]
QUEUE = [("0.0", 30.0), ("0.001", 40.0), ("0.005", 50.0), ("+Inf", 50.0)]


def sched(tp: str = "0", dp: str | None = None, reverse: bool = False) -> list[tuple[str, str]]:
    labels = [
        MODEL,
        ("engine_type", "unified"),
        ("tp_rank", tp),
        ("pp_rank", "0"),
        ("moe_ep_rank", "0"),
    ]
    if dp is not None:
        labels.append(("dp_rank", dp))
    return labels[::-1] if reverse else labels


def page(
    step: int,
    *,
    running: float = 40,
    waiting: float = 3,
    usage: float = 0.5,
    new_version: bool = True,
    reverse: bool = False,
    streaming_split: bool = False,
    retracted: float = 0,
    retracted_total: float = 0,
    dp_ranks: bool = False,
    tp_copies: tuple[str, ...] = (),
) -> str:
    """SGLang's page after ``step`` busy intervals (step 0: nothing counted yet).
    ``new_version``: the families newer versions add (queue time is in every version
    checked, so only the counters and kv_used_tokens go). ``dp_ranks``: a second DP rank
    with 10 running, 1 waiting, usage 0.7 and twice the queue observations; ``tp_copies``:
    those TP ranks export rank 0's scheduler figures too."""
    ranks = [(sched(dp="0" if dp_ranks else None, reverse=reverse), running, waiting, usage, 1)]
    ranks += [(sched(tp=tp, reverse=reverse), running, waiting, usage, 1) for tp in tp_copies]
    if dp_ranks:
        ranks.append((sched(dp="1", reverse=reverse), 10, 1, 0.7, 2))
    tokenizer = [MODEL, ("engine_type", "unified")] if new_version else [MODEL]
    if reverse:
        tokenizer = tokenizer[::-1]
    if streaming_split:  # 0.5.23+: TTFT and e2e split by is_streaming, summed back
        ttft = [
            ([*tokenizer, ("is_streaming", "true")], scaled(TTFT, step * 0.4), 8.0 * step),
            ([*tokenizer, ("is_streaming", "false")], scaled(TTFT, step * 0.6), 12.0 * step),
        ]
    else:
        ttft = [(tokenizer, scaled(TTFT, step), 20.0 * step)]
    itl = [(tokenizer, scaled(ITL, step), 1.2 * step)]
    e2e = [(tokenizer, scaled(E2E, step), 75.0 * step)]
    queue = [(labels, scaled(QUEUE, step * n), 0.05 * step * n) for labels, _, _, _, n in ranks]
    text = (
        histogram("sglang:time_to_first_token_seconds", ttft)
        + histogram("sglang:inter_token_latency_seconds", itl)
        + histogram("sglang:e2e_request_latency_seconds", e2e)
        + histogram("sglang:queue_time_seconds", queue)
        + counter("sglang:num_requests", [(tokenizer, 100 + 50 * step)])
        + counter("sglang:num_aborted_requests", [(tokenizer, 1 + 2 * step)])
        + counter("sglang:prompt_tokens", [(tokenizer, 1000 + 4000 * step)])
        + gauge("sglang:num_running_reqs", [(r[0], r[1]) for r in ranks])
        + gauge("sglang:num_queue_reqs", [(r[0], r[2]) for r in ranks])
        + gauge("sglang:token_usage", [(r[0], r[3]) for r in ranks])
        + gauge("sglang:num_used_tokens", [(r[0], r[3] * 560000) for r in ranks])
        + gauge("sglang:max_total_num_tokens", [(r[0], 560000) for r in ranks])
        + gauge("sglang:cache_hit_rate", [(r[0], 0.4) for r in ranks])
        + gauge("sglang:gen_throughput", [(r[0], 812.5) for r in ranks])
        + gauge("sglang:num_retracted_reqs", [(r[0], retracted) for r in ranks])
    )
    if new_version:
        text += counter(
            "sglang:cached_tokens", [([*tokenizer, ("cache_source", "device")], 1000 * step)]
        )
        text += counter("sglang:num_retracted_requests", [(r[0], retracted_total) for r in ranks])
        text += gauge("sglang:kv_used_tokens", [(r[0], r[3] * 560000 - 1000) for r in ranks])
    return text


def reader(argv: tuple[str, ...] = (), window_s: float = 60.0) -> LatencyReader:
    found = get_backend("sglang").new_latency_reader(argv, window_s)
    assert found is not None
    return found


def two_pages(**kwargs: object) -> Latency:
    read = reader()
    assert read.read(page(0, **kwargs), 100.0) is None  # one page: no window yet
    event = read.read(page(1, **kwargs), 104.0)
    assert event is not None
    return event


def test_a_window_of_two_pages_gives_every_figure_sglang_serves() -> None:
    event = two_pages()
    assert event.span_s == 4.0 and event.window_s == 60.0
    ttft = event.ttft_s
    assert ttft is not None and (ttft.count, ttft.mean) == (50.0, 0.4)
    assert (ttft.p50, ttft.p90, ttft.p99) == (0.3, 0.75, 0.975)
    itl = event.itl_s
    assert itl is not None and (itl.p50, itl.p90, itl.p99, itl.mean) == (
        0.00625,
        0.015,
        0.0195,
        0.012,
    )
    e2e = event.e2e_s
    assert e2e is not None and (e2e.p50, e2e.p90, e2e.p99) == (1.375, 1.875, 1.9875)
    queue = event.queue_s  # le="0.0" lowest: a request that never queued reads 0
    assert queue is not None and (queue.p50, queue.p90, queue.p99) == (0.0, 0.003, 0.0048)
    assert event.requests_per_s == 12.5  # 50 finished over 4 s
    assert event.finished == (("abort", 2.0),)  # SGLang counts aborts apart, no other reason
    assert event.prefix_cache_hit_rate == 0.25  # 1,000 cached of 4,000 prompt tokens
    assert event.preemptions == 0.0 and not event.preempting
    assert (event.running, event.waiting, event.kv_usage) == (40, 3, 0.5)
    assert (event.kv_used_tokens, event.kv_total_tokens) == (279000, 560000)  # kv_used_tokens
    assert not event.queue_growing and not event.kv_near_full and event.waiting_change == 0
    assert event.tpot_s is None  # SGLang has no per-request time per output token
    assert event.prompt_tokens is None and event.generation_tokens is None
    assert event.max_running is None and event.groups == () and event.group_label is None


def test_label_order_extra_labels_and_split_series_change_nothing() -> None:
    plain = two_pages()
    assert two_pages(reverse=True) == plain
    split = two_pages(streaming_split=True)  # the same requests, counted in two series
    assert split.ttft_s == plain.ttft_s


def test_a_version_without_the_newer_families_reports_them_absent_not_zero() -> None:
    event = two_pages(new_version=False)
    assert event.prefix_cache_hit_rate == 0.4  # the scheduler's gauge, no counters to rate
    assert event.preemptions == 0.0  # the gauge of the last interval's retractions
    assert event.kv_used_tokens == 280000  # num_used_tokens where kv_used_tokens is missing
    assert event.queue_s is not None  # queue time is in every version
    bare = reader()
    text = page(0).split("# HELP sglang:queue_time_seconds")[0]  # only the latency histograms
    bare.read(text, 0.0)
    event = bare.read(page(1).split("# HELP sglang:queue_time_seconds")[0], 4.0)
    assert event is not None and event.ttft_s is not None
    absent = ("queue_s", "requests_per_s", "finished", "prefix_cache_hit_rate", "preemptions")
    for name in (*absent, "running", "waiting", "kv_usage", "kv_used_tokens", "kv_total_tokens"):
        assert getattr(event, name) is None, name
    assert not event.saturated


def test_each_data_parallel_rank_is_a_group_and_the_totals_add_them() -> None:
    read = reader()
    read.read(page(0, dp_ranks=True), 0.0)
    event = read.read(page(1, dp_ranks=True), 4.0)
    assert event is not None and event.group_label == "dp_rank"
    assert [group.name for group in event.groups] == ["0", "1"]
    rank0, rank1 = event.groups
    assert (rank0.running, rank1.running, event.running) == (40, 10, 50)
    assert (rank0.waiting, rank1.waiting, event.waiting) == (3, 1, 4)
    assert (rank0.kv_usage, rank1.kv_usage, event.kv_usage) == (0.5, 0.7, 0.6)
    assert rank0.queue_s is not None and rank0.queue_s.count == 50.0
    assert rank1.queue_s is not None and rank1.queue_s.count == 100.0
    assert event.queue_s is not None and event.queue_s.count == 150.0
    assert event.kv_total_tokens == 2 * 560000  # each rank its own pool
    assert rank0.ttft_s is None  # the tokenizer counts before the ranks split: no dp_rank
    assert event.ttft_s is not None and event.ttft_s.count == 50.0


def test_every_tensor_parallel_ranks_copy_is_read_once() -> None:
    """--enable-metrics-for-all-schedulers: each TP rank exports its group's figures."""
    read = reader()
    read.read(page(0, tp_copies=("10", "2", "1")), 0.0)
    event = read.read(page(1, tp_copies=("10", "2", "1")), 4.0)
    assert event is not None and (event.running, event.waiting) == (40, 3)
    assert event.queue_s is not None and event.queue_s.count == 50.0
    assert event.kv_total_tokens == 560000


def test_the_maximum_of_running_requests_comes_from_server_info_or_the_launch() -> None:
    read = reader(("python", "-m", "sglang.launch_server", "--max-running-requests", "32"))
    assert read.max_running == 32
    read.server_info(
        {
            "max_running_requests": None,
            "internal_states": [
                {"effective_max_running_requests_per_dp": 48},
                {"effective_max_running_requests_per_dp": 48},
            ],
        }
    )
    assert read.max_running == 96  # two DP ranks
    read.server_info({"max_running_requests": 64, "internal_states": "nonsense"})
    assert read.max_running == 64
    read.server_info(["not", "a", "dict"])
    read.server_info({"internal_states": [{"effective_max_running_requests_per_dp": True}]})
    assert read.max_running == 64
    read.read(page(0), 0.0)
    event = read.read(page(1), 4.0)
    assert event is not None and event.max_running == 64


def test_saturation_flags_carry_their_numbers() -> None:
    read = reader()
    for second, waiting in ((0.0, 0), (4.0, 3), (8.0, 9)):
        event = read.read(page(int(second / 4), waiting=waiting, usage=0.93), second)
    assert event is not None
    assert event.queue_growing and event.waiting_change == 9
    assert event.kv_near_full and event.kv_usage == 0.93 and event.kv_threshold == 0.9
    retracting = reader()
    retracting.read(page(0), 0.0)
    event = retracting.read(page(1, retracted_total=4), 4.0)
    assert event is not None and event.preemptions == 4.0 and event.preempting
    assert event.saturated


def test_a_queue_that_shrinks_back_is_not_growing() -> None:
    read = reader()
    for second, waiting in ((0.0, 0), (4.0, 9), (8.0, 1)):
        event = read.read(page(int(second / 4), waiting=waiting), second)
    assert event is not None and event.waiting_change == 1 and not event.queue_growing


def test_the_old_retraction_gauge_gives_the_windows_largest_reading() -> None:
    read = reader()
    read.read(page(0, new_version=False, retracted=0), 0.0)
    read.read(page(1, new_version=False, retracted=5), 4.0)
    event = read.read(page(2, new_version=False, retracted=0), 8.0)
    assert event is not None and event.preemptions == 5.0 and event.preempting


def test_a_hostile_or_broken_page_raises_nothing() -> None:
    read = reader()
    assert read.read("not { prometheus", 0.0) is None
    read.read(page(0).replace("sglang:token_usage{", 'sglang:token_usage{x="1",', 1), 0.0)
    nan = page(1).replace(" 0.5\n", " NaN\n")  # token usage NaN: skipped, not shown
    event = read.read(nan, 4.0)
    assert event is not None and event.kv_usage == round(279000 / 560000, 4)  # used / total
    huge = page(2).replace("sglang:num_running_reqs{", "sglang:num_running_reqs{", 1)
    huge = huge.replace(" 40\n", " 1e300\n")
    event = read.read(huge, 8.0)
    assert event is not None and event.running is not None and event.running <= 10**12


@pytest.mark.parametrize("window_s", [5.0, 60.0])
def test_pages_older_than_the_window_leave_it(window_s: float) -> None:
    read = reader(window_s=window_s)
    for second in range(0, 40, 4):
        event = read.read(page(second // 4), float(second))
    assert event is not None and event.span_s == min(window_s // 4 * 4, 36.0)
    assert event.ttft_s is not None and event.ttft_s.count == 50.0 * event.span_s / 4

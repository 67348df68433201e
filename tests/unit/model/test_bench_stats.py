"""Benchmark statistics and the shipped prompt set (pure functions, no server)."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specmon.experiments.bench.runner import (
    BenchSettings,
    RequestResult,
    mean_phase_times,
    merge_repeats,
    metrics_accept_length,
    percentile,
    pooled_accept_length,
    speculative_from_server_info,
    steady_tok_s,
    summarize,
)
from specmon.model.errors import UsageError
from specmon.model.events import ProbeTiming
from specmon.model.prompts import available_prompt_sets, load_prompt_set

finite = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(st.lists(finite, min_size=2, max_size=60))
def test_percentiles_match_statistics_inclusive_quantiles(values):
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    assert percentile(values, 10) == pytest.approx(deciles[0], rel=1e-9, abs=1e-6)
    assert percentile(values, 90) == pytest.approx(deciles[-1], rel=1e-9, abs=1e-6)
    assert percentile(values, 50) == pytest.approx(statistics.median(values), rel=1e-9, abs=1e-6)
    assert min(values) <= percentile(values, 10) <= percentile(values, 90) <= max(values)


def test_percentile_rejects_nonsense():
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)
    assert percentile([7.0], 10) == 7.0


def ok(tokens: int, latency: float, verify: int | None = None, ttft: float | None = None):
    return RequestResult(
        prompt_id="p",
        ok=True,
        latency_s=latency,
        completion_tokens=tokens,
        spec_verify_ct=verify,
        ttft_s=ttft,
    )


def test_accept_length_pools_cycles_not_per_request_ratios():
    # 100 tokens in 50 cycles (2.0) and 10 tokens in 10 cycles (1.0): pooled 110/60.
    results = [ok(100, 1.0, 50), ok(10, 1.0, 10), ok(5, 1.0, None)]
    assert pooled_accept_length(results) == pytest.approx(110 / 60)
    assert pooled_accept_length([ok(5, 1.0)]) is None


def test_summarize_overall_and_per_request_figures():
    results = [ok(64, 1.0, ttft=0.05), ok(64, 0.8, ttft=0.10), ok(64, 0.5, ttft=0.15)]
    result = summarize(
        settings=BenchSettings(requests=3, max_tokens=64),
        base_url="http://127.0.0.1:1",
        prompt_set_version="v1",
        prompt_set_digest="x",
        started_at=0.0,
        duration_s=2.3,
        results=results,
    )
    assert result.tok_s_overall == pytest.approx(192 / 2.3)
    assert result.tok_s_median == pytest.approx(80.0)
    assert result.tok_s_p10 == pytest.approx(64 + 0.2 * 16)
    assert result.ttft_median_ms == pytest.approx(100.0)
    assert result.speculative is None  # no server info: unknown, so never a baseline


def streamed(first: float, last: float, tokens_per_chunk: int = 2, every: float = 0.1):
    """A request whose first chunk (1 token) came at ``first`` and then one chunk of
    ``tokens_per_chunk`` tokens every ``every`` s up to ``last``."""
    counts = [(first, 1)]
    while counts[-1][0] + every <= last + 1e-9:
        counts.append((counts[-1][0] + every, counts[-1][1] + tokens_per_chunk))
    return replace(ok(counts[-1][1], last, ttft=0.0), stream_counts=tuple(counts))


def test_steady_tok_s_leaves_the_ramp_up_and_the_tail_out():
    # A streams 0.0-2.0 s, B starts at 0.5 (a late connection, a prefill) and ends at 2.3;
    # both run at 20 tok/s. The window is 0.5-2.0: 40 tok/s, where the overall figure of the
    # same run (tokens / 2.3 s) is ~36 and falls with every ramp-up delay.
    early, late = streamed(0.0, 2.0), streamed(0.5, 2.3)
    assert steady_tok_s([early, late]) == pytest.approx(40.0)
    overall = (early.completion_tokens + late.completion_tokens) / 2.3
    assert overall < 37
    # A later start of B changes the window, not the figure.
    assert steady_tok_s([early, streamed(0.9, 2.7)]) == pytest.approx(40.0)
    # Uneven chunks (accept lengths 1-4) count whole chunks: 10 tokens in 0.4 s.
    uneven = replace(early, stream_counts=((0.0, 1), (0.1, 2), (0.2, 6), (0.3, 8), (0.4, 11)))
    assert steady_tok_s([uneven]) == pytest.approx(25.0)


def test_steady_tok_s_is_none_without_a_window_all_requests_shared():
    one_after_another = [streamed(0.0, 1.0), streamed(1.05, 2.0)]
    assert steady_tok_s(one_after_another) is None
    assert steady_tok_s([ok(64, 1.0)]) is None  # not streamed, or no running counts
    assert (
        steady_tok_s([streamed(0.0, 2.0), replace(ok(1, 1.0), stream_counts=((0.5, 1),))]) is None
    )
    # Overlapping by less than two chunks of one of them: no rate to read.
    assert steady_tok_s([streamed(0.0, 1.0), streamed(0.95, 2.0)]) is None
    # Failed requests are not part of it.
    failed = RequestResult(prompt_id="p", ok=False, latency_s=1.0, error="x")
    assert steady_tok_s([streamed(0.0, 2.0), failed]) == pytest.approx(20.0)


def test_summarize_reports_steady_tok_s_and_to_dict_leaves_the_chunk_counts_out():
    result = summarize(
        settings=BenchSettings(requests=2, concurrency=2, max_tokens=41),
        base_url="http://127.0.0.1:1",
        prompt_set_version="v1",
        prompt_set_digest="x",
        started_at=0.0,
        duration_s=2.3,
        results=[streamed(0.0, 2.0), streamed(0.5, 2.3)],
    )
    assert result.tok_s_steady == pytest.approx(40.0)
    out = result.to_dict()
    assert out["tok_s_steady"] == pytest.approx(40.0)
    assert all("stream_counts" not in r for r in out["requests"])
    json.dumps(out)
    # Repeats of one load: the mean of theirs, none when one repeat has none.
    again = replace(result, tok_s_steady=50.0)
    assert merge_repeats([result, again]).tok_s_steady == pytest.approx(45.0)
    assert merge_repeats([result, replace(result, tok_s_steady=None)]).tok_s_steady is None


def test_failed_request_counts_zero_and_no_success_is_an_error():
    failed = RequestResult(prompt_id="p", ok=False, latency_s=1.0, error="HTTP 500")
    assert failed.tok_s == 0.0
    with pytest.raises(Exception, match="no successful request"):
        summarize(
            settings=BenchSettings(),
            base_url="u",
            prompt_set_version="v1",
            prompt_set_digest="x",
            started_at=0,
            duration_s=1,
            results=[failed],
        )


def test_speculation_is_read_from_the_servers_own_launch_args():
    assert speculative_from_server_info({"speculative_algorithm": "EAGLE3"}) is True
    assert speculative_from_server_info({"speculative_algorithm": None}) is False
    assert speculative_from_server_info({"model_path": "m"}) is None
    assert speculative_from_server_info(None) is None


def test_metrics_accept_length_prefers_tp_rank_zero():
    text = (
        "# HELP sglang:spec_accept_length The average acceptance length\n"
        "# TYPE sglang:spec_accept_length gauge\n"
        'sglang:spec_accept_length{model_name="m",tp_rank="1"} 1.5\n'
        'sglang:spec_accept_length{model_name="m",tp_rank="0"} 2.25\n'
    )
    assert metrics_accept_length(text) == pytest.approx(2.25)
    assert metrics_accept_length("garbage {{{") is None
    assert metrics_accept_length("") is None


def test_phase_means_label_their_source():
    records = [
        ProbeTiming(wall=1, draft_ms=1, verify_ms=28, extend_ms=0.3, cycle_ms=29.3),
        ProbeTiming(wall=2, draft_ms=0.8, verify_ms=30, extend_ms=0.3, cycle_ms=31.1),
    ]
    times = mean_phase_times(records)
    assert times.verify_ms == pytest.approx(29.0) and times.cycles == 2
    assert times.source == "probe"
    assert mean_phase_times([]) is None


@pytest.mark.parametrize(
    ("field", "value", "option"),
    [
        ("requests", 0, "--requests"),
        ("concurrency", -1, "--concurrency"),
        ("max_tokens", 10**9, "--max-tokens"),
        ("warmup", -2, "--warmup"),
    ],
)
def test_settings_name_the_bad_option(field, value, option):
    with pytest.raises(UsageError, match=option):
        BenchSettings(**{field: value}).validate()


def test_prompt_set_is_versioned_fixed_and_covers_every_length():
    assert "v1" in available_prompt_sets()
    prompts = load_prompt_set("v1")
    assert prompts.version == "v1" and len(prompts.digest) == 64
    assert {p.length for p in prompts.prompts} == {"short", "medium", "long"}
    first = [p.id for p in prompts.schedule(30)]
    assert first == [p.id for p in load_prompt_set("v1").schedule(30)]  # fixed seed
    assert first != [p.id for p in prompts.schedule(30, seed=1)]
    # Each round of len(prompts) requests uses every prompt once.
    n = len(prompts.prompts)
    assert sorted(first[:n]) == sorted(p.id for p in prompts.prompts)
    assert {p.length for p in prompts.schedule(3)} <= {"short", "medium", "long"}
    with pytest.raises(UsageError, match="unknown prompt set 'v9'; shipped: v1"):
        load_prompt_set("v9")

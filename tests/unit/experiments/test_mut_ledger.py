"""The ledger's baseline and speed-up, exactly: every field of the baseline found, each
coordinate that must match, the time bound, ties, the text shown and the ratio. A wrong
baseline makes every speed-up the console and `specmon bench` print silently wrong
(docs/testing.md, "Mutation testing", found these holes)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from specmon.experiments.bench.runner import BenchResult, BenchSettings, RequestResult, summarize
from specmon.experiments.ledger import Baseline, BenchContext, Ledger


def bench_result(
    tok_s: float,
    *,
    speculative: bool,
    model: str | None = "m",
    concurrency: int = 1,
    at: float | None = None,
) -> BenchResult:
    """A real summarize() over 3 requests of 100 tokens, each at ``tok_s``."""
    results = [
        RequestResult(prompt_id=f"p{i}", ok=True, latency_s=100 / tok_s, completion_tokens=100)
        for i in range(3)
    ]
    return summarize(
        settings=BenchSettings(requests=3, concurrency=concurrency, max_tokens=64),
        base_url="http://127.0.0.1:1",
        prompt_set_version="v1",
        prompt_set_digest="d" * 64,
        started_at=time.time() if at is None else at,
        duration_s=300 / tok_s,
        results=results,
        server_info={
            "model_path": model,
            "version": "0.5.9",
            "speculative_algorithm": "EAGLE3" if speculative else None,
        },
    )


def test_the_baseline_found_carries_the_benchmarks_own_fields(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        bid = ledger.record_benchmark(
            bench_result(62.5, speculative=False, concurrency=4, at=1000.0),
            BenchContext(host="root@h:22", profile="kimi-baseline"),
        )
        found = ledger.find_baseline(host="root@h:22", model="m", prompt_set="v1", concurrency=4)
    assert found == Baseline(
        benchmark_id=bid,
        tok_s=pytest.approx(62.5),
        measured_at=1000.0,
        host="root@h:22",
        model="m",
        profile="kimi-baseline",
        prompt_set="v1",
        concurrency=4,
    )
    assert type(found.benchmark_id) is int and type(found.concurrency) is int


def test_a_baseline_without_a_model_or_profile_matches_only_an_unknown_model(
    tmp_path: Path,
) -> None:
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        bid = ledger.record_benchmark(
            bench_result(40.0, speculative=False, model=None, at=5.0), BenchContext(host="h")
        )
        found = ledger.find_baseline(host="h", model=None, prompt_set="v1", concurrency=1)
        assert ledger.find_baseline(host="h", model="m", prompt_set="v1", concurrency=1) is None
    assert found is not None
    assert (found.benchmark_id, found.model, found.profile) == (bid, None, None)


def test_the_time_bound_includes_its_instant_and_a_tie_goes_to_the_later_row(
    tmp_path: Path,
) -> None:
    ctx = BenchContext(host="h")
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        first = ledger.record_benchmark(bench_result(50.0, speculative=False, at=100.0), ctx)
        second = ledger.record_benchmark(bench_result(51.0, speculative=False, at=100.0), ctx)
        ledger.record_benchmark(bench_result(52.0, speculative=False, at=100.5), ctx)
        at_bound = ledger.find_baseline(
            host="h", model="m", prompt_set="v1", concurrency=1, before=100.0
        )
        too_early = ledger.find_baseline(
            host="h", model="m", prompt_set="v1", concurrency=1, before=99.9
        )
    assert at_bound is not None and at_bound.benchmark_id == second != first
    assert too_early is None


def test_the_baseline_for_a_benchmark_shares_all_its_coordinates(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        ctx = BenchContext(host="h")
        base = ledger.record_benchmark(bench_result(60.0, speculative=False, at=10.0), ctx)
        # Newer, but each differs in one coordinate: none of them is this result's baseline.
        ledger.record_benchmark(bench_result(70.0, speculative=False, at=20.0), BenchContext("g"))
        ledger.record_benchmark(bench_result(71.0, speculative=False, model="n", at=20.0), ctx)
        ledger.record_benchmark(bench_result(72.0, speculative=False, concurrency=2, at=20.0), ctx)
        spec = ledger.record_benchmark(bench_result(90.0, speculative=True, at=30.0), ctx)
        found = ledger.baseline_for_benchmark(spec)
        missing = ledger.baseline_for_benchmark(spec + 100)
    assert found is not None and found.benchmark_id == base
    assert found.speedup(90.0) == pytest.approx(1.5)
    assert missing is None


def test_describe_and_age_say_which_baseline_and_how_old() -> None:
    baseline = Baseline(
        benchmark_id=7,
        tok_s=62.94,
        measured_at=1000.0,
        host="h",
        model="m",
        profile="kimi-baseline",
        prompt_set="v1",
        concurrency=1,
    )
    assert baseline.describe(now=1000.0 + 2 * 3600) == (
        "baseline b7 (kimi-baseline, speculation off, 62.9 tok/s, measured 2.0 h ago)"
    )
    unnamed = Baseline(7, 62.94, 1000.0, "h", "m", None, "v1", 1)
    assert unnamed.describe(now=1030.0) == (
        "baseline b7 (speculation off, 62.9 tok/s, measured 30 s ago)"
    )
    assert baseline.age_s(now=1010.0) == 10.0
    assert baseline.age_s(now=900.0) == 0.0  # a clock behind the record: never negative
    assert 0.0 < baseline.age_s() < 1e10  # now by default
    assert baseline.speedup(125.88) == pytest.approx(2.0)

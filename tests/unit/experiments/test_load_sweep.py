"""Sweeps at several loads (issue 29 item 4), the pure parts: the figures of one load and their
spreads, objectives, the SLO grammar, the ranking with ties, the tables, the ledger migration
and the plan's key."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time

import pytest
from support.paths import REPO

from specmon.experiments.bench.runner import (
    BenchSettings,
    RequestResult,
    merge_repeats,
    summarize,
)
from specmon.experiments.ledger import (
    MIGRATIONS,
    SCHEMA_VERSION,
    BenchContext,
    Ledger,
    RunRecord,
    load_point_key,
    params_key,
)
from specmon.experiments.load import (
    OBJECTIVES,
    LoadFigures,
    figures_from_benchmark_row,
    load_figures,
    meets_slos,
    parse_loads,
    parse_objective,
    parse_slo,
    parse_slos,
    quantile_interval,
    rank_at_load,
    requests_at,
)
from specmon.experiments.report import (
    best_per_load_table,
    load_sweep_table,
    prediction_by_load,
)
from specmon.experiments.sweep import GridAxis, SweepPlan, SweepPointResult
from specmon.model.errors import UsageError

# --- the figures ----------------------------------------------------------------------------


def request(latency: float, ttft: float, tokens: int = 101) -> RequestResult:
    return RequestResult(
        prompt_id="p", ok=True, latency_s=latency, completion_tokens=tokens, ttft_s=ttft
    )


def bench(requests: list[RequestResult], duration: float, concurrency: int = 2):
    return summarize(
        settings=BenchSettings(requests=len(requests), concurrency=concurrency, max_tokens=101),
        base_url="http://127.0.0.1:1",
        prompt_set_version="v1",
        prompt_set_digest="d" * 64,
        started_at=time.time(),
        duration_s=duration,
        results=requests,
        server_info={"model_path": "m", "speculative_algorithm": "EAGLE3"},
    )


def test_itl_is_the_time_per_output_token_after_the_first():
    # 101 tokens, first after 0.2 s, done after 1.2 s: 100 gaps in 1.0 s = 10 ms each.
    assert request(1.2, 0.2).itl_s == pytest.approx(0.010)
    assert RequestResult("p", ok=True, latency_s=1.0, completion_tokens=1, ttft_s=0.1).itl_s is None
    assert RequestResult("p", ok=True, latency_s=1.0, completion_tokens=9).itl_s is None  # no TTFT
    assert (
        RequestResult("p", ok=False, latency_s=1.0, completion_tokens=9, ttft_s=0.1).itl_s is None
    )


def test_load_figures_from_the_clients_timings():
    requests = [request(1.0 + 0.1 * i, 0.1 + 0.01 * i) for i in range(10)]
    figures = load_figures(bench(requests, duration=5.0, concurrency=2))
    assert figures.concurrency == 2 and figures.requests == 10 and figures.repeats == 1
    assert figures.tok_s == pytest.approx(1010 / 5.0)  # aggregate: all tokens / wall time
    per_request = sorted(101 / (1.0 + 0.1 * i) for i in range(10))
    assert figures.tok_s_per_request == pytest.approx((per_request[4] + per_request[5]) / 2)
    itls = [(0.9 + 0.09 * i) * 1000 / 100 for i in range(10)]  # (latency - ttft) / 100 gaps
    assert figures.itl_p50_ms == pytest.approx((itls[4] + itls[5]) / 2)
    assert figures.itl_p90_ms == pytest.approx(itls[8] + 0.1 * (itls[9] - itls[8]))
    assert figures.ttft_p90_ms == pytest.approx(100 + 80 + 0.1 * 10)
    low, high = figures.tok_s_spread
    assert low < figures.tok_s < high  # the request-level uncertainty of the mean rate
    assert figures.itl_p90_spread[0] <= figures.itl_p90_ms <= figures.itl_p90_spread[1]
    assert figures.tok_s_per_request_spread == (
        pytest.approx(figures.tok_s_per_request_spread[0]),
        pytest.approx(figures.tok_s_per_request_spread[1]),
    )
    assert figures.tok_s_per_request_spread[0] < figures.tok_s_per_request_spread[1]


def test_identical_requests_have_no_spread_but_repeats_widen_it():
    same = [request(1.0, 0.1) for _ in range(4)]
    one = load_figures(bench(same, duration=2.0))
    assert one.tok_s_spread == (pytest.approx(202.0), pytest.approx(202.0))
    merged = merge_repeats([bench(same, duration=2.0), bench(same, duration=2.5)])
    figures = load_figures(merged)
    assert figures.repeats == 2 and figures.requests == 8
    assert figures.repeat_tok_s == (pytest.approx(202.0), pytest.approx(404 / 2.5))
    assert figures.tok_s == pytest.approx((202.0 + 404 / 2.5) / 2)  # the mean of the repeats
    assert figures.tok_s_spread == (pytest.approx(404 / 2.5), pytest.approx(202.0))
    assert figures.to_json_dict()["tok_s_repeats"] == list(figures.repeat_tok_s)


def test_a_p90_interval_is_distribution_free_and_reaches_the_max_with_few_values():
    assert quantile_interval([5.0, 1.0, 3.0, 2.0]) == (2.0, 5.0)  # ranks 2..4 of 4
    assert quantile_interval([7.0]) == (7.0, 7.0)
    values = list(range(1, 101))
    low, high = quantile_interval(values)
    assert 80 <= low < 90 < high <= 97  # a 90% interval around the p90 of 100 values
    with pytest.raises(ValueError):
        quantile_interval([])


def test_figures_round_trip_through_the_ledger(tmp_path):
    requests = [request(1.0 + 0.05 * i, 0.1 + 0.02 * i) for i in range(6)]
    merged = merge_repeats([bench(requests[:3], 1.5), bench(requests[3:], 1.7)])
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        bid = ledger.record_benchmark(merged, BenchContext(host="h"))
        row = ledger.get_benchmark(bid)
    assert row["itl_p90_ms"] == pytest.approx(merged.itl_p90_ms)
    assert row["repeats"] == list(merged.repeat_tok_s)
    assert figures_from_benchmark_row(row) == load_figures(merged)


# --- parsing --------------------------------------------------------------------------------


def test_loads_parse_strictly():
    assert parse_loads("1,8,32") == (1, 8, 32)
    assert parse_loads(" 4 ") == (4,)
    for bad, said in (
        ("", "expected N"),
        ("1,,8", "expected N"),
        ("0", "not a whole number from 1 to 1024"),
        ("1,x", "'x' is not a whole number"),
        ("8,-1", "'-1' is not a whole number"),
        ("2048", "from 1 to 1024"),
        ("1,8,1", "1 is listed twice"),
        ("1.5", "not a whole number"),
    ):
        with pytest.raises(UsageError, match=said):
            parse_loads(bad)
    assert requests_at(5, 1) == 5 and requests_at(5, 8) == 16  # two per request slot


def test_slo_grammar():
    assert parse_slo("itl_p90<=30ms") == parse_slo(" itl_p90 <= 0.03 s ")
    slo = parse_slo("itl_p90<=30ms")
    assert (slo.metric, slo.op, slo.limit, slo.field) == ("itl_p90", "<=", 30.0, "itl_p90_ms")
    assert parse_slo("ttft_p90<2s").limit == 2000.0
    assert parse_slo("tok_s>=500").limit == 500.0
    assert parse_slo("tok_s_per_request>40tok/s").op == ">"
    assert slo.text() == "itl_p90<=30ms"
    for bad, said in (
        ("itl_p90<=30", "a latency needs its unit"),
        ("itl_p90=30ms", "expected METRIC OP VALUE"),
        ("itl_p99<=30ms", "unknown metric 'itl_p99'"),
        ("tok_s>=5ms", "tok_s is in tok/s, not ms"),
        ("itl_p90<=0ms", "more than 0"),
        ("itl_p90<=-3ms", "expected METRIC OP VALUE"),
        ("itl_p90<=30ms and more", "expected METRIC OP VALUE"),
        ("ITL_P90<=30ms", "expected METRIC OP VALUE"),
    ):
        with pytest.raises(UsageError, match=said):
            parse_slo(bad)
    with pytest.raises(UsageError, match="itl_p90 is given twice"):
        parse_slos(["itl_p90<=30ms", "itl_p90<40ms"])


def test_objectives():
    assert parse_objective("throughput").higher_is_better
    assert parse_objective("itl-p90").field == "itl_p90_ms"
    assert not parse_objective("ttft-p90").higher_is_better
    with pytest.raises(UsageError, match="throughput, itl-p90, ttft-p90"):
        parse_objective("latency")


@pytest.mark.parametrize(
    "option",
    [["--slo", "itl_p90<=30"], ["--objective", "fast"], ["--concurrency", "1,0"]],
)
def test_bad_load_options_are_one_clear_line_and_exit_2(tmp_path, option):
    done = subprocess.run(
        [sys.executable, "-m", "specmon", "bench", "local", "--url", "http://127.0.0.1:9",
         "--no-record", *option],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
        env={"PYTHONPATH": str(REPO), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and option[0] in lines[0], done.stderr


# --- ranking with ties ----------------------------------------------------------------------


def figures(
    tok_s: float,
    spread: float = 0.0,
    itl: float = 10.0,
    itl_spread: float = 0.0,
    ttft: float | None = 50.0,
    concurrency: int = 1,
) -> LoadFigures:
    return LoadFigures(
        concurrency=concurrency,
        repeats=1,
        requests=4,
        tok_s=tok_s,
        tok_s_spread=(tok_s - spread, tok_s + spread),
        tok_s_per_request=tok_s / concurrency,
        tok_s_per_request_spread=(tok_s / concurrency, tok_s / concurrency),
        ttft_p50_ms=ttft,
        ttft_p90_ms=ttft,
        ttft_p90_spread=None if ttft is None else (ttft, ttft),
        itl_p50_ms=itl,
        itl_p90_ms=itl,
        itl_p90_spread=(itl - itl_spread, itl + itl_spread),
    )


def point(steps: str, load: LoadFigures | None, *, baseline=False, status="ok"):
    return SweepPointResult(
        params={} if baseline else {"speculative-num-steps": steps},
        is_baseline=baseline,
        status=status,
        tok_s=None if load is None else load.tok_s,
        accept_len=None,
        verify_ms=None,
        load_seconds=1.0,
        concurrency=load.concurrency if load is not None else 1,
        load=load,
        error=None if status == "ok" else "boom",
        model="m",
    )


def steps_of(groups):
    return [[p.params["speculative-num-steps"] for p in group] for group in groups]


def test_overlapping_spreads_are_a_tie_opened_by_the_best():
    throughput = OBJECTIVES["throughput"]
    points = [
        point("1", figures(90, 4)),  # 86..94: opens the second group
        point("2", figures(100, 5)),  # 95..105: the best
        point("3", figures(96, 0.5)),  # 95.5..96.5: overlaps the best
        point("4", figures(80, 20)),  # 60..100: overlaps the best, but 1 comes between
        point("5", figures(50, 1)),
    ]
    assert steps_of(rank_at_load(points, throughput)) == [["2", "3"], ["1", "4"], ["5"]]
    # No overlap, no tie: each its own rank.
    apart = [point("1", figures(90, 1)), point("2", figures(100, 1))]
    assert steps_of(rank_at_load(apart, throughput)) == [["2"], ["1"]]


def test_a_latency_objective_ranks_lowest_first_and_slos_come_first():
    itl = OBJECTIVES["itl-p90"]
    points = [
        point("1", figures(100, itl=12.0, itl_spread=0.1)),
        point("2", figures(120, itl=9.0, itl_spread=0.1)),
        point("3", figures(140, itl=15.0, itl_spread=0.1)),
        point("4", figures(10, itl=8.0, itl_spread=0.1, ttft=None)),
    ]
    assert steps_of(rank_at_load(points, itl)) == [["4"], ["2"], ["1"], ["3"]]
    throughput = OBJECTIVES["throughput"]
    slo = parse_slos(["itl_p90<=12ms"])
    assert steps_of(rank_at_load(points, throughput, slo)) == [["2"], ["1"], ["4"], ["3"]]
    # A figure not measured misses its SLO; a point without the objective's figure comes last.
    assert not meets_slos(points[3].load, parse_slos(["ttft_p90<=1s"]))
    ttft = OBJECTIVES["ttft-p90"]
    assert steps_of(rank_at_load(points, ttft))[-1] == ["4"]


def sweep_points():
    return [
        point("", figures(60, 1, itl=16.0, concurrency=1), baseline=True),
        point("2", figures(70, 2, itl=14.0, itl_spread=0.2, concurrency=1)),
        point("5", figures(75, 2, itl=13.0, itl_spread=0.2, concurrency=1)),
        point("", figures(400, 5, itl=20.0, concurrency=8), baseline=True),
        point("2", figures(430, 20, itl=18.0, itl_spread=1.5, concurrency=8)),
        point("5", figures(420, 20, itl=19.0, itl_spread=1.5, concurrency=8)),
        point("9", None, status="failed"),
    ]


def test_the_best_per_load_table_shows_a_tie_as_one_row_beside_that_loads_baseline():
    throughput = OBJECTIVES["throughput"]
    text = best_per_load_table(sweep_points(), throughput)
    rows = {line.split()[0]: line for line in text.splitlines()[3:]}
    assert "speculative-num-steps=5" in rows["1"] and "steps=2" not in rows["1"]
    assert "1.25x" in rows["1"] and " 60.0 " in rows["1"]  # vs the baseline at load 1
    assert "speculative-num-steps=2 ~ speculative-num-steps=5" in rows["8"]
    assert "tie of 2" in rows["8"] and " 400.0 " in rows["8"] and "1.07x" in rows["8"]
    # For ITL p90 the best at load 1 is still 5 steps; the ratio is of latencies.
    itl = best_per_load_table(sweep_points(), OBJECTIVES["itl-p90"], parse_slos(["itl_p90<=15ms"]))
    rows = {line.split()[0]: line for line in itl.splitlines()[3:]}
    assert "0.81x ITL p90" in rows["1"]  # 13 / 16
    assert "no setting meets the SLO" in rows["8"] and "SLO itl_p90<=15ms" in itl


def test_the_load_table_ranks_each_load_with_shared_ranks_for_ties():
    text = load_sweep_table(
        sweep_points(), ["speculative-num-steps"], OBJECTIVES["throughput"], parse_slos([])
    )
    lines = text.splitlines()[2:]
    load1 = [line.split()[:3] for line in lines if line.split()[0] == "1"]
    assert load1[:3] == [["1", "-", "(baseline)"], ["1", "1", "5"], ["1", "2", "2"]]
    load8 = [line.split()[:3] for line in lines if line.split()[0] == "8"]
    assert load8[1:3] == [["8", "=1", "2"], ["8", "=1", "5"]]
    assert "failed" in text and "boom" in text


def test_a_prediction_per_load_is_confirmed_refuted_or_untested():
    advice = {
        "by_load": [
            {"concurrency": 1, "recommended_steps": 5, "steps_low": 4, "steps_high": 6},
            {"concurrency": 8, "recommended_steps": 9, "steps_low": 8, "steps_high": 10},
            {"concurrency": 32, "recommended_steps": 2, "steps_low": 1, "steps_high": 2},
        ]
    }
    points = sweep_points()
    points[5] = point("5", figures(300, 1, concurrency=8))  # 2 steps alone best at load 8
    verdicts = prediction_by_load(advice, points, "speculative-num-steps")
    assert [(v["concurrency"], v["verdict"]) for v in verdicts] == [
        (1, "confirmed"),
        (8, "untested"),  # the grid has no step count in 8..10
        (32, "untested"),  # nothing measured at 32
    ]
    advice["by_load"][1].update(recommended_steps=5, steps_low=5, steps_high=5)
    verdicts = prediction_by_load(advice, points, "speculative-num-steps")
    assert verdicts[1]["verdict"] == "refuted" and verdicts[1]["measured_best_steps"] == [2]


# --- the plan and the ledger ----------------------------------------------------------------


def test_a_single_load_plan_keeps_its_key_and_a_load_plan_measures_each_load():
    axes = (GridAxis("speculative-num-steps", ("2", "4")),)
    single = SweepPlan("h", "p", axes, False, BenchSettings(requests=5))
    assert "loads" not in single.to_dict() and "repeats" not in single.to_dict()
    loads = SweepPlan("h", "p", axes, False, BenchSettings(requests=5), loads=(1, 8), repeats=2)
    assert loads.to_dict()["loads"] == [1, 8] and loads.key != single.key
    assert loads.bench_at(8) == BenchSettings(requests=16, concurrency=8)
    assert loads.bench_at(1) == BenchSettings(requests=5, concurrency=1)


def test_a_version_5_ledger_opens_migrated_and_keeps_its_points(tmp_path):
    path = tmp_path / "v5.sqlite3"
    conn = sqlite3.connect(path)
    for statements in MIGRATIONS[:5]:
        for statement in statements:
            conn.execute(statement)
    conn.execute(
        "INSERT INTO sweeps (created_at, sweep_key, host, profile, spec_json, status)"
        " VALUES (1, 'k', 'h', 'p', '{\"grid\": []}', 'finished')"
    )
    conn.execute(
        "INSERT INTO sweep_points (sweep_id, created_at, params_key, params_json, is_baseline,"
        " status) VALUES (1, 1, '{}', '{}', 0, 'failed')"
    )
    conn.execute("PRAGMA user_version = 5")
    conn.commit()
    conn.close()
    with Ledger(path) as ledger:
        assert ledger.schema_version == SCHEMA_VERSION >= 6
        (old,) = ledger.sweep_points(1)
        assert old.concurrency is None and not old.load
        run = RunRecord(host="h", profile="p", argv=(), env={}, status="ready")
        first = ledger.record_sweep_point(
            1, {"a": "1"}, is_baseline=False, status="failed", run=run, concurrency=8
        )
        ledger.record_sweep_point(
            1,
            {"a": "1"},
            is_baseline=False,
            status="failed",
            concurrency=32,
            run_ref=ledger.point_run_ref(first),
        )
        points = ledger.sweep_points(1)
    assert [(p.params_key, p.concurrency, p.load) for p in points[1:]] == [
        (load_point_key({"a": "1"}, 8), 8, True),
        (load_point_key({"a": "1"}, 32), 32, True),
    ]
    assert points[1].run_ref == points[2].run_ref is not None
    assert load_point_key({"a": "1"}, 8) == params_key({"a": "1"}) + "@c8"


# --- the advisor at several loads -----------------------------------------------------------


def advisor_inputs(k: int = 5, cycles: int = 500):
    from specmon.experiments.advisor import AdvisorInputs

    return AdvisorInputs(
        num_steps=k,
        topk=1,
        accept_at_least=tuple(0.75**i for i in range(1, k + 1)),
        draft_ms_per_step=0.2,
        verify_ms=25.0,
        extend_ms=0.3,
        requests_per_cycle=1.0,
        cycles=cycles,
    )


def test_the_prediction_at_the_measured_load_is_the_advice_itself():
    from specmon.experiments.advisor import advise, predict_loads

    advice = advise(advisor_inputs())
    (at_one,) = predict_loads(advice, [1]).by_load
    for step, p in zip(at_one.steps, advice.predictions, strict=True):
        assert step.tok_s == pytest.approx(p.tok_s) and step.num_steps == p.num_steps
        assert step.itl_ms == pytest.approx(p.cycle_ms / p.accept_len)
        assert step.tok_s_low <= step.tok_s <= step.tok_s_high
        assert step.itl_ms_low <= step.itl_ms <= step.itl_ms_high
    assert at_one.recommended_steps == advice.recommended.num_steps
    assert at_one.steps_low <= at_one.recommended_steps <= at_one.steps_high


def test_the_best_step_count_falls_as_the_load_rises_and_the_range_says_how_sure():
    from specmon.experiments.advisor import LoadModel, advise, predict_loads

    advice = predict_loads(advise(advisor_inputs()), [1, 8, 64, 256])
    best = [p.recommended_steps for p in advice.by_load]
    assert best == sorted(best, reverse=True) and best[0] > best[-1], best
    for load in advice.by_load:
        step = load.steps[load.recommended_steps - 1]
        assert step.tok_s == pytest.approx(step.tok_s_per_request * load.concurrency)
    # More cycles measured, a ledger-fitted knee: a narrower range of the best step count.
    sure = predict_loads(advise(advisor_inputs(cycles=100_000)), [64], LoadModel(200.0, "ledger"))
    unsure = advice.by_load[2]
    assert sure.by_load[0].steps_high - sure.by_load[0].steps_low <= (
        unsure.steps_high - unsure.steps_low
    )
    # Without growth with load (an enormous knee) the best is the same at every load.
    flat = predict_loads(advise(advisor_inputs()), [1, 64], LoadModel(1e12, "ledger"))
    assert flat.by_load[0].recommended_steps == flat.by_load[1].recommended_steps


def test_advice_json_carries_per_load_predictions_only_when_asked():
    from specmon.experiments.advisor import advise, predict_loads

    advice = advise(advisor_inputs())
    assert "by_load" not in advice.to_dict()
    data = predict_loads(advice, [1, 32]).to_dict()
    assert [entry["concurrency"] for entry in data["by_load"]] == [1, 32]
    assert all(entry["prediction"] is True for entry in data["by_load"])
    assert data["load_model"] == {"knee_tokens": 200.0, "source": "default"}
    assert set(data["by_load"][0]["steps"][0]) == {
        "num_steps", "tok_s", "tok_s_low", "tok_s_high", "tok_s_per_request", "itl_ms",
        "itl_ms_low", "itl_ms_high",
    }  # fmt: skip


def test_the_knee_is_fitted_from_the_ledgers_verify_times_at_two_loads():
    from specmon.experiments.advisor_inputs import load_model_from_samples
    from specmon.experiments.ledger import VerifySample

    argv = (
        "python3", "-m", "sglang.launch_server", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1",
    )  # fmt: skip

    def sample(concurrency: int, ms: float) -> VerifySample:
        return VerifySample(argv=argv, env={}, verify_ms=ms, concurrency=concurrency)

    # verify = 20 ms x (1 + tokens / 100): 4 tokens per request at 1 and 25 requests.
    fitted = load_model_from_samples([sample(1, 20.8), sample(25, 40.0)])
    assert fitted is not None and fitted.source == "ledger"
    assert fitted.knee_tokens == pytest.approx(100.0)
    assert load_model_from_samples([sample(1, 20.8), sample(1, 21.0)]) is None  # one load
    assert load_model_from_samples([sample(1, 30.0), sample(25, 20.0)]) is None  # no growth


def test_advise_prints_the_per_load_prediction_labelled_with_its_range():
    from specmon.commands.advise import by_load_text
    from specmon.experiments.advisor import advise, predict_loads

    advice = predict_loads(advise(advisor_inputs()), [1, 64])
    text = by_load_text(advice)
    assert text.startswith("PREDICTION at each load (not a measurement)")
    assert "knee 200 tokens per forward, a default (estimated)" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines()[3:5]}
    for load in advice.by_load:
        row = rows[str(load.concurrency)]
        assert row[1] == str(load.recommended_steps)
        assert row[2] == f"{load.steps_low}-{load.steps_high}"
    assert text.endswith("`specmon sweep ... --concurrency 1,64`")

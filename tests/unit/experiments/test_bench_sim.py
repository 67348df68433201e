"""The benchmark runner and `specmon bench` against the real simulator over real HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO
from support.sim import free_port, start_sim

from specmon.experiments.bench.runner import BenchError, BenchSettings, run_benchmark

BASELINE_ARGS = ("--model-path", "moonshotai/Kimi-K2.5", "--tp", "8", "--enable-metrics")
TIME_SCALE = 0.002


@pytest.fixture
def sims(tmp_path: Path):
    """Start simulators with ``sims(**start_sim kwargs)``; every one is killed at teardown."""
    with contextlib.ExitStack() as stack:
        count = iter(range(100))
        yield lambda **kw: stack.enter_context(start_sim(tmp_path / f"sim{next(count)}", **kw))


def specmon(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPECMON_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "specmon", "--config", str(REPO / "specmon.toml"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )


async def test_runner_measures_the_simulator_streaming_and_concurrent(sims):
    sim = sims(time_scale=TIME_SCALE, args=["--enable-metrics"])
    sim.wait_ready()
    seen = []
    settings = BenchSettings(requests=4, concurrency=2, max_tokens=32, warmup=1)
    result = await run_benchmark(f"http://127.0.0.1:{sim.port}", settings, on_progress=seen.append)
    assert [(p.phase, p.done) for p in seen] == [
        ("warmup", 1),
        ("measure", 1),
        ("measure", 2),
        ("measure", 3),
        ("measure", 4),
    ]
    assert len(result.requests) == 4 and all(r.ok for r in result.requests)
    assert all(r.completion_tokens == 32 for r in result.requests)  # ignore_eos: exact length
    # The simulator decodes at its modelled real speed (~60-90 tok/s per request).
    assert 30 < result.tok_s_median < 150
    assert result.tok_s_p10 <= result.tok_s_median <= result.tok_s_p90
    assert result.tok_s_overall > result.tok_s_median * 1.2  # two streams at once
    assert result.tok_s_steady is None  # two waves: never all four streaming at once
    assert 0 < result.ttft_median_ms < 1000
    assert 1.0 < result.accept_len <= 4.0  # steps 3: at most 4 tokens per verify
    assert result.metrics_accept_len is not None
    assert result.speculative is True and result.server_version
    assert result.server_info["speculative_num_steps"] == 3


async def test_non_streaming_requests_measure_too(sims):
    sim = sims(time_scale=TIME_SCALE, base_args=BASELINE_ARGS)
    sim.wait_ready()
    settings = BenchSettings(requests=2, max_tokens=16, warmup=0, stream=False)
    result = await run_benchmark(f"http://127.0.0.1:{sim.port}", settings)
    assert all(r.ttft_s is None and r.completion_tokens == 16 for r in result.requests)
    assert result.ttft_median_ms is None and result.accept_len is None
    assert result.tok_s_steady is None  # no chunks to time
    assert result.speculative is False


async def test_a_server_that_is_gone_is_a_clear_benchmark_error(tmp_path):
    settings = BenchSettings(requests=1, max_tokens=8, warmup=1, request_timeout_s=5)
    with pytest.raises(BenchError, match=r"warm-up failed .*ConnectError"):
        await run_benchmark(f"http://127.0.0.1:{free_port()}", settings)


def test_bench_cli_records_and_compares_only_with_a_measured_baseline(sims, tmp_path):
    spec_sim = sims(time_scale=TIME_SCALE, args=["--enable-metrics"])
    base_sim = sims(time_scale=TIME_SCALE, base_args=BASELINE_ARGS)
    spec_sim.wait_ready()
    base_sim.wait_ready()
    data = tmp_path / "data"
    common = ["--requests", "2", "--max-tokens", "24", "--warmup", "1"]

    # No baseline yet: the speculative result is recorded but no speed-up is claimed.
    first = specmon("bench", "local", "--url", spec_sim.url(""), *common, data_dir=data)
    assert first.returncode == 0, first.stderr
    assert "no measured baseline" in first.stdout
    assert "speed-up" not in first.stdout.replace("speed-ups are not", "")
    assert "measure  [" in first.stderr or "measure [" in first.stderr  # the progress bar

    base = specmon(
        "bench",
        "local",
        "--url",
        base_sim.url(""),
        "--profile",
        "kimi-baseline",
        *common,
        data_dir=data,
    )
    assert base.returncode == 0, base.stderr
    assert "this is a measured baseline (speculation off)" in base.stdout

    again = specmon("bench", "local", "--url", spec_sim.url(""), "--json", *common, data_dir=data)
    assert again.returncode == 0, again.stderr
    payload = json.loads(again.stdout)
    assert payload["baseline"]["id"] == 2 and payload["id"] == 3
    assert payload["speedup_vs_baseline"] == pytest.approx(
        payload["tok_s"] / payload["baseline"]["tok_s"]
    )
    # The simulator's model: EAGLE-3 at 3 steps beats its no-speculation baseline.
    assert payload["speedup_vs_baseline"] > 1.0

    shown = specmon("ledger", "show", "b3", data_dir=data)
    assert "speed-up" in shown.stdout and "vs baseline b2 (kimi-baseline" in shown.stdout
    listed = specmon("ledger", "list", data_dir=data)
    assert "off (baseline)" in listed.stdout and listed.stdout.count("local") == 3
    exported = specmon("ledger", "export", "--csv", data_dir=data)
    lines = exported.stdout.splitlines()
    assert lines[0].startswith("id,created_at,host,profile") and len(lines) == 4

    # A profile merely *named* baseline is refused as one when its server speculates.
    named = specmon(
        "bench", "local", "--url", spec_sim.url(""), "--profile", "kimi-baseline", *common,
        data_dir=data,
    )  # fmt: skip
    assert "is named like a baseline, but its server reported speculation on" in named.stdout
    latest = specmon("ledger", "show", "b2", "--json", data_dir=data)
    assert json.loads(latest.stdout)["speculative"] == 0  # b2 stays the baseline


def test_bench_at_several_loads_measures_and_records_each_against_its_own_baseline(sims, tmp_path):
    """`bench --concurrency 1,3`: one JSON object per load with the client's figures and
    spreads, each recorded, each compared with the baseline measured at that same load."""
    spec_sim = sims(time_scale=TIME_SCALE, args=["--enable-metrics"])
    base_sim = sims(time_scale=TIME_SCALE, base_args=BASELINE_ARGS)
    spec_sim.wait_ready()
    base_sim.wait_ready()
    data = tmp_path / "data"
    common = ["--requests", "2", "--max-tokens", "24", "--warmup", "0", "--json"]
    loads = ["--concurrency", "1,3"]
    base = specmon("bench", "local", "--url", base_sim.url(""), *loads, *common, data_dir=data)
    assert base.returncode == 0, base.stderr
    baseline = [json.loads(line) for line in base.stdout.splitlines()]
    spec = specmon(
        "bench", "local", "--url", spec_sim.url(""), *loads, "--repeats", "2", *common,
        data_dir=data,
    )  # fmt: skip
    assert spec.returncode == 0, spec.stderr
    points = [json.loads(line) for line in spec.stdout.splitlines()]
    assert [p["concurrency"] for p in points] == [1, 3]
    assert [p["requests"] for p in points] == [4, 12]  # 2 repeats of max(2, 2 x load)
    for point, base_point in zip(points, baseline, strict=True):
        assert point["repeats"] == 2 and len(point["tok_s_repeats"]) == 2
        assert point["tok_s_spread"][0] <= min(point["tok_s_repeats"])
        assert max(point["tok_s_repeats"]) <= point["tok_s_spread"][1]
        assert 0 < point["itl_p90_spread"][0] <= point["itl_p90_ms"] <= point["itl_p90_spread"][1]
        assert point["baseline"]["id"] == base_point["id"]  # the same load's baseline
        assert point["speedup_vs_baseline"] == pytest.approx(point["tok_s"] / base_point["tok_s"])
    assert points[1]["tok_s"] > 1.5 * points[1]["tok_s_per_request"]
    assert "ITL p90 ms" in spec.stderr  # the per-load table (stderr with --json)


def test_cli_rejects_bad_input_in_one_line(tmp_path):
    for args, message in [
        (["bench", "local", "--requests", "0"], "--requests must be an integer from 1"),
        (["bench", "local", "--url", "ftp://x"], "expected http://HOST:PORT"),
        (["bench", "local", "--prompt-set", "v7"], "unknown prompt set 'v7'"),
        (["ledger", "show", "x9"], "bad id 'x9'"),
        (["ledger", "plot", "--width", "5"], "--width must be 20..400"),
        (["sweep", "local", "--profile", "demo", "--grid", "steps"], "expected NAME=VALUE"),
        (["sweep", "local", "--profile", "nope", "--grid", "a=1"], "unknown profile 'nope'"),
        (
            ["sweep", "local", "--profile", "demo", "--grid", "NCCL_PROTO=LL,Bad"],
            "[NCCL_PROTO=Bad] NCCL_PROTO: 'Bad' is not a protocol",
        ),
        (["sweep", "local", "--profile", "demo"], "give at least one --grid"),
    ]:
        done = specmon(*args, data_dir=tmp_path)
        assert done.returncode == 2, done.stderr
        assert message in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1

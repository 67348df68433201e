"""The collective benchmark's log reading, settings check, plan, table and ledger rows (no torch).

NCCL lines are written in the format of NCCL's INFO() macro (``host:pid:tid [dev] NCCL INFO``)
with its texts: "NCCL_PROTO set by environment to LL" (ENV subsystem) and the TUNING choice
line in both its forms ("AllReduce: N Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}" since
2.19, "N Bytes -> Algo 1 proto 0 time 9.1" before).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from support.paths import REPO

from specmon.experiments.collective import CollectiveResult, check_settings, read_log
from specmon.experiments.collective_sweep import (
    CollectivePlan,
    CollectivePointResult,
    plan_collective_points,
)
from specmon.experiments.ledger import SCHEMA_VERSION, Ledger, RunRecord
from specmon.experiments.report import collective_table
from specmon.experiments.sweep import parse_grid
from specmon.launch.config import load_config
from specmon.model.errors import UsageError
from specmon.nccl_bench import RANK_PREFIX, RESULT_PREFIX, parse_config, percentile


def rank_line(rank: int, env: dict[str, str], *, world: int = 2, backend: str = "nccl") -> str:
    record = {"rank": rank, "world_size": world, "backend": backend, "pid": 100 + rank, "env": env}
    return RANK_PREFIX + json.dumps(record)


def result_line(batch: int, p50: float, *, backend: str = "nccl") -> str:
    record = {
        "batch": batch,
        "hidden": 7168,
        "bytes": batch * 7168 * 2,
        "calls": 2000,
        "p50_us": p50,
        "p90_us": p50 * 1.1,
        "p99_us": p50 * 1.5,
        "mean_us": p50 * 1.05,
        "world_size": 2,
        "backend": backend,
        "timer": "cuda-event",
    }
    return RESULT_PREFIX + json.dumps(record)


def nccl(pid: int, text: str) -> str:
    return f"gpu-box:{pid}:{pid + 7} [{pid - 100}] NCCL INFO {text}"


DONE = 'specmon-collective-done {"sizes": 2}'


def good_nccl_log(proto: str = "LL", algo: str = "Ring") -> list[str]:
    env = {"NCCL_PROTO": proto, "NCCL_ALGO": algo, "NCCL_DEBUG": "INFO"}
    return [
        rank_line(0, env),
        rank_line(1, env),
        nccl(100, "NCCL version 2.27.5+cuda12.9"),
        nccl(100, f"NCCL_PROTO set by environment to {proto}"),
        nccl(101, f"NCCL_PROTO set by environment to {proto}"),
        nccl(100, f"NCCL_ALGO set by environment to {algo}"),
        nccl(101, f"NCCL_ALGO set by environment to {algo}"),
        nccl(
            100,
            f"AllReduce: 14336 Bytes -> Algo {algo.upper()} proto {proto} channel{{Lo..Hi}}={{0..1}}",
        ),
        result_line(1, 20.0),
        result_line(8, 25.0),
        "some unrelated warning line",
        DONE,
    ]


def test_reads_results_ranks_and_nccl_lines():
    log = read_log(good_nccl_log())
    assert log.world_size == 2 and log.backend == "nccl" and log.done
    assert [r.batch for r in log.results] == [1, 8]
    assert log.results[0] == CollectiveResult(
        1, 7168, 14336, 2000, 20.0, 22.0, 30.0, 21.0, 2, "nccl", "cuda-event"
    )
    assert log.nccl_env["NCCL_PROTO"] == {100: "LL", 101: "LL"}
    assert log.nccl_choices == {("RING", "LL"): 1}


def test_setting_confirmed_by_ranks_and_nccl():
    check = check_settings(read_log(good_nccl_log()), {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"})
    assert check.reached, check.problems
    assert "NCCL: NCCL_PROTO set by environment to LL (2 procs)" in check.evidence
    assert any("per-call choice" in e for e in check.evidence)


def test_old_numeric_tuning_line_is_read():
    lines = good_nccl_log()
    lines[7] = nccl(100, "14336 Bytes -> Algo 1 proto 0 time 9.100000")  # RING, LL
    log = read_log(lines)
    assert log.nccl_choices == {("RING", "LL"): 1}
    assert check_settings(log, {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"}).reached


def test_a_rank_that_saw_another_value_fails_the_check():
    lines = good_nccl_log()
    lines[1] = rank_line(1, {"NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring"})
    check = check_settings(read_log(lines), {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"})
    assert not check.reached
    assert any("NCCL_PROTO: ranks [1] saw {1: 'Simple'}" in p for p in check.problems)


def test_nccl_choosing_another_protocol_fails_the_check():
    lines = good_nccl_log()
    lines[7] = nccl(100, "AllReduce: 14336 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..1}")
    check = check_settings(read_log(lines), {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"})
    assert any("NCCL chose [('RING', 'SIMPLE')]" in p for p in check.problems)


def test_nccl_backend_without_nccl_lines_is_unconfirmed():
    lines = [line for line in good_nccl_log() if "NCCL INFO" not in line]
    check = check_settings(read_log(lines), {"NCCL_PROTO": "LL"})
    assert check.problems == ("no NCCL INFO lines in the log: launch with NCCL_DEBUG=INFO",)


def test_unset_variable_that_nccl_reports_set_fails():
    lines = good_nccl_log()
    lines.insert(3, nccl(100, "NCCL_P2P_LEVEL set by environment to NVL"))
    check = check_settings(read_log(lines), {"NCCL_PROTO": "LL", "NCCL_P2P_LEVEL": None})
    assert any("NCCL_P2P_LEVEL: NCCL reports it set to ['NVL']" in p for p in check.problems)


def test_gloo_is_checked_by_the_ranks_own_reports():
    env = {"NCCL_PROTO": "LL"}
    lines = [
        rank_line(0, env, backend="gloo"),
        rank_line(1, env, backend="gloo"),
        result_line(1, 300.0, backend="gloo"),
        DONE,
    ]
    check = check_settings(read_log(lines), {"NCCL_PROTO": "LL", "NCCL_P2P_LEVEL": None})
    assert check.reached
    assert check.evidence == ("NCCL_PROTO=LL: 2 ranks", "NCCL_P2P_LEVEL=(unset): 2 ranks")
    missing = check_settings(read_log(lines[1:]), {"NCCL_PROTO": "LL"})
    assert "ranks [0] did not report their environment" in missing.problems
    unfinished = check_settings(read_log(lines[:-1]), {"NCCL_PROTO": "LL"})
    assert "the benchmark did not finish (no completion line)" in unfinished.problems


def test_garbage_lines_never_raise():
    log = read_log(
        [RESULT_PREFIX + "{not json", RANK_PREFIX + "[1]", RESULT_PREFIX + "{}", "\x1b[31m"]
    )
    assert log.results == [] and log.ranks == {}


def test_percentile_matches_statistics_inclusive():
    values = sorted([5.0, 1.0, 9.0, 3.0, 7.0, 2.0, 8.0])
    quartiles = statistics.quantiles(values, n=4, method="inclusive")
    assert percentile(values, 25) == pytest.approx(quartiles[0])
    assert percentile(values, 50) == pytest.approx(quartiles[1])
    assert percentile(values, 100) == 9.0 and percentile(values, 0) == 1.0


def test_bench_settings_from_flags_and_env():
    config = parse_config(
        ["--model-path", "ar", "--tp", "8"],
        {"SPECMON_NCCL_BENCH_DEVICE": "cuda", "SPECMON_NCCL_BENCH_BATCHES": "1, 64"},
    )
    assert (config.world_size, config.backend, config.batches, config.hidden) == (
        8,
        "nccl",
        (1, 64),
        7168,
    )
    assert parse_config(["--tp", "2"], {}).backend == "gloo"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"SPECMON_NCCL_BENCH_BACKEND": "nccl"},
            "the nccl backend needs SPECMON_NCCL_BENCH_DEVICE=cuda",
        ),
        ({"SPECMON_NCCL_BENCH_ITERS": "many"}, "iters='many' is not a whole number"),
        ({"SPECMON_NCCL_BENCH_BATCHES": "1,0"}, "batch must be at least 1"),
    ],
)
def test_bad_bench_settings_are_one_line(env, message):
    with pytest.raises(SystemExit, match=message):
        parse_config(["--tp", "2"], env)


def test_bad_setting_exits_2_with_one_line_and_no_torch_import():
    """The launcher refuses before any rank starts: one stderr line, exit code 1 or 2."""
    done = subprocess.run(
        [sys.executable, "-m", "specmon.nccl_bench", "--tp", "2"],
        env={
            "SPECMON_NCCL_BENCH_BACKEND": "nccl",
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(REPO),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "nccl_bench: the nccl backend needs SPECMON_NCCL_BENCH_DEVICE=cuda"
    ]


PROFILE = """
[profiles.allreduce]
command = ["{python}", "-m", "specmon.nccl_bench"]
model_path = "allreduce"
tp = 8
gpu_agent = "none"

[profiles.allreduce.env]
NCCL_DEBUG = "INFO"
"""


def test_plan_varies_env_only_and_unset_removes(tmp_path):
    path = tmp_path / "specmon.toml"
    path.write_text(PROFILE)
    config = load_config(path)
    plan = CollectivePlan(
        "local", "allreduce", parse_grid(["NCCL_PROTO=LL,Simple", "NCCL_P2P_LEVEL=unset,SYS"])
    )
    points = plan_collective_points(config, plan, python="/usr/bin/python3")
    assert len(points) == 4
    assert points[0].spec.argv == (
        "/usr/bin/python3",
        "-m",
        "specmon.nccl_bench",
        "--model-path",
        "allreduce",
        "--tp",
        "8",
    )
    assert "NCCL_P2P_LEVEL" not in points[0].spec.env_dict()
    assert points[1].spec.env_dict()["NCCL_P2P_LEVEL"] == "SYS"
    assert points[1].spec.env_dict()["NCCL_DEBUG"] == "INFO"
    with pytest.raises(UsageError, match="'ll' is not a protocol"):
        plan_collective_points(
            config, CollectivePlan("local", "allreduce", parse_grid(["NCCL_PROTO=ll"]))
        )
    with pytest.raises(UsageError, match="varies environment variables only; tp is a flag"):
        plan_collective_points(config, CollectivePlan("local", "allreduce", parse_grid(["tp=2"])))
    assert plan.key != CollectivePlan("local", "allreduce", parse_grid(["NCCL_PROTO=LL"])).key


def test_ledger_records_collective_points_atomically(tmp_path):
    results = read_log(good_nccl_log()).results
    run = RunRecord(host="local", profile="allreduce", argv=("python3",), env={}, status="exited")
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        assert ledger.schema_version == SCHEMA_VERSION >= 4
        sweep = ledger.start_sweep("k", "local", "allreduce", {"kind": "collective"})
        point = ledger.record_collective_point(
            sweep, {"NCCL_PROTO": "LL"}, status="ok", run=run, results=results, evidence=("e1",)
        )
        rows = ledger.collective_results(point)
        assert [(r["batch"], r["p50_us"], r["evidence"]) for r in rows] == [
            (1, 20.0, ["e1"]),
            (8, 25.0, ["e1"]),
        ]
        assert [p.params for p in ledger.sweep_points(sweep)] == [{"NCCL_PROTO": "LL"}]
        assert len(ledger.table("collective_results")) == 2


def test_table_ranks_by_small_batch_latency_failures_last():
    results = read_log(good_nccl_log()).results
    points = [
        CollectivePointResult({"NCCL_PROTO": "Simple"}, "ok", (results[1], results[0])[::-1]),
        CollectivePointResult({"NCCL_PROTO": "LL128"}, "failed", error="benchmark failed"),
        CollectivePointResult(
            {"NCCL_PROTO": "LL"},
            "ok",
            tuple(replace(r, p50_us=r.p50_us / 2) for r in results),
        ),
    ]
    table = collective_table(points, ["NCCL_PROTO"]).splitlines()
    assert table[0].split() == [
        "#",
        "NCCL_PROTO",
        "status",
        "p50",
        "b1",
        "p50",
        "b8",
        "p99",
        "b1",
        "note",
    ]
    assert table[2].split()[:5] == ["1", "LL", "ok", "10.0", "12.5"]
    assert table[3].split()[:5] == ["2", "Simple", "ok", "20.0", "25.0"]
    assert table[4].split()[:3] == ["-", "LL128", "failed"]


def test_specmon_never_imports_torch_to_launch_or_read_the_benchmark():
    """The benchmark's launcher and everything that reads it stay torch-free (the ranks alone
    import it), so specmon runs on a host whose interpreter has no torch."""
    code = (
        "import sys\n"
        "import specmon.nccl_bench, specmon.experiments.collective, specmon.experiments.collective_sweep\n"
        "import specmon.commands.nccl_sweep\n"
        "specmon.nccl_bench.parse_config(['--tp', '2'], {})\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_ledger_show_prints_a_collective_sweep_as_latencies(tmp_path, capsys):
    from specmon.cli import main

    results = read_log(good_nccl_log()).results
    run = RunRecord(host="local", profile="allreduce", argv=("python3",), env={}, status="exited")
    path = tmp_path / "l.sqlite3"
    plan = CollectivePlan("local", "allreduce", parse_grid(["NCCL_PROTO=LL"]))
    with Ledger(path) as ledger:
        sweep = ledger.start_sweep(plan.key, "local", "allreduce", plan.to_dict())
        ledger.record_collective_point(
            sweep, {"NCCL_PROTO": "LL"}, status="ok", run=run, results=results
        )
    assert main(["ledger", "show", f"s{sweep}", "--ledger", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"nccl-sweep s{sweep}  local  profile allreduce")
    assert lines[2].split() == [
        "#",
        "NCCL_PROTO",
        "status",
        "p50",
        "b1",
        "p50",
        "b8",
        "p99",
        "b1",
        "note",
    ]
    assert lines[4].split() == ["1", "LL", "ok", "20.0", "25.0", "30.0"]


def test_a_claimed_world_of_a_trillion_ranks_costs_nothing():
    """The world size is the log's word (issue 24, item 3: no number read from a host sizes
    an allocation): the missing ranks are named up to 16 and counted past them."""
    env = {"NCCL_PROTO": "LL"}
    line = rank_line(0, env, world=10**12, backend="gloo")
    started = time.monotonic()
    check = check_settings(read_log([line, DONE]), {"NCCL_PROTO": "LL"})
    assert time.monotonic() - started < 1.0
    assert (
        f"ranks {list(range(1, 17))} and {10**12 - 17} more did not report their environment"
        in check.problems
    )

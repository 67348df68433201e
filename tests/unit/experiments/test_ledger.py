"""The ledger: schema and migrations, baseline rules, resumable sweeps, and crash safety."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from support.paths import REPO

from specmon.experiments.bench.runner import BenchSettings, RequestResult, summarize
from specmon.experiments.ledger import (
    MIGRATIONS,
    SCHEMA_VERSION,
    BenchContext,
    Ledger,
    LedgerError,
    RunRecord,
    default_ledger_path,
)
from specmon.model.errors import SpecmonError

ROUNDS = 8  # kills at random moments; a non-atomic record is caught with p > 0.99


def bench_result(tok_s: float, *, speculative: bool | None, model="m", concurrency=1, at=None):
    """A real summarize() over 3 requests of 100 tokens, each at ``tok_s``."""
    results = [
        RequestResult(prompt_id=f"p{i}", ok=True, latency_s=100 / tok_s, completion_tokens=100)
        for i in range(3)
    ]
    info = {"model_path": model, "version": "0.5.9"}
    if speculative is not None:
        info["speculative_algorithm"] = "EAGLE3" if speculative else None
    return summarize(
        settings=BenchSettings(requests=3, concurrency=concurrency, max_tokens=64),
        base_url="http://127.0.0.1:1",
        prompt_set_version="v1",
        prompt_set_digest="d" * 64,
        started_at=time.time() if at is None else at,
        duration_s=300 / tok_s,
        results=results,
        server_info=info,
    )


def test_default_path_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECMON_DATA_DIR", str(tmp_path / "data"))
    assert default_ledger_path() == tmp_path / "data" / "ledger.sqlite3"


def test_fresh_ledger_is_wal_at_current_schema(tmp_path):
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        assert ledger.schema_version == SCHEMA_VERSION
        assert ledger.integrity_check() == "ok"
    conn = sqlite3.connect(tmp_path / "l.sqlite3")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_old_schema_is_migrated_and_keeps_rows(tmp_path):
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    for statement in MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute(
        "INSERT INTO runs (created_at, host, profile, argv_json, env_json, specmon_version,"
        " status) VALUES (1, 'h', 'p', '[]', '{}', '0.0.1', 'ready')"
    )
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with Ledger(path) as ledger:
        assert ledger.schema_version == SCHEMA_VERSION
        assert [r["host"] for r in ledger.list_runs()] == ["h"]
    indexes = {
        row[0]
        for row in sqlite3.connect(path).execute(
            "SELECT name FROM sqlite_master WHERE type='index'"
        )
    }
    assert "benchmarks_baseline" in indexes


def test_newer_schema_and_garbage_files_are_refused_clearly(tmp_path):
    newer = tmp_path / "newer.sqlite3"
    conn = sqlite3.connect(newer)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError, match="newer than this specmon"):
        Ledger(newer)
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(SpecmonError, match="not a usable SQLite database"):
        Ledger(garbage)


def test_benchmark_round_trip_keeps_context(tmp_path):
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        result = bench_result(70.0, speculative=True)
        context = BenchContext(
            host="root@h:22", profile="p", argv=("python3", "-m", "x"), env={"NCCL_PROTO": "LL"}
        )
        bid = ledger.record_benchmark(result, context)
        row = ledger.get_benchmark(bid)
    assert row["host"] == "root@h:22" and row["profile"] == "p"
    assert row["argv"] == ["python3", "-m", "x"] and row["env"] == {"NCCL_PROTO": "LL"}
    assert row["tok_s"] == pytest.approx(70.0)
    assert row["speculative"] == 1 and row["server_version"] == "0.5.9"
    assert row["prompt_set"] == "v1" and len(row["request_results"]) == 3 and row["requests"] == 3
    assert row["server_args"]["model_path"] == "m"


def test_only_measured_speculation_off_benchmarks_are_baselines(tmp_path):
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        ctx = BenchContext(host="h")
        ledger.record_benchmark(bench_result(90.0, speculative=None), ctx)  # unknown: no
        ledger.record_benchmark(bench_result(80.0, speculative=True), ctx)  # speculative: no
        old = ledger.record_benchmark(bench_result(61.0, speculative=False, at=100.0), ctx)
        other_c = ledger.record_benchmark(bench_result(50.0, speculative=False, concurrency=4), ctx)
        new = ledger.record_benchmark(bench_result(62.9, speculative=False), ctx)
        ledger.record_benchmark(bench_result(55.0, speculative=False, model="other"), ctx)
        found = ledger.find_baseline(host="h", model="m", prompt_set="v1", concurrency=1)
        assert found is not None and found.benchmark_id == new
        assert found.tok_s == pytest.approx(62.9)
        before = ledger.find_baseline(
            host="h", model="m", prompt_set="v1", concurrency=1, before=200
        )
        assert before is not None and before.benchmark_id == old
        c4 = ledger.find_baseline(host="h", model="m", prompt_set="v1", concurrency=4)
        assert c4 is not None and c4.benchmark_id == other_c
        assert ledger.find_baseline(host="other", model="m", prompt_set="v1", concurrency=1) is None
        assert ledger.find_baseline(host="h", model="m", prompt_set="v2", concurrency=1) is None
        assert "62.9 tok/s" in found.describe() and "measured" in found.describe()


def test_sweep_points_are_unique_and_sweeps_resumable(tmp_path):
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        sid = ledger.start_sweep("key1", "h", "p", {"grid": []})
        run = RunRecord(host="h", profile="p", argv=("a",), env={}, status="failed")
        ledger.record_sweep_point(
            sid, {"a": "1"}, is_baseline=False, status="failed", run=run, error="oom"
        )
        with pytest.raises(LedgerError, match="already recorded"):
            ledger.record_sweep_point(sid, {"a": "1"}, is_baseline=False, status="ok")
        assert [p.params for p in ledger.sweep_points(sid)] == [{"a": "1"}]
        assert ledger.resumable_sweep("key1").id == sid
        ledger.set_sweep_status(sid, "finished")
        assert ledger.resumable_sweep("key1") is None
        assert ledger.get_sweep(sid).finished_at is not None


WRITER = r"""
import sys, time
sys.path.insert(0, sys.argv[2])
sys.path.insert(0, sys.argv[2] + "/tests")  # support.X, as pytest's pythonpath has it
from tests.unit.experiments.test_ledger import bench_result
from specmon.experiments.ledger import Ledger, BenchContext, RunRecord
ledger = Ledger(sys.argv[1])
sweep = ledger.start_sweep("k", "h", "p", {})
big = {f"NCCL_X{i}": "v" * 2000 for i in range(200)}  # ~400 kB per run row: slow writes
n = 0
while True:
    result = bench_result(60.0 + n % 7, speculative=bool(n % 2))
    run = RunRecord(host="h", profile="p", argv=("python3",), env=big, status="ready")
    ledger.record_sweep_point(sweep, {"n": str(n)}, is_baseline=False, status="ok", run=run,
                              benchmark=(result, BenchContext(host="h", env=big)))
    n += 1
    print(n, flush=True)
"""


def test_sigkill_mid_write_loses_nothing_committed_and_leaves_no_partial_rows(tmp_path):
    path = tmp_path / "crash.sqlite3"
    committed_before_kill = []
    for round_ in range(ROUNDS):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(REPO)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        try:
            # Wait until it has committed a few points, then kill it at a varying moment.
            last = 0
            deadline = time.monotonic() + 30
            while last < 1 + round_ % 3 and time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line:
                    break
                last = int(line)
            time.sleep(random.uniform(0, 0.012))  # one write takes ~5-20 ms
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        assert last >= 1, "the writer never committed"
        committed_before_kill.append(last)
        with Ledger(path) as ledger:
            assert ledger.integrity_check() == "ok"
            points = ledger.table("sweep_points")
            runs = ledger.table("runs")
            benchmarks = ledger.table("benchmarks")
            # Every point has its run and benchmark, and nothing exists without its point.
            assert {p["run_ref"] for p in points} == {r["id"] for r in runs}
            assert {p["benchmark_ref"] for p in points} == {b["id"] for b in benchmarks}
            for bench in benchmarks:
                assert len(bench["request_results"]) == 3
            for run in runs:
                assert len(run["env"]) == 200
            # Every point the writer reported committed survived the kill.
            per_sweep: dict[int, int] = {}
            for point in points:
                per_sweep[point["sweep_id"]] = per_sweep.get(point["sweep_id"], 0) + 1
            counts = [
                per_sweep.get(sid, 0) for sid in sorted(s["id"] for s in ledger.table("sweeps"))
            ]
            assert len(counts) == round_ + 1
            for count, reported in zip(counts, committed_before_kill, strict=True):
                assert count >= reported


def test_version_7_keeps_fingerprints_and_sampling_and_finds_a_runs_sampling(tmp_path):
    """A v6 ledger (from the last release) is brought to v7 with its rows; a run and its
    benchmark then keep the draft/target fingerprint, the sampling and the host's run id,
    and ``sampling_of_run`` finds a run's sampling through either link (docs/run-diff.md)."""
    path = tmp_path / "v6.sqlite3"
    conn = sqlite3.connect(path)
    for migration in MIGRATIONS[:6]:
        for statement in migration:
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 6")
    conn.commit()
    conn.close()
    fingerprint = {"v": 1, "aux_layer_ids": [2, 30, 58], "draft": {"path": "/m/d"}}
    sampling = {"temperature": 0.0, "max_new_tokens": 64, "ignore_eos": True}
    with Ledger(path) as ledger:
        assert ledger.schema_version == SCHEMA_VERSION == 7
        run_ref = ledger.record_run(
            RunRecord(
                "h", "p", ("python3",), {}, "ready", run_id="r-sweep", fingerprint=fingerprint
            )
        )
        from dataclasses import replace

        result = replace(bench_result(60.0, speculative=True), sampling=sampling)
        ledger.record_benchmark(result, BenchContext("h", fingerprint=fingerprint), run_ref=run_ref)
        other = replace(result, sampling={**sampling, "temperature": 0.7})
        ledger.record_benchmark(other, BenchContext("h", run_id="r-bench"))
        assert ledger.sampling_of_run("r-sweep") == sampling
        assert ledger.sampling_of_run("r-bench")["temperature"] == 0.7
        assert ledger.sampling_of_run("nobody") is None
        (run,) = ledger.list_runs()
        assert run["fingerprint"] == fingerprint
        first = ledger.list_benchmarks()[-1]
        assert first["fingerprint"] == fingerprint and first["sampling"] == sampling


@pytest.mark.parametrize("backend", ["sglang", "vllm"])
def test_a_benchmarks_sampling_is_what_its_requests_ask_for(backend):
    from specmon.backends import get_backend
    from specmon.experiments.bench.runner import sampling_params

    body = get_backend(backend).generate_body("hello", 64, True)
    sampling = sampling_params(body)
    assert sampling["temperature"] == 0.0 and sampling["ignore_eos"] is True
    assert 64 in sampling.values()  # max_new_tokens (SGLang) or max_tokens (vLLM)
    assert not {"text", "prompt", "stream", "stream_options"} & set(sampling)

"""Where the advisor's inputs come from: the store (settings in force, probe means, acceptance
by position), the ledger (verify time per draft-token count; predictions kept for later), and
the refusal of `specmon advise` below the minimum."""

from __future__ import annotations

import dataclasses
import sqlite3
import time

import pytest
from test_ledger import bench_result

from specmon.experiments.advisor import AdvisorError, advise
from specmon.experiments.advisor_inputs import (
    advise_from_store,
    draft_settings,
    enough_data,
    gather_inputs,
    verify_by_draft_tokens,
)
from specmon.experiments.bench.runner import PhaseTimes
from specmon.experiments.ledger import MIGRATIONS, SCHEMA_VERSION, BenchContext, Ledger
from specmon.model.events import ProbeTiming, RunInfo, ServerInfo, SpecParams
from specmon.state.store import StateStore

ARGV = (
    "python3", "-m", "sglang.launch_server", "--model-path", "/m",
    "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "5",
    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "6",
)  # fmt: skip


def live_store(cycles: int = 60, batch: int = 2, argv: tuple[str, ...] = ARGV) -> StateStore:
    store = StateStore()
    store.apply(RunInfo(run_id="r1", profile="p", argv=argv), at=0.0)
    for i in range(cycles):
        store.apply(
            ProbeTiming(
                wall=float(i),
                draft_ms=1.0,  # 5 steps: 0.2 ms per step
                verify_ms=28.0,
                extend_ms=0.5,
                cycle_ms=29.5,
                batch_size=batch,
                draft_tokens=batch * 6,
                accepted_tokens=None,
                accepted_per_request=tuple((i + j) % 6 for j in range(batch)),
            ),
            at=float(i),
        )
    return store


def test_inputs_from_the_store():
    store = live_store()
    inputs = gather_inputs(store)
    assert (inputs.num_steps, inputs.topk, inputs.current_tokens) == (5, 1, 6)
    assert inputs.draft_ms_per_step == pytest.approx(0.2)
    assert inputs.verify_ms == 28.0 and inputs.extend_ms == 0.5
    assert inputs.requests_per_cycle == 2.0 and inputs.cycles == 60
    # accepted counts 0..5 equally often: P(>= i) = (6 - i) / 6
    assert inputs.accept_at_least == pytest.approx([(6 - i) / 6 for i in range(1, 6)])
    assert enough_data(store)


def test_server_report_and_adaptive_steps_win_over_launch_flags():
    store = live_store()
    store.apply(ServerInfo(values=(("speculative_num_steps", "4"),)), at=100.0)
    assert draft_settings(store).num_steps == 4
    store.apply(SpecParams(steps_before=4, steps=3), at=101.0)
    assert dataclasses.astuple(draft_settings(store)) == (3, 1, 4)


def test_settings_from_the_probe_when_the_launch_names_none():
    store = live_store(argv=("python3", "-m", "sglang.launch_server"))
    assert dataclasses.astuple(draft_settings(store)) == (5, 1, 6)


def test_refusals_are_one_line():
    with pytest.raises(AdvisorError, match="at least 50"):
        advise(gather_inputs(live_store(cycles=10)))
    with pytest.raises(AdvisorError, match="no probe cycles"):
        gather_inputs(_run_only())
    tree = live_store(argv=(*ARGV[:-4], "--speculative-eagle-topk", "4", "--x", "1"))
    tree.apply(ServerInfo(values=(("speculative_eagle_topk", "4"),)), at=200.0)
    with pytest.raises(AdvisorError, match="topk is 4"):
        advise(gather_inputs(tree))
    assert not enough_data(live_store(cycles=10))


def _run_only() -> StateStore:
    store = StateStore()
    store.apply(RunInfo(run_id="r1", argv=ARGV), at=0.0)
    return store


def _speculative_bench(steps: int, verify_ms: float, concurrency: int = 1, source: str = "probe"):
    result = bench_result(70.0, speculative=True, model="m", concurrency=concurrency)
    result = dataclasses.replace(
        result, phase_times=PhaseTimes(1.0, verify_ms, 0.3, cycles=9, source=source)
    )
    argv = (
        "python3", "-m", "sglang.launch_server", "--speculative-num-steps", str(steps),
        "--speculative-eagle-topk", "1",
    )  # fmt: skip
    return result, BenchContext(host="h", profile="p", argv=argv)


def test_ledger_verify_points_per_draft_token_count(tmp_path):
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        assert verify_by_draft_tokens(ledger.speculative_verify_times("h", "m")) == {}
        for steps, ms in ((2, 25.0), (2, 26.0), (5, 28.7)):
            ledger.record_benchmark(*_speculative_bench(steps, ms))
        ledger.record_benchmark(*_speculative_bench(9, 40.0, concurrency=8))  # one count only
        ledger.record_benchmark(*_speculative_bench(7, 90.0, source="step_time"))  # whole cycle
        samples = ledger.speculative_verify_times("h", "m")
        assert len(samples) == 4  # the step-time benchmark is not a verify time
        assert verify_by_draft_tokens(samples, 1.3) == {3: 25.5, 6: 28.7}
        assert ledger.speculative_verify_times("h", "other-model") == []
        assert ledger.speculative_verify_times("elsewhere", "m") == []
        # the advice takes the ledger's slope once it has two token counts
        store = live_store()
        store.apply(ServerInfo(values=(("model_path", "m"),)), at=500.0)
        advice, model = advise_from_store(store, ledger, "h")
        assert model == "m" and advice.verify_slope_source == "ledger"
        assert advice.verify_slope_ms_per_token == pytest.approx((28.7 - 25.5) / 3)


def test_predictions_are_stored_and_the_schema_migrates(tmp_path):
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    for migration in MIGRATIONS[:2]:
        for statement in migration:
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()
    advice = advise(gather_inputs(live_store())).to_dict()
    with Ledger(path) as ledger:
        assert ledger.schema_version == SCHEMA_VERSION >= 4
        sweep_id = ledger.start_sweep("k", "h", "p", {"grid": []})
        ledger.record_prediction(
            host="h", model="m", advice=advice, source="sweep start", sweep_id=sweep_id
        )
        stored = ledger.prediction_for_sweep(sweep_id)
        assert stored is not None and stored["advice"] == advice
        assert stored["recommended_steps"] == advice["recommended"]["num_steps"]
        assert stored["created_at"] <= time.time()
        assert ledger.prediction_for_sweep(sweep_id + 1) is None
        assert len(ledger.table("predictions")) == 1


def test_advise_text_labels_the_prediction_and_names_its_basis():
    from specmon.commands.advise import advice_text

    store = live_store()
    advice = advise(gather_inputs(store))
    text = advice_text(advice, "gpu-host", store)
    assert "PREDICTION, not a measurement" in text
    assert "based on 60 probe cycles, 2.0 requests per cycle" in text
    assert "a default slope (estimated)" in text
    assert f"recommended: {advice.recommended.num_steps} steps" in text
    rows = [line for line in text.splitlines() if line.strip()[:2].strip().isdigit()]
    assert len(rows) == 10 and "current" in rows[4]


def test_advise_refuses_in_one_line_without_a_run(tmp_path):
    """Without a server on the host it says so within seconds, not after --timeout (120 s)."""
    import subprocess
    import sys

    state = tmp_path / "state"
    completed = subprocess.run(
        [sys.executable, "-m", "specmon", "advise", "local", "--state-dir", str(state),
         "--gpu-agent", "none", "--ledger", str(tmp_path / "l.sqlite3")],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert completed.returncode == 1, completed.stderr
    assert completed.stdout == ""
    lines = completed.stderr.strip().splitlines()
    assert lines == ["specmon: advise local: no server is running there, so there is nothing "
                     "to measure; start one with `specmon launch local -p demo --wait ready`, "
                     "then run advise again"]  # fmt: skip


def test_a_sweep_over_steps_stores_the_prediction_the_store_supports(tmp_path):
    """With no prediction handed over, a sweep over step counts predicts from the running
    server's store when it starts (and stores nothing when the store cannot support one)."""
    from support import hosts

    from specmon.experiments.bench.runner import BenchSettings
    from specmon.experiments.sweep import SweepPlan, SweepRunner, parse_grid
    from specmon.session.host import HostSession
    from specmon.session.local import LocalTransport

    session = HostSession(LocalTransport(), profiles={}, options=hosts.test_options(tmp_path))

    def runner(grid: str, ledger: Ledger) -> SweepRunner:
        plan = SweepPlan("h", "p", parse_grid([grid]), False, BenchSettings())
        return SweepRunner(session, ledger, plan, [])

    with Ledger(tmp_path / "l.sqlite3") as ledger:
        sweep_id = ledger.start_sweep("k", "h", "p", {"grid": []})
        runner("speculative-num-steps=2,3", ledger)._record_prediction(sweep_id)
        assert ledger.prediction_for_sweep(sweep_id) is None  # an empty store: nothing
        for event in _events_of(live_store()):
            session.bus.store.apply(event, at=0.0)
        runner("NCCL_PROTO=LL,Simple", ledger)._record_prediction(sweep_id)
        assert ledger.prediction_for_sweep(sweep_id) is None  # not a sweep over steps
        runner("speculative-num-steps=2,3", ledger)._record_prediction(sweep_id)
        stored = ledger.prediction_for_sweep(sweep_id)
        assert stored is not None and stored["source"] == "sweep start"
        assert stored["advice"] == advise(gather_inputs(live_store())).to_dict()


def _events_of(store: StateStore) -> list:
    assert store.run is not None
    return [store.run, *store.probe]

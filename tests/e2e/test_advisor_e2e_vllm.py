"""The tuning advisor's proof on the simulator's vLLM personality (issue 17, "both backends"):
from one live run at k = 5 (``num_speculative_tokens``), the recommended k is within one step
of the best a real sweep over 1, 2, 3, 5 and 8 then measures, and every predicted tok/s is
within 15% of its measurement. Acceptance by position comes from vLLM's own SpecDecoding lines
(weighted by their drafts), the phase times from the vLLM probe's records (extend 0, verify
from the step's start), and the sweep's axis and stored prediction use vLLM's setting name."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest
from support import hosts
from support.hosts import kill_everything_under
from support.profiles import vllm_sim_profile_toml
from support.sim import free_port
from support.waiting import until as wait_until

from specmon.cli import main as cli_main
from specmon.experiments.advisor_inputs import advise_from_store, enough_data, steps_setting
from specmon.experiments.bench.runner import BenchSettings, run_benchmark
from specmon.experiments.ledger import Ledger
from specmon.experiments.sweep import (
    SweepPlan,
    SweepRunner,
    parse_grid,
    plan_points,
    session_base_url,
)
from specmon.launch.config import load_config
from specmon.session.host import HostSession
from specmon.session.local import LocalTransport

GRID = (1, 2, 3, 5, 8)
BENCH = BenchSettings(requests=2, max_tokens=128, warmup=0, concurrency=1)
PROFILE = "vsim"


def five_token_config(tmp_path: Path):
    """The built-in demo-vllm profile at k = 5, fast start-up, a stats line every second."""
    path = tmp_path / "specmon.toml"
    path.write_text(vllm_sim_profile_toml(PROFILE, free_port(), k=5, time_scale="0.002"))
    return load_config(path)


async def advise_cli(tmp_path: Path, state_dir: Path) -> dict:
    """`specmon advise local --json` in its own process, reattaching to the live run."""
    import asyncio

    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specmon", "--config", str(tmp_path / "specmon.toml"),
        "advise", "local", "--json", "--cycles", "50",
        "--timeout", "30", "--state-dir", str(state_dir), "--gpu-agent", "none",
        "--ledger", str(tmp_path / "advise-ledger.sqlite3"),
        cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return json.loads(out)


async def test_advice_from_a_k5_vllm_run_matches_a_real_sweep(tmp_path):
    config = five_token_config(tmp_path)
    state_dir = tmp_path / "state"
    session = HostSession(
        LocalTransport(), profiles=config.profiles, options=hosts.test_options(state_dir)
    )
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    try:
        await session.start()
        store = session.bus.store
        # One live run at k = 5, under a real load of one request at a time.
        await session.launch(PROFILE)
        await wait_until(lambda: store.run_state == "ready", 60, "ready server")
        assert store.run is not None and store.run.backend == "vllm"
        base_url = await session_base_url(session)
        load = BenchSettings(requests=3, max_tokens=256, warmup=0, concurrency=1)
        await run_benchmark(base_url, load, backend="vllm")
        # vLLM's own per-position counts (its SpecDecoding lines) are what the view shows.
        await wait_until(
            lambda: enough_data(store) and store.accept_by_position.server.drafts >= 50,
            20,
            "probe cycles and SpecDecoding lines",
        )
        assert len(store.accept_by_position.ratios()) == 5  # k positions, no root
        advice, _model = advise_from_store(store, ledger, session.host_label)
        inputs = advice.inputs
        assert (inputs.num_steps, inputs.topk, inputs.current_tokens) == (5, 1, 6)
        assert inputs.extend_ms == 0.0  # vLLM's EAGLE has no separate extend
        assert advice.verify_slope_source == "default"  # the ledger is empty: flagged
        assert steps_setting(store) == "num_speculative_tokens"
        # `specmon advise` on this vLLM host: it reattaches to the running server and predicts.
        cli = await advise_cli(tmp_path, state_dir)
        assert cli["current"]["num_steps"] == 5 and cli["current"]["num_draft_tokens"] == 6
        assert [p["num_steps"] for p in cli["predictions"]] == list(range(1, 11))
        assert cli["inputs"]["extend_ms"] == 0.0 and cli["inputs"]["topk"] == 1

        plan = SweepPlan(
            host=session.host_label,
            profile=PROFILE,
            axes=parse_grid(["num_speculative_tokens=" + ",".join(map(str, GRID))]),
            baseline=False,
            bench=BENCH,
        )
        points = plan_points(config, plan, python=sys.executable)
        runner = SweepRunner(session, ledger, plan, points, ready_timeout_s=60, prediction=advice)
        finished = await runner.run()
    finally:
        await session.close()
        kill_everything_under(state_dir)

    measured = {int(r.params["num_speculative_tokens"]): r.tok_s for r in finished.results}
    assert all(r.status == "ok" for r in finished.results), [r.error for r in finished.results]
    predicted = {p.num_steps: p.tok_s for p in advice.predictions}
    errors = {k: predicted[k] / measured[k] - 1 for k in GRID}
    summary = {k: (round(predicted[k], 1), round(measured[k], 1)) for k in GRID}
    print("\nk  predicted  measured  error")
    for k in GRID:
        print(f"{k}  {predicted[k]:.1f}  {measured[k]:.1f}  {errors[k] * 100:+.1f}%")
    print(f"recommended {advice.recommended.num_steps}, measured best "
          f"{max(measured, key=lambda k: measured[k])}")  # fmt: skip
    assert all(abs(e) <= 0.15 for e in errors.values()), summary
    best = max(measured, key=lambda k: measured[k])
    assert abs(advice.recommended.num_steps - best) <= 1, (advice.recommended.num_steps, summary)

    # The prediction was stored before the sweep; `ledger show` sets it against the result.
    ledger_path = str(tmp_path / "ledger.sqlite3")
    stored = ledger.prediction_for_sweep(finished.sweep_id)
    ledger.close()
    assert stored is not None and stored["source"] == "advisor view"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["ledger", "--ledger", ledger_path, "show", f"s{finished.sweep_id}"]) == 0
    text = out.getvalue()
    assert "advisor PREDICTION" in text
    for k in GRID:
        assert f"{errors[k] * 100:+.1f}%" in text
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli_main(["ledger", "--ledger", ledger_path, "show", f"s{finished.sweep_id}", "--json"])
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    plot = io.StringIO()
    with contextlib.redirect_stdout(plot):  # x: the sweep's step count setting by default
        assert cli_main(["ledger", "--ledger", ledger_path, "plot", f"s{finished.sweep_id}"]) == 0
    assert "nothing to plot" not in plot.getvalue() and "num_speculative_tokens" in plot.getvalue()
    assert {int(r["params"]["num_speculative_tokens"]): r["predicted_tok_s"] for r in rows} == {
        k: pytest.approx(predicted[k]) for k in GRID
    }

"""The advisor's inputs for a vLLM run, read through the backend: the draft's shape from
``--speculative-config`` (k drafts, topk 1, k + 1 tokens verified), the probe's draft tokens
counted without a root (k positions), vLLM's own per-position counts preferred to the probe's
and never added to them, the ledger's vLLM launches, and the sweep axis named by the backend."""

from __future__ import annotations

import dataclasses
import json

import pytest

from specmon.backends import DraftShape, get_backend
from specmon.experiments.advisor import advise
from specmon.experiments.advisor_inputs import (
    draft_settings,
    gather_inputs,
    model_of,
    steps_setting,
    verify_by_draft_tokens,
)
from specmon.experiments.ledger import VerifySample
from specmon.experiments.sweep import steps_axis
from specmon.model.events import ProbeTiming, RunInfo, ServerInfo, SpecDecode
from specmon.state.store import StateStore

VLLM = get_backend("vllm")
SGLANG = get_backend("sglang")


def vllm_argv(k: int = 5, **extra: object) -> tuple[str, ...]:
    config = {"method": "eagle3", "model": "/draft", "num_speculative_tokens": k, **extra}
    return (
        "vllm", "serve", "/models/llama", "--tensor-parallel-size", "8",
        "--speculative-config", json.dumps(config),
    )  # fmt: skip


def vllm_store(k: int = 5, cycles: int = 60, batch: int = 2) -> StateStore:
    """A vLLM run at k drafts: probe records as the vLLM probe writes them (k x batch draft
    tokens, extend 0) with per-request counts as the simulator adds them."""
    store = StateStore()
    store.apply(RunInfo(run_id="r1", backend="vllm", argv=vllm_argv(k)), at=0.0)
    for i in range(cycles):
        store.apply(
            ProbeTiming(
                wall=float(i),
                draft_ms=2.0,
                verify_ms=30.0,
                extend_ms=0.0,
                cycle_ms=32.5,
                batch_size=batch,
                draft_tokens=batch * k,
                accepted_tokens=None,
                accepted_per_request=tuple((i + j) % (k + 1) for j in range(batch)),
            ),
            at=float(i),
        )
    return store


def test_the_vllm_draft_shape_is_a_chain_of_k_with_k_plus_one_verified():
    assert VLLM.draft_shape(vllm_argv(5), {}, {}) == DraftShape(5, 1, 6)
    shortcuts = ("vllm", "serve", "/m", "--spec-method", "ngram", "--spec-tokens", "3")
    assert VLLM.draft_shape(shortcuts, {}, {}) == DraftShape(3, 1, 4)
    assert VLLM.draft_shape(("vllm", "serve", "/m"), {}, {}) == DraftShape(0, 1, 1)  # off
    tree = vllm_argv(2, speculative_token_tree="[(0,), (1,), (0, 0), (0, 1)]")
    assert VLLM.draft_shape(tree, {}, {}) == DraftShape(2, 2, 5)  # two branches, 4 nodes
    no_k = ("vllm", "serve", "/m", "--speculative-config", '{"method":"mtp"}')
    assert VLLM.draft_shape(no_k, {}, {}) == DraftShape(None, 1, None)


def test_the_sglang_draft_shape_takes_the_servers_report_over_its_flags():
    argv = ("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "5",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "6")  # fmt: skip
    assert SGLANG.draft_shape(argv, {}, {}) == DraftShape(5, 1, 6)
    info = {"speculative_num_steps": "3", "speculative_num_draft_tokens": "4"}
    assert SGLANG.draft_shape(argv, {}, info) == DraftShape(3, 1, 4)
    assert SGLANG.draft_shape((), {}, {}) == DraftShape(None, None, None)


def test_each_backend_names_its_step_setting_and_counts_its_probe_positions():
    assert (SGLANG.steps_setting, VLLM.steps_setting) == (
        "speculative-num-steps",
        "num_speculative_tokens",
    )
    assert SGLANG.probe_draft_positions(2 * 6, 2) == 5  # the verified root counted
    assert VLLM.probe_draft_positions(2 * 5, 2) == 5  # k drafts per request, no root
    assert steps_axis(["NCCL_PROTO", "num_speculative_tokens"]) == "num_speculative_tokens"
    assert steps_axis(["speculative-num-steps"]) == "speculative-num-steps"
    assert steps_axis(["NCCL_PROTO"]) is None


def test_vllm_probe_records_give_k_positions():
    store = vllm_store(k=5)
    # accepted counts 0..5 equally often: P(>= i) = (6 - i) / 6, for all five positions
    assert store.accept_by_position.ratios() == pytest.approx([(6 - i) / 6 for i in range(1, 6)])
    assert store.accept_by_position.drafts == 120


def test_vllms_own_counts_win_and_are_not_added_to_the_probes():
    store = vllm_store(k=3)
    assert store.accept_by_position.drafts == 120  # the probe's, while vLLM has said nothing
    store.apply(SpecDecode(per_position=(0.8, 0.5, 0.2), drafted=300, accepted=150), at=70.0)
    store.apply(SpecDecode(per_position=(0.6, 0.3, 0.0), drafted=300, accepted=90), at=80.0)
    assert store.accept_by_position.drafts == 200  # vLLM's drafts only, not 200 + 120
    assert store.accept_by_position.ratios() == pytest.approx([0.7, 0.4, 0.1])


def test_inputs_for_a_vllm_run():
    store = vllm_store(k=5)
    store.apply(ServerInfo(values=(("model", "llama"), ("model_path", "/models/llama"))), at=61.0)
    store.apply(
        SpecDecode(per_position=(0.8, 0.6, 0.4, 0.3, 0.2), drafted=5 * 400, accepted=920),
        at=62.0,
    )
    assert dataclasses.astuple(draft_settings(store)) == (5, 1, 6)
    inputs = gather_inputs(store)
    assert (inputs.num_steps, inputs.topk, inputs.current_tokens) == (5, 1, 6)
    assert inputs.draft_ms_per_step == pytest.approx(0.4) and inputs.extend_ms == 0.0
    assert inputs.verify_ms == 30.0 and inputs.requests_per_cycle == 2.0
    assert inputs.accept_at_least == pytest.approx((0.8, 0.6, 0.4, 0.3, 0.2))
    assert model_of(store) == "/models/llama"  # as vLLM's bench_info records the model
    assert steps_setting(store) == "num_speculative_tokens"
    advice = advise(inputs)
    assert advice.current.num_draft_tokens == 6
    assert [p.num_steps for p in advice.predictions] == list(range(1, 11))
    from specmon.commands.advise import advice_text

    text = advice_text(advice, "h", store)
    k = advice.recommended.num_steps
    assert f"recommended: {k} steps (num_speculative_tokens={k}, {k + 1} tokens per verify)" in text
    assert "h: running 5 steps (topk 1, 6 draft tokens)" in text


def test_a_vllm_run_without_speculation_is_refused_in_one_line():
    store = StateStore()
    store.apply(RunInfo(run_id="r", backend="vllm", argv=("vllm", "serve", "/m")), at=0.0)
    for i in range(60):
        store.apply(ProbeTiming(wall=i, draft_ms=0, verify_ms=20, extend_ms=0, cycle_ms=20))
    with pytest.raises(Exception, match="not speculating"):
        advise(gather_inputs(store))


def test_ledger_verify_points_of_vllm_launches_are_read_by_vllms_backend():
    def sample(k: int, ms: float) -> VerifySample:
        return VerifySample(argv=vllm_argv(k), env={}, verify_ms=ms, concurrency=1)

    samples = [sample(1, 25.0), sample(4, 28.0), sample(4, 29.0)]
    assert verify_by_draft_tokens(samples, 1.0) == {2: 25.0, 5: 28.5}
    # a command no backend claims is read by the live run's backend
    odd = [dataclasses.replace(s, argv=("/opt/run.sh", *s.argv[3:])) for s in samples]
    assert verify_by_draft_tokens(odd, 1.0, "vllm") == {2: 25.0, 5: 28.5}


def test_the_sweep_plot_puts_vllms_step_count_on_the_x_axis():
    from specmon.experiments.sweep import parse_grid
    from specmon.tui.widgets.sweep_plot import choose_x_axis

    grid = parse_grid(["gpu-memory-utilization=0.8,0.9", "num_speculative_tokens=1,2,3"])
    assert choose_x_axis(grid) == "num_speculative_tokens"

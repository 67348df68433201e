"""Sweep planning: the grid syntax, the baseline, launch validation, and the final table."""

from __future__ import annotations

from pathlib import Path

import pytest

from specmon.experiments.bench.runner import BenchSettings
from specmon.experiments.ledger import Baseline
from specmon.experiments.report import sweep_plot, sweep_series, sweep_table
from specmon.experiments.sweep import (
    SweepPlan,
    SweepPointResult,
    combinations,
    parse_grid,
    plan_points,
    rank_results,
)
from specmon.launch.config import load_config
from specmon.model.errors import UsageError

PROFILES = """
[profiles.spec]
command = ["{python}", "-m", "specmon.sim"]
model_path = "m"
draft_model_path = "/d"
tp = 8
extra_args = ["--disable-custom-all-reduce"]

[profiles.spec.speculative]
algorithm = "EAGLE3"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4

[profiles.spec.env]
NCCL_P2P_LEVEL = "SYS"

[profiles.named]
command = ["{python}", "-m", "specmon.sim"]
model_path = "m"
draft_model_path = "/d"
baseline_profile = "plain"

[profiles.named.speculative]
algorithm = "EAGLE3"
num_steps = 2
eagle_topk = 1
num_draft_tokens = 3

[profiles.plain]
command = ["{python}", "-m", "specmon.sim"]
model_path = "m"
extra_args = ["--disable-custom-all-reduce"]

[profiles.wrong]
command = ["{python}", "-m", "specmon.sim"]
model_path = "m"
draft_model_path = "/d"
baseline_profile = "spec"

[profiles.wrong.speculative]
algorithm = "EAGLE3"
"""


@pytest.fixture
def config(tmp_path: Path):
    path = tmp_path / "specmon.toml"
    path.write_text(PROFILES)
    return load_config(path)


def plan(profile: str, grid: list[str], baseline: bool = True) -> SweepPlan:
    return SweepPlan("h", profile, parse_grid(grid), baseline, BenchSettings())


def test_grid_names_starting_uppercase_are_env_vars():
    axes = parse_grid(["speculative-num-steps=1,2,3,5", "NCCL_PROTO=LL,Simple"])
    assert [(a.name, a.values, a.is_env) for a in axes] == [
        ("speculative-num-steps", ("1", "2", "3", "5"), False),
        ("NCCL_PROTO", ("LL", "Simple"), True),
    ]
    combos = combinations(axes)
    assert len(combos) == 8
    assert combos[0] == {"speculative-num-steps": "1", "NCCL_PROTO": "LL"}
    assert combos[1] == {"speculative-num-steps": "1", "NCCL_PROTO": "Simple"}


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ([], "at least one --grid"),
        (["speculative-num-steps"], "expected NAME=VALUE"),
        (["--speculative-num-steps=1"], "without the leading '--'"),
        (["steps=1,,2"], "empty value"),
        (["steps=1,1"], "listed twice"),
        (["NCCL_proto=LL"], "not a valid environment variable name"),
        (["bad name=1"], "not a valid flag name"),
        (["a=1", "a=2"], "given twice"),
        (["a=" + ",".join(map(str, range(40))), "b=" + ",".join(map(str, range(40)))], "at most"),
    ],
)
def test_bad_grids_get_one_clear_line(grid, message):
    with pytest.raises(UsageError, match=message):
        parse_grid(grid)


def test_baseline_is_the_profile_without_speculation_and_comes_first(config):
    points = plan_points(config, plan("spec", ["speculative-num-steps=2,5"]))
    baseline, *rest = points
    assert baseline.is_baseline and baseline.params == {}
    assert not baseline.spec.has_flag("speculative-algorithm")
    assert not any(a.startswith("--speculative") for a in baseline.spec.args)
    assert baseline.spec.has_flag("disable-custom-all-reduce")  # same server config otherwise
    assert baseline.spec.env_dict() == {"NCCL_P2P_LEVEL": "SYS"}
    # topk 1: draft tokens follow steps + 1, and the point says so.
    assert [p.spec.flag("speculative-num-draft-tokens") for p in rest] == ["3", "6"]
    assert "steps + 1" in rest[1].notes[0]


def test_env_axes_go_to_the_environment(config):
    points = plan_points(config, plan("spec", ["NCCL_PROTO=LL,Simple"], baseline=False))
    assert [p.spec.env_dict()["NCCL_PROTO"] for p in points] == ["LL", "Simple"]
    assert all(p.spec.env_dict()["NCCL_P2P_LEVEL"] == "SYS" for p in points)


def test_a_named_baseline_profile_is_used_and_must_have_speculation_off(config):
    baseline = plan_points(config, plan("named", ["speculative-num-steps=2"]))[0]
    assert baseline.profile == "plain" and "baseline profile plain" in baseline.notes[0]
    with pytest.raises(UsageError, match="must have speculation off"):
        plan_points(config, plan("wrong", ["speculative-num-steps=2"]))


def test_invalid_combinations_are_refused_before_anything_runs(config):
    with pytest.raises(UsageError, match="NCCL_PROTO") as info:
        plan_points(config, plan("spec", ["NCCL_PROTO=LL,Bogus"]))
    assert "[NCCL_PROTO=Bogus]" in str(info.value)
    with pytest.raises(UsageError, match="unknown profile 'nope'"):
        plan_points(config, plan("nope", ["a=1"]))


def test_plan_key_changes_with_what_is_measured():
    one = plan("spec", ["speculative-num-steps=2,5"])
    assert one.key == plan("spec", ["speculative-num-steps=2,5"]).key
    assert one.key != plan("spec", ["speculative-num-steps=2,6"]).key
    assert one.key != plan("spec", ["speculative-num-steps=2,5"], baseline=False).key
    other = SweepPlan("h", "spec", one.axes, True, BenchSettings(concurrency=4))
    assert one.key != other.key


def result(steps: str, proto: str, tok_s: float | None, status: str = "ok", **extra):
    return SweepPointResult(
        params={"speculative-num-steps": steps, "NCCL_PROTO": proto},
        is_baseline=False,
        status=status,
        tok_s=tok_s,
        accept_len=None if tok_s is None else 2.0,
        verify_ms=None if tok_s is None else 25.0,
        load_seconds=3.0,
        model="m",
        **extra,
    )


def test_table_ranks_by_tok_s_and_shows_the_baseline_and_its_age():
    baseline = Baseline(
        benchmark_id=7,
        tok_s=62.9,
        measured_at=1000.0,
        host="h",
        model="m",
        profile="kimi-baseline",
        prompt_set="v1",
        concurrency=1,
    )
    results = [
        SweepPointResult({}, True, "ok", 62.9, 1.0, 15.9, 2.0, model="m"),
        result("5", "LL", 71.3),
        result("2", "LL", 75.9),
        result("3", "Simple", None, "failed", error="server failed (oom): CUDA out of memory"),
    ]
    ranked = rank_results([r.with_baseline(baseline) for r in results])
    assert [r.tok_s for r in ranked] == [75.9, 71.3, 62.9, None]
    assert ranked[0].speedup_vs_baseline == pytest.approx(75.9 / 62.9)
    assert ranked[2].speedup_vs_baseline is None  # the baseline itself
    table = sweep_table(ranked, ["speculative-num-steps", "NCCL_PROTO"], baseline, now=1000 + 7200)
    lines = table.splitlines()
    assert lines[2].split()[:5] == ["1", "2", "LL", "ok", "75.9"]
    assert "1.21x" in lines[2]
    assert "(baseline)" in lines[4] and "1.00x" in lines[4]
    assert "failed" in lines[5] and "CUDA out of memory" in lines[5]
    assert (
        lines[-1]
        == "speed-up vs baseline b7 (kimi-baseline, speculation off, 62.9 tok/s, measured 2.0 h ago)"
    )


def test_no_speedup_without_a_measured_baseline_of_the_same_model():
    other_model = Baseline(1, 60.0, 0.0, "h", "other", None, "v1", 1)
    assert result("2", "LL", 75.9).with_baseline(other_model).speedup_vs_baseline is None
    table = sweep_table([result("2", "LL", 75.9)], ["speculative-num-steps", "NCCL_PROTO"], None)
    assert "no measured baseline" in table and "x" not in table.splitlines()[2].split()[5]


def test_plot_draws_one_series_per_nccl_setting_and_the_baseline():
    baseline = Baseline(3, 62.9, 0.0, "h", "m", None, "v1", 1)
    results = [
        result("2", "LL", 87.0),
        result("5", "LL", 82.0),
        result("2", "Simple", 75.7),
        result("5", "Simple", 71.6),
    ]
    assert sweep_series(list(reversed(results)), "speculative-num-steps") == {
        "NCCL_PROTO=LL": [(2.0, 87.0), (5.0, 82.0)],
        "NCCL_PROTO=Simple": [(2.0, 75.7), (5.0, 71.6)],
    }
    text = sweep_plot(results, baseline, "speculative-num-steps", width=70, height=18)
    assert "NCCL_PROTO=LL" in text and "NCCL_PROTO=Simple" in text
    assert "baseline b3 62.9" in text
    assert "nothing to plot" in sweep_plot(results, None, "mem-fraction-static")

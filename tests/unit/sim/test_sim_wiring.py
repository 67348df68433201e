"""The simulator's draft wiring (issue 31 item 4): config.json layers against trained layers,
and the miswired acceptance curve."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from specmon.backends.draft_wiring import (
    AUX_KEY,
    TRAINED_ENV,
    DraftConfigError,
    resolve,
    target_layer_count,
)
from specmon.sim import perf

THREE_STEPS = perf.SpecSettings(num_steps=3, topk=1, num_draft_tokens=4)


def draft_dir(tmp_path: Path, ids: list[int] | None, name: str = "draft") -> Path:
    d = tmp_path / name
    d.mkdir()
    config: dict = {"architectures": ["LlamaForCausalLMEagle3"]}
    if ids is not None:
        config["eagle_config"] = {AUX_KEY: ids}  # SGLang's place
        config[AUX_KEY] = ids  # vLLM's place
    (d / "config.json").write_text(json.dumps(config))
    return d


@pytest.mark.parametrize("backend", ["sglang", "vllm"])
def test_trained_default_is_the_servers_default(tmp_path: Path, backend: str) -> None:
    good = resolve(backend, str(draft_dir(tmp_path, [2, 30, 58])), {}, target_layers=61)
    assert good.matched and good.trained == (2, 30, 58)
    bad = resolve(backend, str(draft_dir(tmp_path, [0, 2, 30, 58], "bad")), {}, target_layers=61)
    assert not bad.matched and bad.in_effect.source == "checkpoint"
    none = resolve(backend, str(tmp_path / "no-such-dir"), {}, target_layers=61)
    assert none.matched and none.in_effect.source == "default"
    hub_id = resolve(backend, "org/EAGLE3-draft", {}, target_layers=61)
    assert hub_id.matched


def test_trained_layers_from_env(tmp_path: Path) -> None:
    d = str(draft_dir(tmp_path, [0, 2, 30, 58]))
    env = {TRAINED_ENV: "0,2,30,58"}
    assert resolve("sglang", d, env, target_layers=61).matched
    assert not resolve("sglang", None, env, target_layers=61).matched  # default [2, 30, 58]
    with pytest.raises(DraftConfigError, match=TRAINED_ENV):
        resolve("sglang", d, {TRAINED_ENV: "two"}, target_layers=61)


def test_malformed_draft_config_is_one_line(tmp_path: Path) -> None:
    d = tmp_path / "draft"
    d.mkdir()
    (d / "config.json").write_text("{oops")
    with pytest.raises(DraftConfigError) as err:
        resolve("vllm", str(d), {}, target_layers=80)
    assert "config.json" in str(err.value) and "\n" not in str(err.value)


def test_target_layer_count(tmp_path: Path) -> None:
    assert target_layer_count(None, 61) == 61
    assert target_layer_count("moonshotai/Kimi-K2.5", 61) == 61
    t = tmp_path / "target"
    t.mkdir()
    (t / "config.json").write_text(json.dumps({"text_config": {"num_hidden_layers": 32}}))
    assert target_layer_count(str(t), 61) == 32
    (t / "config.json").write_text("[]")
    assert target_layer_count(str(t), 61) == 61


def test_miswired_acceptance_figures() -> None:
    """Position 1 drops to figures.md's ~0.19; the matched curve is untouched."""
    miswired = replace(THREE_STEPS, miswired=True)
    assert perf.position_accept_probability(1) == perf.ACCEPT_FIRST
    assert perf.position_accept_probability(1, miswired=True) == pytest.approx(0.19)
    matched_rate = (perf.expected_accept_length(THREE_STEPS) - 1) / 3
    miswired_rate = (perf.expected_accept_length(miswired) - 1) / 3
    assert miswired_rate < 0.3 * matched_rate
    assert perf.expected_accept_length(miswired) == pytest.approx(1.216, abs=0.01)
    rng = random.Random(7)
    draws = [perf.sample_accepted(miswired, rng) for _ in range(20000)]
    assert sum(d >= 1 for d in draws) / len(draws) == pytest.approx(0.19, abs=0.01)


def test_default_path_draws_are_unchanged() -> None:
    """The same seed gives the same draws with the field left at its default."""
    a, b = random.Random(3), random.Random(3)
    explicit = replace(THREE_STEPS, miswired=False)
    assert [perf.sample_accepted(THREE_STEPS, a) for _ in range(500)] == [
        perf.sample_accepted(explicit, b) for _ in range(500)
    ]

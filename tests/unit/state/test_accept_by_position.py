"""Acceptance by position: one view in the store, from SGLang's per-request probe counts at any
batch size, from single-request sums, and from vLLM's per-position rates."""

from __future__ import annotations

import json

import pytest

from specmon.model.events import ProbeTiming, SpecDecode
from specmon.probe.records import parse_probe_line
from specmon.state.store import StateStore


def probe(batch: int, per_request: tuple[int, ...] | None, *, accepted: int | None = None):
    return ProbeTiming(
        wall=0.0,
        draft_ms=1.0,
        verify_ms=20.0,
        extend_ms=1.0,
        cycle_ms=22.0,
        batch_size=batch,
        draft_tokens=batch * 4,  # 3 steps + the verified root, per request
        accepted_tokens=accepted if accepted is not None else sum(per_request or ()),
        accepted_per_request=per_request,
    )


def test_per_request_counts_give_acceptance_by_position_at_any_batch_size():
    store = StateStore()
    store.apply(probe(4, (0, 1, 2, 3)), at=1.0)
    store.apply(probe(2, (3, 3)), at=2.0)
    view = store.accept_by_position
    assert view.drafts == 6
    assert view.ratios() == pytest.approx([5 / 6, 4 / 6, 3 / 6])


def test_batch_sums_without_per_request_counts_are_not_split_into_positions():
    store = StateStore()
    store.apply(probe(3, None, accepted=4), at=1.0)  # 4 over 3 requests: which positions?
    assert store.accept_by_position.ratios() == []
    store.apply(probe(1, None, accepted=2), at=2.0)  # one request: positions 1 and 2
    assert store.accept_by_position.ratios() == [1.0, 1.0, 0.0]


def test_mismatched_per_request_list_is_ignored():
    store = StateStore()
    store.apply(probe(3, (1, 1)), at=1.0)  # two counts for three requests: a torn record
    assert store.accept_by_position.ratios() == []


def test_vllm_per_position_rates_feed_the_same_view_weighted_by_drafts():
    store = StateStore()
    # 100 drafts of 3 tokens, then 300 drafts: the second interval weighs three times as much.
    store.apply(SpecDecode(per_position=(0.8, 0.6, 0.4), drafted=300, accepted=180), at=1.0)
    store.apply(SpecDecode(per_position=(0.4, 0.2, 0.0), drafted=900, accepted=180), at=2.0)
    assert store.accept_by_position.drafts == 400
    assert store.accept_by_position.ratios() == pytest.approx([0.5, 0.3, 0.1])
    store.apply(SpecDecode(per_position=(0.9,), drafted=None), at=3.0)  # no weight: skipped
    assert store.accept_by_position.drafts == 400


def test_record_field_is_optional_and_parsed():
    base = {
        "wall": 1.0,
        "draft_ms": 1.0,
        "verify_ms": 2.0,
        "extend_ms": 0.5,
        "cycle_ms": 3.5,
        "batch_size": 2,
        "draft_tokens": 8,
        "accepted_tokens": 3,
    }
    old = parse_probe_line(json.dumps(base))
    assert isinstance(old, ProbeTiming) and old.accepted_per_request is None
    new = parse_probe_line(json.dumps({**base, "accepted_per_request": [1, 2]}))
    assert isinstance(new, ProbeTiming) and new.accepted_per_request == (1, 2)
    assert parse_probe_line(json.dumps({**base, "accepted_per_request": [-1, 2]})) is None
    odd = parse_probe_line(json.dumps({**base, "accepted_per_request": "12"}))
    assert isinstance(odd, ProbeTiming) and odd.accepted_per_request is None


def test_vllm_log_lines_reach_the_view_through_the_parser():
    from specmon.backends.vllm.parser import VLLMLogParser

    lines = [
        "(APIServer pid=4120) INFO 11-30 06:03:10 [metrics.py:120] SpecDecoding metrics: Mean "
        "acceptance length: 2.87, Accepted throughput: 399.10 tokens/s, Drafted throughput: "
        "640.20 tokens/s, Accepted: 3991 tokens, Drafted: 6402 tokens, Per-position acceptance "
        "rate: 0.812, 0.601, 0.457, Avg Draft acceptance rate: 62.3%",
        "(APIServer pid=4120) INFO 11-30 06:03:20 [metrics.py:120] SpecDecoding metrics: Mean "
        "acceptance length: 2.93, Accepted throughput: 462.20 tokens/s, Drafted throughput: "
        "720.30 tokens/s, Accepted: 4622 tokens, Drafted: 7203 tokens, Per-position acceptance "
        "rate: 0.829, 0.622, 0.474, Avg Draft acceptance rate: 64.2%",
    ]
    store = StateStore()
    for event in VLLMLogParser().parse_lines(lines):
        store.apply(event, at=1.0)
    drafts = (2134, 2401)  # 6402 / 3 and 7203 / 3
    assert store.accept_by_position.drafts == sum(drafts)
    expected = [
        (a * drafts[0] + b * drafts[1]) / sum(drafts)
        for a, b in ((0.812, 0.829), (0.601, 0.622), (0.457, 0.474))
    ]
    assert store.accept_by_position.ratios() == pytest.approx(expected, abs=1e-3)

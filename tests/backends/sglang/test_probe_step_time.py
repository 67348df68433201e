"""Whole-step records from /server_info's step_time_dict (SGLANG_RECORD_STEP_TIME=1)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from specmon.probe.step_time import StepTimeCursor, has_step_time, step_time_records

# The shape 0.5.9 answers with: ServerArgs fields, then internal_states (one per DP rank).
SERVER_INFO = {
    "tp_size": 8,
    "version": "0.5.9",
    "internal_states": [
        {
            "last_gen_throughput": 612.5,
            "avg_spec_accept_length": 2.9,
            "step_time_dict": {"6": [0.0291, 0.0302], "1": [0.0262]},
        }
    ],
}


def test_records_are_whole_steps_labelled_step_time():
    records = step_time_records(SERVER_INFO, wall=100.0)
    assert sorted((r.batch_size, round(r.cycle_ms, 3)) for r in records) == [
        (1, 26.2),
        (6, 29.1),
        (6, 30.2),
    ]
    for record in records:
        assert record.source == "step_time"
        assert record.wall == 100.0
        assert math.isnan(record.draft_ms) and math.isnan(record.verify_ms)
        assert math.isnan(record.extend_ms)
        assert record.draft_tokens is None and record.accepted_tokens is None


def test_cursor_returns_only_new_values():
    cursor = StepTimeCursor()
    assert len(step_time_records(SERVER_INFO, wall=1.0, cursor=cursor)) == 3
    assert step_time_records(SERVER_INFO, wall=2.0, cursor=cursor) == []
    grown = {"internal_states": [{"step_time_dict": {"6": [0.0291, 0.0302, 0.0310]}}]}
    new = step_time_records(grown, wall=3.0, cursor=cursor)
    assert [(r.batch_size, round(r.cycle_ms, 3), r.wall) for r in new] == [(6, 31.0, 3.0)]
    restarted = {"internal_states": [{"step_time_dict": {"6": [0.05]}}]}
    assert [round(r.cycle_ms) for r in step_time_records(restarted, 4.0, cursor)] == [50]


def test_top_level_dict_is_read_and_absence_is_reported():
    assert has_step_time({"step_time_dict": {"2": [0.01]}})
    assert [r.batch_size for r in step_time_records({"step_time_dict": {"2": [0.01]}}, 0.0)] == [2]
    without = {"internal_states": [{"last_gen_throughput": 1.0}], "tp_size": 8}
    assert not has_step_time(without)
    assert step_time_records(without, 0.0) == []


def test_malformed_entries_are_skipped():
    info = {
        "internal_states": [
            "nonsense",
            {
                "step_time_dict": {
                    "x": [0.1],
                    "-1": [0.1],
                    "3": "0.1",
                    "4": [None, True, -1, "a", 0.02],
                }
            },
        ]
    }
    assert [(r.batch_size, r.cycle_ms) for r in step_time_records(info, 0.0)] == [(4, 20.0)]


@given(
    st.recursive(
        st.none() | st.booleans() | st.floats() | st.integers() | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
        max_leaves=20,
    )
)
def test_never_raises_on_arbitrary_json(value):
    info = {"internal_states": [{"step_time_dict": value}], "step_time_dict": value}
    for record in step_time_records(info, 0.0):
        assert record.cycle_ms >= 0 and math.isfinite(record.cycle_ms)

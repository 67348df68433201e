"""parse_agent_line: every agent line becomes a typed result, and garbage never raises."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from specmon.agent import GpuReading, header_line, message_line, tick_line
from specmon.events import AgentStatus, GpuSample
from specmon.gpu_stream import (
    AgentError,
    AgentHeader,
    AgentNotice,
    AgentUnreadable,
    agent_script,
    parse_agent_line,
    reading_problems,
)

READING = GpuReading(
    index=0,
    uuid="GPU-1",
    name="NVIDIA H200",
    util_gpu=99.0,
    mem_used_mb=17000.0,
    throttle_reasons=("sw_power_cap",),
    processes=((1234, 16384.0), (99, None)),
)


def test_a_tick_becomes_a_gpu_sample_with_readings():
    result = parse_agent_line(tick_line(1700000000.25, [READING, GpuReading(index=1)]) + "\n")
    assert isinstance(result, GpuSample)
    assert result.wall == 1700000000.25
    assert result.gpus == (READING, GpuReading(index=1))


def test_the_header_becomes_a_started_status():
    line = header_line("nvml", "gpu-host", 8, driver="580.159.04", nvml="13.580", cuda="13.0")
    header = parse_agent_line(line)
    assert header == AgentHeader(
        schema=1,
        source="nvml",
        host="gpu-host",
        gpus=8,
        driver="580.159.04",
        nvml="13.580",
        cuda="13.0",
    )
    assert header.to_status() == AgentStatus(
        state="started", detail="8 GPUs via nvml, driver 580.159.04, CUDA 13.0"
    )


def test_errors_and_notices_keep_their_message_verbatim():
    message = "no NVIDIA driver on host gpu-7: Driver Not Loaded"
    error = parse_agent_line(message_line("error", message))
    assert error == AgentError(message)
    assert error.to_status() == AgentStatus(state="error", detail=message)
    assert parse_agent_line(message_line("notice", "power_limit: not supported")) == AgentNotice(
        "power_limit: not supported"
    )


def test_unknown_fields_from_a_newer_agent_are_ignored():
    data = json.loads(tick_line(1.0, [READING]))
    data["gpus"][0]["fan_percent"] = 40
    data["extra"] = True
    result = parse_agent_line(json.dumps(data))
    assert isinstance(result, GpuSample) and result.gpus == (READING,)


def unreadable(line: str) -> str:
    result = parse_agent_line(line)
    assert isinstance(result, AgentUnreadable), result
    assert result.line == line
    return result.reason


def test_lines_outside_the_format_say_why():
    assert unreadable("") == "empty line"
    assert unreadable("bash: python3: command not found") == "not JSON"
    assert unreadable("[1, 2]") == "JSON but not an object"
    assert unreadable('{"type": "bogus"}') == "unknown line type 'bogus'"
    assert unreadable('{"type": "error"}') == "error without a message"
    assert unreadable('{"type": "tick", "gpus": []}') == "tick without a numeric wall time"
    assert unreadable('{"type": "tick", "wall": 1, "gpus": {}}') == "tick without a list of GPUs"
    assert unreadable('{"type": "header", "schema": 2, "gpus": 1}') == (
        "agent schema 2 is newer than this console's 1"
    )
    assert unreadable('{"type": "header", "schema": 1}') == "header without a GPU count"


def test_a_gpu_entry_of_the_wrong_shape_is_unreadable_not_an_exception():
    bad_entries = [
        {"index": True},
        {"index": -1},
        {"index": 0, "util_gpu": "high"},
        {"index": 0, "util_gpu": math.nan},
        {"index": 0, "name": 7},
        {"index": 0, "throttle_reasons": "idle"},
        {"index": 0, "processes": [[1]]},
        {"index": 0, "processes": [["pid", 3.0]]},
        {"index": 0, "processes": 5},
        "gpu0",
    ]
    for entry in bad_entries:
        assert reading_problems(entry), entry
        line = json.dumps({"type": "tick", "wall": 1.0, "gpus": [entry]})
        assert unreadable(line)


def test_every_reading_the_agent_can_write_passes_the_schema_check():
    assert reading_problems(json.loads(tick_line(1.0, [READING]))["gpus"][0]) == []


def test_agent_script_is_the_shippable_agent_source():
    source = agent_script()
    assert source.startswith('"""specmon\'s GPU agent')
    assert 'if __name__ == "__main__":' in source


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_never_raises(text: str):
    parse_agent_line(text)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["tick", "header", "error", "notice", None, 3]),
    st.dictionaries(
        st.sampled_from(["wall", "gpus", "schema", "message", "source", "host", "driver"]),
        json_values,
    ),
    st.lists(
        st.dictionaries(
            st.sampled_from(
                ["index", "util_gpu", "processes", "name", "throttle_reasons", "mem_used_mb"]
            ),
            json_values,
        ),
        max_size=3,
    ),
)
def test_arbitrary_json_in_agent_shapes_never_raises(kind, body, gpus):
    body = dict(body, type=kind)
    if kind == "tick":
        body["gpus"] = gpus
    result = parse_agent_line(json.dumps(body))
    if isinstance(result, GpuSample):
        for reading in result.gpus:
            assert isinstance(reading, GpuReading)

"""parse_agent_line: every agent line becomes a typed result, and garbage never raises."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from specmon.model.events import AgentStatus, GpuSample
from specmon.remote.agent import (
    TICK_ROW_FIELDS,
    GpuReading,
    header_line,
    message_line,
    state_line,
    tick_line,
)
from specmon.session.gpu_stream import (
    AgentError,
    AgentHeader,
    AgentNotice,
    AgentState,
    AgentStream,
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
        schema=2,
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
    assert parse_agent_line(message_line("error", message, retry=False)) == AgentError(
        message, retry=False
    )
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
    assert unreadable('{"type": "header", "schema": 3, "gpus": 1}') == (
        "agent schema 3 is newer than this console's 2"
    )
    assert unreadable('{"type": "state", "wall": 1, "gpus": {}}') == "state without a list of GPUs"
    assert unreadable('{"type": "header", "schema": 2, "gpus": 1, "tick_rows": ["bogus"]}') == (
        "header tick_rows is not a list of known columns: ['bogus']"
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
    st.sampled_from(["tick", "state", "header", "error", "notice", None, 3]),
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
    if kind in ("tick", "state"):
        body["gpus"] = gpus
    result = parse_agent_line(json.dumps(body))
    if isinstance(result, GpuSample):
        for reading in result.gpus:
            assert isinstance(reading, GpuReading)


# --- AgentStream: nvidia-smi's tick rows and the agent's state lines, merged -----------------

ROWS_HEADER = header_line("nvml", "gpu-host", 2, tick_rows=TICK_ROW_FIELDS)
STATE = [
    GpuReading(index=0, uuid="GPU-0", mem_used_mb=17612.8, temp_c=54.0, processes=((451, 1.0),)),
    GpuReading(index=1, uuid="GPU-1", mem_used_mb=0.5, temp_c=33.0),
]
# 2026-12-01 14:20:00.250 UTC, as nvidia-smi writes it under TZ=UTC
STAMP, WALL = "2026/12/01 14:20:00.250", 1796134800.25


def feed_all(stream: AgentStream, lines: list[str]) -> list:
    return [result for line in lines for result in stream.feed(line + "\n")]


def samples(results: list) -> list[GpuSample]:
    return [r for r in results if isinstance(r, GpuSample)]


def test_rows_become_one_sample_per_tick_with_the_state_fields():
    stream = AgentStream()
    results = feed_all(
        stream,
        [
            ROWS_HEADER,
            state_line(1.0, STATE[:1]),
            state_line(1.0, STATE[1:]),
            f"{STAMP}, 0, 99, 25, 692.96",
            f"{STAMP}, 1, 0, 0, 78.70",
        ],
    )
    assert isinstance(results[0], AgentHeader) and results[0].tick_rows == TICK_ROW_FIELDS
    assert isinstance(results[1], AgentState) and results[1].gpus == (STATE[0],)
    (sample,) = samples(results)
    assert sample.wall == WALL
    assert sample.gpus == (
        GpuReading(
            index=0,
            uuid="GPU-0",
            util_gpu=99.0,
            util_mem=25.0,
            power_w=692.96,
            mem_used_mb=17612.8,
            temp_c=54.0,
            processes=((451, 1.0),),
        ),
        GpuReading(
            index=1,
            uuid="GPU-1",
            util_gpu=0.0,
            util_mem=0.0,
            power_w=78.7,
            mem_used_mb=0.5,
            temp_c=33.0,
        ),
    )


def test_the_first_gpus_row_does_not_wait_for_the_others_and_a_missing_row_is_null():
    """Rows arrive one line at a time; a tick is out at the last GPU's row, and a tick whose
    row for some GPU never came goes out at the next tick's first row, that GPU's utilisation
    and power null."""
    stream = AgentStream()
    feed_all(stream, [ROWS_HEADER, state_line(1.0, STATE)])
    assert stream.feed(f"{STAMP}, 0, 10, 1, 100.0\n") == []
    (first,) = samples(stream.feed(f"{STAMP}, 1, 20, 2, 200.0\n"))
    assert [g.util_gpu for g in first.gpus] == [10.0, 20.0]
    assert stream.feed("2026/12/01 14:20:00.500, 0, 30, 3, 300.0\n") == []
    (second,) = samples(stream.feed("2026/12/01 14:20:00.750, 0, 40, 4, 400.0\n"))
    assert second.wall == WALL + 0.25
    assert [(g.util_gpu, g.power_w) for g in second.gpus] == [(30.0, 300.0), (None, None)]
    assert second.gpus[1].mem_used_mb == 0.5  # the state stays


def test_a_state_line_between_rows_changes_the_next_ticks_not_the_rows_gathered():
    stream = AgentStream()
    feed_all(stream, [ROWS_HEADER, state_line(1.0, STATE)])
    stream.feed(f"{STAMP}, 0, 10, 1, 100.0\n")
    newer = GpuReading(index=1, uuid="GPU-1", mem_used_mb=999.0)
    (state,) = stream.feed(state_line(2.0, [newer]) + "\n")
    assert state == AgentState(wall=2.0, gpus=(newer,))
    (sample,) = samples(stream.feed(f"{STAMP}, 1, 20, 2, 200.0\n"))
    assert sample.gpus[1].mem_used_mb == 999.0 and sample.gpus[1].util_gpu == 20.0


def test_not_available_cells_are_null_and_a_lost_gpu_keeps_its_error():
    stream = AgentStream()
    lost = GpuReading(index=1, uuid="GPU-1", error="gpu_is_lost")
    feed_all(stream, [ROWS_HEADER, state_line(1.0, [STATE[0], lost])])
    results = feed_all(stream, [f"{STAMP}, 0, 5, 1, [N/A]", f"{STAMP}, 1, 7, 1, 80.0"])
    (sample,) = samples(results)
    assert sample.gpus[0].power_w is None and sample.gpus[0].util_gpu == 5.0
    assert sample.gpus[1] == lost


def test_nvidia_smi_messages_in_the_stream_are_unreadable_and_json_ticks_flush_the_rows():
    """nvidia-smi's own error text shares the stream; the agent ticking itself again (its
    loop died) flushes the rows gathered so far first."""
    stream = AgentStream()
    feed_all(stream, [ROWS_HEADER, state_line(1.0, STATE)])
    message = "Unable to determine the device handle for GPU0000:19:00.0: Unknown Error"
    (bad,) = stream.feed(message + "\n")
    assert isinstance(bad, AgentUnreadable) and bad.reason == "a tick row of 5 columns was expected"
    (bad,) = stream.feed("yesterday, 0, 1, 2, 3\n")
    assert isinstance(bad, AgentUnreadable) and bad.reason.startswith("not a tick row")
    (bad,) = stream.feed(f"{STAMP}, 0, nan, 2, 3\n")
    assert isinstance(bad, AgentUnreadable)
    assert stream.feed(f"{STAMP}, 0, 1, 2, 3\n") == []
    flushed, ticked = stream.feed(tick_line(5.0, STATE) + "\n")
    assert isinstance(flushed, GpuSample) and flushed.wall == WALL
    assert ticked == GpuSample(wall=5.0, gpus=tuple(STATE))


def test_without_a_rows_header_a_csv_line_is_just_unreadable():
    stream = AgentStream()
    feed_all(stream, [header_line("nvml", "h", 1)])
    (result,) = stream.feed(f"{STAMP}, 0, 1, 2, 3\n")
    assert isinstance(result, AgentUnreadable) and result.reason == "not JSON"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=80), max_size=6))
def test_arbitrary_rows_never_raise(lines: list[str]):
    stream = AgentStream()
    feed_all(stream, [ROWS_HEADER, state_line(1.0, STATE)])
    for line in lines:
        for result in stream.feed(line):
            if isinstance(result, GpuSample):
                assert all(isinstance(r, GpuReading) for r in result.gpus)


def _smi_writes(row: str) -> list[str]:
    """A row as nvidia-smi writes it: one write(2) per cell, then the newline (strace on an
    H200: "2026/12/01 14:36:03.063", ", 0", ", 0", ", 0", ", 78.28", "\\n")."""
    first, *rest = row.split(", ")
    return [first, *(", " + cell for cell in rest), "\n"]


def _lines_of(writes: list[str]) -> list[str]:
    return "".join(writes).splitlines(keepends=True)


def test_a_row_cut_by_the_agents_writes_at_any_point_comes_back_whole():
    """The agent's writes are whole lines, but nvidia-smi's are cells: the agent's lines may
    land inside a row at any of its write boundaries, once or twice. The ticks and states
    read are the same as with nothing cut."""
    rows = [f"{STAMP}, 0, 10, 1, 100.0", f"{STAMP}, 1, 20, 2, 200.0"]
    newer = GpuReading(index=1, uuid="GPU-1", mem_used_mb=999.0)
    block = state_line(2.0, [newer]) + "\n" + message_line("notice", "n") + "\n"
    clean = [w for row in rows for w in _smi_writes(row)]
    start = [ROWS_HEADER + "\n", state_line(1.0, STATE) + "\n"]

    def read(writes: list[str]) -> list:
        return feed_all(AgentStream(), [line.rstrip("\n") for line in _lines_of(start + writes)])

    expected = read([*clean[:6], block, *clean[6:]])  # the block between the two rows
    assert len(samples(expected)) == 1 and samples(expected)[0].gpus[1].mem_used_mb == 999.0
    for cut in range(1, 6):  # inside the second row, at each boundary
        got = read([*clean[: 6 + cut], block, *clean[6 + cut :]])
        assert got == expected, cut
    first_row_expected = read([*clean[:6], block, *clean[6:]])
    for cut in range(1, 6):  # inside the first row, then between the rows again
        got = read([*clean[:cut], block, *clean[cut:6], block, *clean[6:]])
        assert samples(got) == samples(first_row_expected), cut
        assert not [r for r in got if isinstance(r, AgentUnreadable)], cut

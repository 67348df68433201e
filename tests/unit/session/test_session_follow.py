"""The session's pure steps, without a connection: the log follower (bytes in, events out) and
the failure report (error lines, usage errors, exits, hangs)."""

from __future__ import annotations

import pytest

from specmon.backends import DEFAULT_BACKEND, get_backend
from specmon.model.events import LogLine, Ready, ServerError
from specmon.session.failure import failure_event, hang_reason
from specmon.session.log_follower import LogFollower, LogGapError

READY = "[2026-12-01 10:00:05] The server is fired up and ready to roll!\n"


def follower() -> LogFollower:
    return LogFollower(parser=get_backend(DEFAULT_BACKEND).new_log_parser())


def test_lines_and_parsed_events_come_out_in_order_and_a_resend_is_not_repeated():
    log = follower()
    data = ("[2026-12-01 10:00:01] starting\n" + READY).encode()
    first = log.feed_log(0, data[:20])
    assert first == []  # no complete line yet
    events = log.feed_log(0, data)  # resent from the start, as after a reconnect
    lines = [e.text for e in events if isinstance(e, LogLine)]
    assert lines == ["[2026-12-01 10:00:01] starting", READY.rstrip("\n")]
    assert any(isinstance(e, Ready) for e in events)
    assert [e.offset for e in events if isinstance(e, LogLine)] == [0, 31]
    assert log.feed_log(0, data) == []


def test_a_gap_in_the_offsets_is_an_error():
    log = follower()
    log.feed_log(0, b"a\n")
    with pytest.raises(LogGapError, match="log gap at byte 2"):
        log.feed_log(5, b"b\n")


def test_a_reattach_replays_only_the_tail_from_a_line_boundary():
    data = b"first line that is skipped\nsecond\nthird\n"
    log = LogFollower.reattached(follower().parser, len(data), replay_bytes=10)
    assert log.replaying
    events = log.feed_log(0, data)
    assert [e.text for e in events if isinstance(e, LogLine)] == ["third"]
    assert log.replay_finished() and not log.replaying
    assert not log.replay_finished()  # once


def test_finish_emits_the_unterminated_last_line_and_errors_are_kept():
    log = follower()
    log.feed_log(0, b"Traceback (most recent call last):\n")
    events = log.feed_log(35, b"torch.OutOfMemoryError: CUDA out of memory. Tried 2 GiB")
    events += log.finish()
    assert events[-1] == LogLine(
        text="torch.OutOfMemoryError: CUDA out of memory. Tried 2 GiB", offset=35
    )
    assert log.errors and all(isinstance(e, ServerError) for e in log.errors)
    assert log.recent[-1].startswith("torch.OutOfMemoryError")


def test_a_usage_error_is_the_root_cause_of_an_exit_2_without_error_lines():
    recent = [
        "usage: launch_server.py [-h] --model-path MODEL_PATH [--enable-metrics]",
        "launch_server.py: error: unrecognized arguments: true",
    ]
    failed = failure_event("r1", [], recent, command="x", last_phase=None, exit_code=2)
    assert failed.root_cause == ("launch_server.py: error: unrecognized arguments: true",)
    plain = failure_event("r1", [], ["bye"], command="x", last_phase=None, exit_code=2)
    assert plain.root_cause == ("the server exited with code 2 with no error line",)
    killed = failure_event("r1", [], recent, command=None, last_phase=None, signal=9)
    assert killed.root_cause == ("the server was killed by signal 9 with no error line",)


def test_hung_only_when_both_log_and_http_are_quiet_since_the_last_connect():
    assert hang_reason(1000.0, 0.0, 0.0, 0.0, 300.0) == (
        "no log output and no HTTP answer for 1000s"
    )
    assert hang_reason(1000.0, 0.0, 900.0, 0.0, 300.0) is None  # HTTP answered lately
    assert hang_reason(1000.0, 0.0, 0.0, 800.0, 300.0) is None  # reconnected lately

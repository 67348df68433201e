"""`specmon parse` reading a log file in parts at once (specmon/logs/parts.py) writes what one
pass writes, byte for byte: events in order, the summary, the counts, whatever the cuts fall
on (tracebacks, tqdm bars, server restarts, decode shapes), and when a forked reader fails.

Parts are made small here (a few KiB) so that small logs are cut into many waves."""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO, TESTS
from support.proc_stat import cpu_ticks, parent_of, running

from specmon.cli import main
from specmon.commands import parse as parse_command
from specmon.logs import parts as log_parts

LOGS = TESTS / "logs"
SGLANG_LOGS = sorted(LOGS.glob("sglang-*.log"))


def mixed_log(path: Path, copies: int, seed: int) -> Path:
    """Every SGLang field log, shuffled in blocks and repeated: tracebacks, restarts, shard
    bars and decode shapes land on every kind of cut."""
    rng = random.Random(seed)
    blocks = [log.read_bytes() for log in SGLANG_LOGS]
    with path.open("wb") as out:
        for _ in range(copies):
            rng.shuffle(blocks)
            for block in blocks:
                out.write(block if block.endswith(b"\n") else block + b"\n")
    return path


def run_parse(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    *argv: str,
    part_bytes: int = 16 << 10,
    name: str = "out",
) -> bytes:
    """`specmon parse ARGV` in this process, stdout a real file; parts of ``part_bytes``."""
    monkeypatch.setattr(log_parts, "PART_BYTES", part_bytes)
    monkeypatch.setattr(log_parts, "MIN_PART_BYTES", part_bytes // 4)
    monkeypatch.setattr(log_parts, "READ_BYTES", 4096)
    monkeypatch.setattr(parse_command, "READ_BYTES", 4096)
    target = tmp_path / name
    with target.open("w", encoding="utf-8") as out:
        monkeypatch.setattr(sys, "stdout", out)
        code = main(["parse", *argv])
        monkeypatch.undo()
    assert code == 0
    return target.read_bytes()


FORMS = [
    ("--json", "--summary", "--events"),
    ("--summary", "--events"),
    ("--summary",),  # the summary alone
    ("--json", "--kind", "error", "--kind", "shard_progress", "--summary", "--events"),
    # A window whose edges fall inside the shuffled blocks: parts begin inside and outside.
    (
        "--json",
        "--since",
        "2026-02-10 09:15",
        "--until",
        "2026-02-10 10:03",
        "--summary",
        "--events",
    ),
    ("--since", "08:31", "--until", "11:01:05", "--summary", "--no-events"),
]


@pytest.mark.parametrize("form", FORMS, ids=" ".join)
@pytest.mark.parametrize("jobs", [2, 3, 5])
def test_parts_write_what_one_pass_writes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, form: tuple[str, ...], jobs: int
) -> None:
    log = mixed_log(tmp_path / "server.log", copies=12, seed=jobs)
    assert log.stat().st_size > 200_000
    one = run_parse(monkeypatch, tmp_path, str(log), *form, "--jobs", "1", name="one")
    parts = run_parse(monkeypatch, tmp_path, str(log), *form, "--jobs", str(jobs))
    assert parts == one
    assert b'"kind": "summary"' in one or b"summary:" in one


def test_parts_match_on_a_serving_log_cut_inside_its_crash(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The benchmark's log (start-up, 95% decodes in five shapes, a crash with tracebacks):
    parts of a size that puts cuts inside the crash."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from parse_throughput import write_log
    finally:
        sys.path.pop(0)
    log = tmp_path / "server.log"
    write_log(log, 30_000)
    for part_bytes in (8 << 10, 40 << 10, 1 << 20):
        one = run_parse(
            monkeypatch, tmp_path, str(log), "--json", "--summary", "--events", "--jobs", "1"
        )
        parts = run_parse(
            monkeypatch, tmp_path, str(log), "--json", "--summary", "--events", "--jobs", "2",
            part_bytes=part_bytes,
        )  # fmt: skip
        assert parts == one


def test_a_cut_inside_a_traceback_is_read_again_in_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Every part starts inside a traceback: no forked reader's start is confirmed, so this
    process reads every part itself, and the result is still the one pass's."""
    decode = (
        "[2026-02-10 09:19:{s:02d} TP0] Decode batch, #running-req: 4, #token: 100, "
        "token usage: 0.01, accept len: 2.50, accept rate: 0.60, cuda graph: True, "
        "gen throughput (token/s): 55.00, #queue-req: 0\n"
    )
    frames = "".join(f'  File "/sglang/x.py", line {n}, in f\n    call()\n' for n in range(400))
    block = (
        "".join(decode.format(s=s % 60) for s in range(40))
        + "[2026-02-10 09:20:00 TP3] Scheduler hit an exception: Traceback (most recent call "
        "last):\n" + frames + "RuntimeError: NCCL error: unhandled cuda error\n"
    )
    log = tmp_path / "server.log"
    log.write_text(block * 30)
    one = run_parse(
        monkeypatch, tmp_path, str(log), "--json", "--summary", "--events", "--jobs", "1"
    )
    thrown_away: list[int] = []
    original = log_parts._Part.discard

    def discard(part: log_parts._Part) -> None:
        if part.pid:  # still running or never waited for: its start was not confirmed
            thrown_away.append(part.start)
        original(part)

    monkeypatch.setattr(log_parts._Part, "discard", discard)
    parts = run_parse(
        monkeypatch, tmp_path, str(log), "--json", "--summary", "--events", "--jobs", "2"
    )
    assert parts == one
    assert len(thrown_away) >= 3
    assert one.count(b'"category": "nccl"') == 30


def test_a_failed_forked_reader_is_replaced(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log = mixed_log(tmp_path / "server.log", copies=8, seed=3)
    one = run_parse(
        monkeypatch, tmp_path, str(log), "--json", "--summary", "--events", "--jobs", "1"
    )

    def fail(self: object, out: object) -> None:
        raise MemoryError("a forked reader that dies")

    monkeypatch.setattr(parse_command._LogReader, "begin_part", fail)
    parts = run_parse(
        monkeypatch, tmp_path, str(log), "--json", "--summary", "--events", "--jobs", "3"
    )
    assert parts == one


def test_a_log_without_its_last_newline_and_a_vllm_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log = mixed_log(tmp_path / "server.log", copies=6, seed=5)
    log.write_bytes(log.read_bytes() + b"[2026-02-10 09:30:00 TP0] Load weight begin. avail mem=1")
    for path in (log, LOGS / "vllm-0.33-dp-docker-ray.log"):
        one = run_parse(
            monkeypatch, tmp_path, str(path), "--json", "--summary", "--events", "--jobs", "1"
        )
        parts = run_parse(
            monkeypatch, tmp_path, str(path), "--json", "--summary", "--events", "--jobs", "4"
        )
        assert parts == one


def test_parts_to_a_text_stream_without_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where stdout is no file (captured), the parts' outputs are copied as text."""
    log = mixed_log(tmp_path / "server.log", copies=8, seed=9)
    one = run_parse(monkeypatch, tmp_path, str(log), "--summary", "--events", "--jobs", "1")
    monkeypatch.setattr(log_parts, "PART_BYTES", 16 << 10)
    monkeypatch.setattr(log_parts, "MIN_PART_BYTES", 4 << 10)
    assert main(["parse", str(log), "--summary", "--events", "--jobs", "3"]) == 0
    assert capsys.readouterr().out.encode() == one


def run_cli(*argv: str, stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess[bytes]:
    code = (
        "import sys; from specmon.logs import parts as p; p.PART_BYTES = 1 << 16; "
        "p.MIN_PART_BYTES = 1 << 14; from specmon.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        stdout=stdout,
        stderr=subprocess.PIPE,
        timeout=120,
        check=False,
    )


def test_parts_into_a_pipe_and_a_reader_that_goes_away(tmp_path: Path) -> None:
    log = mixed_log(tmp_path / "server.log", copies=40, seed=11)
    one = run_cli("parse", str(log), "--json", "--summary", "--events", "--jobs", "1")
    parts = run_cli("parse", str(log), "--json", "--summary", "--events", "--jobs", "2")
    assert one.returncode == parts.returncode == 0
    assert parts.stdout == one.stdout
    # `| head -1`: the reader leaves at once; no traceback, exit 0, no forked reader left.
    with subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.readline())"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    ) as head:
        assert head.stdin is not None
        done = run_cli("parse", str(log), "--json", "--jobs", "2", stdout=head.stdin.fileno())
        head.stdin.close()
        assert head.stdout is not None
        assert head.stdout.read().startswith(b"{")
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr


def test_jobs_out_of_range_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", os.devnull, "--jobs", "0"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize(
    "log", [*SGLANG_LOGS, *sorted(LOGS.glob("vllm-*.log"))], ids=lambda path: path.name
)
def test_summaries_of_two_parts_merge_into_the_whole(log: Path) -> None:
    """Every backend's LogSummary.merge, cut at every event: what one summary of all says."""
    from specmon.backends import detect_backend, get_backend

    text = log.read_text(encoding="utf-8", errors="replace")
    backend = get_backend(detect_backend(text) or "sglang")
    parser = backend.new_log_parser()
    events = parser.feed(text) + parser.flush()
    assert events
    whole = backend.new_log_summary()
    whole.add_all(events)
    expected = whole.finish(parser)
    for cut in range(len(events) + 1):
        first, second = backend.new_log_summary(), backend.new_log_summary()
        first.add_all(events[:cut])
        second.add_all(events[cut:])
        first.merge(second)
        assert first.finish(parser) == expected, cut


def test_no_forked_reader_outlives_a_parse_killed_outright(tmp_path: Path) -> None:
    """SIGKILL leaves no handler to clean up: the kernel ends the forked readers
    (PR_SET_PDEATHSIG). The readers are stopped (SIGSTOP) first, so that one that merely
    finished its part in time cannot pass for one that was ended."""
    import signal
    import time

    log = mixed_log(tmp_path / "server.log", copies=1500, seed=13)
    code = (
        "import sys; from specmon.logs import parts as p; p.PART_BYTES = 8 << 20; "
        "p.MIN_PART_BYTES = 1 << 20; from specmon.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    parse = subprocess.Popen(
        [sys.executable, "-c", code, "parse", str(log), "--json", "--jobs", "4"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    readers: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while not readers and time.monotonic() < deadline and parse.poll() is None:
            readers = [
                int(pid)
                for pid in os.listdir("/proc")
                if pid.isdigit() and parent_of(int(pid)) == parse.pid
            ]
        assert readers, "no forked reader seen"
        # Stopped only once reading (some CPU spent): past the prctl made first thing.
        while time.monotonic() < deadline and not all(
            cpu_ticks(pid) >= 3 or not running(pid) for pid in readers
        ):
            time.sleep(0.002)
        for pid in readers:
            os.kill(pid, signal.SIGSTOP)
        parse.kill()
        parse.wait(10)
        deadline = time.monotonic() + 5
        while any(running(pid) for pid in readers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in readers if running(pid)]
    finally:
        for pid in readers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if parse.poll() is None:
            parse.kill()
            parse.wait(10)

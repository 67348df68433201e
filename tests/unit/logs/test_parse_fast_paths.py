"""`specmon parse`'s bulk paths say what the per-event paths say: runs of decodes written
from their texts (JSON and text), the summary read in bulk and alone (--no-events), --kind,
--since/--until, and a live pipe that sees each event when its line arrives."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.paths import REPO, TESTS

from specmon.backends.sglang.parser import SGLangLogParser
from specmon.backends.sglang.summary import SGLangLogSummary
from specmon.cli import main
from specmon.commands.parse import format_event
from specmon.logs.event_lines import json_lines, text_lines
from specmon.model.events import Event, ServerError

LOGS = TESTS / "logs"

DECODE = (
    "Decode batch, #running-req: {run}, #token: 12188, token usage: 0.10, accept len: 3.00, "
    "accept rate: 0.78, cuda graph: {graph}, gen throughput (token/s): 60.00, #queue-req: 1"
)
# Shapes the bulk writer must mend or refuse: no rank, no accept len, other graph texts,
# leading zeros (not JSON numbers), a stamp-less prefix, and lines that are not decodes.
ODD_LOG = "\n".join(
    [
        *(
            f"[2026-02-10 09:19:{i:02d} TP0] " + DECODE.format(run=i, graph="True")
            for i in range(30)
        ),
        *(f"[2026-02-10 09:20:{i:02d}] " + DECODE.format(run=i, graph="False") for i in range(30)),
        *(
            f"[2026-02-10 09:21:{i:02d} TP1] "
            + DECODE.format(run=i, graph="True" if i % 3 else "False")
            for i in range(30)
        ),
        *(
            f"[2026-02-10 09:22:{i:02d} TP2] Decode batch, #running-req: 007, #token: 5, "
            "token usage: 00.50, cuda graph: True, gen throughput (token/s): 1.50, #queue-req: 0"
            for i in range(30)
        ),
        *(
            f"[2026-02-10 09:23:{i:02d} TP3] Decode batch, #running-req: {i}, #token: 5, "
            "token usage: 0.50, cuda graph: True, gen throughput (token/s): 1.50, #queue-req: 0"
            for i in range(30)
        ),
        *(f"09:24:{i:02d} TP4 | " + DECODE.format(run=i, graph="Yes") for i in range(30)),
        *("pid 42 | " + DECODE.format(run=i, graph="True") for i in range(30)),
        "[2026-02-10 09:25:00 TP0] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, "
        "token usage: 0.05, #running-req: 1, #queue-req: 0",
        "[2026-02-10 09:25:01] The server is fired up and ready to roll!",
    ]
)


def parsed(text: str) -> list[Event]:
    parser = SGLangLogParser()
    return parser.feed(text.encode() + b"\n") + parser.flush()


def test_odd_log_takes_the_bulk_path_for_most_lines() -> None:
    events = parsed(ODD_LOG)
    held = sum(getattr(e, "_texts", None) is not None for e in events)
    assert len(events) == 212 and held > 150  # else the comparisons below test little


def test_bulk_json_is_the_per_event_json() -> None:
    events = parsed(ODD_LOG)
    bulk = json_lines(events, Event.to_json).splitlines()
    one_by_one = [event.to_json() for event in parsed(ODD_LOG)]
    assert len(bulk) == len(one_by_one)
    for written, expected in zip(bulk, one_by_one, strict=True):
        # Same keys in the same order, same values; numbers may keep the log's spelling.
        assert list(json.loads(written).items()) == list(json.loads(expected).items())
        assert re.search(r'": 0\d', written) is None  # `007` is no JSON number


def test_bulk_text_is_the_per_event_text_but_for_number_spelling() -> None:
    def one(event: Event) -> str:
        return format_event(event.to_dict())

    def g(line: str) -> str:  # the per-event form writes floats with :g, ints with str()
        line = re.sub(r"=(\d+\.\d+)(?= |$)", lambda m: f"={float(m.group(1)):g}", line)
        return re.sub(r"=(\d+)(?= |$)", lambda m: f"={int(m.group(1))}", line)

    bulk = text_lines(parsed(ODD_LOG), one).splitlines()
    expected = [one(event) for event in parsed(ODD_LOG)]
    assert [g(line) for line in bulk] == expected


def test_json_escapes_c0_and_c1_controls() -> None:
    message = "RuntimeError: CUDA error: bad \x85 \x9b31m \x1b[2J \x07 tab\tend"
    line = json_lines([ServerError(category="other", message=message)], Event.to_json)
    assert all(not ("\x00" <= c < " " or "\x7f" <= c <= "\x9f") for c in line[:-1])
    assert "\\u0085" in line and "\\u009b" in line and json.loads(line)["message"] == message


def test_bulk_summary_is_the_per_event_summary() -> None:
    events = parsed(ODD_LOG)
    one_by_one, bulk = SGLangLogSummary(), SGLangLogSummary()
    for event in parsed(ODD_LOG):
        one_by_one.add(event)
    bulk.add_all(events)
    alone = SGLangLogSummary()
    parser = SGLangLogParser()
    count = parser.summarize(ODD_LOG.encode() + b"\n", alone) + parser.summarize(b"", alone)
    assert count == len(events)
    assert bulk.result() == one_by_one.result() == alone.result(parser.unparsed_decode_like)


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["parse", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("form", [(), ("--json",)])
def test_no_events_prints_the_same_summary_alone(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, form: tuple[str, ...]
) -> None:
    log = tmp_path / "odd.log"
    log.write_text(ODD_LOG + "\n")
    for path in [log, *sorted(LOGS.glob("*.log"))]:
        _, with_events, _ = run_main(capsys, str(path), "--summary", "--events", *form)
        code, alone, _ = run_main(capsys, str(path), "--summary", "--no-events", *form)
        assert code == 0 and alone and with_events.endswith(alone), path
        _, by_default, _ = run_main(capsys, str(path), "--summary", *form)
        assert by_default == alone, path  # --summary alone prints the summary alone
        assert alone.startswith("summary:" if not form else '{"kind": "summary"')


def test_no_events_without_summary_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(capsys, str(LOGS / "sglang-oom-traceback.log"), "--no-events")
    assert code == 2 and out == "" and err.count("\n") == 1 and "--summary" in err


def test_kind_keeps_only_those_events(capsys: pytest.CaptureFixture[str]) -> None:
    log = str(LOGS / "sglang-oom-traceback.log")
    _, every, _ = run_main(capsys, log, "--json")
    code, out, _ = run_main(capsys, log, "--json", "--kind", "error", "--kind", "load_begin")
    kinds = [json.loads(line)["kind"] for line in out.splitlines()]
    assert code == 0 and kinds and set(kinds) == {"error", "load_begin"}
    assert out.splitlines() == [
        line for line in every.splitlines() if json.loads(line)["kind"] in set(kinds)
    ]
    code, out, err = run_main(capsys, log, "--kind", "errors")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "'errors' is not a kind of event a log gives" in err and "error" in err


def test_since_until_cut_the_log_by_its_stamps(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = tmp_path / "odd.log"
    log.write_text(ODD_LOG + "\n")
    code, out, _ = run_main(
        capsys, str(log), "--json", "--since", "2026-02-10 09:20:10", "--until", "2026-02-10 09:21"
    )
    stamps = [json.loads(line)["ts"] for line in out.splitlines()]
    assert code == 0 and len(stamps) == 20 + 30
    assert stamps[0] == "2026-02-10 09:20:10" and stamps[-1] == "2026-02-10 09:21:29"
    # A time alone compares with the stamps' time of day; unstamped lines follow the last one.
    _, out, _ = run_main(capsys, str(log), "--json", "--since", "09:24:28", "--until", "09:24:59")
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["ts"] for r in records[:2]] == ["09:24:28", "09:24:29"]
    assert len(records) == 2 + 30 and all(r["ts"] is None for r in records[2:])
    for bad in (("--since", "yesterday"), ("--since", "10:00", "--until", "09:00")):
        code, out, err = run_main(capsys, str(log), *bad)
        assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err


def test_live_pipe_writes_each_event_as_its_line_arrives() -> None:
    """A writer feeds a real `specmon parse - --json` one line at a time and waits for each
    event before writing the next: with block buffering anywhere this would stall."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as a user has it
    process = subprocess.Popen(
        [sys.executable, "-m", "specmon", "parse", "-", "--json"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
    )
    assert process.stdin is not None and process.stdout is not None
    lines: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in process.stdout], daemon=True).start()
    latencies = []
    try:
        for run in range(20):
            line = f"[2026-02-10 09:19:12 TP0] {DECODE.format(run=run, graph='True')}\n"
            written = time.monotonic()
            process.stdin.write(line.encode())
            process.stdin.flush()
            record = json.loads(lines.get(timeout=20))
            latencies.append(time.monotonic() - written)
            assert record["kind"] == "decode" and record["running_req"] == run
    finally:
        process.stdin.close()
        process.wait(timeout=20)
    # Bounded generously for a loaded machine; benchmarks/parse_pipe_latency.py measures it.
    assert sorted(latencies)[len(latencies) // 2] < 2.0

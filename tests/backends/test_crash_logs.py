"""Crash and start-up shapes of logs as users have them (issue 25 item 5), in both backends:
tracebacks cut before their exception line (end of a file, a follower's process exit, an
unrelated line), logs and pastes that begin inside a traceback, frames behind process tags,
`CUDA driver error: out of memory`, vLLM V0's KV cache blocks, and logs of no known server
(PyTorch c10d and Ray lines) read by the neutral reader."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support.paths import TESTS

from specmon.backends import get_backend, neutral_log_reading
from specmon.backends.neutral import NeutralLogSummary
from specmon.backends.tracebacks import CUT_MESSAGE
from specmon.cli import main
from specmon.commands import parse as parse_command
from specmon.logs import parts as log_parts
from specmon.model.events import Decode, Event, KvCache, ServerError, ShardProgress
from specmon.session.failure import failure_event
from specmon.session.log_follower import LogFollower

LOGS = TESTS / "logs"
BACKENDS = ("sglang", "vllm")


def parsed(backend: str, text: str, *, chunk: int | None = None) -> list[Event]:
    """The events of ``text`` fed whole (or in chunks of ``chunk`` characters), then flushed,
    by a backend's parser or (``neutral``) the reader of logs no backend recognises."""
    reading = neutral_log_reading() if backend == "neutral" else get_backend(backend)
    parser = reading.new_log_parser()
    events: list[Event] = []
    step = chunk or len(text) or 1
    for start in range(0, len(text), step):
        events += parser.feed(text[start : start + step])
    return events + parser.flush()


def errors(events: list[Event]) -> list[ServerError]:
    return [event for event in events if isinstance(event, ServerError)]


SGLANG_CUT = (LOGS / "sglang-0.5-cut-traceback.log").read_text()
VLLM_CUT = (LOGS / "vllm-0.7-compose-cut-traceback.log").read_text()
CUT_LOGS = {"sglang": SGLANG_CUT, "vllm": VLLM_CUT}
LAST_FRAMES = {
    "sglang": 'File "/usr/local/lib/python3.10/dist-packages/sglang/srt/speculative/'
    'eagle_worker.py", line 241, in forward_batch_speculative_generation',
    "vllm": 'File "/opt/venv/lib/python3.12/site-packages/vllm/scripts.py", line 204, in main: '
    "args.dispatch_function(args)",
}

# --- a traceback cut before its exception line --------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_traceback_cut_at_the_end_of_a_file_is_a_crash_of_unknown_cause(backend: str) -> None:
    found = errors(parsed(backend, CUT_LOGS[backend]))
    assert len(found) == 1, found
    assert found[0].category == "unknown"
    assert found[0].message == f"{CUT_MESSAGE}; last frame: {LAST_FRAMES[backend]}"


def test_the_cut_keeps_the_time_and_rank_of_the_record_that_opened_it() -> None:
    (error,) = errors(parsed("sglang", SGLANG_CUT))
    assert (error.ts, error.rank) == ("2026-03-02 14:23:12", 0)
    # 0.2-0.3: `Exception in run_tp_server:` on a time-only prefix, the traceback below it.
    (error,) = errors(parsed("sglang", (LOGS / "sglang-0.3-run-tp-server-cut.log").read_text()))
    assert (error.ts, error.rank, error.category) == ("23:17:08", 4, "unknown")
    assert error.message.endswith("line 230, in exposed_step: self.forward_step()")


@pytest.mark.parametrize("backend", ["vllm", "neutral"])
def test_the_vllm_cli_frame_of_a_cut_traceback_is_no_error(backend: str) -> None:
    """The first frame of vLLM's CLI, behind a process tag that eats its indentation, was
    read as the exception; a cut after it is a crash of unknown cause."""
    log = (
        "(APIServer pid=1) INFO 11-30 06:00:01 [startup.py:38] vLLM server version 0.33.0\n"
        "(APIServer pid=1) Traceback (most recent call last):\n"
        '(APIServer pid=1)   File "/usr/local/bin/vllm", line 7, in <module>\n'
    )
    (error,) = errors(parsed(backend, log))
    assert error.category == "unknown"
    assert error.message == (
        f'{CUT_MESSAGE}; last frame: File "/usr/local/bin/vllm", line 7, in <module>'
    )
    whole = log + "(APIServer pid=1)     sys.exit(main())\n(APIServer pid=1) KeyError: 'model'\n"
    assert [(e.category, e.message) for e in errors(parsed(backend, whole))] == [
        ("other", "KeyError: 'model'")
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_frames_still_arriving_are_no_error_and_an_unrelated_line_ends_the_traceback(
    backend: str,
) -> None:
    """Live: each line fed alone, nothing is reported while frames arrive; a line that is no
    part of a traceback (the shell's `Killed`, a tqdm bar) reports the cut, then is read."""
    parser = get_backend(backend).new_log_parser()
    head, *frames = CUT_LOGS[backend].splitlines(keepends=True)[-7:]
    assert parser.feed(head) == [] or backend == "sglang"  # SGLang's decode line comes first
    for frame in frames:
        assert errors(parser.feed(frame)) == [], frame
    shards = "Loading safetensors checkpoint shards: 100% Completed | 2/2 [00:01<00:00,  1.2it/s]\n"
    after = parser.feed(shards)
    assert [type(event) for event in after] == [ServerError, ShardProgress]
    assert isinstance(after[0], ServerError) and after[0].category == "unknown"
    assert parser.flush() == []  # reported once


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_follower_reports_the_cut_when_the_server_process_exits(backend: str) -> None:
    follower = LogFollower(parser=get_backend(backend).new_log_parser())
    data = CUT_LOGS[backend].encode()
    offset = 0
    for line in data.splitlines(keepends=True):
        follower.feed_log(offset, line)
        offset += len(line)
    assert not follower.errors
    follower.finish()  # the process exited
    (error,) = follower.errors
    failed = failure_event("run-1", follower.errors, follower.recent, command=None, last_phase=None)
    assert failed.category == "unknown" and failed.root_cause == (error.message,)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_new_traceback_or_a_chained_one_is_not_a_cut(backend: str) -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "/a.py", line 1, in f\n'
        "    g()\n"
        "ValueError: first\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/a.py", line 3, in h\n'
        "RuntimeError: second\n"
    )
    assert [(e.category, e.message) for e in errors(parsed(backend, log))] == [
        ("other", "ValueError: first")
    ]


@pytest.mark.parametrize("backend", [*BACKENDS, "neutral"])
def test_a_new_traceback_ends_one_cut_before_its_exception_line(backend: str) -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "/a.py", line 1, in f\n'
        "Traceback (most recent call last):\n"
        '  File "/b.py", line 2, in g\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    found = errors(parsed(backend, log))
    assert [e.category for e in found] == ["unknown", "oom"]
    assert found[0].message == f'{CUT_MESSAGE}; last frame: File "/a.py", line 1, in f'
    assert found[1].message.endswith("Tried to allocate 2.00 GiB")


@pytest.mark.parametrize("backend", [*BACKENDS, "neutral"])
@pytest.mark.parametrize("then", ["", "Loading safetensors checkpoint shards: 100% Completed\n"])
def test_an_exception_group_reports_its_exception_not_a_cut(backend: str, then: str) -> None:
    """Python 3.11's exception groups (anyio's TaskGroup under an ASGI app) are indented
    behind `|` to the end: their first exception line is the cause, at their end."""
    log = (
        "  + Exception Group Traceback (most recent call last):\n"
        '  |   File "/x/starlette/middleware/base.py", line 185, in __call__\n'
        "  |     with collapse_excgroups():\n"
        "  | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)\n"
        "  +-+---------------- 1 ----------------\n"
        "    | Traceback (most recent call last):\n"
        '    |   File "/x/entrypoints/openai/api_server.py", line 88, in create\n'
        "    | ValueError: bad request\n"
        "    +------------------------------------\n"
    ) + then
    found = errors(parsed(backend, log))
    assert [(e.category, e.message) for e in found] == [
        ("other", "ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)")
    ]


def test_a_cut_traceback_at_the_end_of_a_file_read_in_parts_is_reported_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`specmon parse` on many cores: the cut at the very end is reported once, and the
    output is what one pass writes."""
    decode = (
        "[2026-03-02 14:{m:02d}:{s:02d} TP0] Decode batch, #running-req: 3, #token: 2210, "
        "token usage: 0.01, accept len: 2.61, accept rate: 0.65, cuda graph: True, "
        "gen throughput (token/s): 301.20, #queue-req: 0\n"
    )
    log = tmp_path / "server.log"
    body = "".join(decode.format(m=n // 60 % 60, s=n % 60) for n in range(6000))
    log.write_text(body + SGLANG_CUT)
    outputs = []
    for jobs in ("1", "2", "3"):
        monkeypatch.setattr(log_parts, "PART_BYTES", 64 << 10)
        monkeypatch.setattr(log_parts, "MIN_PART_BYTES", 16 << 10)
        monkeypatch.setattr(log_parts, "READ_BYTES", 4096)
        monkeypatch.setattr(parse_command, "READ_BYTES", 4096)
        target = tmp_path / f"out-{jobs}"
        with target.open("w", encoding="utf-8") as out:
            monkeypatch.setattr(sys, "stdout", out)
            assert main(["parse", str(log), "--json", "--summary", "--events", "--jobs", jobs]) == 0
            monkeypatch.undo()
        outputs.append(target.read_text())
    assert outputs[1] == outputs[0] and outputs[2] == outputs[0]
    records = [json.loads(line) for line in outputs[0].splitlines()]
    cuts = [r for r in records if r["kind"] == "error" and r["message"].startswith(CUT_MESSAGE)]
    assert len(cuts) == 1 and cuts[0]["category"] == "unknown"
    assert records[-1]["errors"] == 1 and records[-1]["first_error"] == cuts[0]["message"]


# --- a log or paste that begins inside a traceback ------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("indent", ["    ", ""], ids=["indented", "collector-stripped"])
def test_a_paste_beginning_inside_a_traceback_reports_its_exception_line(
    backend: str, indent: str
) -> None:
    text = (LOGS / "paste-inside-traceback.log").read_text()
    if not indent:  # a collector took the indentation off; the paste begins at a frame
        text = "\n".join(line.lstrip() for line in text.splitlines()[1:]) + "\n"
    found = errors(parsed(backend, text))
    assert found[0] == ServerError(
        category="nccl",
        message="RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for "
        "details)",
    )
    assert all("raise" not in e.message and not e.message.startswith("File") for e in found)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_paste_that_begins_inside_a_traceback_and_ends_early_is_a_cut(backend: str) -> None:
    text = '  File "/x/model_runner.py", line 12, in load\n    self.model = build()\n'
    (error,) = errors(parsed(backend, text, chunk=7))
    assert error.category == "unknown"
    assert error.message.endswith(
        'File "/x/model_runner.py", line 12, in load: self.model = build()'
    )


def test_a_faulthandler_dump_is_not_read_as_a_traceback() -> None:
    """faulthandler writes `line N in f` (no comma): not a traceback's frame, nothing opens."""
    text = 'Thread 0x00007f (most recent call first):\n  File "/x.py", line 12 in run\n'
    for backend in BACKENDS:
        assert errors(parsed(backend, text)) == []


# --- categories and V0 start-up ---------------------------------------------------------------


@pytest.mark.parametrize("backend", [*BACKENDS, "neutral"])
def test_cuda_driver_out_of_memory_is_an_oom(backend: str) -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/x/worker.py", line 3, in init_device\n'
        "    torch.cuda.set_device(self.device)\n"
        "RuntimeError: CUDA driver error: out of memory\n"
    )
    found = errors(parsed(backend, text))
    assert [(e.category, e.message) for e in found] == [
        ("oom", "RuntimeError: CUDA driver error: out of memory")
    ]


def test_vllm_v0_gpu_blocks_give_the_kv_cache_in_tokens_of_the_stated_block_size() -> None:
    events = parsed("vllm", (LOGS / "vllm-0.6-v0-gpu-blocks.log").read_text())
    kv = [event for event in events if isinstance(event, KvCache)]
    assert kv == [KvCache(ts="09-05 10:00:44", tokens=5691 * 16)]
    kinds = [event.kind for event in events]
    assert kinds.index("load_end") < kinds.index("kv_cache") < kinds.index("graph_end")


@pytest.mark.parametrize(
    ("stated", "tokens"),
    [
        ("", None),  # the log does not say: tokens unknown
        ("INFO 10-01 09:00:00 api_server.py:1] args: Namespace(load_format='auto', block_size=None)\n", None),
        ("INFO 10-01 09:00:00 [arg_utils.py:1] non-default args: {'block_size': 32}\n", 5218 * 32),
    ],
    ids=["unstated", "none", "non-default-args"],
)  # fmt: skip
def test_vllm_v0_cuda_blocks(stated: str, tokens: int | None) -> None:
    log = (
        stated
        + "INFO 10-01 09:00:12 [executor_base.py:110] # cuda blocks: 5218, # CPU blocks: 512\n"
    )
    kv = [event for event in parsed("vllm", log) if isinstance(event, KvCache)]
    assert kv == [KvCache(ts="10-01 09:00:12", tokens=tokens)]


# --- logs of no known server: c10d and Ray lines ----------------------------------------------


def run_parse(
    capsys: pytest.CaptureFixture[str], path: Path, *argv: str
) -> tuple[list[dict[str, object]], str]:
    assert main(["parse", str(path), "--json", *argv]) == 0
    out, err = capsys.readouterr()
    return [json.loads(line) for line in out.splitlines()], err


def test_a_log_of_c10d_lines_alone_is_read_for_errors_by_the_neutral_reader(
    capsys: pytest.CaptureFixture[str],
) -> None:
    records, err = run_parse(capsys, LOGS / "c10d-watchdog-only.log", "--summary", "--events")
    assert "no backend detected" in err and "read for errors alone" in err
    events = records[:-1]
    assert {r["kind"] for r in events} == {"error"}  # no shard bar: no server's events
    assert {r["category"] for r in events} == {"nccl"}
    assert [(r["rank"], r["ts"]) for r in events[:3]] == [
        (3, "09:14:15.123456"),
        (3, "09:14:15.130309"),
        (5, "09:14:16.002117"),
    ]
    summary = records[-1]
    assert summary["kind"] == "summary" and summary["errors"] == len(events)
    assert summary["ready"] is False and summary["decode_lines"] == 0


@pytest.mark.parametrize(
    ("around", "tag", "detected"),
    [
        ("", "(RayWorkerWrapper pid=2793, ip=10.0.0.2) ", "vllm"),  # Ray's tag alone says vLLM
        ("[2026-12-10 09:10:00 TP3] Init torch distributed begin.\n", "", "sglang"),
    ],
    ids=["ray-vllm", "sglang"],
)  # fmt: skip
def test_c10d_lines_among_a_servers_lines_are_read_as_that_servers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, around: str, tag: str, detected: str
) -> None:
    watchdog = (
        f"{tag}[rank3]:[E1210 09:14:15.123456 "
        "ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1184, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600031 "
        "milliseconds before timing out.\n"
    )
    log = tmp_path / "ray.log"
    log.write_text(around + watchdog)
    records, err = run_parse(capsys, log)
    assert err == f"specmon: detected backend {detected}\n"
    assert [(r["kind"], r["category"], r["rank"]) for r in records] == [("error", "nccl", 3)]


def test_the_neutral_reader_reports_tracebacks_and_no_server_events() -> None:
    parser = neutral_log_reading().new_log_parser()
    sglang_lines = (
        "[2026-02-10 09:19:12 TP0] Decode batch, #running-req: 6, #token: 12188, token usage: "
        "0.02, cuda graph: True, gen throughput (token/s): 412.55, #queue-req: 0\n"
    )
    events = parser.feed(sglang_lines + VLLM_CUT) + parser.flush()
    assert not any(isinstance(event, Decode) for event in events)
    assert [(e.category, e.message.startswith(CUT_MESSAGE)) for e in errors(events)] == [
        ("unknown", True)
    ]


def test_neutral_summaries_of_two_parts_merge_into_the_whole() -> None:
    text = (LOGS / "c10d-watchdog-only.log").read_text()
    cut = text.index("Loading")
    whole, first, second = NeutralLogSummary(), NeutralLogSummary(), NeutralLogSummary()
    parser = neutral_log_reading().new_log_parser()
    whole.add_all(parser.feed(text) + parser.flush())
    parser = neutral_log_reading().new_log_parser()
    first.add_all(parser.feed(text[:cut]))
    second.add_all(parser.feed(text[cut:]) + parser.flush())
    first.merge(second)
    assert first.finish(parser) == whole.finish(parser)


def test_vllm_v0_cpu_backend_blocks_are_its_kv_cache() -> None:
    log = (
        "INFO 10-01 09:00:00 [arg_utils.py:1] non-default args: {'block_size': 128}\n"
        "INFO 10-01 09:00:12 cpu_executor.py:188] # CPU blocks: 2730\n"
    )
    kv = [event for event in parsed("vllm", log) if isinstance(event, KvCache)]
    assert kv == [KvCache(ts="10-01 09:00:12", tokens=2730 * 128)]

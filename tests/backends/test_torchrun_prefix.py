"""torchrun's `[rankN]:` before every line a rank writes is a wrapper around the line: both
backends read the line inside as they would read it unwrapped, the wrapper's N giving the
rank where the line's own prefix names none, and each rank's traceback apart from the
others' (docs/parser.md, "torchrun's rank wrapper")."""

from __future__ import annotations

import dataclasses

import pytest

from specmon.backends import LogParser
from specmon.backends.neutral import NeutralLogParser
from specmon.backends.sglang.parser import SGLangLogParser
from specmon.backends.vllm.parser import VLLMLogParser
from specmon.model.events import Event, ServerError, ShardProgress

PARSERS = [SGLangLogParser, VLLMLogParser]
CRASH_READERS = [*PARSERS, NeutralLogParser]  # the neutral reader: a paste of tracebacks alone

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 0 has a total capacity of 79.10 GiB"
)
OOM_TRACEBACK = f"""Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/sglang/srt/managers/scheduler.py", line 2313, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)
  File "/usr/lib/python3/dist-packages/torch/cuda/memory.py", line 12, in empty
{OOM}
"""
NCCL_TEXT = (
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) "
    "ran for 600000 milliseconds before timing out."
)
NCCL_LINE = f"[E1203 06:01:44.123456 ProcessGroupNCCL.cpp:1234] {NCCL_TEXT}\n"
SHARD_BAR = "Loading safetensors checkpoint shards:  50% Completed | 32/64 [00:20<00:20, 1.6it/s]\n"


def wrapped(text: str, rank: int, space: bool = True) -> str:
    """``text`` as torchrun writes it for rank ``rank``: every line behind `[rankN]:`."""
    gap = " " if space else ""
    return "".join(f"[rank{rank}]:{gap}{line}\n" for line in text.splitlines())


def parse(parser_class: type[LogParser], text: str) -> list[Event]:
    parser = parser_class()
    return parser.feed(text) + parser.flush()


def without_rank(events: list[Event]) -> list[Event]:
    return [dataclasses.replace(event, rank=None) for event in events]


@pytest.mark.parametrize("parser_class", CRASH_READERS)
def test_wrapped_oom_traceback_is_one_oom_error_of_its_rank(
    parser_class: type[LogParser],
) -> None:
    events = parse(parser_class, wrapped(OOM_TRACEBACK, 0))
    assert events == [ServerError(ts=None, rank=0, category="oom", message=OOM)]


@pytest.mark.parametrize("parser_class", PARSERS)
def test_wrapped_log_reads_as_the_same_log_unwrapped(parser_class: type[LogParser]) -> None:
    log = NCCL_LINE + OOM_TRACEBACK + SHARD_BAR
    plain = parse(parser_class, log)
    for space in (True, False):
        events = parse(parser_class, wrapped(log, 2, space))
        assert without_rank(events) == without_rank(plain)
        assert [event.rank for event in events] == [2] * len(plain)
    assert [type(event) for event in plain] == [ServerError, ServerError, ShardProgress]


@pytest.mark.parametrize("parser_class", PARSERS)
def test_c10d_watchdog_line_behind_the_wrapper(parser_class: type[LogParser]) -> None:
    """`[rank3]:[E...] Watchdog ...` (no space after the wrapper), then the rank's
    traceback: the NCCL line is an error of its own, rank 3's, with the same message as
    unwrapped, and the traceback's cause is the next."""
    log = "[rank3]:" + NCCL_LINE + wrapped(OOM_TRACEBACK, 3, space=True)
    events = parse(parser_class, log)
    assert [(event.rank, event.category) for event in events if isinstance(event, ServerError)] == [
        (3, "nccl"),
        (3, "oom"),
    ]
    nccl = events[0]
    assert isinstance(nccl, ServerError)
    assert nccl.message == NCCL_TEXT
    assert without_rank(events) == without_rank(parse(parser_class, NCCL_LINE + OOM_TRACEBACK))


@pytest.mark.parametrize("parser_class", CRASH_READERS)
def test_interleaved_ranks_each_give_their_own_error(parser_class: type[LogParser]) -> None:
    rank0 = wrapped(OOM_TRACEBACK, 0).splitlines(keepends=True)
    other = OOM_TRACEBACK.replace(OOM, "RuntimeError: NCCL error: unhandled system error")
    rank1 = wrapped(other, 1).splitlines(keepends=True)
    mixed = "".join(line for pair in zip(rank0, rank1, strict=True) for line in pair)
    events = parse(parser_class, mixed)
    assert sorted(events, key=lambda event: event.rank or 0) == [
        ServerError(ts=None, rank=0, category="oom", message=OOM),
        ServerError(
            ts=None,
            rank=1,
            category="nccl",
            message="RuntimeError: NCCL error: unhandled system error",
        ),
    ]


@pytest.mark.parametrize("parser_class", PARSERS)
def test_wrapped_shard_bar_gives_progress_of_its_rank(parser_class: type[LogParser]) -> None:
    for space in (True, False):
        events = parse(parser_class, wrapped(SHARD_BAR, 5, space))
        assert events == [
            ShardProgress(
                ts=None,
                rank=5,
                done=32,
                total=64,
                elapsed_s=20.0,
                remaining_s=20.0,
                seconds_per_shard=0.625,
            )
        ]


def test_wrapped_shard_redraws_read_as_they_arrive_in_sglang() -> None:
    """tqdm redraws with `\\r`: a bar is reported before the next redraw, with its rank."""
    parser = SGLangLogParser()
    events = parser.feed("[rank1]:" + SHARD_BAR.rstrip("\n") + "\r")
    events += parser.feed("[rank1]:" + SHARD_BAR.replace("32/64", "33/64").rstrip("\n"))
    events += parser.flush()
    assert [(event.rank, event.done) for event in events if isinstance(event, ShardProgress)] == [
        (1, 32),
        (1, 33),
    ]


def test_unwrapped_c10d_line_takes_its_rank_from_the_process_group_tag_in_sglang() -> None:
    """Unwrapped, c10d's `[PG ... Rank 5]` names the rank (as it did before the wrapper was
    read apart from the glog header); the tag stays in the message, as behind the wrapper."""
    message = f"[PG ID 0 PG GUID 0(default_pg) Rank 5] {NCCL_TEXT}"
    events = parse(SGLangLogParser, f"[E1210 09:14:15.123456 ProcessGroupNCCL.cpp:616] {message}\n")
    assert [(event.rank, event.category, event.message) for event in events] == [
        (5, "nccl", message)
    ]


def test_a_warning_naming_an_oom_stays_a_warning_behind_the_wrapper_in_vllm() -> None:
    """vLLM reports errors only from lines logged at ERROR or CRITICAL (or without a level): a
    WARNING that quotes an OOM is no crash, and torchrun's wrapper must not lose its level."""
    warning = f"WARNING 12-03 06:01:44 [gpu_model_runner.py:1890] retrying smaller: {OOM}\n"
    error = warning.replace("WARNING", "ERROR", 1)
    assert parse(VLLMLogParser, warning) == []
    assert parse(VLLMLogParser, wrapped(warning, 1)) == []
    assert [type(event) for event in parse(VLLMLogParser, wrapped(error, 1))] == [ServerError]

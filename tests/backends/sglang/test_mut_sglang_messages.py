"""SGLang's parser where the full mutation run left survivors in how a line's prefix is split
from its message and which event a message gives (docs/testing.md, "Mutation testing"): the
time and rank every event keeps, PyTorch's `[rankN]:` prefixes (c10d's and torchrun's), a
record behind a wrapper the parser does not know, records that follow an error's message,
stacked runtime wrappers, a load line cut short and a tqdm bar padded by its redraw.

Each test uses lines no other test feeds, so that the module's caches (prefix tags -> rank)
hold nothing that would hide a change in the reading."""

from __future__ import annotations

from specmon.backends.sglang.parser import SGLangLogParser, parse_line
from specmon.model.events import (
    Event,
    GraphBegin,
    HttpUp,
    LoadBegin,
    LoadEnd,
    Ready,
    ServerError,
    ShardProgress,
    SpecParams,
)

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


def read(lines: list[str]) -> list[Event]:
    """Every event of a whole log, as `specmon parse` reads one."""
    parser = SGLangLogParser()
    events = parser.feed("\n".join(lines) + "\n")
    return events + parser.flush()


def test_a_c10d_watchdog_line_keeps_its_process_group_tag_in_the_message() -> None:
    # PyTorch's c10d prefix is `[rankN]:[glog header] `; what follows (`[PG ID ...]`) is the
    # message the operator reads, with the process group that timed out.
    line = (
        "[rank5]:[E1210 09:14:15.123456789 ProcessGroupNCCL.cpp:616] "
        "[PG ID 0 PG GUID 0(default_pg) Rank 5] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=600000) "
        "ran for 600031 milliseconds before timing out."
    )
    assert read([line]) == [
        ServerError(
            ts="09:14:15.123456789",
            rank=5,
            category="nccl",
            message=line[line.index("[PG ID") :],
        )
    ]


def test_graph_capture_begin_keeps_the_time_and_rank_of_its_line() -> None:
    assert read(
        [
            "[2026-02-10 09:17:46 DP1 TP6 EP6] Capture cuda graph begin. This can take up to "
            "several minutes. avail mem=25.75 GB",
            "[2026-02-10 09:17:58 DP1 TP6 EP6] Capture draft cuda graph begin. This can take up "
            "to several minutes. avail mem=21.30 GB",
        ]
    ) == [
        GraphBegin(ts="2026-02-10 09:17:46", rank=6, role="target", avail_mem_gb=25.75),
        GraphBegin(ts="2026-02-10 09:17:58", rank=6, role="draft", avail_mem_gb=21.3),
    ]


def test_adaptive_spec_params_keep_the_rank_that_changed_its_steps() -> None:
    line = (
        "[2026-02-10 10:02:31 TP7] Adaptive spec params updated: steps 3 -> 5 (ema_accept_len=3.87)"
    )
    assert read([line]) == [
        SpecParams(ts="2026-02-10 10:02:31", rank=7, steps_before=3, steps=5, ema_accept_len=3.87)
    ]


def test_torchrun_prefixed_server_lines_keep_the_launcher_rank() -> None:
    # torchrun prefixes each worker's lines with `[rankN]:`; a node's HTTP server coming up
    # is told apart from another node's by that rank.
    assert read(
        [
            "[rank2]:[2026-02-10 09:18:41] INFO:     Uvicorn running on http://0.0.0.0:30002 "
            "(Press CTRL+C to quit)",
            "[rank2]:[2026-02-10 09:18:44] The server is fired up and ready to roll!",
        ]
    ) == [
        HttpUp(ts="2026-02-10 09:18:41", rank=2, port=30002),
        Ready(ts="2026-02-10 09:18:44", rank=2),
    ]


def test_a_load_end_line_cut_short_still_ends_the_load() -> None:
    # A log whose writer died mid-line: the load ended, its numbers are not there.
    assert parse_line("[2026-02-10 09:16:03 TP4] Load weight end. elapsed=") == LoadEnd(
        ts="2026-02-10 09:16:03",
        rank=4,
        mem_usage_gb=None,
        avail_mem_gb=None,
        elapsed_s=None,
        model_type=None,
        role="target",
    )


def test_an_error_message_with_double_quotes_is_an_error() -> None:
    # Only uvicorn's access lines (`"GET /x HTTP/1.1" 500`) are never errors.
    line = (
        "[2026-02-10 09:21:07 TP1] Scheduler hit an exception: ValueError: "
        'unknown "stop_token_ids" entry 151999'
    )
    assert read([line]) == [
        ServerError(
            ts="2026-02-10 09:21:07",
            rank=1,
            category="other",
            message=line[line.index("Scheduler") :],
        )
    ]


def test_a_record_in_an_operators_format_after_an_error_is_its_own_line() -> None:
    # Lines after a bare exception line may continue its message; a record with a time and
    # a level of its own does not.
    assert read(
        [OOM, "2026-02-10 09:22:40,517 INFO The server is fired up and ready to roll!"]
    ) == [
        ServerError(ts=None, rank=None, category="oom", message=OOM),
        Ready(ts="2026-02-10 09:22:40,517", rank=None),
    ]


def test_a_record_behind_an_unknown_wrapper_after_an_error_is_its_own_line() -> None:
    # `logger`-style syslog tag before SGLang's own prefix: the prefix is found behind it.
    assert read(
        [OOM, "<14>sglang[4021]: [2026-02-10 09:23:05 TP5] Load weight begin. avail mem=71.25 GB"]
    ) == [
        ServerError(ts=None, rank=None, category="oom", message=OOM),
        LoadBegin(ts="2026-02-10 09:23:05", rank=5, avail_mem_gb=71.25),
    ]


def test_a_bare_line_behind_two_wrappers_takes_the_time_of_the_outer_one() -> None:
    # `kubectl logs --timestamps` of a pod whose entrypoint multiplexes processes
    # (`name | line`): the only time is the outer wrapper's.
    line = f"2026-02-10T09:24:11.402913577Z server.1 | {OOM}"
    assert read([line]) == [
        ServerError(ts="2026-02-10T09:24:11.402913577Z", rank=None, category="oom", message=OOM)
    ]


def test_a_shard_bar_padded_by_its_redraw_is_reported_before_the_next_one() -> None:
    # tqdm pads a redraw with blanks where the last one was longer; the bar is complete.
    parser = SGLangLogParser()
    bar = "Loading safetensors checkpoint shards:  71% Completed | 5/7 [00:09<00:03,  1.80s/it]"
    assert parser.feed(bar + "   ") == [
        ShardProgress(done=5, total=7, elapsed_s=9.0, remaining_s=3.0, seconds_per_shard=1.8)
    ]


def test_a_torchrun_ranks_shard_bar_keeps_the_launcher_rank() -> None:
    # Each torchrun rank loads its own shards: its bar is told apart by the `[rankN]:` wrapper,
    # whether read as a complete line or reported early from a redraw still open.
    bar = "Loading safetensors checkpoint shards: 100% Completed | 7/7 [00:12<00:00,  1.71s/it]"
    done = ShardProgress(
        rank=3, done=7, total=7, elapsed_s=12.0, remaining_s=0.0, seconds_per_shard=1.71
    )
    assert read([f"[rank3]:{bar}"]) == [done]
    assert SGLangLogParser().feed(f"[rank3]:{bar}") == [done]


def test_an_access_line_for_a_path_naming_an_error_is_no_server_error() -> None:
    # The request path is the client's text: a scanner asking for `/AcceleratorError` must
    # not make the console report the server as failing.
    line = (
        '[2026-02-10 09:25:02] INFO:     10.0.0.7:51234 - "GET /debug/AcceleratorError HTTP/1.1" '
        "404 Not Found"
    )
    assert read([line]) == []


def test_lines_seen_counts_crlf_and_blank_lines_once_each() -> None:
    # As `wc -l` counts them: the count `specmon parse`'s benchmark compares with the log's.
    parser = SGLangLogParser()
    parser.feed("[2026-02-10 09:25:10] The server is fired up and ready to roll!\r\n\r\n")
    assert parser.lines_seen == 2
    parser.feed("\n")
    assert parser.lines_seen == 3
    parser.feed("half a line")
    parser.feed("\n\n")
    assert parser.lines_seen == 5


def test_a_line_still_being_written_is_read_once_when_it_ends() -> None:
    parser = SGLangLogParser()
    ready = "[2026-02-10 09:25:20 TP2] The server is fired up and ready to roll!"
    begin = "[2026-02-10 09:25:21 TP2] Load weight begin. avail mem=71.25 GB"
    assert parser.feed(f"{ready}\n{begin}") == [Ready(ts="2026-02-10 09:25:20", rank=2)]
    assert parser.lines_seen == 1
    assert parser.feed("\n") == [LoadBegin(ts="2026-02-10 09:25:21", rank=2, avail_mem_gb=71.25)]
    assert parser.lines_seen == 2


def test_a_chained_traceback_after_a_bare_error_continues_it() -> None:
    # A log (a tail) that begins with a bare exception line, then the next link of its chain:
    # the cause was reported, the link adds no error (and the parser does not break on it).
    assert read(
        [
            OOM,
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 9, '
            "in run",
            "RuntimeError: the scheduler stopped",
        ]
    ) == [ServerError(ts=None, rank=None, category="oom", message=OOM)]

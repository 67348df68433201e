"""vLLM's parser, field by field where the other tests look only at some: the rank of a
worker's prefix on every event kind, the KV cache's size and tokens (v1 and v0's blocks x
block size), the engine of a data-parallel decode line, percentages as fractions
(docs/testing.md, "Mutation testing", found these holes)."""

from __future__ import annotations

from pathlib import Path

from specmon.backends.logtext import CONTINUATION_MAX_LINES, MAX_LINE_CHARS
from specmon.backends.vllm.parser import MAX_POSITIONS, VLLMLogParser
from specmon.events import (
    CompileBegin,
    Decode,
    HttpUp,
    KvCache,
    Notice,
    Ready,
    ServerError,
    ShardProgress,
    SpecDecode,
    WeightsLoaded,
)

LOGS = Path(__file__).parent / "logs"
WORKER = "(EngineCore_DP0 pid=559) (Worker_TP2 pid=566) INFO 11-30 06:01:44 "
STATS = (
    "Avg prompt throughput: 800.0 tokens/s, Avg generation throughput: 400.0 tokens/s, "
    "Running: 8 reqs, Waiting: 2 reqs, GPU KV cache usage: 10.5%, Prefix cache hit rate: 50.0%"
)
SPEC = (
    "SpecDecoding metrics: Draft acceptance rate: 58.4%, Mean acceptance length: 2.75, "
    "Accepted throughput: 119.10 tokens/s, Drafted throughput: 203.90 tokens/s, "
    "Accepted: 1191 tokens, Drafted: 2039 tokens, Per-position acceptance rate: 0.771, 0.583"
)


def read(*lines: str) -> list[object]:
    parser = VLLMLogParser()
    return parser.feed("".join(line + "\n" for line in lines)) + parser.flush()


def test_a_workers_rank_reaches_every_event_it_logs() -> None:
    events = read(
        WORKER + "[gpu_worker.py:772] Available KV cache memory: 88.20 GiB",
        WORKER + "[kv_cache_utils.py:1147] GPU KV cache size: 1,204,224 tokens, Maximum "
        "concurrency for 40,960 tokens per request: 29.40x",
        WORKER + "[entry.py:139] Starting vLLM server on http://0.0.0.0:8000",
        WORKER + "[loggers.py:335] Engine 003: " + STATS,
        WORKER + "[loggers.py:335] " + STATS,
    )
    decode = dict(running_req=8, tokens=None, token_usage=0.105, gen_throughput=400.0, queue_req=2)
    assert events == [
        KvCache(ts="11-30 06:01:44", rank=2, tokens=1204224, size_gb=88.2),
        HttpUp(ts="11-30 06:01:44", rank=2, port=8000),
        Decode(ts="11-30 06:01:44", rank=2, engine=3, **decode),
        Decode(ts="11-30 06:01:44", rank=2, **decode),
    ]


def test_a_v0_kv_cache_is_its_gpu_blocks_times_the_block_size() -> None:
    parser = VLLMLogParser()
    events = parser.feed((LOGS / "vllm-0.6-v0-gpu-blocks.log").read_bytes()) + parser.flush()
    kv = [e for e in events if isinstance(e, KvCache)]
    assert kv == [KvCache(ts="09-05 10:00:44", rank=None, tokens=5691 * 16, size_gb=None)]


def test_spec_decoding_lines_with_and_without_a_stamp() -> None:
    stamped, bare = read(WORKER + "[metrics.py:86] " + SPEC, SPEC)
    fields = dict(
        engine=None,
        mean_accept_len=2.75,
        accepted=1191,
        drafted=2039,
        per_position=(0.771, 0.583),
        draft_acceptance_rate=0.584,
        accepted_throughput=119.1,
        drafted_throughput=203.9,
    )
    assert stamped == SpecDecode(ts="11-30 06:01:44", rank=2, **fields)
    assert bare == SpecDecode(ts=None, rank=None, **fields)


def test_every_percentage_is_a_fraction() -> None:
    for percent in ("0.0", "7.3", "33.3", "99.9", "100.0"):
        line = WORKER + "[loggers.py:335] " + STATS.replace("10.5%", percent + "%")
        (event,) = read(line)
        assert isinstance(event, Decode)
        assert event.token_usage == round(float(percent) / 100, 6)


def test_lines_read_the_same_while_another_workers_traceback_is_open() -> None:
    """An open traceback sends every line through the per-line reader: it must read each
    line as the bulk reader does (fields, rank, engine, percentages)."""
    lines = [
        WORKER + "[gpu_worker.py:772] Available KV cache memory: 88.20 GiB",
        WORKER + "[kv_cache_utils.py:1147] GPU KV cache size: 1,204,224 tokens, Maximum "
        "concurrency for 40,960 tokens per request: 29.40x",
        WORKER + "[entry.py:139] Starting vLLM server on http://0.0.0.0:8000",
        WORKER + "[loggers.py:335] Engine 003: " + STATS.replace("10.5%", "7.3%"),
        WORKER + "[loggers.py:335] " + STATS.replace("10.5%", "41.7%"),
        WORKER + "[metrics.py:86] " + SPEC,
    ]
    other = "(EngineCore_DP0 pid=559) (Worker_TP1 pid=567) ERROR 11-30 06:01:40 [x.py:1] "
    opened = VLLMLogParser()
    events = opened.feed(
        other
        + "Traceback (most recent call last):\n"
        + other
        + '  File "x.py", line 1, in f\n'
        + "".join(line + "\n" for line in lines)
    )
    assert events == read(*lines)
    assert [e.token_usage for e in events if isinstance(e, Decode)] == [0.073, 0.417]


def test_a_traceback_through_nccl_code_names_nccl_unless_its_exception_says_more() -> None:
    def errors(exception: str) -> list[object]:
        frame = '  File "/v/distributed/device_communicators/pynccl.py", line 1, in all_reduce'
        head = "(EngineCore_DP0 pid=559) (Worker_TP2 pid=566) ERROR 11-30 06:01:44 [x.py:1] "
        text = "".join(
            head + line + "\n" for line in ("Traceback (most recent call last):", frame, exception)
        )
        return [e for e in read(text.rstrip("\n")) if isinstance(e, ServerError)]

    assert errors("RuntimeError: boom") == [
        ServerError(ts="11-30 06:01:44", rank=2, category="nccl", message="RuntimeError: boom")
    ]
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert errors(oom) == [ServerError(ts="11-30 06:01:44", rank=2, category="oom", message=oom)]


def test_lines_of_one_chunk_are_read_at_once_and_a_bare_line_takes_the_last_stamp() -> None:
    parser = VLLMLogParser()
    events = parser.feed(
        "(APIServer pid=1) INFO 11-30 06:02:05 [metrics.py:86] " + SPEC + "\n"
        "INFO:     Application startup complete.\n"
    )
    assert [type(e) for e in events] == [SpecDecode, Ready]
    assert events[1] == Ready(ts="11-30 06:02:05", rank=None)


def test_v0_blocks_carry_the_rank_and_the_kv_memory_read_before() -> None:
    head = "(Worker_TP2 pid=5) INFO 09-05 10:00:44 [worker.py:1] "
    (kv,) = read(
        head + "block_size=16",
        head + "Available KV cache memory: 8.00 GiB",
        head + "# GPU blocks: 100, # CPU blocks: 0",
    )
    assert kv == KvCache(ts="09-05 10:00:44", rank=2, tokens=1600, size_gb=8.0)


def test_a_line_past_the_bulk_readers_length_reads_the_same_per_line() -> None:
    """Lines longer than MAX_LINE_CHARS skip the bulk reader; the per-line reader must give
    the same decode (its engine included)."""
    for engine in ("Engine 003: ", ""):
        line = WORKER + "[loggers.py:335] " + engine + STATS
        (short,) = read(line)
        (long,) = read(line + " " * (MAX_LINE_CHARS + 1 - len(line)))
        assert long == short
        assert isinstance(long, Decode) and long.engine == (3 if engine else None)


# The SpecDecoding shape since ~Sep 2025 (0.33's), the one the bulk reader takes on the spot.
CURRENT_SPEC = (
    "SpecDecoding metrics: Mean acceptance length: 2.75, Accepted throughput: 119.10 tokens/s, "
    "Drafted throughput: 203.90 tokens/s, Accepted: 1191 tokens, Drafted: 2039 tokens, "
    "Per-position acceptance rate: 0.771, 0.583, Avg Draft acceptance rate: 58.4%"
)


def test_a_bare_line_takes_the_stamp_of_a_current_spec_decoding_line_before_it() -> None:
    parser = VLLMLogParser()
    events = parser.feed(
        "(APIServer pid=1) INFO 11-30 06:02:05 [metrics.py:86] " + CURRENT_SPEC + "\n"
        "INFO:     Application startup complete.\n"
    )
    assert [type(e) for e in events] == [SpecDecode, Ready]
    assert events[0].ts == events[1].ts == "11-30 06:02:05"


def test_a_spec_decoding_line_at_a_lines_start_does_not_cut_a_traceback() -> None:
    """A current SpecDecoding line with no prefix at all is read on the spot, as one after a
    prefix is: between a traceback's lines it is no line of the traceback's, and does not cut
    it (its exception is still the error)."""
    parser = VLLMLogParser()
    events = parser.feed(
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in f\n'
        "    f()\n" + CURRENT_SPEC + "\n"
        "RuntimeError: boom\n"
    )
    events += parser.flush()
    assert [type(e) for e in events] == [SpecDecode, ServerError]
    assert events[1] == ServerError(
        ts=None, rank=None, category="other", message="RuntimeError: boom"
    )


def test_a_log_that_begins_inside_a_workers_traceback_reports_that_workers_rank() -> None:
    """A tail or a paste that begins at a frame: the traceback is read from there, and its
    exception is the error of the worker (time and rank) whose prefix the frame has."""
    head = "(EngineCore_DP0 pid=559) (Worker_TP2 pid=566) ERROR 11-30 06:01:44 [x.py:1] "
    events = read(
        head + '  File "/v/worker/gpu_model_runner.py", line 1, in execute_model',
        head + "    self.model(x)",
        head + "RuntimeError: boom",
    )
    assert events == [
        ServerError(ts="11-30 06:01:44", rank=2, category="other", message="RuntimeError: boom")
    ]


def test_the_targets_shard_bar_with_its_stamp_and_not_the_drafts_after_it() -> None:
    """The target's bar is reported with its line's time and rank; the draft's `1/1` bar after
    the target's completed one is not; a bar of another total before the target's completed
    (a load begun again) is."""

    def bars(*counts: str) -> list[ShardProgress]:
        head = "(Worker_TP2 pid=5) INFO 11-30 06:01:44 [weight_utils.py:1] "
        return [
            e
            for e in read(
                *(
                    f"{head}Loading safetensors checkpoint shards: 50% Completed | {c} "
                    "[00:01<00:01, 2.00s/it]"
                    for c in counts
                )
            )
            if isinstance(e, ShardProgress)
        ]

    events = bars("0/2", "1/2", "2/2", "0/1", "1/1")
    assert [(e.done, e.total) for e in events] == [(0, 2), (1, 2), (2, 2)]
    assert all(e.ts == "11-30 06:01:44" and e.rank == 2 for e in events)
    assert events[1].seconds_per_shard == 2.0
    assert [(e.done, e.total) for e in bars("1/4", "1/2")] == [(1, 4), (1, 2)]


def test_an_over_long_lines_rest_ends_at_its_newline_and_the_next_line_is_read() -> None:
    parser = VLLMLogParser()
    assert parser.feed("x" * (MAX_LINE_CHARS + 10)) == []
    assert parser.feed("rest of it\n") == []
    (event,) = parser.feed(WORKER + "[loggers.py:335] " + STATS + "\n")
    assert isinstance(event, Decode)


def test_an_incomplete_character_at_the_end_of_the_input_is_read_as_a_replacement() -> None:
    """The decoder's last bytes are flushed as U+FFFD, so the last line keeps its full text."""
    parser = VLLMLogParser()
    events = parser.feed(
        b"Traceback (most recent call last):\n"
        b'  File "x.py", line 1, in f\n'
        b"RuntimeError: boom \xe2\x82"
    )
    events += parser.flush()
    assert events == [
        ServerError(ts=None, rank=None, category="other", message="RuntimeError: boom \ufffd")
    ]


def test_a_workers_line_that_cuts_its_traceback_is_still_read() -> None:
    """A prefixed line of the worker whose traceback is open, and no line of it, ends it: the
    cut is reported first, then the line's own event."""
    head = "(EngineCore_DP0 pid=559) (Worker_TP2 pid=566) ERROR 11-30 06:01:44 [x.py:1] "
    events = read(
        head + "Traceback (most recent call last):",
        head + '  File "x.py", line 1, in f',
        WORKER + "[entry.py:139] Starting vLLM server on http://0.0.0.0:8000",
    )
    assert [type(e) for e in events] == [ServerError, HttpUp]
    assert events[0].category == "unknown"  # type: ignore[attr-defined]
    assert events[1] == HttpUp(ts="11-30 06:01:44", rank=2, port=8000)


def test_a_spec_decoding_line_takes_the_engine_of_a_stats_line_read_per_line() -> None:
    """A stats line past the bulk reader's length is read per line: the SpecDecoding line
    after it still takes its engine, as after one read in bulk."""
    stats = WORKER + "[loggers.py:335] Engine 003: " + STATS
    events = read(
        stats + " " * (MAX_LINE_CHARS + 1 - len(stats)), WORKER + "[metrics.py:86] " + SPEC
    )
    assert [type(e) for e in events] == [Decode, SpecDecode]
    assert [e.engine for e in events] == [3, 3]  # type: ignore[attr-defined]


def test_the_warm_up_begins_a_compile_of_the_workers_rank() -> None:
    (event,) = read(WORKER + "[x.py:1] Warming up model for the compilation.")
    assert event == CompileBegin(ts="11-30 06:01:44", rank=2, part=None)


def test_a_cut_position_list_says_how_many_positions_it_had() -> None:
    rates = ", ".join(["0.500"] * (MAX_POSITIONS + 3))
    events = read(WORKER + "[metrics.py:86] " + SPEC.replace("0.771, 0.583", rates))
    (notice,) = [e for e in events if isinstance(e, Notice)]
    assert f"listed {MAX_POSITIONS + 3} positions" in notice.message


def test_a_load_after_the_server_came_up_is_a_new_runs_first() -> None:
    """The HTTP server starting, or `Application startup complete`, ends a run: the weights of
    a load begun after it are the target's again, not a draft's."""
    head = "(EngineCore_DP0 pid=559) INFO 11-30 06:01:44 [x.py:1] "
    for up in (
        "INFO:     Application startup complete.",
        head + "Starting vLLM API server 0 on http://0.0.0.0:8000",
    ):
        events = read(
            head + "Starting to load model /models/llama...",
            head + "Loading weights took 1.00 s",
            up,
            head + "Starting to load model /models/llama...",
            head + "Loading weights took 1.00 s",
        )
        assert [e.role for e in events if isinstance(e, WeightsLoaded)] == ["target", "target"]


def test_after_a_stop_is_asked_for_an_error_that_points_above_is_no_fault() -> None:
    """Either sign of a stop (`[shutdown]`, or a signal received) makes the engine's
    `See stack trace (above)` error the stop itself."""
    head = "(EngineCore_DP0 pid=559) ERROR 11-30 06:01:44 [core.py:1] "
    dead = (
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
        "See stack trace (above) for the root cause."
    )
    for stop in ("[shutdown] Shutting down", "Engine core received signal SIGTERM"):
        events = read(
            "(APIServer pid=1) INFO 11-30 06:01:43 [x.py:1] " + stop,
            head + "Traceback (most recent call last):",
            head + '  File "x.py", line 1, in f',
            head + dead,
        )
        assert [e for e in events if isinstance(e, ServerError)] == [], stop
    (error,) = read(
        head + "Traceback (most recent call last):",
        head + '  File "x.py", line 1, in f',
        head + dead,
    )
    assert isinstance(error, ServerError)


def test_a_shard_bar_after_the_drafter_began_loading_is_the_drafts() -> None:
    head = "(EngineCore_DP0 pid=559) INFO 11-30 06:01:44 [x.py:1] "
    events = read(
        head + "Loading drafter model...",
        head + "Loading safetensors checkpoint shards: 0% Completed | 0/1 [00:00<?, ?it/s]",
    )
    assert [e for e in events if isinstance(e, ShardProgress)] == []


def test_an_exceptions_message_may_continue_for_fifty_lines() -> None:
    """Lines of the same process after an exception's line continue its message (no error of
    their own) for CONTINUATION_MAX_LINES lines; the line after those is read as any other."""
    head = "(EngineCore_DP0 pid=559) ERROR 11-30 06:01:44 [core.py:1] "

    def errors(lines_between: int) -> list[str]:
        events = read(
            head + "Traceback (most recent call last):",
            head + '  File "x.py", line 1, in f',
            head + "RuntimeError: boom",
            *(head + f"  detail {n}" for n in range(lines_between)),
            head + "ValueError: another",
        )
        return [e.message for e in events if isinstance(e, ServerError)]

    assert errors(CONTINUATION_MAX_LINES - 1) == ["RuntimeError: boom"]
    assert errors(CONTINUATION_MAX_LINES) == ["RuntimeError: boom", "ValueError: another"]


def test_an_exception_groups_first_exception_is_reported_at_its_end() -> None:
    """Python 3.11's exception group, indented behind `|` to its end (anyio's TaskGroup in
    the API server): its first exception line is the error (test_crash_logs.py has the
    backends' common case; this one is in mutmut's selection)."""
    events = read(
        "  + Exception Group Traceback (most recent call last):",
        '  |   File "/x/starlette/middleware/base.py", line 185, in __call__',
        "  |     with collapse_excgroups():",
        "  | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)",
        "  +-+---------------- 1 ----------------",
        "    | Traceback (most recent call last):",
        '    |   File "/x/entrypoints/openai/api_server.py", line 88, in create',
        "    | ValueError: bad request",
        "    +------------------------------------",
    )
    assert events == [
        ServerError(
            ts=None,
            rank=None,
            category="other",
            message="ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)",
        )
    ]

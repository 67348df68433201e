"""vLLM's parser, field by field where the other tests look only at some: the rank of a
worker's prefix on every event kind, the KV cache's size and tokens (v1 and v0's blocks x
block size), the engine of a data-parallel decode line, percentages as fractions
(docs/testing.md, "Mutation testing", found these holes)."""

from __future__ import annotations

from dataclasses import replace

from support.paths import TESTS

from specmon.backends.logtext import CONTINUATION_MAX_LINES, MAX_LINE_CHARS
from specmon.backends.tracebacks import CUT_MESSAGE
from specmon.backends.vllm.parser import MAX_POSITIONS, VLLMLogParser
from specmon.model.events import (
    CompileBegin,
    CompileEnd,
    Decode,
    GraphBegin,
    GraphEnd,
    HttpUp,
    KvCache,
    LoadBegin,
    LoadEnd,
    Notice,
    Ready,
    ServerError,
    ShardProgress,
    SpecDecode,
    WeightsLoaded,
)

LOGS = TESTS / "logs"
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


# --- issue 30, the full run's survivors: start-up phases, the line reader, errors ----------

TS = "11-30 06:01:44"
ERR = "(EngineCore_DP0 pid=559) (Worker_TP2 pid=566) ERROR 11-30 06:01:44 [x.py:1] "


def test_a_shard_bar_in_items_per_second_and_its_clock_times() -> None:
    """tqdm shows shards per second while a shard takes under a second (`1.00it/s` at one
    exactly): the seconds per shard are its inverse, to six places; the bar's two clock
    fields are the elapsed and remaining time, in that order."""
    head = WORKER + "[weight_utils.py:1] Loading safetensors checkpoint shards: "
    events = read(
        head + " 33% Completed | 1/3 [00:04<00:02,  3.00it/s]",
        head + " 67% Completed | 2/3 [00:05<00:01,  1.00it/s]",
    )
    where = dict(ts=TS, rank=2, total=3)
    assert events == [
        ShardProgress(**where, done=1, elapsed_s=4.0, remaining_s=2.0, seconds_per_shard=0.333333),
        ShardProgress(**where, done=2, elapsed_s=5.0, remaining_s=1.0, seconds_per_shard=1.0),
    ]


def test_a_shard_bar_without_a_rate_has_no_seconds_per_shard_and_never_raises() -> None:
    """The first draw (`?it/s`) has no rate yet; a zero rate (a bar from another tool, or
    edited) must not divide by zero: input never makes the parser raise."""
    head = WORKER + "[weight_utils.py:1] Loading safetensors checkpoint shards: "
    events = read(
        head + "  0% Completed | 0/2 [00:00<?, ?it/s]",
        head + " 50% Completed | 1/2 [00:03<00:03,  0.00it/s]",
    )
    where = dict(ts=TS, rank=2, total=2, seconds_per_shard=None)
    assert events == [
        ShardProgress(**where, done=0, elapsed_s=0.0, remaining_s=None),
        ShardProgress(**where, done=1, elapsed_s=3.0, remaining_s=3.0),
    ]


def test_a_log_that_ends_inside_a_shard_bars_redraw_gives_no_bar_and_never_raises() -> None:
    """A log read while it is written may end mid-redraw: the shards line without its counts
    is no bar (and no error); the lines before it keep their events."""
    parser = VLLMLogParser()
    events = parser.feed(
        WORKER + "[gpu_model_runner.py:1] Starting to load model /models/llama...\n"
        "Loading safetensors checkpoint shards:  50% Completed | 1/"
    )
    assert events + parser.flush() == [LoadBegin(ts=TS, rank=2)]


def test_each_start_up_line_gives_its_event_with_its_lines_time_and_rank() -> None:
    """Every start-up event kind carries the time and TP rank of the line that gave it."""
    cases = [
        ("[gpu_model_runner.py:1] Starting to load model /models/llama...", LoadBegin()),
        (
            "[default_loader.py:1] Loading weights took 1.50 seconds",
            WeightsLoaded(role="target", seconds=1.5),
        ),
        ("[model_runner.py:1] Loading model weights took 14.99 GB", LoadEnd(mem_usage_gb=14.99)),
        (
            "[decorators.py:743] [backbone] saved AOT compiled function to "
            "/root/.cache/vllm/torch_compile_cache/torch_aot_compile/0962e4/rank_0_0/model",
            CompileEnd(part="backbone", seconds=None),
        ),
        (
            "[cudagraph_utils.py:1] Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): "
            "100%|██████████| 67/67 [00:03<00:00, 20.10it/s]",
            GraphBegin(),
        ),
        ("[launcher.py:1] Application startup complete.", Ready()),
    ]
    for line, bare in cases:
        assert read(WORKER + line) == [replace(bare, ts=TS, rank=2)], line


def test_the_cpu_builds_load_ends_at_the_warm_up_on_the_workers_rank_and_ends_the_run() -> None:
    """The CPU build prints no `Model loading took`: the warm-up ends the load (its time and
    rank) and the run, so a load begun after it (a restart) reads the target's weights
    again, not a draft's."""
    load = [
        WORKER + "[cpu_model_runner.py:68] Starting to load model m...",
        WORKER + "[default_loader.py:501] Loading weights took 0.04 seconds",
        WORKER + "[cpu_model_runner.py:87] Warming up model for the compilation...",
    ]
    where = dict(ts=TS, rank=2)
    weights = WeightsLoaded(**where, role="target", seconds=0.04)
    assert read(*load, *load[:2]) == [
        LoadBegin(**where),
        weights,
        LoadEnd(**where),
        CompileBegin(**where, part=None),
        LoadBegin(**where),
        weights,
    ]


def test_a_load_begun_after_a_load_ended_is_a_new_runs_and_its_errors_are_reported() -> None:
    """A server that crashed after its load (before it came up) and was restarted into the
    same log: the new load's weights are the target's again and the same crash is reported
    again, for V1's `Model loading took` and V0's `Loading model weights took` alike."""
    head = WORKER + "[x.py:1] "
    crash = [
        ERR + "Traceback (most recent call last):",
        ERR + '  File "/v/worker/gpu_worker.py", line 1, in determine_available_memory',
        ERR + "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.",
    ]
    oom = ServerError(ts=TS, rank=2, category="oom", message=crash[-1].removeprefix(ERR))
    weights = head + "Loading weights took 1.50 seconds"
    target = WeightsLoaded(ts=TS, rank=2, role="target", seconds=1.5)
    for loaded, load_end in (
        (
            [weights, head + "Model loading took 15.20 GiB memory and 5.100000 seconds"],
            [target, LoadEnd(ts=TS, rank=2, mem_usage_gb=15.2, elapsed_s=5.1)],
        ),
        (
            [head + "Loading model weights took 14.99 GB"],
            [LoadEnd(ts=TS, rank=2, mem_usage_gb=14.99)],
        ),
    ):
        run = [head + "Starting to load model /models/llama...", *loaded, *crash]
        first = [LoadBegin(ts=TS, rank=2), *load_end, oom]
        assert read(*run, *run) == first + first, loaded[-1]


def test_a_second_graph_capture_after_the_first_finished_begins_again() -> None:
    """Two engines (data parallel) capturing one after the other: each capture is a begin and
    an end; the bar's redraws within one capture give no second begin."""
    bar = "Capturing CUDA graphs (decode, FULL): {}%|█| {}/35 [00:01<00:01, 20.00it/s]"
    done = "[gpu_model_runner.py:1] Graph capturing finished in 5 secs, took 0.50 GiB"
    dp1 = WORKER.replace("EngineCore_DP0 pid=559", "EngineCore_DP1 pid=560")
    events = read(
        bar.format(50, 17),
        bar.format(100, 35),
        WORKER + done,
        bar.format(50, 17),
        dp1 + done,
    )
    assert events == [
        GraphBegin(ts=None, rank=None),
        GraphEnd(ts=TS, rank=2, seconds=5.0, mem_usage_gb=0.5),
        GraphBegin(ts=None, rank=None),
        GraphEnd(ts=TS, rank=2, seconds=5.0, mem_usage_gb=0.5),
    ]


def test_the_cpu_backends_blocks_alone_times_the_block_size() -> None:
    """V0's CPU backend prints `# CPU blocks: 512` alone: its KV cache is those blocks of the
    stated block size."""
    head = "INFO 09-05 10:00:44 [executor_base.py:1] "
    (kv,) = read(head + "block_size=16", head + "# CPU blocks: 512")
    assert kv == KvCache(ts="09-05 10:00:44", rank=None, tokens=512 * 16, size_gb=None)


def test_a_request_path_that_reads_like_an_error_in_an_access_line_is_no_error() -> None:
    """Anyone who can reach the API writes into uvicorn's access line (it logs the request's
    path): `/OutOfMemoryError` there is no server error, whatever its status."""
    assert read('INFO:     10.0.0.7:51234 - "GET /OutOfMemoryError HTTP/1.1" 404 Not Found') == []


def test_an_error_line_that_quotes_a_name_is_the_workers_error() -> None:
    """An error line outside a traceback is reported with its time and rank, quotes and
    all (only an access line, with `HTTP/` and a closing quote, is left out)."""
    message = 'RuntimeError: Failed to load "libcuda.so.1" from the driver'
    assert read(ERR + message) == [ServerError(ts=TS, rank=2, category="other", message=message)]


def test_workers_cut_at_the_same_frame_are_one_error() -> None:
    """Eight workers killed at the same frame (here two, the input ends) leave the same cut
    traceback: it is reported once, with the first worker's rank."""
    lines = []
    for rank in (0, 1):
        head = ERR.replace("Worker_TP2 pid=566", f"Worker_TP{rank} pid=56{rank}")
        lines += [
            head + "Traceback (most recent call last):",
            head + '  File "/v/worker/gpu_model_runner.py", line 1, in execute_model',
        ]
    last = 'File "/v/worker/gpu_model_runner.py", line 1, in execute_model'
    assert read(*lines) == [
        ServerError(ts=TS, rank=0, category="unknown", message=f"{CUT_MESSAGE}; last frame: {last}")
    ]


def test_a_workers_exception_group_through_nccl_code_is_an_nccl_error_of_its_rank() -> None:
    """An exception group's first exception is the error, with the group's time and rank, and
    NCCL frames inside it name nccl as they do in a plain traceback."""
    group = "ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)"
    events = read(
        ERR + "  + Exception Group Traceback (most recent call last):",
        ERR + '  |   File "/v/distributed/device_communicators/pynccl.py", line 1, in all_reduce',
        ERR + "  |     with collapse_excgroups():",
        ERR + "  | " + group,
        ERR + "  +-+---------------- 1 ----------------",
        ERR + "    | Traceback (most recent call last):",
        ERR + '    |   File "/v/worker/gpu_worker.py", line 88, in execute',
        ERR + "    | RuntimeError: boom",
        ERR + "    +------------------------------------",
    )
    assert events == [ServerError(ts=TS, rank=2, category="nccl", message=group)]


def test_a_line_that_cuts_its_workers_traceback_keeps_its_own_events_in_order() -> None:
    """A worker's warm-up line that cuts its open traceback while the load is open: the cut
    first, then the load's end, then the compile's begin."""
    events = read(
        WORKER + "[cpu_model_runner.py:68] Starting to load model m...",
        ERR + "Traceback (most recent call last):",
        ERR + '  File "/v/worker/cpu_model_runner.py", line 1, in load_model',
        WORKER + "[cpu_model_runner.py:87] Warming up model for the compilation...",
    )
    last = 'File "/v/worker/cpu_model_runner.py", line 1, in load_model'
    assert events == [
        LoadBegin(ts=TS, rank=2),
        ServerError(
            ts=TS, rank=2, category="unknown", message=f"{CUT_MESSAGE}; last frame: {last}"
        ),
        LoadEnd(ts=TS, rank=2),
        CompileBegin(ts=TS, rank=2, part=None),
    ]


def test_a_traceback_after_a_chained_one_is_reported() -> None:
    """A chained traceback's later link is no new error, but the next traceback of the same
    process (another request failing later) is."""
    head = "(APIServer pid=1) ERROR 11-30 06:01:44 [serving_chat.py:1] "
    frame = head + '  File "/v/entrypoints/openai/serving_chat.py", line 1, in create'
    events = read(
        head + "Traceback (most recent call last):",
        frame,
        head + "KeyError: 'prompt'",
        head + "The above exception was the direct cause of the following exception:",
        head + "Traceback (most recent call last):",
        frame,
        head + "ValueError: bad request",
        head + "Traceback (most recent call last):",
        frame,
        head + "RuntimeError: another request failed",
    )
    assert [e.message for e in events if isinstance(e, ServerError)] == [
        "KeyError: 'prompt'",
        "RuntimeError: another request failed",
    ]


def test_an_ignored_exceptions_traceback_is_looked_for_within_three_lines() -> None:
    """Python's `Exception ignored in` is followed by its traceback; other lines of the same
    stream (a bar's redraws) may come between, up to the third line; a traceback after
    those is a failure of its own. One cut by the input's end is no error either."""
    ignored = "Exception ignored in: <function CPUDNNLGEMMHandler.__del__ at 0x7fcbe3b12340>"
    bar = "Capturing CUDA graphs (decode, FULL): {}%|█| {}/35 [00:01<00:01, 20.00it/s]"
    recursion = "RecursionError: maximum recursion depth exceeded while calling a Python object"
    traceback = [
        "Traceback (most recent call last):",
        '  File "/opt/venv/lib/python3.11/site-packages/vllm/_custom_ops.py", line 3728, in __del__',
        recursion,
    ]
    begin = GraphBegin(ts=None, rank=None)
    two_between = [bar.format(10, 3), bar.format(20, 7)]
    assert read(ignored, *two_between, *traceback) == [begin]
    three_between = [*two_between, bar.format(30, 10)]
    assert read(ignored, *three_between, *traceback) == [
        begin,
        ServerError(ts=None, rank=None, category="other", message=recursion),
    ]
    assert read(ignored, *traceback[:2]) == []


def test_every_unreadable_stats_line_counts() -> None:
    """``unparsed_decode_like`` counts each stats line that did not read (a cut one here)."""
    parser = VLLMLogParser()
    cut = WORKER + "[loggers.py:335] Engine 000: Avg prompt throughput: 800.0 tokens/s, Avg"
    assert parser.feed(f"{cut}\n{cut}\n") == []
    assert parser.unparsed_decode_like == 2


def test_a_spec_decoding_line_takes_its_own_processs_engine_else_the_last_one() -> None:
    """Two engines' processes log stats and SpecDecoding lines in turn: each SpecDecoding line
    takes the engine of its own process's last stats line; one from a process that logs no
    stats (the API server) takes the last stats line's engine, whoever wrote it. Both
    shapes of the line read alike."""
    dp0 = "(EngineCore_DP0 pid=2) INFO 11-30 06:01:44 [loggers.py:1] "
    dp1 = "(EngineCore_DP1 pid=3) INFO 11-30 06:01:44 [loggers.py:1] "
    api = "(APIServer pid=1) INFO 11-30 06:01:44 [metrics.py:1] "
    for spec in (SPEC, CURRENT_SPEC):
        events = read(
            dp0 + "Engine 000: " + STATS,
            dp1 + "Engine 001: " + STATS,
            dp0 + spec,
            dp1 + spec,
            api + spec,
        )
        assert [(type(e), e.engine) for e in events] == [  # type: ignore[attr-defined]
            (Decode, 0),
            (Decode, 1),
            (SpecDecode, 0),
            (SpecDecode, 1),
            (SpecDecode, 1),
        ], spec


def test_percentages_are_computed_from_their_text_when_not_yet_known() -> None:
    """The percentage cache is the module's, so an earlier test has filled it with every
    text these lines hold: it is emptied here, so that the computation itself is read (a
    mutation test's worker is forked after the other tests ran, with the cache full)."""
    from specmon.backends.vllm import parser as vllm_parser

    vllm_parser._FRACTIONS.clear()
    stats = STATS.replace("10.5%", "12.3%")
    spec = SPEC.replace("58.4%", "45.6%")
    decode, spec_decode = read("INFO 11-30 06:01:44 [loggers.py:335] " + stats, spec)
    assert isinstance(decode, Decode) and isinstance(spec_decode, SpecDecode)
    assert decode.token_usage == 0.123
    assert spec_decode.draft_acceptance_rate == 0.456
    for tenth in range(5000):  # more texts than it keeps: it starts again, the values right
        assert vllm_parser._FRACTIONS[f"{tenth / 10:.1f}"] == round(tenth / 1000, 6)
    assert len(vllm_parser._FRACTIONS) <= 4096


def test_a_torchrun_rank_behind_docker_composes_prefix_is_the_lines_rank() -> None:
    """`docker compose up` puts `vllm-1  | ` before torchrun's `[rankN]: `, so the wrapper is
    not at the line's start: its rank is still read from the prefix, on a bare progress bar,
    a headed line and a stats line alike."""
    compose = "vllm-1  | [rank2]: "
    events = read(
        compose
        + "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01, 1.0it/s]",
        compose + "INFO 11-30 06:01:44 [default_loader.py:262] Loading weights took 3.00 seconds",
        compose + "INFO 11-30 06:01:45 [loggers.py:335] " + STATS,
    )
    assert [(type(event), event.rank) for event in events] == [  # type: ignore[attr-defined]
        (ShardProgress, 2),
        (WeightsLoaded, 2),
        (Decode, 2),
    ]


def test_a_torchrun_wrapped_traceback_is_one_error_of_its_rank() -> None:
    """torchrun writes `[rankN]: ` before each line of a rank's traceback: the wrapper (and
    its space) comes off, so the lines read as the traceback they are, its cause reported
    once with the wrapper's rank."""
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    traceback = [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/vllm/worker.py", line 12, in run',
        "    load()",
        oom,
    ]
    events = read(*("[rank1]: " + line for line in traceback))
    assert events == [ServerError(ts=None, rank=1, category="oom", message=oom)]

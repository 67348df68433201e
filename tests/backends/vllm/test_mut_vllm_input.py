"""vLLM's parser at its input: the prefixes around a message (process tags, ranks, wrappers
that are not vLLM's), long and cut lines, chunk boundaries, and the lines the bulk reader
takes on the spot (docs/testing.md, "Mutation testing": the survivors of the full run in
`feed`, `split_line`, `_lines` and their helpers)."""

from __future__ import annotations

import pytest

from specmon.backends.logtext import MAX_LINE_CHARS
from specmon.backends.vllm.parser import MAX_POSITIONS, VLLMLogParser
from specmon.model.events import (
    Decode,
    Event,
    HttpUp,
    KvCache,
    LoadBegin,
    Notice,
    Ready,
    ServerError,
    SpecDecode,
    WeightsLoaded,
)

STAMP = "11-30 06:01:44"
STATS = (
    "Avg prompt throughput: 800.0 tokens/s, Avg generation throughput: 400.0 tokens/s, "
    "Running: 8 reqs, Waiting: 2 reqs, GPU KV cache usage: 10.5%, Prefix cache hit rate: 50.0%"
)
DECODE = dict(running_req=8, tokens=None, token_usage=0.105, gen_throughput=400.0, queue_req=2)
# The SpecDecoding shape since ~Sep 2025 (0.33's), which the bulk reader takes on the spot.
CURRENT_SPEC = (
    "SpecDecoding metrics: Mean acceptance length: 2.75, Accepted throughput: 119.10 tokens/s, "
    "Drafted throughput: 203.90 tokens/s, Accepted: 1191 tokens, Drafted: 2039 tokens, "
    "Per-position acceptance rate: 0.771, 0.583, Avg Draft acceptance rate: 58.4%"
)
SPEC_FIELDS = dict(
    mean_accept_len=2.75,
    accepted=1191,
    drafted=2039,
    per_position=(0.771, 0.583),
    draft_acceptance_rate=0.584,
    accepted_throughput=119.1,
    drafted_throughput=203.9,
)


def read(*lines: str) -> list[Event]:
    parser = VLLMLogParser()
    return parser.feed("".join(line + "\n" for line in lines)) + parser.flush()


def errors(events: list[Event]) -> list[ServerError]:
    return [e for e in events if isinstance(e, ServerError)]


# --- prefixes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tag",
    [
        "(VllmWorker rank=3 pid=566)",  # ~0.8-0.9
        "(VllmWorker TP3 pid=566)",  # ~0.10.0-0.10.1
        "(EngineCore_DP0 pid=559) (Worker_TP3 pid=566)",  # 0.10.2 on, nested
    ],
)
def test_each_releases_worker_tag_gives_the_rank_of_every_event(tag: str) -> None:
    """The rank stands in the worker's process tag, spelt differently by each release: it
    reaches every event that worker logs, those the bulk reader takes on the spot included."""
    head = f"{tag} INFO {STAMP} "
    events = read(
        head + "[gpu_model_runner.py:1] Starting to load model /models/llama...",
        head + "[loggers.py:335] Engine 000: " + STATS,
        head + "[metrics.py:120] " + CURRENT_SPEC,
    )
    assert events == [
        LoadBegin(ts=STAMP, rank=3),
        Decode(ts=STAMP, rank=3, engine=0, **DECODE),
        SpecDecode(ts=STAMP, rank=3, engine=0, **SPEC_FIELDS),
    ]


def test_a_torchrun_rank_prefix_gives_the_rank_of_a_current_spec_decoding_line() -> None:
    """torchrun's `[rank1]:` before each line (vLLM's external launcher: one engine per rank)
    is the rank of that line's events, its SpecDecoding line read on the spot too."""
    events = read(
        f"[rank1]:INFO {STAMP} [loggers.py:335] Engine 000: " + STATS,
        f"[rank1]:INFO {STAMP} [metrics.py:120] " + CURRENT_SPEC,
    )
    assert events == [
        Decode(ts=STAMP, rank=1, engine=0, **DECODE),
        SpecDecode(ts=STAMP, rank=1, engine=0, **SPEC_FIELDS),
    ]


def test_a_compose_service_named_after_its_tensor_parallelism_is_no_rank() -> None:
    """docker compose's `name  | ` is no rank, whatever the name says (`TP8`: the size)."""
    events = read(
        f"llama70B-TP8-1  | INFO {STAMP} [gpu_model_runner.py:1] Starting to load model x...",
        f"llama70B-TP8-1  | INFO {STAMP} [entry.py:139] Starting vLLM server on http://0.0.0.0:8000",
    )
    assert events == [LoadBegin(ts=STAMP, rank=None), HttpUp(ts=STAMP, rank=None, port=8000)]


@pytest.mark.parametrize(
    "wrapper",
    [
        "Nov 30 06:01:44 gpu-node-3 vllm[1234]: ",  # journalctl -u vllm
        "2025-11-30T06:01:44.123456789Z stderr F ",  # a Kubernetes node's container log file
    ],
)
def test_a_workers_traceback_behind_a_wrapper_vllm_does_not_know(wrapper: str) -> None:
    """Older releases put the worker's tag on every line, tracebacks included (no vLLM header
    there); a wrapper in front that the parser does not know (journald, a container runtime's
    log file) still leaves the message to start after the tag, and the tag's rank."""
    tag = "(VllmWorker TP3 pid=566) "
    events = read(
        wrapper + tag + "Traceback (most recent call last):",
        wrapper + tag + '  File "/v/worker/gpu_model_runner.py", line 1, in execute_model',
        wrapper + tag + "    self.model(x)",
        wrapper + tag + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    )
    assert events == [
        ServerError(
            ts=None,
            rank=3,
            category="oom",
            message="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        )
    ]


def test_an_exception_quoting_another_process_log_far_into_its_message_keeps_its_text() -> None:
    """Only a line's first characters may hold its header and process tags: a header or tag
    that an exception's message quotes (a subprocess' output) further on is text of the
    message, which stays whole."""
    quoted = f"(Worker_TP1 pid=567) INFO {STAMP} [backends.py:1] Compiling a graph"
    message = (
        "RuntimeError: compilation failed; the compiler said: "
        + "error: cannot lower the graph; " * 16
        + "last output: "
        + quoted
    )
    assert message.index(quoted) > 400
    events = read("(VllmWorker TP3 pid=566) " + message)
    assert events == [ServerError(ts=None, rank=3, category="other", message=message)]


@pytest.mark.parametrize("level", ["INFO", "WARNING", "DEBUG"])
def test_a_request_log_quoting_an_error_is_no_error(level: str) -> None:
    """A line below ERROR is no error, whatever text it holds: a logged request quotes its
    user's prompt (`--enable-log-requests`); the same text in an ERROR line is one."""
    text = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    line = f"Received request chatcmpl-1: prompt: 'Why does vLLM print {text}?'"
    for head in (
        f"(APIServer pid=1) {level} {STAMP} [logger.py:41] ",
        f"{level} {STAMP} logger.py:41] ",  # <=0.6
    ):
        assert read(head + line) == [], head
    error = f"(APIServer pid=1) ERROR {STAMP} [core.py:1] {text}"
    assert read(error) == [ServerError(ts=STAMP, rank=None, category="oom", message=text)]


# --- the bulk reader and the per-line reader --------------------------------------------------


@pytest.mark.parametrize(
    "stats",
    [
        STATS,  # no prefix at all: the stats line at the line's start
        f"INFO {STAMP} [loggers.py:335] Engine 000: " + STATS,  # 0.8-0.9: the API server's
    ],
)
def test_a_stats_line_between_a_tracebacks_lines_does_not_cut_it(stats: str) -> None:
    """0.8-0.9's API server prints its lines without a process tag: a stats line its stat
    logger writes while a traceback is being printed is no line of the traceback and does not
    cut it; the traceback's exception is still the error."""
    parser = VLLMLogParser()
    events = parser.feed(
        "Traceback (most recent call last):\n"
        '  File "/v/entrypoints/openai/api_server.py", line 1, in create\n'
        "    await handler(request)\n" + stats + "\n"
        "RuntimeError: boom\n"
    )
    events += parser.flush()
    assert [type(e) for e in events] == [Decode, ServerError]
    assert errors(events) == [
        ServerError(ts=None, rank=None, category="other", message="RuntimeError: boom")
    ]


def pad(line: str) -> str:
    """``line`` past the bulk reader's length, read by the per-line reader alone."""
    return line + " " * (MAX_LINE_CHARS + 1 - len(line))


def test_a_line_that_lost_its_newline_reads_the_same_in_both_readers() -> None:
    """Two engines' lines glued by a lost newline: the bulk reader reads the first record, as
    the per-line reader (a line past the bulk reader's length) does."""
    first = f"(APIServer pid=1) INFO {STAMP} [loggers.py:335] Engine 000: " + STATS
    second = "(APIServer pid=1) INFO 11-30 06:01:54 [loggers.py:335] Engine 001: " + STATS.replace(
        "Running: 8", "Running: 5"
    )
    spec = f"(APIServer pid=1) INFO {STAMP} [metrics.py:120] " + CURRENT_SPEC
    other_spec = spec.replace("Accepted: 1191", "Accepted: 7")
    for glued in (first + second, spec + other_spec):
        (bulk,) = read(glued)
        (per_line,) = read(pad(glued))
        assert bulk == per_line
    assert read(first + second) == [Decode(ts=STAMP, rank=None, engine=0, **DECODE)]
    assert read(spec + other_spec) == [SpecDecode(ts=STAMP, rank=None, engine=None, **SPEC_FIELDS)]


@pytest.mark.parametrize("percent", ["58.4", "12.34567", "0.0000051", "100.0", "33.333333"])
def test_the_acceptance_rate_reads_the_same_in_both_readers(percent: str) -> None:
    line = f"(APIServer pid=1) INFO {STAMP} [metrics.py:120] " + CURRENT_SPEC.replace(
        "58.4%", percent + "%"
    )
    (bulk,) = read(line)
    (per_line,) = read(pad(line))
    assert isinstance(bulk, SpecDecode)
    assert bulk == per_line
    assert bulk.draft_acceptance_rate == round(float(percent) / 100, 6)


# --- engines and stamps ---------------------------------------------------------------------


def test_each_data_parallel_engines_spec_decoding_line_takes_its_own_engine() -> None:
    """With data parallelism each engine core logs its own stats and SpecDecoding lines; a
    SpecDecoding line takes the engine of its own process's last stats line, and one of a
    process that logged none takes the last stats line's, whoever logged it."""
    dp0 = f"(EngineCore_DP0 pid=559) INFO {STAMP} "
    dp1 = f"(EngineCore_DP1 pid=560) INFO {STAMP} "
    events = read(
        dp0 + "[loggers.py:335] Engine 000: " + STATS,
        dp1 + "[loggers.py:335] Engine 001: " + STATS,
        dp0 + "[metrics.py:120] " + CURRENT_SPEC,
        dp1 + "[metrics.py:120] " + CURRENT_SPEC,
        f"(APIServer pid=1) INFO {STAMP} [metrics.py:120] " + CURRENT_SPEC,
        f"INFO {STAMP} [metrics.py:120] " + CURRENT_SPEC,
    )
    assert [e.engine for e in events if isinstance(e, SpecDecode)] == [0, 1, 1, 1]


def test_uvicorns_line_takes_the_stamp_of_the_last_stamped_stats_line() -> None:
    """uvicorn's `Application startup complete` has no stamp of its own: it takes the last
    one seen, a stats line's (read on the spot) included; a stats line without a stamp keeps
    the one before; with no stamp seen at all it has none."""
    later = "11-30 06:02:05"
    assert read(
        f"(APIServer pid=1) INFO {STAMP} [entry.py:139] Starting vLLM server on http://0.0.0.0:8000",
        f"(APIServer pid=1) INFO {later} [loggers.py:335] Engine 000: " + STATS,
        "INFO:     Application startup complete.",
    )[-1] == Ready(ts=later, rank=None)
    assert read(
        f"(APIServer pid=1) INFO {STAMP} [entry.py:139] Starting vLLM server on http://0.0.0.0:8000",
        "Engine 000: " + STATS,
        "INFO:     Application startup complete.",
    )[-1] == Ready(ts=STAMP, rank=None)
    assert read(
        "INFO:     Started server process [1]",
        "INFO:     Waiting for application startup.",
        "INFO:     Application startup complete.",
    ) == [Ready(ts=None, rank=None)]


# --- per-position lists and cut lines -------------------------------------------------------


def spec_with(rates: list[str]) -> str:
    return f"(APIServer pid=1) INFO {STAMP} [metrics.py:120] " + CURRENT_SPEC.replace(
        "0.771, 0.583", ", ".join(rates)
    )


def test_a_position_list_past_the_deepest_draft_is_cut_and_said_once() -> None:
    """A list of exactly MAX_POSITIONS is kept whole; a longer one is cut there, and a notice
    (once per log) says how many positions it had."""
    parser = VLLMLogParser()
    full = [f"0.{n:03d}" for n in range(MAX_POSITIONS)]
    (whole,) = parser.feed(spec_with(full) + "\n")
    assert isinstance(whole, SpecDecode)
    assert whole.per_position == tuple(float(rate) for rate in full)
    longer = [*full, "0.100", "0.050"]
    events = parser.feed(spec_with(longer) + "\n" + spec_with(longer) + "\n")
    notice = Notice(
        source="log",
        message=f"a SpecDecoding line listed {MAX_POSITIONS + 2} positions; those past "
        f"{MAX_POSITIONS} (the deepest draft read) are left out",
    )
    assert [type(e) for e in events] == [SpecDecode, Notice, SpecDecode]
    assert events[1] == notice
    assert events[0] == events[2] == whole


def test_a_spec_decoding_line_cut_at_the_end_of_the_log_gives_the_fields_it_holds() -> None:
    """A log's last line cut mid-way (the server killed while writing, a copy of a growing
    file) gives the fields whose text is whole before the cut."""
    head = f"(APIServer pid=1) INFO {STAMP} [metrics.py:120] "
    throughputs = dict(mean_accept_len=2.75, accepted_throughput=119.1, drafted_throughput=203.9)

    def last_line(cut_after: str) -> list[Event]:
        parser = VLLMLogParser()
        text = head + CURRENT_SPEC[: CURRENT_SPEC.index(cut_after) + len(cut_after)]
        return parser.feed(text) + parser.flush()

    assert last_line("Accepted: 1191 tokens, Drafted: 20") == [
        SpecDecode(ts=STAMP, rank=None, accepted=1191, **throughputs)
    ]
    assert last_line("0.583, Avg Dr") == [
        SpecDecode(
            ts=STAMP,
            rank=None,
            accepted=1191,
            drafted=2039,
            per_position=(0.771, 0.583),
            **throughputs,
        )
    ]


def test_a_v0_log_that_never_states_its_block_size_gives_no_kv_tokens() -> None:
    """V0's KV cache is in blocks; without a stated block size its tokens are unknown."""
    (kv,) = read(f"INFO {STAMP} [executor_base.py:1] # GPU blocks: 5691, # CPU blocks: 2048")
    assert kv == KvCache(ts=STAMP, rank=None, tokens=None, size_gb=None)


def test_a_worker_that_begins_loading_late_does_not_begin_a_new_run() -> None:
    """A worker on a slower node may print `Starting to load model` after another read its
    target's weights: the load is the same, and that other worker's next weights are its
    draft's."""
    tp0 = f"(VllmWorker TP0 pid=5) INFO {STAMP} [x.py:1] "
    tp1 = f"(VllmWorker TP1 pid=6) INFO {STAMP} [x.py:1] "
    events = read(
        tp0 + "Starting to load model /models/llama...",
        tp0 + "Loading weights took 10.00 seconds",
        tp1 + "Starting to load model /models/llama...",
        tp1 + "Loading weights took 11.00 seconds",
        tp0 + "Loading weights took 1.00 seconds",
    )
    loaded = [(e.rank, e.role) for e in events if isinstance(e, WeightsLoaded)]
    assert loaded == [(0, "target"), (1, "target"), (0, "draft")]


# --- chunks and over-long lines -------------------------------------------------------------


def test_the_lines_after_an_over_long_lines_rest_are_read_wherever_the_chunks_end() -> None:
    """The rest of a line cut at MAX_LINE_CHARS is dropped up to its newline, and only that:
    every line after it is read, whether the chunk begins at that newline or holds it with
    several lines after."""
    head = f"(APIServer pid=1) INFO {STAMP} [loggers.py:335] "
    lines = head + "Engine 000: " + STATS + "\n" + head + "Engine 001: " + STATS + "\n"
    expected = [
        Decode(ts=STAMP, rank=None, engine=0, **DECODE),
        Decode(ts=STAMP, rank=None, engine=1, **DECODE),
    ]
    for rest in ("rest of it", ""):
        parser = VLLMLogParser()
        assert parser.feed("x" * (MAX_LINE_CHARS + 10)) == []
        assert parser.feed(rest + "\n" + lines) + parser.flush() == expected, repr(rest)

"""SGLang's parser where the full mutation run left survivors (docs/testing.md, "Mutation
testing"): traceback and continuation bookkeeping, the state between lines that parallel
reading compares, decode lines read on their own, the end of the input, odd field texts.

The TP rank of a prefix's tags is tested on ``_rank_of`` and a fresh ``_RankTable``
directly: the parser keeps the module's table for its whole life, so a line only reads
tags that no earlier test left in it."""

from __future__ import annotations

from specmon.backends.sglang.parser import (
    SGLangLogParser,
    _rank_of,
    _RankTable,
    decode_template,
    parse_line,
)
from specmon.backends.sglang.summary import SGLangLogSummary
from specmon.logs.event_lines import json_lines
from specmon.model.events import (
    Decode,
    Event,
    HttpUp,
    KvCache,
    Prefill,
    Ready,
    ServerError,
    ShardProgress,
)

TS = "2026-02-10 09:19:12"
PREFIX = f"[{TS} TP3] "
# 0.5.9's decode line (the parser's first known shape) and 0.5.2's (dot, trailing `, `).
DECODE_059 = (
    PREFIX + "Decode batch, #running-req: 6, #token: 12188, token usage: 0.02, "
    "accept len: 3.12, accept rate: 0.78, cuda graph: True, gen throughput (token/s): 412.55, "
    "#queue-req: 0"
)
DECODE_052 = (
    PREFIX + "Decode batch. #running-req: 4, #token: 9000, token usage: 0.10, "
    "accept len: 2.50, cuda graph: True, gen throughput (token/s): 60.00, #queue-req: 1, "
)
HEAD = "Traceback (most recent call last):"
FRAME = '  File "/sglang/python/sglang/srt/managers/scheduler.py", line 1942, in event_loop'
SOURCE = "    self.run_batch(batch)"
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
CUDA_ERROR = "CUDA error: an illegal memory access was encountered"
DOCKER_TS = "2026-02-10T09:19:12.123456789Z"


def read(*lines: str) -> tuple[SGLangLogParser, list[Event]]:
    """A parser that read ``lines`` as one chunk, and the events they gave."""
    parser = SGLangLogParser()
    return parser, parser.feed("".join(line + "\n" for line in lines))


FRESH = SGLangLogParser().line_state()


# --- ranks ---------------------------------------------------------------------------------


def test_the_rank_is_the_last_tp_tag_with_1_to_19_digits() -> None:
    assert _rank_of(" DP1 TP3 EP3") == 3
    assert _rank_of(" TP13") == 13
    assert _rank_of(" TP2 TP5") == 5
    assert _rank_of(" DP0 EP3 PP1") is None  # no TP tag: no rank, not another tag's number
    assert _rank_of("") is None
    assert _rank_of(" tp3") is None
    assert _rank_of(" TP" + "9" * 19) == int("9" * 19)
    assert _rank_of(" TP" + "9" * 20) is None  # longer than the decode templates read


def test_the_rank_table_reads_each_tag_string_once_and_alike() -> None:
    table = _RankTable()
    assert table[" DP1 TP3 EP3"] == 3
    assert table[" DP1 TP3 EP3"] == 3  # the stored answer
    assert table[" DP0"] is None
    assert dict(table) == {" DP1 TP3 EP3": 3, " DP0": None}


# --- fields --------------------------------------------------------------------------------


def test_a_052_decode_line_whose_trailing_blank_was_dropped() -> None:
    """0.4.10-0.5.5 end decode lines with `, `; a collector that strips trailing blanks leaves
    `#queue-req: 1,`."""
    assert parse_line(DECODE_052.rstrip()) == Decode(
        ts=TS,
        rank=3,
        running_req=4,
        tokens=9000,
        token_usage=0.1,
        accept_len=2.5,
        gen_throughput=60.0,
        queue_req=1,
        cuda_graph=True,
    )


def test_a_decode_line_with_a_garbled_or_missing_number_is_no_decode() -> None:
    assert parse_line(DECODE_059.replace("#queue-req: 0", "#queue-req: 0X")) is None
    # Cut before its last field (a line cut by a tail, a killed process).
    assert parse_line(DECODE_059.removesuffix(", #queue-req: 0")) is None
    parser, events = read(DECODE_059.replace("#queue-req: 0", "#queue-req: 0X"))
    assert events == [] and parser.unparsed_decode_like == 1


def test_a_prefill_line_in_another_order_keeps_its_input_throughput() -> None:
    line = (
        "Prefill batch, #new-token: 3310, #new-seq: 2, #cached-token: 512, token usage: 0.02, "
        "#running-req: 4, #queue-req: 0, input throughput (token/s): 9843.22, cuda graph: False"
    )
    assert parse_line(PREFIX + line) == Prefill(
        ts=TS,
        rank=3,
        new_seq=2,
        new_token=3310,
        cached_token=512,
        running_req=4,
        queue_req=0,
        input_throughput=9843.22,
    )


def test_kv_cache_lines_with_k_and_v_sizes_or_none() -> None:
    def kv(text: str) -> Event | None:
        return parse_line(PREFIX + "KV Cache is allocated. " + text)

    assert kv("#tokens: 560138, K size: 0.13 GB, V size: 0.25 GB") == KvCache(
        ts=TS, rank=3, tokens=560138, size_gb=0.38
    )
    # The sum to four places (float noise off), whatever the places written.
    assert kv("#tokens: 10, K size: 0.12345 GB, V size: 0.00001 GB") == KvCache(
        ts=TS, rank=3, tokens=10, size_gb=0.1235
    )
    assert kv("#tokens: 10") == KvCache(ts=TS, rank=3, tokens=10, size_gb=None)


def test_shard_rates_of_one_and_zero_per_second() -> None:
    bar = "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  {}]"
    assert parse_line(bar.format("1.00it/s")) == ShardProgress(
        done=1, total=2, elapsed_s=1.0, remaining_s=1.0, seconds_per_shard=1.0
    )
    # No rate (tqdm writes `?it/s`; a zero must not divide).
    assert parse_line(bar.format("0.00it/s")) == ShardProgress(
        done=1, total=2, elapsed_s=1.0, remaining_s=1.0, seconds_per_shard=None
    )


def test_an_exception_logged_in_a_record_is_no_crash_alone_it_is() -> None:
    """A prefixed `ValueError: ...` is a message the server logged and lived on; the same text
    on a line of its own is an exception's line."""
    logged = PREFIX + "ValueError: bad request"
    assert parse_line(logged) is None
    assert read(logged)[1] == []
    assert parse_line("ValueError: bad request") == ServerError(
        category="other", message="ValueError: bad request"
    )


# --- decode lines read on their own --------------------------------------------------------


def test_a_decode_line_in_another_shape_is_written_as_in_bulk() -> None:
    """A 0.5.2 line among 0.5.9 lines (a restarted server) is read alone, by its learned
    shape: its JSON keeps the log's number spelling, as when its shape is read in bulk."""
    _, mixed = read(DECODE_052, DECODE_059)
    _, alone = read(DECODE_052)
    assert json_lines(mixed, Event.to_json).splitlines()[0] == json_lines(alone, Event.to_json)[:-1]
    assert '"token_usage": 0.10' in json_lines(alone, Event.to_json)


def test_a_decode_line_behind_journald_is_read_by_its_shape() -> None:
    journald = "Dec 01 10:00:01 Xeon-07 python3[4021]: "
    _, wrapped = read(journald + DECODE_052, journald + DECODE_052)
    _, plain = read(DECODE_052, DECODE_052)
    assert json_lines(wrapped, Event.to_json) == json_lines(plain, Event.to_json)
    assert '"token_usage": 0.10' in json_lines(wrapped, Event.to_json)


def test_a_decode_line_read_alone_ends_what_came_before() -> None:
    """Unprefixed lines after a decode line read alone are new: an error, a traceback."""
    _, events = read(
        DECODE_052,
        CUDA_ERROR,
        DECODE_052,
        HEAD,
        FRAME,
        SOURCE,
        "RuntimeError: boom",
        DECODE_059,
    )
    assert [type(event).__name__ for event in events] == [
        "Decode",
        "ServerError",
        "Decode",
        "ServerError",
        "Decode",
    ]
    assert events[1] == ServerError(category="other", message=CUDA_ERROR)
    assert events[3] == ServerError(category="other", message="RuntimeError: boom")


def test_a_garbled_decode_line_that_cuts_a_traceback_counts_as_unparsed() -> None:
    parser, events = read(HEAD, FRAME, SOURCE, "Decode batch, #running-req: 4, #tok")
    assert events == [
        ServerError(
            category="unknown",
            message="traceback cut before its exception line; last frame: "
            + FRAME.strip()
            + ": "
            + SOURCE.strip(),
        )
    ]
    assert parser.unparsed_decode_like == 1


# --- tracebacks and continuation lines -----------------------------------------------------


def test_a_traceback_cut_by_another_ranks_traceback_is_reported() -> None:
    def head(rank: int) -> str:
        return f"[{TS} TP{rank}] Scheduler hit an exception: {HEAD}"

    _, events = read(head(0), FRAME, SOURCE, head(1), FRAME, SOURCE, OOM)
    assert events == [
        ServerError(
            ts=TS,
            rank=0,
            category="unknown",
            message="traceback cut before its exception line; last frame: "
            + FRAME.strip()
            + ": "
            + SOURCE.strip(),
        ),
        ServerError(ts=TS, rank=1, category="oom", message=OOM),
    ]


def test_an_exception_group_cut_at_the_end_reports_its_first_exception() -> None:
    parser, events = read(
        PREFIX + "Scheduler hit an exception:   + Exception Group Traceback (most recent call "
        "last):",
        '  |   File "/sglang/python/sglang/srt/managers/scheduler.py", line 10, in run',
        '  |     raise ExceptionGroup("workers failed", errors)',
        "  | ExceptionGroup: workers failed (1 sub-exception)",
        "  +-+---------------- 1 ----------------",
        "    | ValueError: bad shape",
        "    +------------------------------------",
    )
    assert events == []
    assert parser.flush() == [
        ServerError(
            ts=TS,
            rank=3,
            category="other",
            message="ExceptionGroup: workers failed (1 sub-exception)",
        )
    ]


def test_a_line_that_cuts_a_traceback_is_read_as_any_line() -> None:
    cut = ServerError(
        category="unknown",
        message="traceback cut before its exception line; last frame: "
        + FRAME.strip()
        + ": "
        + SOURCE.strip(),
    )
    bar = "Loading safetensors checkpoint shards:   0% Completed | 0/2 [00:00<?, ?it/s]"
    assert read(HEAD, FRAME, SOURCE, bar)[1] == [
        cut,
        ShardProgress(done=0, total=2, elapsed_s=0.0, remaining_s=None),
    ]
    assert read(HEAD, FRAME, SOURCE, CUDA_ERROR)[1] == [
        cut,
        ServerError(category="other", message=CUDA_ERROR),
    ]


def test_two_tracebacks_in_a_row_are_two_errors() -> None:
    """Without `During handling of the above exception` between them the second is no link
    of a chain: both are reported, also where the log begins inside the first."""
    second = [HEAD, FRAME, SOURCE, "RuntimeError: second"]
    for first in ([HEAD, FRAME, SOURCE, OOM], [FRAME, SOURCE, OOM]):
        assert read(*first, *second)[1] == [
            ServerError(category="oom", message=OOM),
            ServerError(category="other", message="RuntimeError: second"),
        ]


def test_a_log_that_begins_inside_a_traceback_reads_as_one_from_its_head() -> None:
    """`docker logs -t`: each line stamped by the runtime. Begun at the first frame, the
    traceback's error and the state after it are those of a reading from its head."""
    lines = [f"{DOCKER_TS} {line}" for line in (HEAD, FRAME, SOURCE, OOM)]
    from_head, head_events = read(*lines)
    from_frame = SGLangLogParser()
    assert from_frame.feed(lines[1] + "\n") == []
    assert from_frame.line_state() != FRESH  # inside a traceback: no part may start here
    assert from_frame.feed("".join(line + "\n" for line in lines[2:])) == head_events
    assert head_events == [ServerError(ts=DOCKER_TS, category="oom", message=OOM)]
    assert from_frame.line_state() == from_head.line_state()


def test_an_exception_message_continues_for_at_most_50_lines() -> None:
    """NCCL's and torch's messages run on over lines (`Last error:`, `Cuda failure ...`)
    that are no errors of their own; the 51st unprefixed line after it is read again."""
    more = "Cuda failure 'out of memory'"
    for ending in ([OOM], [HEAD, FRAME, SOURCE, OOM]):
        _, events = read(*ending, *[more] * 51)
        assert events == [
            ServerError(category="oom", message=OOM),
            ServerError(category="oom", message=more),
        ]


def test_a_bracketed_line_after_an_exception_is_read_as_its_own() -> None:
    watchdog = (
        "[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."
    )
    assert read(CUDA_ERROR, watchdog)[1] == [
        ServerError(category="other", message=CUDA_ERROR),
        ServerError(category="nccl", message=watchdog),
    ]


def test_a_record_announcing_a_traceback_gives_it_its_time_and_rank() -> None:
    for announce in ("Exception in run_tp_server:", "Exception in run_tp_server: "):
        _, events = read(PREFIX + announce, HEAD, FRAME, SOURCE, OOM)
        assert events == [ServerError(ts=TS, rank=3, category="oom", message=OOM)]
    # A record ending in `:` that names no exception announces nothing.
    _, events = read(PREFIX + "Ignored model config keys:", HEAD, FRAME, SOURCE, OOM)
    assert events == [ServerError(category="oom", message=OOM)]


def test_the_runtimes_time_stamps_a_line_without_its_own() -> None:
    line = f"{DOCKER_TS} INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)"
    assert read(line)[1] == [HttpUp(ts=DOCKER_TS, port=30000)]


# --- the state between lines ---------------------------------------------------------------


def test_a_prefixed_record_ends_an_exceptions_message() -> None:
    """After it a part of the log may be read from the parser's first state."""
    parser, _ = read(CUDA_ERROR)
    assert parser.line_state() != FRESH  # its message may go on
    parser.feed(PREFIX + "Ignored model config keys:\n")
    assert parser.line_state() == FRESH
    assert parser.feed(OOM + "\n") == [ServerError(category="oom", message=OOM)]


def test_the_state_holds_whose_exception_a_chain_may_continue() -> None:
    """Two logs alike but for the rank whose exception ended them are in different states
    while that exception's message may go on (50 unprefixed lines), then in the same."""

    def after(rank: int, lines: int) -> object:
        head = f"[{TS} TP{rank}] Scheduler hit an exception: {HEAD}"
        return read(head, FRAME, SOURCE, OOM, *["Last error:"] * lines)[0].line_state()

    assert after(3, 0) != after(5, 0)
    assert after(3, 49) != after(5, 49)
    assert after(3, 50) == after(5, 50)


def test_there_is_no_state_inside_a_partial_line_or_inside_a_traceback() -> None:
    parser = SGLangLogParser()
    parser.feed(PREFIX + "Load weight")
    assert parser.line_state() is None
    parser, _ = read(PREFIX + "Scheduler hit an exception: " + HEAD)
    assert parser.line_state() != FRESH


# --- the end of the input ------------------------------------------------------------------


def test_flush_reads_a_last_line_cut_inside_a_character() -> None:
    parser = SGLangLogParser()
    assert parser.feed(PREFIX.encode() + b"Scheduler hit an exception: caf\xc3") == []
    assert parser.flush() == [
        ServerError(
            ts=TS, rank=3, category="other", message="Scheduler hit an exception: caf\ufffd"
        )
    ]
    assert parser.lines_seen == 1
    assert parser.line_state() == FRESH


def test_flush_after_a_complete_log_adds_no_line_and_the_parser_reads_on() -> None:
    parser = SGLangLogParser()
    ready = PREFIX + "The server is fired up and ready to roll!"
    assert parser.feed((ready + "\n").encode()) == [Ready(ts=TS, rank=3)]
    assert parser.flush() == []
    assert parser.lines_seen == 1
    assert parser.line_state() == FRESH
    # The console's follower flushes when the server exits and reads its restart on.
    assert parser.feed((ready + "\n").encode()) == [Ready(ts=TS, rank=3)]


def test_events_after_a_summary_are_events() -> None:
    parser = SGLangLogParser()
    summary = SGLangLogSummary()
    parser.summarize(DECODE_059 + "\n", summary)
    assert summary.decode_lines == 1
    assert parser.feed(DECODE_059 + "\n") == [parse_line(DECODE_059)]


# --- fourth round: torchrun rank lanes, their line state, decode shapes for the bulk path ---

TP0_PREFIX = "[2026-02-10 09:19:12 TP0] "
DECODE_LINE_TAIL = (
    "Decode batch, #running-req: 1, #token: 1, token usage: 0.00, accept len: 1.00, "
    "accept rate: 1.00, cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0"
)


def rank_head(rank: int | None) -> str:
    """A traceback's first two lines (head and one frame), behind rank's wrapper if any."""
    wrap = "" if rank is None else f"[rank{rank}]: "
    return (
        f"{wrap}Traceback (most recent call last):\n"
        f'{wrap}  File "/srv/r{rank}.py", line 7, in run\n'
    )


def read_all(text: str) -> list[Event]:
    parser = SGLangLogParser()
    return parser.feed(text) + parser.flush()


def rank_errors(events: list[Event]) -> list[tuple[int | None, str]]:
    return [(event.rank, event.message) for event in events if isinstance(event, ServerError)]


def test_tracebacks_cut_at_the_end_are_reported_per_rank_current_first_then_in_rank_order() -> None:
    """Four tracebacks open when the log ends (three ranks' and one unwrapped): each is one
    cut error of its own rank, the last rank read first, then the others by rank (unwrapped
    first), whatever order they were left in."""
    events = read_all(rank_head(None) + rank_head(1) + rank_head(0) + rank_head(2))
    assert [rank for rank, _ in rank_errors(events)] == [2, None, 0, 1]
    assert all("/srv/r" + str(rank) in message for rank, message in rank_errors(events))


def test_interleaved_ranks_tracebacks_each_end_in_their_own_exception() -> None:
    log = (
        rank_head(0)
        + rank_head(1)
        + "[rank0]: RuntimeError: rank zero failed\n"
        + "[rank1]: ValueError: rank one failed\n"
    )
    assert rank_errors(read_all(log)) == [
        (0, "RuntimeError: rank zero failed"),
        (1, "ValueError: rank one failed"),
    ]


def test_lanes_beyond_the_cap_are_dropped_memory_stays_bounded() -> None:
    """1024 ranks' open tracebacks are kept aside (plus the current one's); more are
    dropped, so a log of endless rank numbers cannot grow the parser without bound."""
    events = read_all("".join(rank_head(rank) for rank in range(1030)))
    assert len(rank_errors(events)) == 1025


def test_a_rank_that_left_nothing_open_leaves_no_state() -> None:
    """Two parsers that will read what follows alike report the same line state, so
    `specmon parse` may cut a file into parts there."""
    first, second = SGLangLogParser(), SGLangLogParser()
    first.feed("[rank0]: some rank zero line\n[rank1]: some rank one line\n")
    second.feed("[rank1]: some rank one line\n")
    assert first.line_state() == second.line_state()


def lane_state(text: str) -> object:
    parser = SGLangLogParser()
    parser.feed(text)
    return parser.line_state()


def test_line_state_tells_which_rank_holds_a_put_aside_traceback() -> None:
    """The put-aside lanes are part of the state: whose they are, what their traceback
    holds, whose exception a chained link continues; any of these read what follows
    differently, so the states differ."""
    current = "[rank5]: other line\n"
    assert lane_state(rank_head(0) + current) != lane_state(rank_head(1) + current)
    assert lane_state(rank_head(None) + current) != lane_state(rank_head(1) + current)
    two = rank_head(0) + "[rank1]: x\n" + "[rank1]: RuntimeError: one\n"
    swapped = rank_head(1) + "[rank0]: x\n" + "[rank0]: RuntimeError: one\n"
    assert lane_state(two + current) != lane_state(swapped + current)
    frame = '[rank0]:   File "/srv/other.py", line 9, in run\n'
    assert lane_state(rank_head(0) + current) != lane_state(rank_head(0) + frame + current)
    announced = "[rank0]: [2026-02-10 09:19:12 TP0] Exception in run_tp_server:\n"
    assert lane_state(announced + current) != lane_state(current)
    owner = "[rank0]: RuntimeError: one\n[rank0]: During handling of the above exception\n"
    other_owner = "[rank3]: RuntimeError: one\n[rank3]: During handling of the above exception\n"
    assert lane_state(owner + current) != lane_state(other_owner + current)
    both = lane_state(rank_head(None) + rank_head(0) + rank_head(1) + current)
    assert both == lane_state(rank_head(None) + rank_head(1) + rank_head(0) + current)


def test_a_rank_wrapped_decode_line_is_a_decode_of_that_rank_and_ends_its_error() -> None:
    """A decode line inside a rank's wrapper is read line by line in that rank's lane: a
    Decode, and the end of the rank's error message, so the next error is one of its own."""
    log = (
        "[rank0]: ValueError: first failure\n"
        f"[rank0]: {TP0_PREFIX}{DECODE_LINE_TAIL}\n"
        "[rank0]: NameError: second failure\n"
    )
    events = read_all(log)
    assert [type(event) for event in events] == [ServerError, Decode, ServerError]
    assert rank_errors(events) == [
        (0, "ValueError: first failure"),
        (0, "NameError: second failure"),
    ]


def test_decode_lines_in_bulk_end_the_unwrapped_error_message() -> None:
    """Decode lines read in bulk are unwrapped prefixed lines: they end the unwrapped lane's
    error message even when a rank's line came last, so the next bare error is reported."""
    log = (
        "ValueError: first failure\n"
        "[rank0]: some rank zero line\n"
        f"{TP0_PREFIX}{DECODE_LINE_TAIL}\n"
        "NameError: second failure\n"
    )
    events = read_all(log)
    assert rank_errors(events) == [
        (None, "ValueError: first failure"),
        (None, "NameError: second failure"),
    ]


def test_a_log_beginning_inside_a_ranks_traceback_reports_that_rank() -> None:
    log = '[rank3]:   File "/srv/x.py", line 1, in f\n[rank3]: RuntimeError: boom\n'
    assert rank_errors(read_all(log)) == [(3, "RuntimeError: boom")]


def test_parse_line_takes_the_rank_from_torchruns_wrapper() -> None:
    event = parse_line("[rank2]: RuntimeError: boom")
    assert isinstance(event, ServerError)
    assert event.rank == 2


def test_a_rank_wrapped_shard_bar_is_that_ranks_progress() -> None:
    bar = "[rank1]: Loading safetensors checkpoint shards:  50% Completed | 32/64 [00:20<00:20, 1.6it/s]"
    complete = read_all(bar + "\n")
    parser = SGLangLogParser()
    eager = parser.feed(bar)  # the bar drawn, its `\r` not yet: reported at once
    for events in (complete, eager):
        assert [(type(event), event.rank) for event in events] == [(ShardProgress, 1)]


def test_a_late_cuda_graph_field_still_gets_a_decode_template() -> None:
    """A second `cuda graph` field is no column: the shape still takes the bulk path."""
    tail = DECODE_LINE_TAIL[len("Decode batch, ") :] + ", cuda graph: False"
    template = decode_template("Decode batch, ", tail)
    assert template is not None
    assert template.matches(TP0_PREFIX + "Decode batch, " + tail)


def test_a_decode_line_with_a_rank_and_no_time_gets_a_template_that_reads_it() -> None:
    prefix = "INFO TP3 | "
    line = prefix + DECODE_LINE_TAIL
    template = decode_template("Decode batch, ", DECODE_LINE_TAIL[len("Decode batch, ") :], prefix)
    assert template is not None
    match = template.pattern.match(f"\n{line}\n")
    assert match is not None
    assert match.group(2) == "3"


def test_line_state_tells_whose_exception_a_put_aside_rank_may_continue() -> None:
    """Same rank, same exception, but one announced with its time: a chained link later in
    that rank's lane is reported with that time, so the states differ."""
    exception = "[rank0]: RuntimeError: one\n[rank5]: other line\n"
    announced = "[rank0]: [2026-02-10 09:19:12 TP0] Exception in run_tp_server:\n"
    assert lane_state(announced + rank_head(0) + exception) != lane_state(rank_head(0) + exception)

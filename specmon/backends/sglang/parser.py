"""SGLang server log -> typed events (specmon.model.events), for `specmon parse` and live tails.

The formats are SGLang's own, 0.4.6 to 0.5.23 (docs/parser.md lists them). Decode lines are
almost all of a serving log, so the parser learns the exact shape of the log's decode lines
(one anchored regex per shape) and cuts whole chunks with it in C: one ``findall`` gives a
tuple of field texts per line, and each decode line's tuple becomes a Decode that converts its
numbers when first read (``Decode.from_texts``), so a decode line runs no Python bytecode
here. The regex admits only numbers that convert, so that later read cannot fail. Every other
line goes through ``parse_line``'s dispatch, one at a time. Input never makes it raise: bytes
are decoded with replacement, ``\\r`` (tqdm redraws) counts as a line break and lines are cut
at MAX_LINE_CHARS.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from operator import itemgetter

from specmon.backends import LogParser, LogSummary
from specmon.backends.logtext import (
    ANSI,
    BARE_EXCEPTION,
    CHAIN_LINES,
    CONTINUATION_MAX_LINES,
    MAX_LINE_CHARS,
    TORCH_NCCL,
    TORCH_OOM,
    TQDM_RATE,
    TRACEBACK_HEAD,
    clean_line,
    clock_seconds,
    launcher_rank,
    parse_float,
    parse_int,
)
from specmon.backends.sglang.summary import SGLangLogSummary
from specmon.backends.tracebacks import (
    OpenTraceback,
    Read,
    opened_inside,
    source_text,
    starts_inside,
)
from specmon.model.events import (
    Decode,
    ErrorCategory,
    Event,
    GraphBegin,
    GraphEnd,
    GraphRole,
    HttpUp,
    KvCache,
    LoadBegin,
    LoadEnd,
    Prefill,
    Ready,
    ServerError,
    ShardProgress,
    SpecParams,
)

# --- line prefixes ------------------------------------------------------------------------
#
# Events are keyed on their message text; whatever stands before it (SGLang's own prefix, an
# operator's logging format, a container runtime's or journald's wrapper, a prefix cut off by
# a tail) only gives the event its time and rank: the last timestamp in it, and the last `TPn`
# tag (else a `rank N`). Telling a log record's first line from a continuation line (a
# traceback frame, a message's second line) needs the prefix recognised, though: SGLang's own
# is matched at once, others by a token grammar (`_GENERIC_PREFIX`) after the wrappers.

# `(?:x|)` rather than `(?:x)?`: the same match, but sre runs a group's `?` as a costly REPEAT.
_TS = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,6}|)"
# SGLang's `[%(asctime)s{.ms}{ DP0 PP0 TP3 EP3}] ` and uvicorn's `[%(asctime)s] INFO:     `.
# torchrun's `[rankN]:` before a line is a wrapper (logtext.launcher_rank), taken off first;
# PyTorch c10d's glog header after it (`[E1210 09:14:15.123 ProcessGroupNCCL.cpp:616] `) is
# the line's prefix, and what follows (`[PG ID 0 ... Rank 5] Watchdog ...`) its message.
_SGLANG_PREFIX = re.compile(rf"\[({_TS})([ A-Z_\d]*)\] (?:INFO: +)?")
_PREFIX_SEARCH_CHARS = 200
_GLOG_PREFIX = re.compile(r"\[[IWEF]\d{4} \d\d:\d\d:\d\d[^\]\n]*\] ?", re.ASCII)
# c10d's process-group tag that starts such a message: `[PG ID 0 PG GUID 0(default_pg) Rank 5]`.
_PG_RANK = re.compile(r"\[PG [^\]\n]*?\bRank (\d{1,9})\]", re.ASCII)
# Any timestamp an operator's format or a wrapper writes: ISO date (or none) and a time.
_ANY_TS_TEXT = r"(?:\d{4}[-/]\d\d[-/]\d\d[ T]|)\d\d:\d\d:\d\d(?:[.,]\d{1,9}|)(?:Z|[+-]\d\d:?\d\d|)"
_ANY_TS = re.compile(_ANY_TS_TEXT, re.ASCII)
_RANK_TAG = re.compile(r"(?<![A-Za-z0-9_])TP(\d{1,19})(?![A-Za-z0-9_])", re.ASCII)
_RANK_WORD = re.compile(r"(?<![A-Za-z])(?:rank|Rank|RANK)[ _:=#-]?(\d{1,19})(?!\d)", re.ASCII)
# What runtimes put before the server's own line: `docker logs -t` / `kubectl logs
# --timestamps` (RFC 3339, nanoseconds) and journald (`Dec 01 10:00:01 host python3[4021]: `).
_WRAPPER = re.compile(
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9}|)(?:Z|[+-]\d\d:?\d\d) "
    r"|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d [^\s\[\]:]+ [^\s\[\]:]+(?:\[\d+\]|): "
    r"|[\w.-]+ *\| ",
    re.ASCII,
)
# One piece of an operator's logging format: a bracketed field, a time, a level, a pid, a
# rank tag, `file.py:123`, a dotted logger name (not an exception's name) or a number; then
# a separator. A prefix is a run of them that holds a time, a level or a rank tag.
_PREFIX_TOKEN = (
    r"(?:\[[^\[\]\n]{1,200}\]"
    rf"|{_ANY_TS_TEXT}"
    r"|\d\d[-/]\d\d(?=[ T]\d\d:)"
    r"|[IWEF]\d{4}(?= \d\d:)"
    r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)"
    r"|(?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d{1,19}"
    r"|(?:pid|PID)[=: ]?\d+"
    r"|(?:rank|RANK)[ _=:#-]?\d+"  # not `Rank N`: SGLang's `Rank 3 scheduler is dead`
    r"|\(\w*(?:pid|PID)?[=: ]?\d+\)"
    r"|[\w.-]+\.py:\d+"
    r"|(?![\w.]*(?:Error|Exception|Warning|Interrupt|Exit)\b)[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+"
    r"|\d+)"
)
_PREFIX_SEPARATOR = r"(?:[\])>]?:?[ \t]+(?:[-|:][ \t]+)?|[\])]?:(?=\[)|(?<=\])(?=\[))"
_GENERIC_PREFIX = re.compile(rf"(?:{_PREFIX_TOKEN}{_PREFIX_SEPARATOR}){{1,16}}", re.ASCII)
_STRONG_PREFIX = re.compile(
    r"\d\d:\d\d:\d\d|DEBUG|INFO|WARN|ERROR|CRITICAL|FATAL"
    r"|(?<![A-Za-z0-9_])(?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d|(?:rank|RANK)[ _=:#-]?\d",
    re.ASCII,
)


def _rank_of(tags: str) -> int | None:
    """The TP rank in a prefix's tags (` DP0 TP3 EP3` -> 3); None when the prefix has no TP.

    The last `TPn` tag counts, and only with 1 to 19 digits, as in the decode templates."""
    rank = None
    for tag in tags.split():
        if tag.startswith("TP") and tag[2:].isdigit() and len(tag) <= 21:
            rank = int(tag[2:])
    return rank


class _RankTable(dict[str, int | None]):
    """Prefix tags -> TP rank, computed once per distinct tag string (there are a handful)."""

    def __missing__(self, tags: str) -> int | None:
        rank = _rank_of(tags)
        if len(self) < 1024:
            self[tags] = rank
        return rank


_RANKS = _RankTable()


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    match = None
    for match in pattern.finditer(text):  # noqa: B007 - the last one is wanted
        pass
    return match


def _ts_in(prefix: str) -> str | None:
    """The last timestamp in a prefix (SGLang's own, inside any wrapper's)."""
    match = _last(_ANY_TS, prefix)
    return match.group() if match is not None else None


def _rank_in(prefix: str) -> int | None:
    """The rank a prefix names: its last `TPn` tag, else its last `rank N` / `[rank3]`."""
    match = _last(_RANK_TAG, prefix) or _last(_RANK_WORD, prefix)
    return int(match.group(1)) if match is not None else None


def _unwrap(line: str) -> tuple[str, str]:
    """(wrappers, line): the runtime's prefixes (docker/kubectl time, journald) taken off."""
    outer = ""
    for _ in range(3):
        match = _WRAPPER.match(line)
        if match is None:
            break
        outer += match.group()
        line = line[match.end() :]
    return outer, line


# --- per-message patterns (searched in the text after the prefix) --------------------------

# Messages that are events start with one of these (after the prefix); errors may sit anywhere.
_EVENT_STARTS = (
    "Decode batch",
    "Prefill batch",
    "Load weight",
    "Capture",
    "Uvicorn running",
    "The server is fired up",
    "Adaptive spec params updated",
)
# The same, searched anywhere in a line whose prefix was not recognised (a cut first line).
_EVENT_ANCHOR = re.compile(
    r"Decode batch|Prefill batch|Load weight (?:begin|end)|Capture |Uvicorn running"
    r"|The server is fired up|Adaptive spec params updated"
)
_LONGEST_ANCHOR = len("Adaptive spec params updated")
# Markers tried per line by the event search (a line holds one event; ten markers are noise).
_MAX_MARKERS_TRIED = 16
_ERROR_HINT = re.compile(
    r"rror|xception|Interrupt|out of memory|Out of memory|Not enough memory|NCCL|nccl|atchdog|is dead"
    r"|sigquit|SIGQUIT|ailed|unbalanced|LONGER_CONTEXT_LEN"
)
# Prefill fields in 0.4.6 (no throughput), 0.5.9 and 0.5.23 (`#pending-token`, then `cuda graph`)
_PREFILL = re.compile(
    r"#new-seq: (\d+), #new-token: (\d+), #cached-token: (\d+), [^#]*#running-req: (\d+), "
    r"#queue-req: (\d+)(?:, .*?input throughput \(token/s\): (\d+(?:\.\d+)?))?"
)
_BATCH_HEAD = re.compile(r"(Decode|Prefill) batch(?: \[\d+\])?[.,] ")
_LOAD_BEGIN = re.compile(r"Load weight begin\. avail mem=(\d+(?:\.\d+)?) GB")
_LOAD_END = re.compile(r"Load weight end\. (?:elapsed=(\d+(?:\.\d+)?) s, )?type=([\w.]+)")
_AVAIL_MEM = re.compile(r"avail mem=(\d+(?:\.\d+)?) GB")
_MEM_USAGE = re.compile(r"mem usage=(\d+(?:\.\d+)?) GB")
_DRAFT_MODEL_TYPE = re.compile(r"Eagle|EAGLE|MTP|NextN|Nextn|Draft|Medusa")
_KV_TOKENS = re.compile(r"#tokens: (\d+)")
_KV_SIZE = re.compile(r"KV size: (\d+(?:\.\d+)?) GB")
_K_V_SIZES = re.compile(r"K size: (\d+(?:\.\d+)?) GB, V size: (\d+(?:\.\d+)?) GB")
_GRAPH = re.compile(r"Capture ((?:[\w-]+ )*?)(?:cuda|CUDA) graph (begin|end)\.")
_GRAPH_SECONDS = re.compile(r"(?:Time elapsed: |elapsed=)(\d+(?:\.\d+)?) s")
_UVICORN = re.compile(r"Uvicorn running on \w+://[^\s:/]*:(\d+)")
_SHARDS = re.compile(
    r"^([^|\n]*?[Ss]hards): *\d+%[^|]*\|(?:[^|]*\|)? *(\d+)/(\d+)"
    r"(?: \[([\d:?]*)<([\d:?]*), *([^\]]*)\])?"
)
_ADAPTIVE = re.compile(
    r"Adaptive spec params updated(?: \([^)\n]*\))?: steps (\d{1,9}) -> (\d{1,9})"
    r"(?:[^\n]*?ema_accept_len=(\d+(?:\.\d+)?))?"
)

_OOM = re.compile(
    TORCH_OOM + r"|Not enough memory\. Please try to increase --mem-fraction-static"
    r"|Prefill out of memory|Decode out of memory"
    r"|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|Cuda failure 'out of memory'"
)
_NCCL = re.compile(TORCH_NCCL + r"|NCCL Error \d|NCCL WARN")
_OTHER_FATAL = re.compile(
    r"Scheduler hit an exception|DetokenizerManager hit an exception"
    r"|TokenizerManager hit an exception|Scheduler watchdog timeout|Rank \d+ scheduler is dead"
    r"|Received sigquit from a child process|SIGQUIT received"
    r"|Initialization failed\. warmup error|The memory capacity is unbalanced"
    r"|set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN|Health check failed"
    r"|Capture cuda graph failed|CUDA error: |AcceleratorError|CUDA driver error"
    r"|device-side assert triggered|Triton Error \[CUDA\]|CUBLAS_STATUS_|CUDNN_STATUS_"
    # uvicorn when the port is taken: the server cannot serve, whatever answers there
    r"|error while attempting to bind on address|[Aa]ddress already in use"
)


def _split_prefix(line: str, outer: str = "") -> tuple[str | None, int | None, str, bool]:
    """(ts, rank, message, had_prefix) for one ANSI-free line, its wrappers (``outer``)
    already taken off. Without a prefix of its own, a line's time is its wrapper's."""
    if line.startswith("[2"):  # the usual case, anchored
        match = _SGLANG_PREFIX.match(line)
        if match is not None:
            return match.group(1), _RANKS[match.group(2)], line[match.end() :], True
    if line.startswith(("[E", "[W", "[I", "[F")):
        match = _GLOG_PREFIX.match(line)
        if match is not None:
            message = line[match.end() :]
            tag = _PG_RANK.match(message) if message.startswith("[PG ") else None
            rank = int(tag.group(1)) if tag is not None else None
            return _ts_in(outer + match.group()), rank, message, True
    match = _GENERIC_PREFIX.match(line)
    if match is not None:
        end = match.end()
        # A token may run into the message (`INFO.Decode batch` reads as a dotted logger
        # name): the prefix ends where an event's message begins.
        marker = _EVENT_ANCHOR.search(line, 0, end + _LONGEST_ANCHOR)
        if marker is not None and marker.start() < end:
            end = marker.start()
        prefix = line[:end]
        if _STRONG_PREFIX.search(prefix) is not None:
            return _ts_in(outer + prefix), _rank_in(prefix), line[end:], True
    if "[" in line:  # SGLang's prefix behind an unknown wrapper
        match = _SGLANG_PREFIX.search(line, 0, _PREFIX_SEARCH_CHARS)
        if match is not None:
            return match.group(1), _RANKS[match.group(2)], line[match.end() :], True
    return (_ts_in(outer) if outer else None), None, line, False


def _fields(tail: str) -> dict[str, str]:
    """`#running-req: 6, token usage: 0.02, ...` -> {"#running-req": "6", ...}."""
    out: dict[str, str] = {}
    for item in tail.split(", "):
        key, sep, value = item.partition(": ")
        if sep:
            out[key.strip()] = value.strip().rstrip(",")
    return out


def _decode_from_fields(ts: str | None, rank: int | None, tail: str) -> Decode | None:
    fields = _fields(tail)
    running_req = parse_int(fields.get("#running-req"))
    tokens = parse_int(fields.get("#token", fields.get("#full token")))
    token_usage = parse_float(fields.get("token usage", fields.get("full token usage")))
    gen_throughput = parse_float(fields.get("gen throughput (token/s)"))
    queue_req = parse_int(fields.get("#queue-req"))
    if (
        running_req is None
        or tokens is None
        or token_usage is None
        or gen_throughput is None
        or queue_req is None
    ):
        return None
    graph = next((v for k, v in fields.items() if k.endswith(" graph")), None)
    return Decode(
        ts=ts,
        rank=rank,
        running_req=running_req,
        tokens=tokens,
        token_usage=token_usage,
        accept_len=parse_float(fields.get("accept len")),
        accept_rate=parse_float(fields.get("accept rate")),
        gen_throughput=gen_throughput,
        queue_req=queue_req,
        cuda_graph=None if graph is None else graph == "True",
    )


def _prefill_from_fields(ts: str | None, rank: int | None, tail: str) -> Prefill:
    known = _PREFILL.match(tail)
    if known is not None:
        new_seq, new_token, cached_token, running_req, queue_req, throughput = known.groups()
        return Prefill(
            ts=ts,
            rank=rank,
            new_seq=int(new_seq),
            new_token=int(new_token),
            cached_token=int(cached_token),
            running_req=int(running_req),
            queue_req=int(queue_req),
            input_throughput=None if throughput is None else float(throughput),
        )
    fields = _fields(tail)
    return Prefill(
        ts=ts,
        rank=rank,
        new_seq=parse_int(fields.get("#new-seq")),
        new_token=parse_int(fields.get("#new-token")),
        cached_token=parse_int(fields.get("#cached-token")),
        running_req=parse_int(fields.get("#running-req")),
        queue_req=parse_int(fields.get("#queue-req")),
        input_throughput=parse_float(fields.get("input throughput (token/s)")),
    )


def _graph_role(words: str) -> GraphRole:
    if "draft" in words:
        return "draft_extend" if "extend" in words else "draft"
    return "target"


def error_category(text: str) -> ErrorCategory | None:
    """The category of a fatal or alarming line, None when the line is not one."""
    if _OOM.search(text):
        return "oom"
    if _NCCL.search(text):
        return "nccl"
    if _OTHER_FATAL.search(text):
        # "Capture cuda graph failed" and crash lines that quote an OOM were caught above.
        return "other"
    return None


def _shard_progress(text: str, rank: int | None = None) -> ShardProgress | None:
    match = _SHARDS.match(text)
    if match is None:
        return None
    seconds_per_shard = None
    if match.group(6):
        rate = TQDM_RATE.search(match.group(6))
        if rate is not None:
            value = float(rate.group(1))
            if rate.group(2) == "s/it":
                seconds_per_shard = value
            elif value > 0:
                seconds_per_shard = 1.0 / value
    return ShardProgress(
        rank=rank,
        done=int(match.group(2)),
        total=int(match.group(3)),
        elapsed_s=clock_seconds(match.group(4)),
        remaining_s=clock_seconds(match.group(5)),
        seconds_per_shard=seconds_per_shard,
    )


def _message_event(ts: str | None, rank: int | None, message: str, prefixed: bool) -> Event | None:
    """The event for one line's message (after its prefix), or None.

    A branch chosen by how the message starts (or by a marker in it) that finds no event
    falls through to the event search: the marker may stand in a prefix (an operator's
    format, a cut line) before the event's own message.
    """
    started = message.startswith(_EVENT_STARTS)
    if started:
        event = _started_event(ts, rank, message)
        if event is not None:
            return event
    elif "is allocated." in message:
        kv_cache = _kv_cache(ts, rank, message)
        if kv_cache is not None:
            return kv_cache
    elif not prefixed and "hards" in message:
        progress = _shard_progress(message, rank)
        if progress is not None:
            return progress
    # Past the start when the start was tried: the search never tries the same text again.
    event = _searched_event(ts, rank, message, 1 if started else 0)
    if event is not None:
        return event
    if (" HTTP/" in message and '" ' in message) or _ERROR_HINT.search(message) is None:
        return None  # uvicorn access lines are never events, whatever their status
    category = error_category(message)
    if category is None and not prefixed and BARE_EXCEPTION.match(message):
        category = "other"
    if category is None:
        return None
    return ServerError(ts=ts, rank=rank, category=category, message=message.strip())


def _kv_cache(ts: str | None, rank: int | None, message: str) -> KvCache | None:
    """The KV cache line (`KV Cache is allocated. #tokens: ..., KV size: ... GB`), or None."""
    tokens = _KV_TOKENS.search(message)
    if tokens is None:
        return None
    kv = _KV_SIZE.search(message)
    if kv is not None:
        size: float | None = float(kv.group(1))
    else:
        k_v = _K_V_SIZES.search(message)
        size = round(float(k_v.group(1)) + float(k_v.group(2)), 4) if k_v else None
    return KvCache(ts=ts, rank=rank, tokens=int(tokens.group(1)), size_gb=size)


def _searched_event(ts: str | None, rank: int | None, message: str, start: int) -> Event | None:
    """The first event whose message starts at an event marker found in ``message[start:]``
    (whatever stands before it is a prefix not recognised as one: its time and rank count
    where the line's own prefix gave none).

    Every marker is tried, not only the first: text before the event's own message (a
    prefix, an operator's format) may hold another marker that gives no event. At most
    _MAX_MARKERS_TRIED are, so a line made of markers costs no more than a few reads.
    """
    for tried, anchor in enumerate(_EVENT_ANCHOR.finditer(message, start)):
        if tried == _MAX_MARKERS_TRIED:
            break
        head = message[: anchor.start()]
        event = _started_event(
            ts or _ts_in(head),
            rank if rank is not None else _rank_in(head),
            message[anchor.start() :],
        )
        if event is not None:
            return event
    return None


def _started_event(ts: str | None, rank: int | None, message: str) -> Event | None:
    """Events whose message starts with one of ``_EVENT_STARTS``."""
    if message.startswith(("Decode batch", "Prefill batch")):
        head = _BATCH_HEAD.match(message)
        if head is not None:
            tail = message[head.end() :]
            if head.group(1) == "Decode":
                return _decode_from_fields(ts, rank, tail)
            return _prefill_from_fields(ts, rank, tail)
    elif message.startswith("Load weight begin"):
        match = _LOAD_BEGIN.match(message)
        return LoadBegin(ts=ts, rank=rank, avail_mem_gb=parse_float(match and match.group(1)))
    elif message.startswith("Load weight end"):
        match = _LOAD_END.match(message)
        model_type = match.group(2) if match else None
        avail = _AVAIL_MEM.search(message)
        usage = _MEM_USAGE.search(message)
        draft = model_type is not None and _DRAFT_MODEL_TYPE.search(model_type) is not None
        return LoadEnd(
            ts=ts,
            rank=rank,
            mem_usage_gb=parse_float(usage and usage.group(1)),
            avail_mem_gb=parse_float(avail and avail.group(1)),
            elapsed_s=parse_float(match and match.group(1)),
            model_type=model_type,
            role="draft" if draft else "target",
        )
    elif message.startswith("Capture"):
        match = _GRAPH.match(message)
        if match is not None:
            role = _graph_role(match.group(1))
            avail = _AVAIL_MEM.search(message)
            if match.group(2) == "begin":
                return GraphBegin(
                    ts=ts, rank=rank, role=role, avail_mem_gb=parse_float(avail and avail.group(1))
                )
            seconds = _GRAPH_SECONDS.search(message)
            usage = _MEM_USAGE.search(message)
            return GraphEnd(
                ts=ts,
                rank=rank,
                role=role,
                seconds=parse_float(seconds and seconds.group(1)),
                mem_usage_gb=parse_float(usage and usage.group(1)),
                avail_mem_gb=parse_float(avail and avail.group(1)),
            )
    elif message.startswith("Uvicorn running on "):
        match = _UVICORN.match(message)
        return HttpUp(ts=ts, rank=rank, port=parse_int(match and match.group(1)))
    elif message.startswith("The server is fired up and ready to roll"):
        return Ready(ts=ts, rank=rank)
    elif message.startswith("Adaptive spec params updated"):
        match = _ADAPTIVE.match(message)
        if match is not None:
            return SpecParams(
                ts=ts,
                rank=rank,
                steps_before=int(match.group(1)),
                steps=int(match.group(2)),
                ema_accept_len=parse_float(match.group(3)),
            )
    return None


def parse_line(line: str) -> Event | None:
    """The event one log line stands for, or None. Pure: no traceback or tqdm state.

    A lone `SomeError: message` line counts as an error here; the stateful parser reads it
    as the root cause of the traceback it ends.
    """
    outer, line = _unwrap(clean_line(line.rstrip("\r\n")))
    launcher, line = launcher_rank(line)
    ts, rank, message, prefixed = _split_prefix(line, outer)
    return _message_event(ts, launcher if rank is None else rank, message, prefixed)


_LaneState = tuple[
    OpenTraceback | None,
    tuple[str | None, int | None],
    bool,
    tuple[str | None, int | None] | None,
    int,
]
"""A rank's traceback state: its traceback, chain owner, chained, announced, continuations."""
_IDLE_LANE: _LaneState = (None, (None, None), False, None, 0)
_MAX_LANES = 1024


def _lane_state(state: _LaneState) -> tuple[object, ...]:
    """A put-aside lane's state, hashable (its open traceback as its fields)."""
    traceback = state[0]
    return (None if traceback is None else traceback.state(), *state[1:])


class SGLangLogParser(LogParser):
    """Stateful SGLang log reader for whole files and live tails alike.

    State kept between chunks: the partial last line, an incremental UTF-8 decoder (so a
    character split across chunks survives), the last shard counter (tqdm redraws of the same
    n/N give one event) and whether the lines now arriving are traceback frames.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._discarding_overlong = False
        self._last_shard: tuple[int, int] | None = None
        self._traceback: OpenTraceback | None = None  # the traceback being read
        # Whose exception was read last (time, rank): a chained next link continues it.
        self._chain_owner: tuple[str | None, int | None] = (None, None)
        self._chained = False  # a "During handling of the above exception" line was seen
        # A record that announces a traceback on its next lines (`Exception in run_tp_server:`)
        self._announced: tuple[str | None, int | None] | None = None
        self._continuation_lines = 0
        # torchrun's ranks each write their own lines (`[rankN]:`), interleaved: the state
        # above is the current rank's (its lane); the other ranks' wait here until their
        # next line. None: lines without the wrapper.
        self._lane: int | None = None
        self._lanes: dict[int | None, _LaneState] = {}
        self._templates: list[DecodeTemplate] = [_DEFAULT_TEMPLATE] if _DEFAULT_TEMPLATE else []
        self._decode_sink: Callable[[list[tuple[str, ...]]], None] | None = None
        """Where bulk-read decode lines go as rows of texts instead of events (a summary): a
        row is (#running-req, accept len, gen throughput, ""), see DecodeTemplate.sums."""
        self.lines_seen = 0
        """Complete lines read so far (each `\\r` redraw counts as one)."""
        self.unparsed_decode_like = 0
        """Lines with `Decode batch` (outside tracebacks) that gave no decode event."""

    def _switch_lane(self, lane: int | None) -> None:
        """Put the current rank's traceback state aside and take up ``lane``'s."""
        state = (
            self._traceback,
            self._chain_owner,
            self._chained,
            self._announced,
            self._continuation_lines,
        )
        if state != _IDLE_LANE and len(self._lanes) < _MAX_LANES:
            self._lanes[self._lane] = state
        (
            self._traceback,
            self._chain_owner,
            self._chained,
            self._announced,
            self._continuation_lines,
        ) = self._lanes.pop(lane, _IDLE_LANE)
        self._lane = lane

    # -- LogParser interface ----------------------------------------------------------------

    def feed(self, chunk: str | bytes) -> list[Event]:
        if isinstance(chunk, bytes | bytearray | memoryview):
            text = self._decoder.decode(bytes(chunk))
        elif isinstance(chunk, str):
            text = chunk
        else:
            return []
        if not text:
            return []
        if "\x1b" in text:  # colour codes: off the whole chunk, so coloured lines stay bulk
            text = ANSI.sub("", text)
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        cut = text.rfind("\n")
        if cut < 0:
            self._hold(text)
            return self._eager_shard()
        events: list[Event] = []
        start = 0
        if self._pending or self._discarding_overlong:
            # The held partial line ends at this chunk's first newline.
            start = text.find("\n") + 1
            first = "" if self._discarding_overlong else text[: start - 1]
            joined = self._pending + first + "\n"
            self._pending, self._discarding_overlong = "", False
            self.lines_seen += self._scan(joined, events)
        self._hold(text[cut + 1 :])
        if cut >= start:  # complete lines follow: scanned in place
            self.lines_seen += self._scan(text, events, start, cut + 1)
        events.extend(self._eager_shard())
        return events

    def flush(self) -> list[Event]:
        tail = self._decoder.decode(b"", final=True)
        if tail:  # only replacement characters for bytes cut inside one: never a `\r`
            self._hold(tail)
        rest, self._pending = self._pending, ""
        self._discarding_overlong = False
        events: list[Event] = []
        if rest:
            self.lines_seen += self._scan(rest + "\n", events)
        self._end_traceback(events)
        for lane in sorted(self._lanes, key=lambda rank: -1 if rank is None else rank):
            self._switch_lane(lane)
            self._end_traceback(events)
        return events

    def _end_traceback(self, events: list[Event]) -> None:
        """The input ended: a traceback still being read was cut before its exception line."""
        traceback, self._traceback = self._traceback, None
        if traceback is not None:
            self._ended(traceback, events)

    def _ended(self, traceback: OpenTraceback, events: list[Event]) -> None:
        """A traceback's lines ended without an exception line of its own: an exception
        group's first exception, else the cut."""
        if traceback.group_exception is not None:
            self._exception(traceback, traceback.group_exception, events)
            return
        cut = traceback.cut_error()
        if cut is not None:
            events.append(cut)

    def _exception(self, traceback: OpenTraceback, text: str, events: list[Event]) -> None:
        """A traceback's exception line: the cause, reported unless a chain's later link."""
        self._chain_owner = (traceback.ts, traceback.rank)
        if traceback.report:
            events.append(
                ServerError(
                    ts=traceback.ts,
                    rank=traceback.rank,
                    category=error_category(text) or "other",
                    message=text,
                )
            )

    def summarize(self, chunk: str | bytes, summary: LogSummary) -> int:
        """As LogParser's, but bulk-read decode lines go to an SGLang summary as their
        texts, never made into events (`specmon parse --no-events`)."""
        if not isinstance(summary, SGLangLogSummary):
            return super().summarize(chunk, summary)
        before = summary.decode_lines
        self._decode_sink = summary.add_sums
        try:
            events = self.feed(chunk) if chunk else self.flush()
        finally:
            self._decode_sink = None
        summary.add_all(events)
        return len(events) + summary.decode_lines - before

    def line_state(self) -> Hashable | None:
        """The shard counter, the traceback being read (its place and last frame, which a cut
        reports), whose exception a chained link may still continue, a record announcing a
        traceback and the continuation lines still expected; None inside a partial line. The
        learned decode shapes are a cache, not state."""
        if self._pending or self._discarding_overlong:
            return None
        traceback = self._traceback
        chain_open = self._chained or self._continuation_lines > 0
        return (
            self._last_shard,
            self._lane,
            tuple(
                sorted(
                    (-1 if lane is None else lane, _lane_state(state))
                    for lane, state in self._lanes.items()
                )
            ),
            None if traceback is None else traceback.state(),
            self._chain_owner if chain_open else None,
            self._chained,
            self._continuation_lines,
            self._announced,
        )

    # -- chunk handling ---------------------------------------------------------------------

    def _hold(self, text: str) -> None:
        """Keep a partial line, but never more than MAX_LINE_CHARS of it."""
        if self._discarding_overlong:
            return
        self._pending += text
        if len(self._pending) > MAX_LINE_CHARS:
            self._pending = self._pending[:MAX_LINE_CHARS]
            self._discarding_overlong = True

    def _eager_shard(self) -> list[Event]:
        """A tqdm bar is complete before the `\\r` of its next redraw: report it right away."""
        pending = self._pending
        if not pending or "hards" not in pending or not pending.rstrip().endswith("]"):
            return []
        launcher, line = launcher_rank(clean_line(pending))
        event = _shard_progress(line, launcher)
        if event is None:
            return []
        key = (event.done, event.total)
        if key == self._last_shard:
            return []
        self._last_shard = key
        return [event]

    def _scan(
        self, text: str, events: list[Event], start: int = 0, end: int | None = None, depth: int = 0
    ) -> int:
        """The lines of ``text[start:end]`` (end None: to the end), each ended by a newline, to
        events: lines in the current decode shape in bulk, others one by one. Returns how
        many lines there were.

        One ``findall`` of the shape's template over the chunk, in place (no copy), gives a
        tuple of texts per line, built in C; the decode lines' tuples become Decode events that
        convert their numbers when first read (``Decode.from_texts``), so a decode line costs
        no Python bytecode here.
        """
        if end is None:
            end = len(text)
        if not self._templates:
            lines = text[start:end].split("\n")
            lines.pop()  # "" after the last newline
            self._other_lines(lines, events)
            return len(lines)
        template = self._template_for(text, start, end)
        sink = self._decode_sink
        # A summary needs three of a decode line's texts: fewer groups, fewer strings made.
        scan, taken, line_of = (
            (template.lines, _TAKEN, _LINE)
            if sink is None
            else (template.sums, _SUM_TAKEN, _SUM_LINE)
        )
        rows = scan.findall(text, start, end)
        timestamps = list(map(taken, rows))  # "" on each line the template did not take
        count = len(rows)
        others = timestamps.count("")
        if others == count:
            self._other_lines(list(map(line_of, rows)), events)
            return count
        if depth == 0 and template is not self._templates[0]:
            self._templates.remove(template)  # the next chunk most likely has this shape too
            self._templates.insert(0, template)
        # One event per row (those at other lines are dropped), or the rows for a summary.
        decodes: list[Decode] | list[tuple[str, ...]] = (
            rows if sink is not None else Decode.from_texts(rows)
        )
        take = sink if sink is not None else events.extend
        if others == 0:
            take(decodes)
            self._decoded()
            return count
        find_other = timestamps.index
        position = 0
        while position < count:
            try:
                first = find_other("", position)
            except ValueError:
                first = count
            if first > position:
                take(decodes[position:first])
                self._decoded()
            if first == count:
                break
            last = first + 1
            while last < count and not timestamps[last]:
                last += 1
            lines = list(map(line_of, rows[first:last]))
            position = last
            if depth < _MAX_SCAN_DEPTH and last - first > 16:
                run = "\n".join(lines) + "\n"
                if "Decode batch" in run:
                    # Many lines in another decode shape (where a restarted server's new
                    # version begins, or two ranks' shapes): scan them in bulk too.
                    self._scan(run, events, depth=depth + 1)
                    continue
            self._other_lines(lines, events)
        return count

    def _decoded(self) -> None:
        """Decode lines were read in bulk: lines with a prefix (and no torchrun wrapper, which
        no template takes), so whatever their lane had open before them ended."""
        if self._lane is not None:
            self._switch_lane(None)
        self._continuation_lines = 0
        self._chained = False
        self._announced = None

    def _template_for(self, text: str, start: int, end: int) -> DecodeTemplate:
        """The template for the last decode line of ``text[start:end]`` (learned if new), else
        the last one used: the scan that follows then takes that shape's lines in bulk."""
        found = text.rfind("Decode batch", start, end)
        if found >= 0:
            line_start = max(start, text.rfind("\n", start, found) + 1)
            line = text[line_start : text.find("\n", found, end)]
            for template in self._templates:
                if template.matches(line):
                    return template
            learned = self._learn_template(clean_line(line))
            if learned is not None:
                return learned
        return self._templates[0]

    def _learn_template(self, line: str) -> DecodeTemplate | None:
        """Remember the template of a decode line's shape (second in line), if it has one."""
        head = _BATCH_HEAD.search(line)
        if head is None or head.group(1) != "Decode" or launcher_rank(line)[0] is not None:
            return None  # a torchrun rank's line: read line by line, in its rank's lane
        template = decode_template(head.group(), line[head.end() :], line[: head.start()])
        if template is not None and template not in self._templates:
            self._templates.insert(min(1, len(self._templates)), template)
            del self._templates[_MAX_TEMPLATES:]
        return template

    def _other_lines(self, lines: list[str], events: list[Event]) -> None:
        for line in lines:
            if line:
                if "Decode batch" in line:
                    self._decode_line(line, events)
                else:
                    self._line(line, events)

    def _decode_line(self, raw: str, events: list[Event]) -> None:
        """A decode line the bulk scan did not take: known shapes first, else learn its shape."""
        line = clean_line(raw)
        match = None
        if not line.startswith("[rank"):  # torchrun's wrapper: no template, the rank's lane
            framed = f"\n{line}\n"
            for template in self._templates:
                match = template.pattern.match(framed)
                if match is not None:
                    break
            else:
                learned = self._learn_template(line)
                match = None if learned is None else learned.pattern.match(framed)
        if match is not None:
            self._decoded()  # a prefixed line, as in _line
            # Its texts, as the bulk scan keeps them: the line is written the same whether it
            # came in bulk or alone, whichever shapes were learned before it.
            events.append(Decode.from_texts([tuple(text or "" for text in match.groups())])[0])
            return
        in_traceback = self._traceback is not None
        before = len(events)
        self._line(raw, events)
        if not any(isinstance(event, Decode) for event in events[before:]) and not (
            in_traceback and self._traceback is not None
        ):
            self.unparsed_decode_like += 1

    def _line(self, raw: str, events: list[Event]) -> None:
        outer, line = _unwrap(clean_line(raw))
        launcher, line = launcher_rank(line)
        if launcher != self._lane:
            self._switch_lane(launcher)
        ts, rank, message, prefixed = _split_prefix(line, outer)
        if rank is None:
            rank = launcher
        announced, self._announced = self._announced, None
        traceback = self._traceback
        if traceback is not None and not prefixed and self._traceback_line(traceback, line, events):
            return  # the traceback's; a line that is not was cut and is read as any other
        if TRACEBACK_HEAD in message:
            if self._chained and not prefixed:
                # The next link of a chained exception: its cause was already reported.
                self._start_traceback(*self._chain_owner, report=False)
            else:
                if self._traceback is not None:  # a new traceback: the last one was cut
                    self._end_traceback(events)
                if not prefixed and announced is not None:
                    ts, rank = announced  # `Exception in run_tp_server:` on the line above
                self._start_traceback(ts, rank, report=True)
            return
        if not prefixed and self._continuation_lines:
            # Lines after an exception's first line continue its message ("Possible
            # solutions: ...", NCCL's "Last error: ..."): not new errors.
            self._continuation_lines -= 1
            if line.startswith(CHAIN_LINES):
                self._chained = True
                return None
            if not line.startswith("[") and _shard_progress(line) is None:
                return None
        if prefixed:
            self._continuation_lines = 0
            self._chained = False
            if "xception" in message and message.rstrip().endswith(":"):
                self._announced = (ts, rank)
        elif starts_inside(line):
            # A frame outside any traceback: the log (a tail, a paste) begins inside one.
            self._traceback = opened_inside(ts, rank, line)
            self._chained = False
            return
        event = _message_event(ts, rank, message, prefixed)
        if isinstance(event, ShardProgress):
            key = (event.done, event.total)
            if key == self._last_shard:
                return
            self._last_shard = key
        elif isinstance(event, ServerError) and not prefixed:
            if source_text(line):
                return  # a source line or a message's continuation: no error of its own
            self._continuation_lines = CONTINUATION_MAX_LINES
        if event is not None:
            events.append(event)

    def _start_traceback(self, ts: str | None, rank: int | None, *, report: bool) -> None:
        self._traceback = OpenTraceback(ts, rank, report)
        self._chained = False
        self._continuation_lines = 0

    def _traceback_line(self, traceback: OpenTraceback, line: str, events: list[Event]) -> bool:
        """A line without a prefix inside a traceback (tracebacks.OpenTraceback.read says what
        it is): False when it is not the traceback's, which then was cut (reported here).

        A chained exception reports its first link (the root cause) once; later links only
        continue it.
        """
        read = traceback.read(line)
        if read is Read.PART:
            return True
        self._traceback = None
        if read is Read.CUT:
            self._ended(traceback, events)
            return False
        if read is Read.EXCEPTION:
            self._continuation_lines = CONTINUATION_MAX_LINES
            self._exception(traceback, line.strip(), events)
        return True


# --- the decode fast path: templates learned from the log's own decode lines ----------------
#
# One SGLang version writes every decode line in the same shape, so the first decode line
# of a shape is read field by field and turned into an anchored regex for that exact shape.
# Whole chunks are then cut by it in C (one tuple of texts per line); lines in another shape
# (or anything odd) take the field-by-field path, which gives the same event where the
# template would have matched. The template's number patterns only take texts that int() and
# float() read (ASCII digits, ints under 20 digits), which is what lets Decode convert them
# later without a chance of failing: any other text makes the line miss the template.

_DECODE_ROLES: dict[str, str] = {
    "#running-req": "running",
    "#token": "tokens",
    "#full token": "tokens",
    "token usage": "usage",
    "full token usage": "usage",
    "accept len": "accept_len",
    "accept rate": "accept_rate",
    "gen throughput (token/s)": "gen",
    "#queue-req": "queue",
}
# Every template captures these, in this order, after the timestamp and TP rank; a field the
# shape lacks is an empty group, so every template's rows have the same columns.
_CANONICAL_ROLES = (
    "running",
    "tokens",
    "usage",
    "accept_len",
    "accept_rate",
    "graph",
    "gen",
    "queue",
)
_INT_VALUE = r"(\d{1,19})"
_FLOAT_VALUE = r"(\d+\.\d+)"  # a dot between digits: the text is a JSON float as it is
_DECIMALS = re.compile(r"\d+\.(\d{1,6})", re.ASCII)
_ROLE_VALUE_PATTERNS = {
    "running": _INT_VALUE,
    "tokens": _INT_VALUE,
    "queue": _INT_VALUE,
    "graph": r"(\w+)",
}
_REQUIRED_ROLES = ("running", "tokens", "usage", "gen", "queue")
# The rank is the digits of the last `TPn` tag (as _rank_of reads the tags), "" without one.
# The group is atomic and the rest of the tags possessive: once the last `TPn` is found, a line
# that fails later is not searched again for an earlier one (quadratic on a line of tags).
_SGLANG_HEAD = rf"\[({_TS})(?>(?:[ A-Z_\d]* |)TP{_INT_VALUE}(?![A-Z_\d])|)[ A-Z_\d]*+\] "
_SGLANG_PREFIX_ONLY = re.compile(rf"\[{_TS}[ A-Z_\d]*\] ")
_SHAPE_PIECES = re.compile(r"\d+|[ \t]+|[^\d \t]+")
_TEMPLATE_GROUPS = 2 + len(_CANONICAL_ROLES)
_MAX_TEMPLATES = 8
_MAX_SCAN_DEPTH = 3


@dataclass(frozen=True, slots=True)
class DecodeTemplate:
    """One decode-line shape: its anchored regex (ten groups) and the same for whole texts."""

    pattern: re.Pattern[str]  # `\n[ts tags] Decode batch, ...` up to (not into) the next `\n`
    lines: re.Pattern[str]  # every line + `\n`: the ten groups, or else the line in group 11
    sums: re.Pattern[str]  # as ``lines``, capturing only #running-req, accept len, gen, line

    def matches(self, line: str) -> bool:
        return self.pattern.match(f"\n{line}\n") is not None


_TAKEN = itemgetter(2)  # a row's #running-req: "" when the template did not take the line
_LINE = itemgetter(_TEMPLATE_GROUPS)  # a row's line text when the template did not take it
_SUM_GROUPS = frozenset((3, 6, 9, _TEMPLATE_GROUPS + 1))  # #running-req, accept len, gen, line
_SUM_TAKEN = itemgetter(0)
_SUM_LINE = itemgetter(3)
_template_cache: dict[tuple[object, ...], DecodeTemplate | None] = {}


def _shape(text: str) -> str:
    """A regex for texts of this one's shape: digit runs and blank runs may differ."""
    pieces = []
    for piece in _SHAPE_PIECES.findall(text):
        if piece[0].isdigit():
            pieces.append(r"\d+")
        elif piece[0] in " \t":
            pieces.append(r"[ \t]+")
        else:
            pieces.append(re.escape(piece))
    return "".join(pieces)


def prefix_pattern(prefix: str) -> str:
    """A regex for line prefixes shaped like ``prefix`` (what stands before `Decode batch`),
    with two groups: the time (its last timestamp) and the rank (its last `TPn`, else `rank
    N`), each "" where this shape has none; as the line-by-line reading takes them."""
    if _SGLANG_PREFIX_ONLY.fullmatch(prefix):
        return _SGLANG_HEAD
    ts = _last(_ANY_TS, prefix)
    rank = _last(_RANK_TAG, prefix) or _last(_RANK_WORD, prefix)
    ts_group, rank_group = f"({_ANY_TS_TEXT})", r"(\d{1,19})"
    if rank is None:
        if ts is None:
            return "()()" + _shape(prefix)
        return _shape(prefix[: ts.start()]) + ts_group + _shape(prefix[ts.end() :]) + "()"
    before, after = _shape(prefix[: rank.start(1)]), rank.end(1)
    if ts is None:
        return "()" + before + rank_group + _shape(prefix[after:])
    if ts.start() < rank.start(1):
        between = _shape(prefix[ts.end() : rank.start(1)])
        return (
            _shape(prefix[: ts.start()]) + ts_group + between + rank_group + _shape(prefix[after:])
        )
    # The rank comes first: the time is read ahead, so that the groups stay in order.
    between = _shape(prefix[after : ts.start()])
    return (
        before
        + rf"(?=\d{{1,19}}{between}{ts_group})"
        + rank_group
        + between
        + f"(?:{_ANY_TS_TEXT})"
        + _shape(prefix[ts.end() :])
    )


def decode_template(head: str, tail: str, prefix: str | None = None) -> DecodeTemplate | None:
    """An anchored regex for this decode line's exact shape, from its prefix (None: SGLang's
    own), its head (`Decode batch [7], `) and its field text; None when the shape lacks a
    required field or is odd."""
    head_pattern = _SGLANG_HEAD if prefix is None else prefix_pattern(prefix)
    items = tail.split(", ")
    trailing = items[-1] == ""
    if trailing:
        items.pop()
    keys: list[str] = []
    decimals: list[int | None] = []  # per field: digits after the point of a `12.34` value
    for item in items:
        key, sep, value = item.partition(": ")
        if not sep or not key or "\n" in key:
            return None
        keys.append(key)
        point = _DECIMALS.fullmatch(value)
        decimals.append(len(point.group(1)) if point else None)
    shape = (head_pattern, re.sub(r"\d+", "N", head), tuple(keys), trailing, tuple(decimals))
    if shape in _template_cache:
        return _template_cache[shape]
    template = _build_template(head_pattern, head, keys, trailing, decimals)
    if len(_template_cache) < 256:
        _template_cache[shape] = template
    return template


def _float_pattern(places: int | None) -> str:
    """A float column's pattern. SGLang prints them with `:.2f`, and `\\d+\\.\\d\\d` costs sre
    less than the general form (one repeat instead of three); other texts miss the template
    and take the field-by-field path."""
    if places is None:
        return _FLOAT_VALUE
    return r"(\d+\." + r"\d" * places + ")"


def _build_template(
    head_pattern: str, head: str, keys: list[str], trailing: bool, decimals: list[int | None]
) -> DecodeTemplate | None:
    fields: list[str] = []
    next_role = 0  # index into _CANONICAL_ROLES of the next column to capture
    for key, places in zip(keys, decimals, strict=True):
        role = _DECODE_ROLES.get(key) or ("graph" if key.endswith(" graph") else None)
        position = _CANONICAL_ROLES.index(role) if role is not None else -1
        if position < next_role:  # not a column (`#swa token`), or a second cuda graph
            if role is not None and role != "graph":
                # A column out of order or repeated (`token usage` before `#running-req`):
                # one regex cannot capture it where the line-by-line reader reads it.
                return None
            fields.append(re.escape(key) + r": [^,\n]*")
            continue
        empty_columns = "()" * (position - next_role)
        value = _ROLE_VALUE_PATTERNS.get(role or "") or _float_pattern(places)
        fields.append(empty_columns + re.escape(key) + ": " + value)
        next_role = position + 1
    if next_role != len(_CANONICAL_ROLES):
        return None  # `#queue-req` is the last column; a shape without it is not one we scan
    present = {
        _DECODE_ROLES.get(key) or ("graph" if key.endswith(" graph") else "") for key in keys
    }
    if not all(role in present for role in _REQUIRED_ROLES):
        return None
    separator = re.escape(head.rstrip()[-1]) + " "
    line = (
        head_pattern
        + "Decode batch"
        + (r" \[\d+\]" if "[" in head else "")
        + separator
        + ", ".join(fields)
        + (", " if trailing else "")
    )
    # ASCII: \d takes no other digits, so every captured number reads with int()/float().
    compiled = re.compile(rf"\n{line}(?=\n)", re.ASCII)
    if compiled.groups != _TEMPLATE_GROUPS:
        return None
    lines = rf"(?:{line}|([^\n]*))\n"
    return DecodeTemplate(
        pattern=compiled,
        lines=re.compile(lines, re.ASCII),
        sums=re.compile(_only_groups(lines, _SUM_GROUPS), re.ASCII),
    )


def _only_groups(pattern: str, keep: frozenset[int]) -> str:
    """``pattern`` with its capturing groups but those numbered in ``keep`` made
    non-capturing (escapes and character classes are read past)."""
    out: list[str] = []
    number = 0
    position = 0
    in_class = False
    while position < len(pattern):
        char = pattern[position]
        if char == "\\":
            out.append(pattern[position : position + 2])
            position += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            if pattern.startswith("]", position + 1) or pattern.startswith("^]", position + 1):
                close = pattern.index("]", position + 1) + 1
                out.append(pattern[position:close])
                position = close
                continue
        elif char == "(" and not pattern.startswith("(?", position):
            number += 1
            if number not in keep:
                char = "(?:"
        out.append(char)
        position += 1
    return "".join(out)


_DEFAULT_TEMPLATE = decode_template(
    "Decode batch, ",
    "#running-req: 1, #token: 1, token usage: 0.00, accept len: 1.00, accept rate: 1.00, "
    "cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0",
)
"""The 0.5.9 shape (the transcripts'); a parser starts with it and learns others."""

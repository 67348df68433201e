"""vLLM server log -> typed events (specmon.model.events), for `specmon parse` and live tails.

Formats are vLLM's own, ~0.6 to 0.33 (docs/vllm.md lists them). Every line is keyed on its
message text, never on a fixed prefix: the prefix changed with nearly every release (none,
`(VllmWorker rank=0 pid=1)`, `(EngineCore_DP0 pid=1)`, nested `(A pid=1) (B pid=2)`), and
wrappers add more in front (`docker logs -t` timestamps, Ray Serve's replica tag, ANSI colour).

The periodic stats line (`Engine 000: Avg prompt throughput: ...`) and its `SpecDecoding
metrics:` line are what a serving log repeats, so each is found with ``str.find`` on its fixed
text and read with one anchored match there (a regex that scans each line for where a stats
line starts cost three times as much); one keyword search then skips the lines that cannot be
events (HTTP access lines, routes, warnings) before any per-line dispatch. Input never makes it raise:
bytes are decoded with replacement, ``\\r`` (tqdm redraws, vLLM's ``\\r\\n``-joined records)
counts as a line break and lines are cut at MAX_LINE_CHARS.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable
from dataclasses import dataclass

from specmon.backends import Backend, LogParser
from specmon.backends.logtext import (
    BARE_EXCEPTION,
    CHAIN_LINES,
    CONTINUATION_MAX_LINES,
    LAUNCHER_PREFIX,
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
from specmon.backends.tracebacks import (
    OpenTraceback,
    Read,
    opened_inside,
    source_text,
    starts_inside,
)
from specmon.model.events import (
    CompileBegin,
    CompileEnd,
    Decode,
    ErrorCategory,
    Event,
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

_HEADER_SEARCH_CHARS = 400
MAX_POSITIONS = Backend.max_draft_positions

# vLLM's `LEVEL MM-DD HH:MM:SS [file.py:123] ` (≤0.6 without `[`), wherever it sits in the line.
_HEADER = re.compile(
    r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d{1,6})? "
    r"\[?[^\s:\[\]]+:\d+\] "
)
_TS = re.compile(r"\d\d-\d\d \d\d:\d\d:\d\d")
# Prefixes in front of a message that has no vLLM header: RFC 3339 (`docker logs -t`), docker
# compose's `vllm-1  | `, `(Name pid=N) ` process tags (any number), uvicorn's `INFO:     ` and
# c10d's `[rank3]:[...]` (its `[E1203 06:01:44.123 file.cpp:12] ` also behind torchrun's wrapper,
# which split_line takes off first).
_BARE_PREFIX = re.compile(
    r"(?:\d{4}-\d\d-\d\dT[\d:.,]+(?:Z|[+-]\d\d:?\d\d)? +)?(?:[\w.-]+ +\| )?"
    r"(?:(?:\x1b\[[0-9;]*m)?\([^()\n]*\)(?:\x1b\[[0-9;]*m)? +)*"
    r"(?:INFO: +)?(?:\[rank\d+\]:(?:\[[^\]\n]*\] ?)?|\[[EWIF]\d{4} \d\d:[^\]\n]*\] ?)?"
)
_PROCESS_TAG = re.compile(r"\(([^()\n]*?) pid=\d+\)")
_RANK_IN_TAGS = re.compile(r"TP(\d{1,6})(?!\d)|\brank[= ](\d{1,6})(?!\d)|\[rank(\d{1,6})\]")

# --- the periodic stats line (read in C for whole chunks) ----------------------------------

_STATS_BODY = (
    r"Avg prompt throughput: (\d+\.?\d*) tokens/s, "
    r"Avg generation throughput: (\d+\.?\d*) tokens/s, "
    r"Running: (\d{1,19}) reqs, (?:Swapped: \d{1,19} reqs, )?(?:Waiting|Pending): (\d{1,19}) reqs,"
    r"[^\n]*? KV cache usage: (\d+\.?\d*)%"
)
_ENGINE_HEAD = r"(?:Engine (\d{1,9}): |\d{1,9} Engines Aggregated: |)"
_STATS_LINE = re.compile(rf"{_ENGINE_HEAD}{_STATS_BODY}", re.ASCII)
# The fast path: the body matched where `str.find` put it, the engine read from just before.
_STATS_AT = re.compile(_STATS_BODY, re.ASCII)
_STATS_MARK = "Avg prompt throughput: "
_ENGINE_BEFORE = re.compile(r"(?:Engine (\d{1,9})|\d{1,9} Engines Aggregated): $", re.ASCII)
_DECODE_LIKE = re.compile(r"Engine \d+:|Engines Aggregated:|Avg prompt throughput")

# --- the speculative-decoding line, in its three shapes (and V0's) -------------------------

_SPEC_HEAD = re.compile(r"(?:SpecDecoding|Speculative) metrics: ")
_MEAN_ACCEPT = re.compile(r"Mean acceptance length: (\d+(?:\.\d+)?)")
_ACCEPTED = re.compile(r"(?:\bAccepted: (\d+) tokens|Number of accepted tokens: (\d+))")
_DRAFTED = re.compile(r"(?:\bDrafted: (\d+) tokens|Number of draft tokens: (\d+))")
_ACCEPTED_TPUT = re.compile(r"Accepted throughput: (\d+(?:\.\d+)?) tokens/s")
_DRAFTED_TPUT = re.compile(r"Drafted throughput: (\d+(?:\.\d+)?) tokens/s")
_PER_POSITION = re.compile(r"Per-position acceptance rate: (\d+(?:\.\d+)?(?:, \d+(?:\.\d+)?)*)")
_RATE = re.compile(r"Draft acceptance rate: (\d+(?:\.\d+)?)(%?)")
# The shape since ~Sep 2025 (0.33's), read in one match on the fast path.
_SPEC_MARK = "SpecDecoding metrics: "
_SPEC_CURRENT = re.compile(
    r"Mean acceptance length: (\d+\.\d+), Accepted throughput: (\d+\.\d+) tokens/s, "
    r"Drafted throughput: (\d+\.\d+) tokens/s, Accepted: (\d{1,19}) tokens, "
    r"Drafted: (\d{1,19}) tokens, Per-position acceptance rate: (\d+\.\d+(?:, \d+\.\d+)*), "
    r"Avg Draft acceptance rate: (\d+\.\d+)%",
    re.ASCII,
)

# --- start-up phases -----------------------------------------------------------------------

_LOAD_BEGIN = ("Starting to load model", "Loading model from scratch")
_WEIGHTS = re.compile(r"Loading weights took (\d+(?:\.\d+)?) s")
_V0_WEIGHTS = re.compile(r"Loading model weights took (\d+(?:\.\d+)?) GB")
_MODEL_LOADED = re.compile(
    r"Model loading took (\d+(?:\.\d+)?) GiB(?: memory)? and (\d+(?:\.\d+)?) s"
)
_COMPILE_BEGIN = re.compile(r"(?:\[(\w+)\] )?Starting torch\.compile")
_COMPILE_END = re.compile(r"(?:\[(\w+)\] )?torch\.compile (?:takes|take|took) (\d+(?:\.\d+)?) s")
_KV_MEMORY = re.compile(
    r"Available KV cache memory: (\d+(?:\.\d+)?) GiB"
    r"|(?:Explicitly|Auto) set \((\d+(?:\.\d+)?)/[\d.]+\) GiB for KV cache"  # CPU builds
)
_KV_SIZE = re.compile(r"\b[A-Z]{2,4} KV cache size: ([\d,]{1,30}) tokens")
# V0: `# GPU blocks: 5691, # CPU blocks: 2048` (0.6.4+: `# cuda blocks: 5218, ...`; the CPU
# backend's `# CPU blocks: 512` alone), in blocks of the engine's block size, which the log
# may state earlier (`block_size=16`, or `'block_size': 16` among the non-default args).
_V0_BLOCKS = re.compile(r"# (?!CPU )\w{1,10} blocks: (\d{1,12})\b|^# CPU blocks: (\d{1,12})$")
_BLOCK_SIZE = re.compile(r"\bblock_size(?:=|': )(\d{1,6}|None)\b")
_SHARDS = re.compile(
    r"[Ss]hards(?: \([^)\n]*\))?: *\d+%[^|\n]*\|(?:[^|\n]*\|)? *(\d{1,9})/(\d{1,9})"
    r"(?: \[([\d:?]*)<([\d:?]*), *([^\]\n]*)\])?"
)
# CPU builds (0.32) compile during a warm-up and print no `torch.compile took` line: the
# warm-up's start, then each part's compiled function saved to or loaded from vLLM's cache.
_WARM_UP_BEGIN = "Warming up model for the compilation"
_AOT_DONE = re.compile(
    r"(?:\[(\w+)\] )?(?:saved AOT compiled function to|Directly load AOT compilation from path) "
)
_GRAPH_BAR = re.compile(r"Capturing (?:CUDA graph|cudagraphs)")
_GRAPH_END = re.compile(
    r"Graph capturing finished in (\d+(?:\.\d+)?) secs?(?:, took (-?\d+(?:\.\d+)?) GiB)?"
)
_HTTP_UP = re.compile(r"Starting vLLM (?:API )?server (?:\d+ )?on \S*?:(\d{1,5})\b")
_READY = "Application startup complete"

# Lines that may be events; any other line is skipped without a dispatch.
_HINT = re.compile(
    r"oad|hards|torch\.compile|Warming up|AOT|KV cache|apturing|Starting vLLM|startup complete|Engine"
    r"|Avg prompt|metrics:|Traceback|rror|xception|NCCL|nccl|atchdog|emory|ailed|died"
    r"|root cause|\[shutdown\]|received signal|# [A-Za-z]{2,8} blocks|k_size|File \""
)

# --- errors --------------------------------------------------------------------------------

_OOM = re.compile(
    r"No available memory for the cache blocks|KV cache is needed, which is larger than"
    r"|less than desired GPU memory utilization|Free memory on device"
    r"|less than requested memory for kv"  # CPU builds: VLLM_CPU_KVCACHE_SPACE beyond free RAM
    r"|Failed to load model - not enough GPU memory|" + TORCH_OOM
)
_NCCL = re.compile(TORCH_NCCL + r"|pynccl")
# Lines that point at a cause reported above them: never the root cause when one was seen.
_POINTER = re.compile(
    r"See root cause above|See stack trace \(above\)|[Ss]ee stack trace for root cause"
    r"|check the stack trace above"
    r"|died unexpectedly|EngineCore failed to start|WorkerProc failed to start"
)
# Python's report of an exception raised in __del__ (or another place that cannot raise): the
# traceback after it did not stop anything. vLLM 0.32's CPU build prints one, a RecursionError
# from a GEMM handle's __del__, while it compiles on a cold cache.
_IGNORED_EXCEPTION = "Exception ignored in"
_IGNORED_WINDOW_LINES = 3  # its traceback (or bare exception line) follows within these lines
_REPORTED_LEVELS = (None, "ERROR", "CRITICAL")
_ANY_SOURCE = "\0any"  # the last stats line's engine, whichever process wrote it


def error_category(text: str) -> ErrorCategory:
    """oom, nccl or other, from an exception or error line's text."""
    if _OOM.search(text):
        return "oom"
    if _NCCL.search(text):
        return "nccl"
    return "other"


@dataclass(frozen=True, slots=True)
class _Prefix:
    """What a line's prefix says: its timestamp, level, TP rank and process tags."""

    ts: str | None
    level: str | None
    rank: int | None
    source: str  # the process tags, e.g. "Worker_TP0": tracebacks are followed per source


def _rank_of(tags: str) -> int | None:
    rank = None
    for match in _RANK_IN_TAGS.finditer(tags):
        rank = int(match.group(1) or match.group(2) or match.group(3))
    return rank


def _prefix_of(head: str, level: str | None, ts: str | None) -> _Prefix:
    """A prefix's meaning; torchrun's `[rankN]:` wrapper gives the rank where the rest names
    none, and makes the rank's lines a source of their own (each rank's traceback is read
    apart from the others')."""
    launcher, head = launcher_rank(head)
    tags = " ".join(_PROCESS_TAG.findall(head)) if "pid=" in head else ""
    rank_text = tags if tags else head if "[rank" in head else ""
    rank = _rank_of(rank_text)
    if launcher is None:
        return _Prefix(ts=ts, level=level, rank=rank, source=tags)
    return _Prefix(
        ts=ts,
        level=level,
        rank=launcher if rank is None else rank,
        source=f"[rank{launcher}] {tags}",
    )


class _PrefixTable(dict[str, _Prefix]):
    """A stats line's prefix text -> its _Prefix, for the few prefixes a log repeats. Its
    level is left out (None): a stats or SpecDecoding line is never an error, and the level
    serves only to tell those."""

    def __missing__(self, head: str) -> _Prefix:
        ts = _TS.search(head)
        prefix = _prefix_of(head, None, ts and ts.group())
        if len(self) >= 4096:
            self.clear()
        self[head] = prefix
        return prefix


def split_line(line: str) -> tuple[_Prefix, str]:
    """(prefix, message) for one ANSI-free line, whatever wraps vLLM's own header."""
    header = _HEADER.search(line, 0, _HEADER_SEARCH_CHARS)
    if header is not None:
        head = line[: header.start()]
        return _prefix_of(head, header.group(1), header.group(2)), line[header.end() :]
    start = 0
    if line.startswith("[rank"):  # torchrun's wrapper, taken off as a whole (with its space)
        wrapper = LAUNCHER_PREFIX.match(line)
        if wrapper is not None:
            start = wrapper.end()
    if "pid=" in line:  # the message starts after the last process tag, whatever is before it
        for tag in _PROCESS_TAG.finditer(line, start, _HEADER_SEARCH_CHARS):
            start = tag.start()
    bare = _BARE_PREFIX.match(line, start)
    end = bare.end() if bare is not None else start
    return _prefix_of(line[:end], None, None), line[end:]


def position_rates(text: str) -> tuple[tuple[float, ...], int]:
    """A `Per-position acceptance rate:` list (``0.81, 0.62, ...``) as rates, at most the
    backend's ``max_draft_positions`` of them, and how many past those were left out: the
    list is the server's, and a line of 13,000 entries must not make a tuple as long."""
    parts = text.split(", ", MAX_POSITIONS)
    dropped = 0
    if len(parts) > MAX_POSITIONS:
        dropped = parts.pop().count(", ") + 1
    return tuple(map(float, parts)), dropped


def spec_decode_from_message(
    message: str,
    ts: str | None,
    rank: int | None,
    engine: int | None,
    rates: Callable[[str], tuple[float, ...]] = lambda text: position_rates(text)[0],
) -> SpecDecode | None:
    """A SpecDecode from a `SpecDecoding metrics:` (or V0 `Speculative metrics:`) message;
    ``rates`` reads its per-position list."""
    mean = _MEAN_ACCEPT.search(message)
    accepted = _ACCEPTED.search(message)
    drafted = _DRAFTED.search(message)
    rate = _RATE.search(message)
    if mean is None and accepted is None and drafted is None and rate is None:
        return None
    per_position = _PER_POSITION.search(message)
    accepted_tput = _ACCEPTED_TPUT.search(message)
    drafted_tput = _DRAFTED_TPUT.search(message)
    rate_value = parse_float(rate and rate.group(1))
    if rate is not None and rate_value is not None and rate.group(2) == "%":
        rate_value = round(rate_value / 100, 6)
    return SpecDecode(
        ts=ts,
        rank=rank,
        engine=engine,
        mean_accept_len=parse_float(mean and mean.group(1)),
        accepted=parse_int(accepted and (accepted.group(1) or accepted.group(2))),
        drafted=parse_int(drafted and (drafted.group(1) or drafted.group(2))),
        per_position=rates(per_position.group(1)) if per_position else None,
        draft_acceptance_rate=rate_value,
        accepted_throughput=parse_float(accepted_tput and accepted_tput.group(1)),
        drafted_throughput=parse_float(drafted_tput and drafted_tput.group(1)),
    )


class _Percentages(dict[str, float]):
    """A `12.3` percentage text -> 0.123, computed once per text (a log prints few)."""

    def __missing__(self, text: str) -> float:
        value = round(float(text) / 100, 6)
        if len(self) >= 4096:
            self.clear()
        self[text] = value
        return value


_FRACTIONS = _Percentages()


def _decode(
    prefix: _Prefix, engine: str, gen: str, running: str, waiting: str, usage: str
) -> Decode:
    return Decode(
        ts=prefix.ts,
        rank=prefix.rank,
        running_req=int(running),
        tokens=None,
        token_usage=_FRACTIONS[usage],
        gen_throughput=float(gen),
        queue_req=int(waiting),
        engine=int(engine) if engine else None,
    )


def _shard_progress(match: re.Match[str], ts: str | None, rank: int | None) -> ShardProgress:
    seconds_per_shard = None
    if match.group(5):
        rate = TQDM_RATE.search(match.group(5))
        if rate is not None:
            value = float(rate.group(1))
            if rate.group(2) == "s/it":
                seconds_per_shard = value
            elif value > 0:
                seconds_per_shard = round(1.0 / value, 6)
    return ShardProgress(
        ts=ts,
        rank=rank,
        done=int(match.group(1)),
        total=int(match.group(2)),
        elapsed_s=clock_seconds(match.group(3)),
        remaining_s=clock_seconds(match.group(4)),
        seconds_per_shard=seconds_per_shard,
    )


class VLLMLogParser(LogParser):
    """Stateful vLLM log reader for whole files and live tails alike.

    State kept between chunks: the partial last line, an incremental UTF-8 decoder, the
    load's progress (whose shard bar is the target's: the draft's `1/1` bar comes after the
    target's weights are read and is not reported), the tracebacks being read per process,
    the error messages already reported in this run (eight workers print the same one) and
    the last timestamp seen (uvicorn's lines have none). ``unparsed_decode_like`` counts lines
    that look like a stats or SpecDecoding line but did not read.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._discarding_overlong = False
        self._prefixes = _PrefixTable()
        self.unparsed_decode_like = 0
        self._last_ts: str | None = None
        self._last_engine: dict[str, int | None] = {}
        self._tracebacks: dict[str, OpenTraceback] = {}
        self._chained: set[str] = set()
        self._ignored: dict[str, int] = {}  # sources that just printed `Exception ignored in`
        self._after_exception: dict[str, int] = {}
        self._queued: list[Event] = []  # events a line gives after the one it returns
        self._positions_noticed = False  # a per-position list was cut, and a notice said so
        self._block_size: int | None = None  # V0's, as the log last stated it
        self._new_run()

    def _new_run(self) -> None:
        self._run_done = False  # a load ended or the server came up: a next load_begin restarts
        self._weights_loaded: dict[int | None, int] = {}
        self._drafter = False
        self._load_open = False  # a load began and no `Model loading took` has ended it yet
        self._last_shard: tuple[int, int] | None = None
        self._target_total: int | None = None
        self._kv_gib: float | None = None
        self._capturing = False
        self._reported: set[str] = set()
        self._stopping = False  # after `[shutdown]`, EngineDeadError is the stop, not a fault

    # --- input ------------------------------------------------------------------------

    def feed(self, chunk: str | bytes) -> list[Event]:
        text = self._decoder.decode(chunk) if isinstance(chunk, bytes) else chunk
        if not text:
            return []
        if "\r" in text:
            text = text.replace("\r", "\n")
        if self._discarding_overlong:  # the rest of a line already cut at MAX_LINE_CHARS
            end = text.find("\n")
            if end < 0:
                return []
            text = text[end:]
            self._discarding_overlong = False
        text = self._pending + text
        cut = text.rfind("\n")
        self._pending = text[cut + 1 :]
        if len(self._pending) > MAX_LINE_CHARS:
            self._pending = self._pending[:MAX_LINE_CHARS]
            self._discarding_overlong = True
        return self._lines(text[: cut + 1]) if cut >= 0 else []

    def flush(self) -> list[Event]:
        tail = self._pending
        if not self._discarding_overlong:
            tail += self._decoder.decode(b"", final=True)
        self._pending = ""
        self._discarding_overlong = False
        # No `\r` to replace: feed turned every one into a newline before keeping a tail.
        events = self._lines(tail + "\n") if tail else []
        # The input ended: tracebacks still being read were cut before their exception line.
        for traceback in self._tracebacks.values():
            self._report_cut(traceback, events)
        self._tracebacks.clear()
        return events

    def _lines(self, text: str) -> list[Event]:
        """Stats and current-shape SpecDecoding lines are read here, on the spot; any other
        line is dispatched only when a keyword says it may be an event (or a traceback is
        being read)."""
        events: list[Event] = []
        append = events.append
        prefixes = self._prefixes
        hint = _HINT.search
        stats_at, spec_at = _STATS_AT.match, _SPEC_CURRENT.match
        for line in text.split("\n"):
            if not line:
                continue
            if len(line) <= MAX_LINE_CHARS:
                mark = line.find(_STATS_MARK)
                if mark >= 0:
                    stats = stats_at(line, mark)
                    if stats is not None:
                        append(self._fast_decode(line, mark, stats))
                        continue
                else:
                    mark = line.find(_SPEC_MARK)
                    if mark >= 0:
                        spec = spec_at(line, mark + len(_SPEC_MARK))
                        if spec is not None:
                            append(self._fast_spec(prefixes[line[:mark]], spec))
                            if self._queued:  # the notice of positions left out
                                events += self._queued
                                self._queued.clear()
                            continue
            if self._tracebacks or hint(line) is not None:
                event = self._line(line)
                if event is not None:
                    append(event)
                if self._queued:
                    events += self._queued
                    self._queued.clear()
        return events

    def _fast_decode(self, line: str, mark: int, stats: re.Match[str]) -> Decode:
        head = line[:mark]
        engine_text = ""
        if head.endswith(": "):
            before = _ENGINE_BEFORE.search(head, max(0, mark - 40))
            if before is not None:
                engine_text = before.group(1) or ""
                head = head[: before.start()]
        prefix = self._prefixes[head]
        if prefix.ts is not None:
            self._last_ts = prefix.ts
        engine = int(engine_text) if engine_text else None
        if len(self._last_engine) >= 1024:  # process tags of restarted servers pile up
            self._last_engine.clear()
        self._last_engine[prefix.source] = self._last_engine[_ANY_SOURCE] = engine
        _prompt, gen, running, waiting, usage = stats.groups()
        return _decode(prefix, engine_text, gen, running, waiting, usage)

    def _fast_spec(self, prefix: _Prefix, spec: re.Match[str]) -> SpecDecode:
        if prefix.ts is not None:
            self._last_ts = prefix.ts
        engines = self._last_engine
        mean, accepted_tput, drafted_tput, accepted, drafted, positions, rate = spec.groups()
        return SpecDecode(
            ts=prefix.ts,
            rank=prefix.rank,
            engine=engines.get(prefix.source, engines.get(_ANY_SOURCE)),
            mean_accept_len=float(mean),
            accepted=int(accepted),
            drafted=int(drafted),
            per_position=self._position_rates(positions),
            draft_acceptance_rate=_FRACTIONS[rate],
            accepted_throughput=float(accepted_tput),
            drafted_throughput=float(drafted_tput),
        )

    def _position_rates(self, text: str) -> tuple[float, ...]:
        """``position_rates``, queueing a ``notice`` the first time a list is cut."""
        rates, dropped = position_rates(text)
        if dropped and not self._positions_noticed:
            self._positions_noticed = True
            self._queued.append(
                Notice(
                    source="log",
                    message=f"a SpecDecoding line listed {len(rates) + dropped} positions; "
                    f"those past {MAX_POSITIONS} (the deepest draft read) are left out",
                )
            )
        return rates

    # --- one line ---------------------------------------------------------------------

    def _line(self, raw: str) -> Event | None:
        prefix, message = split_line(clean_line(raw))
        if prefix.ts is not None:
            self._last_ts = prefix.ts
        if prefix.source in self._tracebacks:
            cut: list[Event] = []
            if self._traceback_line(prefix, message, cut):
                return cut[0] if cut else None
            # Not the traceback's: it was cut (its error comes first), and this line is read
            # as any other.
            event = self._line(raw)
            if not cut:
                return event
            if event is not None:
                self._queued.insert(0, event)
            return cut[0]
        if message.startswith(_IGNORED_EXCEPTION):
            self._ignored[prefix.source] = _IGNORED_WINDOW_LINES
            # Python's report of an exception it ignored, no error; an event after the
            # words (they stood in a prefix) is still read.
            return self._event_in(prefix, message[len(_IGNORED_EXCEPTION) :])[0]
        if prefix.source in self._ignored:
            left = self._ignored.pop(prefix.source)
            if TRACEBACK_HEAD in message:  # read, not reported
                self._tracebacks[prefix.source] = OpenTraceback(prefix.ts, prefix.rank, False)
                return None
            if BARE_EXCEPTION.match(message.strip()):
                return None  # the ignored exception itself, printed without a traceback
            if left > 1:
                self._ignored[prefix.source] = left - 1
        if TRACEBACK_HEAD in message:
            report = prefix.source not in self._chained
            self._chained.discard(prefix.source)
            self._tracebacks[prefix.source] = OpenTraceback(prefix.ts, prefix.rank, report)
            return None
        if prefix.source in self._after_exception:
            left = self._after_exception[prefix.source] - 1
            if message.startswith(CHAIN_LINES):
                self._chained.add(prefix.source)
                del self._after_exception[prefix.source]
                return None
            if left <= 0:
                del self._after_exception[prefix.source]
            else:
                self._after_exception[prefix.source] = left
            # the exception's message continues here: no error of its own, and its text is
            # not marked as reported (the same error may happen for real later)
            return self._message_event(prefix, message, errors=False)
        if starts_inside(message):
            # A frame outside any traceback: the log (a tail, a paste) begins inside one.
            self._tracebacks[prefix.source] = opened_inside(prefix.ts, prefix.rank, message)
            return None
        return self._message_event(prefix, message)

    def _message_event(self, prefix: _Prefix, message: str, *, errors: bool = True) -> Event | None:
        """The event for one line's message, or None. A line that looked like a decode or
        metrics line and gave no event counts in ``unparsed_decode_like`` (and is no error,
        whatever words it holds); ``errors=False`` reads no error at all."""
        event, decode_like = self._event_in(prefix, message)
        if event is not None:
            return event
        if decode_like:
            self.unparsed_decode_like += 1
            return None
        if "[shutdown]" in message or "received signal" in message:
            self._stopping = True
            return None
        return self._error_event(prefix, message) if errors else None

    def _event_in(self, prefix: _Prefix, message: str) -> tuple[Event | None, bool]:
        """(the event other than an error in ``message`` or None, whether it looked like a
        decode or metrics line).

        A branch chosen by a marker in the message (`metrics: `, `Engine N: `) that reads no
        event there falls through to the others: the marker may stand in text before the
        event's own message (an operator's prefix, a cut line).
        """
        ts, rank = prefix.ts, prefix.rank
        decode_like = False
        if "metrics: " in message:
            head = _SPEC_HEAD.search(message)
            if head is not None:
                engines = self._last_engine
                engine = engines.get(prefix.source, engines.get(_ANY_SOURCE))
                spec = spec_decode_from_message(
                    message[head.end() :], ts, rank, engine, self._position_rates
                )
                if spec is not None:
                    return spec, True
                decode_like = True
        if "Avg prompt throughput" in message or "Engine" in message:
            stats = _STATS_LINE.search(message)
            if stats is not None:
                engine, _prompt, gen, running, waiting, usage = stats.groups()
                self._last_engine[prefix.source] = self._last_engine[_ANY_SOURCE] = (
                    int(engine) if engine else None
                )
                return _decode(prefix, engine or "", gen, running, waiting, usage), True
            decode_like = decode_like or _DECODE_LIKE.search(message) is not None
        return self._phase_event(prefix, message), decode_like

    def _phase_event(self, prefix: _Prefix, message: str) -> Event | None:
        ts, rank = prefix.ts, prefix.rank
        if "hards" in message:
            shards = _SHARDS.search(message)
            progress = None if shards is None else self._shards(shards, ts, rank)
            if progress is not None:
                return progress
        if "oad" in message:
            if any(text in message for text in _LOAD_BEGIN):
                if self._run_done or self._stopping:
                    self._new_run()
                self._load_open = True
                return LoadBegin(ts=ts, rank=rank)
            if "Loading drafter model" in message:
                self._drafter = True  # no event of its own: an event after it is still read
            weights = _WEIGHTS.search(message)
            if weights is not None:
                # Each rank that reports it reads the target first, then the draft.
                count = self._weights_loaded.get(rank, 0) + 1
                self._weights_loaded[rank] = count
                role = "target" if count == 1 else "draft"
                return WeightsLoaded(ts=ts, rank=rank, role=role, seconds=float(weights.group(1)))
            v0_weights = _V0_WEIGHTS.search(message)
            if v0_weights is not None:
                self._run_done = True
                self._load_open = False
                return LoadEnd(ts=ts, rank=rank, mem_usage_gb=float(v0_weights.group(1)))
            loaded = _MODEL_LOADED.search(message)
            if loaded is not None:
                self._run_done = True
                self._load_open = False
                return LoadEnd(
                    ts=ts,
                    rank=rank,
                    mem_usage_gb=float(loaded.group(1)),
                    elapsed_s=float(loaded.group(2)),
                )
        if "torch.compile" in message:
            done = _COMPILE_END.search(message)
            if done is not None:
                return CompileEnd(
                    ts=ts, rank=rank, part=done.group(1), seconds=float(done.group(2))
                )
            begin = _COMPILE_BEGIN.search(message)
            if begin is not None:
                return CompileBegin(ts=ts, rank=rank, part=begin.group(1))
        if _WARM_UP_BEGIN in message:
            return self._after_load(CompileBegin(ts=ts, rank=rank, part=None))
        if "AOT" in message:
            aot = _AOT_DONE.search(message)
            if aot is not None:  # the CPU build prints no compile time
                return CompileEnd(ts=ts, rank=rank, part=aot.group(1), seconds=None)
        if "blocks: " in message:
            blocks = _V0_BLOCKS.search(message.strip())
            if blocks is not None:
                size = self._block_size
                count = int(blocks.group(1) or blocks.group(2))
                tokens = count * size if size is not None else None
                return self._after_load(
                    KvCache(ts=ts, rank=rank, tokens=tokens, size_gb=self._kv_gib)
                )
        if "block_size" in message:
            stated = _BLOCK_SIZE.search(message)
            if stated is not None:
                self._block_size = parse_int(stated.group(1))
        if "KV cache" in message:
            memory = _KV_MEMORY.search(message)
            if memory is not None:  # no event of its own: the KV cache event's size
                self._kv_gib = float(memory.group(1) or memory.group(2))
            size = _KV_SIZE.search(message)
            if size is not None:
                tokens = parse_int(size.group(1).replace(",", ""))
                return self._after_load(
                    KvCache(ts=ts, rank=rank, tokens=tokens, size_gb=self._kv_gib)
                )
        if "apturing" in message:
            if not self._capturing and _GRAPH_BAR.search(message) is not None:
                self._capturing = True  # the bar's redraws give no event of their own
                return GraphBegin(ts=ts, rank=rank)
            graph = _GRAPH_END.search(message)
            if graph is not None:
                self._capturing = False
                return GraphEnd(
                    ts=ts,
                    rank=rank,
                    seconds=float(graph.group(1)),
                    mem_usage_gb=parse_float(graph.group(2)),
                )
        if "Starting vLLM" in message:
            http = _HTTP_UP.search(message)
            if http is not None:
                self._run_done = True
                return HttpUp(ts=ts, rank=rank, port=int(http.group(1)))
        if _READY in message:
            self._run_done = True
            return Ready(ts=ts or self._last_ts, rank=rank)
        return None

    def _after_load(self, event: Event) -> Event:
        """``event``, preceded by a ``load_end`` where the load is still open: the CPU build
        prints no `Model loading took` line; its load has ended once the warm-up (or, with
        no compilation, the KV cache sizing) begins."""
        if not self._load_open:
            return event
        self._load_open = False
        self._run_done = True
        self._queued.append(event)
        return LoadEnd(ts=event.ts, rank=event.rank)

    def _shards(self, match: re.Match[str], ts: str | None, rank: int | None) -> Event | None:
        """The target's shard bar; a bar after the target's weights are read is the draft's."""
        done, total = int(match.group(1)), int(match.group(2))
        target_complete = self._target_total is not None and self._last_shard == (
            self._target_total,
            self._target_total,
        )
        if (
            self._weights_loaded
            or self._drafter
            or (target_complete and total != self._target_total)
        ):
            return None
        if (done, total) == self._last_shard:
            return None
        self._last_shard = (done, total)
        self._target_total = total
        return _shard_progress(match, ts, rank)

    # --- errors -----------------------------------------------------------------------

    def _error_event(self, prefix: _Prefix, message: str) -> ServerError | None:
        if prefix.level not in _REPORTED_LEVELS:
            return None
        if " HTTP/" in message and '" ' in message:
            return None  # uvicorn access lines are never errors, whatever their status
        if source_text(message):
            return None  # a source line or a message's continuation: no error of its own
        text = message.strip()
        if _OOM.search(text) or _NCCL.search(text) or BARE_EXCEPTION.match(text):
            return self._report(prefix.ts, prefix.rank, text, nccl_frames=False)
        return None

    def _traceback_line(self, prefix: _Prefix, message: str, events: list[Event]) -> bool:
        """A line of a traceback being read for ``prefix.source`` (tracebacks.OpenTraceback.
        read says what it is): False when it is not the traceback's, which then was cut
        (reported here, or nothing when the cut was already reported)."""
        traceback = self._tracebacks[prefix.source]
        read = traceback.read(message)
        if read is Read.PART:
            return True
        del self._tracebacks[prefix.source]
        if read is Read.CUT:
            self._report_cut(traceback, events)
            return False
        if read is Read.EXCEPTION:
            self._after_exception[prefix.source] = CONTINUATION_MAX_LINES
            if traceback.report:
                error = self._report(
                    traceback.ts, traceback.rank, message.strip(), nccl_frames=traceback.nccl_frames
                )
                if error is not None:
                    events.append(error)
        return True

    def _report_cut(self, traceback: OpenTraceback, events: list[Event]) -> None:
        """A traceback whose lines ended without an exception line of its own: an exception
        group's first exception, else the cut, unless the same cut was reported in this run
        (eight workers killed at the same frame)."""
        if traceback.group_exception is not None:
            if traceback.report:
                error = self._report(
                    traceback.ts,
                    traceback.rank,
                    traceback.group_exception,
                    nccl_frames=traceback.nccl_frames,
                )
                if error is not None:
                    events.append(error)
            return
        error = traceback.cut_error()
        if error is None or error.message in self._reported:
            return
        if len(self._reported) < 1024:
            self._reported.add(error.message)
        events.append(error)

    def _report(
        self, ts: str | None, rank: int | None, message: str, *, nccl_frames: bool
    ) -> ServerError | None:
        """An error, unless it repeats one already reported in this run or only points at
        a root cause reported above it (`See root cause above`)."""
        if message in self._reported:
            return None
        if (self._reported or self._stopping) and _POINTER.search(message):
            return None
        if len(self._reported) < 1024:
            self._reported.add(message)
        category = error_category(message)
        if category == "other" and nccl_frames:
            category = "nccl"
        return ServerError(ts=ts, rank=rank, category=category, message=message)

"""Reading a log in which no server was recognised: its errors alone.

A log cut from a larger one may hold no line only one server writes: a Ray worker's output,
PyTorch c10d's `[rank3]:[E1210 ...] Watchdog caught collective operation timeout`, a paste
of a traceback. `specmon parse` then reads it with this reader rather than with some
server's parser: what PyTorch, NCCL and Python write is the same whatever the server, so it
reports out-of-memory and NCCL errors, exception lines and tracebacks (the shared rule of
specmon/backends/tracebacks.py, cut ones included), and no server's own events.

It is not a backend: it cannot launch anything, is not in the registry and is never detected;
`specmon parse` falls back to it (``NeutralLog``), so adding a backend is still adding one
folder and one registry entry.
"""

from __future__ import annotations

import codecs
import re
from typing import Any

from specmon.backends import LogParser, LogSummary
from specmon.backends.log_totals import ServingTotals
from specmon.backends.logtext import (
    BARE_EXCEPTION,
    CHAIN_LINES,
    CONTINUATION_MAX_LINES,
    MAX_LINE_CHARS,
    TORCH_NCCL,
    TORCH_OOM,
    TRACEBACK_HEAD,
    clean_line,
)
from specmon.backends.tracebacks import (
    OpenTraceback,
    Read,
    opened_inside,
    source_text,
    starts_inside,
)
from specmon.model.events import ErrorCategory, Event, ServerError

_OOM = re.compile(TORCH_OOM)
_NCCL = re.compile(TORCH_NCCL + r"|NCCL Error \d|NCCL WARN")
_ERROR_HINT = re.compile(r"rror|xception|Interrupt|out of memory|NCCL|nccl|atchdog|Traceback")
# What stands before a message: `docker logs -t`'s time, docker compose's `name  | `, Ray's
# and vLLM's `(Name pid=N, ip=...)` tags (any number), c10d's `[rank3]:[E1210 09:14:15.1 ...]`.
# torchrun's `[rankN]:` takes its one space with it, so a rank's traceback reads as unwrapped.
_PREFIX = re.compile(
    r"(?:\d{4}-\d\d-\d\dT[\d:.,]+(?:Z|[+-]\d\d:?\d\d)? +)?(?:[\w.-]+ +\| )?"
    r"((?:\([^()\n]*\) +)*)(?:\[rank(\d{1,6})\]:(?:(\[[^\]\n]*\] ?)| ?))?"
)
_TIME = re.compile(r"\d\d:\d\d:\d\d(?:[.,]\d{1,9}|)")
_TAG_RANK = re.compile(r"(?<![A-Za-z])(?:rank[= ]|TP)(\d{1,6})\b")


def error_category(text: str) -> ErrorCategory | None:
    """oom or nccl for what PyTorch, the CUDA driver and NCCL write; None for other text."""
    if _OOM.search(text):
        return "oom"
    if _NCCL.search(text):
        return "nccl"
    return None


class NeutralLogParser(LogParser):
    """Errors from a log of no known server, for whole files and live tails alike.

    State kept between chunks: the partial last line, an incremental UTF-8 decoder, and per
    process (its tags) the traceback being read, the continuation lines after an exception
    and whether a chained exception's next link is due.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._tracebacks: dict[str, OpenTraceback] = {}
        self._after_exception: dict[str, int] = {}
        self._chained: set[str] = set()

    def feed(self, chunk: str | bytes) -> list[Event]:
        text = self._decoder.decode(chunk) if isinstance(chunk, bytes) else chunk
        if not text:
            return []
        text = self._pending + text.replace("\r", "\n")
        cut = text.rfind("\n")
        self._pending = text[cut + 1 :][:MAX_LINE_CHARS]
        events: list[Event] = []
        for line in text[: cut + 1].split("\n"):
            if line:
                self._line(line, events)
        return events

    def flush(self) -> list[Event]:
        tail = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        events: list[Event] = []
        for line in tail.replace("\r", "\n").split("\n"):
            if line:
                self._line(line, events)
        for traceback in self._tracebacks.values():  # cut before their exception lines
            _ended(traceback, events)
        self._tracebacks.clear()
        return events

    def _line(self, raw: str, events: list[Event]) -> None:
        line = clean_line(raw)
        if not (_ERROR_HINT.search(line) or 'File "' in line or self._tracebacks):
            return
        prefix = _PREFIX.match(line)
        source = ""  # the process tags and torchrun's rank: each one's traceback apart
        if prefix is not None:
            source = prefix.group(1).rstrip()
            if prefix.group(2) is not None:
                source += f"[rank{prefix.group(2)}]"
        message = line[prefix.end() :] if prefix is not None else line
        traceback = self._tracebacks.get(source)
        if traceback is not None:
            read = traceback.read(message)
            if read is Read.PART:
                return
            del self._tracebacks[source]
            if read is Read.EXCEPTION:
                self._after_exception[source] = CONTINUATION_MAX_LINES
                _exception(traceback, message.strip(), events)
                return
            if read is not Read.CUT:
                return  # abandoned
            _ended(traceback, events)
        ts, rank = _time_and_rank(prefix)
        if TRACEBACK_HEAD in message:
            report = source not in self._chained
            self._chained.discard(source)
            self._after_exception.pop(source, None)
            self._tracebacks[source] = OpenTraceback(ts, rank, report)
            return
        left = self._after_exception.pop(source, 0)
        if left:
            # Lines after an exception's first line continue its message, or chain it.
            if message.startswith(CHAIN_LINES):
                self._chained.add(source)
            elif left > 1:
                self._after_exception[source] = left - 1
            return
        if starts_inside(message):
            self._tracebacks[source] = opened_inside(ts, rank, message)
            return
        if source_text(message):
            return  # a source line or a message's continuation: no error of its own
        text = message.strip()
        category = error_category(text)
        if category is None and BARE_EXCEPTION.match(text):
            category = "other"
        if category is not None:
            events.append(ServerError(ts=ts, rank=rank, category=category, message=text))


def _exception(traceback: OpenTraceback, text: str, events: list[Event]) -> None:
    """A traceback's exception line: the cause, reported unless a chain's later link."""
    if traceback.report:
        category = error_category(text) or "other"
        events.append(
            ServerError(ts=traceback.ts, rank=traceback.rank, category=category, message=text)
        )


def _ended(traceback: OpenTraceback, events: list[Event]) -> None:
    """A traceback's lines ended without an exception line: an exception group's first
    exception, else the cut."""
    if traceback.group_exception is not None:
        _exception(traceback, traceback.group_exception, events)
        return
    cut = traceback.cut_error()
    if cut is not None:
        events.append(cut)


def _time_and_rank(prefix: re.Match[str] | None) -> tuple[str | None, int | None]:
    """The time c10d's bracket holds and the rank of `[rankN]:` or of the process tags."""
    if prefix is None:
        return None, None
    stamp = _TIME.search(prefix.group(3) or "")
    if prefix.group(2) is not None:
        return (stamp.group() if stamp else None), int(prefix.group(2))
    rank = _TAG_RANK.search(prefix.group(1))
    return (stamp.group() if stamp else None), (int(rank.group(1)) if rank else None)


class NeutralLogSummary(ServingTotals):
    """Errors counted, with the first one's message; a log of no known server has no
    readiness, load or serving figures, which the record gives as absent."""

    def add(self, event: Event) -> None:
        self.add_shared(event)

    def merge(self, later: LogSummary) -> None:
        if not isinstance(later, NeutralLogSummary):
            raise TypeError(f"cannot merge {type(later).__name__} into a neutral summary")
        self.merge_shared(later)

    def finish(self, parser: LogParser) -> dict[str, Any]:
        return {
            "kind": "summary",
            "ready": False,
            "load_seconds": None,
            "shards_total": self.shards_total,
            "decode_lines": 0,
            "mean_gen_throughput": None,
            "mean_accept_len": None,
            "errors": self.errors,
            "prefill_lines": None,
            "first_error": self.first_error,
            "unparsed_decode_like": None,
        }


class NeutralLog:
    """What `specmon parse` reads a log with when no backend recognised it (a LogReading)."""

    name = "neutral"

    def new_log_parser(self) -> LogParser:
        return NeutralLogParser()

    def new_log_summary(self) -> LogSummary:
        return NeutralLogSummary()

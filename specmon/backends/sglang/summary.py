"""`specmon parse --summary` for SGLang logs: readiness, load time and the serving means."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from itertools import compress, repeat
from operator import is_, itemgetter
from typing import Any

from specmon.backends import LogParser, LogSummary
from specmon.backends.log_totals import ServingTotals
from specmon.model.events import Decode, Event, Prefill, Ready, SpecParams, text_rows

# Decode.from_texts rows: accept len and gen throughput texts.
_ACCEPT_LEN = itemgetter(5)
_GEN = itemgetter(8)
# The parser's summary rows (SGLangLogParser.summarize): accept len and gen throughput texts.
_SUM_ACCEPT_LEN = itemgetter(1)
_SUM_GEN = itemgetter(2)


def _timestamp(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace(",", "."))
    except ValueError:
        return None


class SGLangLogSummary(ServingTotals):
    """Running totals over a stream of events, so a huge log need not be held in memory."""

    def __init__(self) -> None:
        super().__init__()
        self.prefill_lines = 0
        self.spec_steps: int | None = None
        self.spec_steps_changes = 0

    def add(self, event: Event) -> None:
        if isinstance(event, Decode):
            self.decode_lines += 1
            self._gen_sum += event.gen_throughput
            if event.accept_len is not None:
                self._accept_sum += event.accept_len
                self._accept_count += 1
        elif isinstance(event, Prefill):
            self.prefill_lines += 1
        elif isinstance(event, Ready):
            if not self.ready:
                self.ready_ts = event.ts
            self.ready = True
        elif isinstance(event, SpecParams):
            self.spec_steps = event.steps
            self.spec_steps_changes += 1
        else:
            self.add_shared(event)

    def add_all(self, events: list[Event]) -> None:
        """Decodes still holding their texts are summed in bulk (their numbers converted in C,
        the events left unread); every other event is taken one by one, in order. The decode
        totals do not depend on order."""
        rows = text_rows(events)
        plain = rows.count(None)
        if plain == len(rows):
            for event in events:
                self.add(event)
            return
        self.add_rows(list(filter(None, rows)) if plain else rows)  # type: ignore[arg-type]
        if plain:
            for event in compress(events, map(is_, rows, repeat(None))):
                self.add(event)

    def add_rows(self, rows: list[tuple[str, ...]]) -> None:
        """Decode lines as ``Decode.from_texts`` rows of texts: counted and summed in C."""
        self.decode_lines += len(rows)
        self._gen_sum = sum(map(float, map(_GEN, rows)), self._gen_sum)
        accepts = list(filter(None, map(_ACCEPT_LEN, rows)))
        self._accept_sum = sum(map(float, accepts), self._accept_sum)
        self._accept_count += len(accepts)

    def add_sums(self, rows: list[tuple[str, ...]]) -> None:
        """Decode lines as rows of (#running-req, accept len, gen throughput, "") texts, as
        the parser's summary scan finds them: counted and summed in C, as add_rows does."""
        self.decode_lines += len(rows)
        self._gen_sum = sum(map(float, map(_SUM_GEN, rows)), self._gen_sum)
        accepts = list(filter(None, map(_SUM_ACCEPT_LEN, rows)))
        self._accept_sum = sum(map(float, accepts), self._accept_sum)
        self._accept_count += len(accepts)

    def merge(self, later: LogSummary) -> None:
        if not isinstance(later, SGLangLogSummary):
            raise TypeError(f"cannot merge {type(later).__name__} into an SGLang summary")
        self.merge_shared(later)
        if not self.ready and later.ready:
            self.ready, self.ready_ts = True, later.ready_ts
        self.prefill_lines += later.prefill_lines
        if later.spec_steps_changes:
            self.spec_steps = later.spec_steps
        self.spec_steps_changes += later.spec_steps_changes

    def load_seconds(self) -> float | None:
        begin, ready = _timestamp(self.first_load_begin), _timestamp(self.ready_ts)
        if begin is None or ready is None or ready < begin:
            return None
        return round((ready - begin).total_seconds(), 3)

    def result(self, unparsed_decode_like: int = 0) -> dict[str, Any]:
        return {
            "kind": "summary",
            "ready": self.ready,
            "load_seconds": self.load_seconds(),
            "shards_total": self.shards_total,
            "decode_lines": self.decode_lines,
            "mean_gen_throughput": self.mean_gen_throughput(),
            "mean_accept_len": self.mean_accept_len(),
            "errors": self.errors,
            "prefill_lines": self.prefill_lines,
            "first_error": self.first_error,
            "unparsed_decode_like": unparsed_decode_like,
            "spec_steps": self.spec_steps,
            "spec_steps_changes": self.spec_steps_changes,
        }

    def finish(self, parser: LogParser) -> dict[str, Any]:
        return self.result(parser.unparsed_decode_like)


def summarize(events: Iterable[Event]) -> dict[str, Any]:
    """The `--summary` record for a sequence of parsed events (see docs/parser.md); the
    parser's own count (``unparsed_decode_like``) is 0 here, as no parser is at hand."""
    summary = SGLangLogSummary()
    for event in events:
        summary.add(event)
    return summary.result()

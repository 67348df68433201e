"""Running totals over a vLLM log's events: the `specmon parse --summary` record for vLLM.

The fields are SGLang's (specmon.commands.parse), read the vLLM way: the load runs from the
first ``load_begin`` to the server's `Starting vLLM server on` line (else to `Application
startup complete.`), decode lines are the `Engine NNN:` stats lines of every engine, and
acceptance comes from the `SpecDecoding metrics:` lines. vLLM logs no prefill lines, so
``prefill_lines`` is None rather than a count.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from specmon.backends import LogParser, LogSummary
from specmon.backends.log_totals import ServingTotals
from specmon.backends.vllm.parser import VLLMLogParser
from specmon.model.events import Decode, Event, HttpUp, Ready, SpecDecode


def log_time(text: str | None) -> datetime | None:
    """A vLLM timestamp (`11-30 06:00:01`, no year) or an ISO one, as a datetime."""
    if not text:
        return None
    try:
        if len(text) <= 19 and text[2:3] == "-" and text[5:6] == " ":
            # vLLM prints no year; a leap year admits 02-29.
            return datetime.strptime(f"2000-{text[:14]}", "%Y-%m-%d %H:%M:%S")
        return datetime.fromisoformat(text.replace(",", "."))
    except ValueError:
        return None


class VLLMLogSummary(ServingTotals):
    """What `specmon parse --summary` reports for a vLLM log, kept as running totals."""

    def __init__(self) -> None:
        super().__init__()
        self.http_up_ts: str | None = None
        self._position_sums: list[float] = []
        self._position_counts: list[int] = []

    def add(self, event: Event) -> None:
        if isinstance(event, Decode):
            self.decode_lines += 1
            self._gen_sum += event.gen_throughput
        elif isinstance(event, SpecDecode):
            if event.mean_accept_len is not None:
                self._accept_sum += event.mean_accept_len
                self._accept_count += 1
            for position, rate in enumerate(event.per_position or ()):
                if position == len(self._position_sums):
                    self._position_sums.append(0.0)
                    self._position_counts.append(0)
                self._position_sums[position] += rate
                self._position_counts[position] += 1
        elif isinstance(event, HttpUp):
            self.ready = True
            if self.http_up_ts is None:
                self.http_up_ts = event.ts
        elif isinstance(event, Ready):
            self.ready = True
            if self.ready_ts is None:
                self.ready_ts = event.ts
        else:
            self.add_shared(event)

    def merge(self, later: LogSummary) -> None:
        if not isinstance(later, VLLMLogSummary):
            raise TypeError(f"cannot merge {type(later).__name__} into a vLLM summary")
        self.merge_shared(later)
        self.ready = self.ready or later.ready
        if self.ready_ts is None:
            self.ready_ts = later.ready_ts
        if self.http_up_ts is None:
            self.http_up_ts = later.http_up_ts
        for position, (total, count) in enumerate(
            zip(later._position_sums, later._position_counts, strict=True)
        ):
            if position == len(self._position_sums):
                self._position_sums.append(0.0)
                self._position_counts.append(0)
            self._position_sums[position] += total
            self._position_counts[position] += count

    def load_seconds(self) -> float | None:
        begin = log_time(self.first_load_begin)
        ready = log_time(self.http_up_ts or self.ready_ts)
        if begin is None or ready is None or ready < begin:
            return None
        return round((ready - begin).total_seconds(), 3)

    def finish(self, parser: LogParser) -> dict[str, Any]:
        """The summary record; ``parser`` is the one that read the log (its unparsed count)."""
        unparsed = parser.unparsed_decode_like if isinstance(parser, VLLMLogParser) else None
        return {
            "kind": "summary",
            "ready": self.ready,
            "load_seconds": self.load_seconds(),
            "shards_total": self.shards_total,
            "decode_lines": self.decode_lines,
            "mean_gen_throughput": self.mean_gen_throughput(),
            "mean_accept_len": self.mean_accept_len(),
            "accept_rate_per_position": (
                [
                    round(total / count, 4)
                    for total, count in zip(self._position_sums, self._position_counts, strict=True)
                ]
                if self._position_sums
                else None
            ),
            "errors": self.errors,
            "prefill_lines": None,
            "first_error": self.first_error,
            "unparsed_decode_like": unparsed,
        }

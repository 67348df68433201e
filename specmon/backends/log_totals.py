"""The running totals that every backend's `specmon parse --summary` record holds alike."""

from __future__ import annotations

from specmon.backends import LogSummary
from specmon.model.events import Event, LoadBegin, ServerError, ShardProgress


class ServingTotals(LogSummary):
    """Totals read the same way whatever the server: the largest shard count, the first
    timed load_begin, decode lines with their summed generation throughput, acceptance
    lengths, and errors with the first one's message. A backend's summary adds what its
    server logs beyond these (when it is ready, its own decode and acceptance fields) and
    builds the record."""

    def __init__(self) -> None:
        self.ready = False
        self.first_load_begin: str | None = None
        self.ready_ts: str | None = None
        self.shards_total: int | None = None
        self.decode_lines = 0
        self._gen_sum = 0.0
        self._accept_sum = 0.0
        self._accept_count = 0
        self.errors = 0
        self.first_error: str | None = None

    def add_shared(self, event: Event) -> None:
        """Count a shard bar, a load_begin or an error; any other event is not counted."""
        if isinstance(event, ShardProgress):
            if self.shards_total is None or event.total > self.shards_total:
                self.shards_total = event.total
        elif isinstance(event, LoadBegin):
            if self.first_load_begin is None and event.ts is not None:
                self.first_load_begin = event.ts
        elif isinstance(event, ServerError):
            self.errors += 1
            if self.first_error is None:
                self.first_error = event.message

    def merge_shared(self, later: ServingTotals) -> None:
        """Fold in the shared totals of the log's next part (see LogSummary.merge); the
        readiness fields are the backend's, as it sets them."""
        if self.first_load_begin is None:
            self.first_load_begin = later.first_load_begin
        if later.shards_total is not None and (
            self.shards_total is None or later.shards_total > self.shards_total
        ):
            self.shards_total = later.shards_total
        self.decode_lines += later.decode_lines
        self._gen_sum += later._gen_sum
        self._accept_sum += later._accept_sum
        self._accept_count += later._accept_count
        self.errors += later.errors
        if self.first_error is None:
            self.first_error = later.first_error

    def mean_gen_throughput(self) -> float | None:
        return round(self._gen_sum / self.decode_lines, 4) if self.decode_lines else None

    def mean_accept_len(self) -> float | None:
        return round(self._accept_sum / self._accept_count, 4) if self._accept_count else None

"""A time window on a log's events (`specmon parse --since/--until`), by the log's own stamps.

Stamps are compared as text, after the few spellings of one instant are made one (`T` or a
space between date and time, `,` or `.` before the fraction, `/` or `-` in the date, a `Z`):
ISO-ordered texts sort as the times do, so a chunk's stamps are compared in C, not parsed one
by one. An event without a stamp (a tqdm bar, a traceback's line) is in the window when the
last stamped line before it was.
"""

from __future__ import annotations

import re
from itertools import compress
from operator import itemgetter

from specmon.model.errors import UsageError
from specmon.model.events import Event, text_rows

_BOUND = re.compile(
    r"(?:\d{4}[-/]\d\d[-/]\d\d(?:[ T]\d\d(?::\d\d(?::\d\d(?:[.,]\d{1,9})?)?)?)?Z?"
    r"|\d\d:\d\d(?::\d\d(?:[.,]\d{1,9})?)?)"
)
_SAME_SPELLING = str.maketrans({"T": " ", ",": ".", "/": "-", "Z": None})
_ROW_TS = itemgetter(0)
_PAST = "\x7f"  # after every stamp character: `--until 09:20` takes all of 09:20


def _bound(text: str | None, option: str) -> str | None:
    if text is None:
        return None
    text = text.strip()
    if _BOUND.fullmatch(text) is None:
        raise UsageError(
            f"parse: {option} wants a log timestamp such as 2026-02-10 09:20:00 or 09:20, "
            f"not {text!r}"
        )
    return text.translate(_SAME_SPELLING)


class TimeWindow:
    """Keeps the events stamped from ``since`` to ``until`` (either may be None), both
    given as the log writes its stamps, a date and a time or a time alone; a bound that
    stops short (`2026-02-10 09:20`) takes the whole minute."""

    def __init__(self, since: str | None, until: str | None) -> None:
        self.since = _bound(since, "--since")
        self.until = _bound(until, "--until")
        if self.since is not None and self.until is not None and self.since > self.until:
            raise UsageError(f"parse: --since {since} is after --until {until}")
        self.dated = any(b is not None and b[2] != ":" for b in (self.since, self.until))
        self._inside = self.since is None  # before the first stamp

    def keep(self, events: list[Event]) -> list[Event]:
        if not events:
            return events
        stamps = self._stamps(events)
        inside = [True] * len(stamps)
        if self.since is not None:
            inside = list(map(self.since.__le__, stamps))
        if self.until is not None:
            until = self.until + _PAST
            inside = list(map(min, inside, map(until.__ge__, stamps)))
        if "" in stamps:  # unstamped events go with the stamped line before them
            state = self._inside
            for index, stamp in enumerate(stamps):
                if stamp:
                    state = inside[index]
                else:
                    inside[index] = state
        self._inside = inside[-1]
        if all(inside):
            return events
        return list(compress(events, inside))

    def carry_state(self) -> bool:
        """What the window carries from one chunk to the next: whether the last stamped line
        was inside it (a line without a stamp goes with it). `specmon parse` reading a file
        in parts checks that a part began in the state one pass would have had."""
        return self._inside

    def _stamps(self, events: list[Event]) -> list[str]:
        """Each event's stamp ("" for none) in the bounds' spelling."""
        rows = text_rows(events)
        if rows.count(None) == 0:  # decodes still holding their texts: no event is read
            stamps = list(map(_ROW_TS, rows))  # type: ignore[arg-type]
        else:
            stamps = [
                row[0] if row is not None else (event.ts or "")
                for event, row in zip(events, rows, strict=True)
            ]
        joined = "\n".join(stamps)
        if "T" in joined or "," in joined or "/" in joined or "Z" in joined:
            stamps = joined.translate(_SAME_SPELLING).split("\n")
        if not self.dated:  # bounds are times of day: compare the stamps' time parts
            stamps = [
                stamp[11:] if stamp[2:3] != ":" and len(stamp) > 11 else stamp for stamp in stamps
            ]
        return stamps

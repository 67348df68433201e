"""Whole-step timing from ``GET /server_info`` (``/get_server_info``), for servers without the
probe: the fallback the draft/verify panel shows, labelled ``source="step_time"``.

SGLang fills ``step_time_dict`` only with ``SGLANG_RECORD_STEP_TIME=1``: batch size (a string key
in JSON) -> list of seconds, one value appended per decode log line (every
``--decode-log-interval`` decode iterations), each the mean wall time of one decode iteration
(one draft+verify+extend cycle with speculation) over that interval. 0.5.9 puts it in each entry
of ``internal_states``; a top-level ``step_time_dict`` is read too. The list only grows, so the
caller keeps a cursor (``StepTimeCursor``) and gets only the values added since the last poll.

Keys read: ``internal_states[i].step_time_dict`` and ``step_time_dict``. Nothing else.
The phase fields cannot be split from a whole step: they are NaN (not measured), never 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specmon.model.events import ProbeTiming

STEP_TIME_KEY = "step_time_dict"


@dataclass(slots=True)
class StepTimeCursor:
    """How many values of each (internal state index, batch size) list were already turned
    into records."""

    seen: dict[tuple[int, int], int] = field(default_factory=dict)


def step_time_dicts(server_info: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The step_time_dict of each scheduler state in a /server_info answer (maybe none)."""
    found: list[Mapping[str, Any]] = []
    states = server_info.get("internal_states")
    if isinstance(states, list):
        for state in states:
            if isinstance(state, Mapping) and isinstance(state.get(STEP_TIME_KEY), Mapping):
                found.append(state[STEP_TIME_KEY])
    top = server_info.get(STEP_TIME_KEY)
    if not found and isinstance(top, Mapping):
        found.append(top)
    return found


def has_step_time(server_info: Mapping[str, Any]) -> bool:
    """Whether the server records step times (SGLANG_RECORD_STEP_TIME=1)."""
    return bool(step_time_dicts(server_info))


def step_time_records(
    server_info: Mapping[str, Any], wall: float, cursor: StepTimeCursor | None = None
) -> list[ProbeTiming]:
    """Whole-step records for the values added since ``cursor`` (all values without one),
    stamped with ``wall`` (the poll time: SGLang keeps no timestamps). Malformed entries are
    skipped; this never raises on odd input."""
    records: list[ProbeTiming] = []
    for index, table in enumerate(step_time_dicts(server_info)):
        for key, values in table.items():
            batch_size = _batch_size(key)
            if batch_size is None or not isinstance(values, list):
                continue
            already = cursor.seen.get((index, batch_size), 0) if cursor is not None else 0
            if already > len(values):  # the server restarted: its lists began again
                already = 0
            for value in values[already:]:
                seconds = _seconds(value)
                if seconds is None:
                    continue
                records.append(
                    ProbeTiming(
                        wall=wall,
                        draft_ms=math.nan,
                        verify_ms=math.nan,
                        extend_ms=math.nan,
                        cycle_ms=seconds * 1000.0,
                        batch_size=batch_size,
                        source="step_time",
                    )
                )
            if cursor is not None:
                cursor.seen[(index, batch_size)] = len(values)
    return records


def _batch_size(key: object) -> int | None:
    try:
        size = int(key)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None
    return size if size >= 0 else None


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds

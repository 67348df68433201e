"""The per-cycle timing record: written by the probe inside SGLang and by the simulator,
read by the host session. One JSON object per line in ``$SPECMON_PROBE_FILE``:

  {"wall": float, "draft_ms": float, "verify_ms": float, "extend_ms": float, "cycle_ms": float,
   "batch_size": int|null, "draft_tokens": int|null, "accepted_tokens": int|null,
   "accepted_per_request": [int, ...]}            (optional)
  {"type": "warning", "message": str}     (e.g. a probe target missing in this SGLang version)

Field meanings (the probe; the simulator follows them): the *_ms fields are GPU-timeline spans
between CUDA events recorded at entry and exit of each phase method (``"clock": "cuda_event"``),
or CPU perf_counter spans where torch/CUDA is absent (``"clock": "perf_counter"``); a phase that
did not run in a cycle is 0.0. ``cycle_ms`` spans the whole ``forward_batch_generation`` call.
``batch_size`` is ``len(batch.seq_lens)``; ``draft_tokens`` is batch_size x
``speculative_num_draft_tokens`` (the tokens verify checks); ``accepted_tokens`` is the accepted
draft tokens summed over the batch, bonus token excluded (so SGLang's "accept len" is
(accepted_tokens + batch_size) / batch_size), or null where it could not be read.
``accepted_per_request`` (optional; absent in older records and where it could not be read)
lists each request's accepted draft tokens in this verify, bonus excluded, in batch order: the
tokens of one chain draft accepted in a row, so "accepted >= i" means position i was accepted.
It is what acceptance by position is derived from, at any batch size. The probe reads it from
v1's CPU list, and in v2 from an asynchronous device-to-host copy of ``accept_lens`` that is
read only once the cycle's last CUDA event has completed (no synchronisation added).
Extra keys such as ``clock`` are ignored by ``parse_probe_line``. In vLLM (see
``specmon/backends/vllm/probe_hook.py``) ``extend_ms`` is 0.0, ``verify_ms`` runs from the
step's start to the rejection sampler's end, and a record may add ``accepted_per_position`` and
``drafted_per_position`` (lists of request counts per draft position).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from specmon.model.events import ProbeTiming

RECORD_KEYS = (
    "wall",
    "draft_ms",
    "verify_ms",
    "extend_ms",
    "cycle_ms",
    "batch_size",
    "draft_tokens",
    "accepted_tokens",
    "accepted_per_request",
)


@dataclass(frozen=True, slots=True)
class ProbeWarning:
    message: str


def parse_probe_line(line: str) -> ProbeTiming | ProbeWarning | None:
    """One line of a probe file; None for garbage or a torn last line (never raises)."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    if data.get("type") == "warning":
        return ProbeWarning(str(data.get("message", "")))
    try:
        return ProbeTiming(
            wall=float(data["wall"]),
            draft_ms=float(data["draft_ms"]),
            verify_ms=float(data["verify_ms"]),
            extend_ms=float(data["extend_ms"]),
            cycle_ms=float(data["cycle_ms"]),
            batch_size=_int_or_none(data.get("batch_size")),
            draft_tokens=_int_or_none(data.get("draft_tokens")),
            accepted_tokens=_int_or_none(data.get("accepted_tokens")),
            accepted_per_request=_int_list_or_none(data.get("accepted_per_request")),
        )
    except (KeyError, TypeError, ValueError):
        return None


def _int_or_none(value: object) -> int | None:
    if value is None:
        return None
    return int(value)  # type: ignore[arg-type]


def _int_list_or_none(value: object) -> tuple[int, ...] | None:
    """A list of non-negative ints, or None (absent, or not a list: an older or broken record)."""
    if not isinstance(value, list):
        return None
    counts = tuple(int(v) for v in value)
    if any(c < 0 for c in counts):
        raise ValueError("negative accepted count")
    return counts

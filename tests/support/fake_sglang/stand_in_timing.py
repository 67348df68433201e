"""Shared by the stand-in worker modules: phase bodies that sleep for known times and keep
their own perf_counter truth, so a test can compare the probe's numbers with it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

PHASE_SECONDS = {"prefill": 0.003, "draft": 0.002, "verify": 0.012, "extend": 0.001}
TRUTH_MS: list[tuple[str, float]] = []


def work(phase: str) -> None:
    started = time.perf_counter()
    time.sleep(PHASE_SECONDS[phase])
    TRUTH_MS.append((phase, (time.perf_counter() - started) * 1000.0))


@dataclass
class Batch:
    """What the probe reads from a ScheduleBatch: ``seq_lens`` (its length is the batch size)."""

    seq_lens: list[int]
    accepted_per_request: list[int] = field(default_factory=list)
    is_prefill: bool = False

"""Probe timings for a benchmark window, taken from a host's live event stream.

The probe's records carry the GPU host's clock; the console's clock may differ. Collecting
the records by their *arrival* time on the bus keeps the window honest without clock sync.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from specmon.experiments.bench.runner import PhaseTimes, mean_phase_times
from specmon.model.events import ProbeTiming
from specmon.state.store import EventBus

MAX_RECORDS = 200_000  # ~1.5 h of 30 ms cycles; older records fall off, the mean stays valid


class ProbeCollector:
    """Subscribes to a bus while a benchmark runs and keeps the probe records with arrival time.

    Use as ``async with ProbeCollector(bus) as probes:`` and pass ``probes.phase_times`` to
    :func:`specmon.experiments.bench.runner.run_benchmark`.
    """

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus
        self._queue: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None
        self._records: deque[tuple[float, ProbeTiming]] = deque(maxlen=MAX_RECORDS)

    async def __aenter__(self) -> ProbeCollector:
        self._queue = self._bus.subscribe()
        self._task = asyncio.create_task(self._drain(self._queue))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._queue is not None:
            self._bus.unsubscribe(self._queue)

    async def _drain(self, queue: asyncio.Queue) -> None:
        while True:
            self._keep(*(await queue.get()))

    def _keep(self, at: float, event: object) -> None:
        if isinstance(event, ProbeTiming):
            self._records.append((at, event))

    def phase_times(self, start: float, end: float) -> PhaseTimes | None:
        """Mean phase times of the records that arrived between ``start`` and ``end``."""
        if self._queue is not None:
            while not self._queue.empty():  # what the drain task has not taken yet
                self._keep(*self._queue.get_nowait())
        return mean_phase_times([event for at, event in self._records if start <= at <= end])

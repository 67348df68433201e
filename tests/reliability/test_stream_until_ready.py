"""`--until ready` (launch --wait, watch) when the health endpoint tells before the log does:
the log's remaining loading lines and its ready line are still printed, within a bound."""

from __future__ import annotations

import asyncio
import io
import json
import time
from types import SimpleNamespace

from specmon.commands.printers import stream_events
from specmon.model.events import Event, KvCache, LoadBegin, Ready, RunInfo, RunState


class Bus:
    store = None

    def unsubscribe(self, queue: object) -> None:
        pass


async def printed(
    events: list[Event], later: tuple[Event, ...] = (), grace: float = 5.0
) -> tuple[int, list[str], float]:
    """stream_events(until=ready) over `events`, then `later` 0.2 s on: (code, kinds, s)."""
    queue: asyncio.Queue = asyncio.Queue()
    for event in events:
        queue.put_nowait((time.time(), event))

    async def feed_later() -> None:
        await asyncio.sleep(0.2)
        for event in later:
            queue.put_nowait((time.time(), event))

    feeder = asyncio.create_task(feed_later())
    out = io.StringIO()
    started = time.monotonic()
    code = await stream_events(
        SimpleNamespace(bus=Bus()),
        as_json=True,
        with_log=False,
        until="ready",
        duration=30,
        out=out,
        queue=queue,
        ready_log_grace_s=grace,
    )
    feeder.cancel()
    kinds = [json.loads(line)["kind"] for line in out.getvalue().splitlines()]
    return code, kinds, time.monotonic() - started


START = [RunInfo(run_id="r1"), LoadBegin()]


async def test_the_logs_ready_line_after_the_health_endpoint_is_still_printed() -> None:
    code, kinds, _ = await printed(
        [*START, RunState(run_id="r1", state="ready")], later=(KvCache(tokens=9), Ready())
    )
    assert code == 0
    assert kinds == ["run", "load_begin", "run_state", "kv_cache", "ready"]


async def test_a_log_that_never_says_ready_ends_the_wait_at_the_grace() -> None:
    code, kinds, took = await printed([*START, RunState(run_id="r1", state="ready")], grace=0.5)
    assert code == 0 and kinds[-1] == "run_state"
    assert 0.5 <= took < 3


async def test_the_logs_ready_first_or_no_start_watched_ends_at_once() -> None:
    code, kinds, took = await printed([*START, Ready(), KvCache(tokens=1)])
    assert code == 0 and kinds == ["run", "load_begin", "ready"] and took < 1
    # attached to a run already ready: no loading was watched, nothing to wait for
    code, kinds, took = await printed([RunInfo(run_id="r1"), RunState(run_id="r1", state="ready")])
    assert code == 0 and kinds == ["run", "run_state"] and took < 1

"""No silent loss: a slow headless reader slows the log tail and loses nothing; the console's
live view, which may skip lines to keep up, says so with a `dropped N` marker; state changes
(ready, failure, run state) reach every subscriber whatever the load."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from support.hostile import hostile_profile_toml
from support.hosts import kill_everything_under
from support.tui_replay import FROZEN_NOW, ReplayController, recorded_session

from specmon.model.events import Dropped, LogLine, Ready, RunState
from specmon.state.store import EventBus
from specmon.tui.app import SpecmonApp
from specmon.tui.widgets.log_pane import LogPane

REPO = Path(__file__).resolve().parents[2]
FLOOD = 60_000


async def test_a_slow_lossless_reader_pauses_the_publisher_and_gets_every_event() -> None:
    bus = EventBus(queue_size=100)
    queue = bus.subscribe()
    got: list[int] = []

    async def slow_reader() -> None:
        while len(got) < 5000:
            _, event = await queue.get()
            got.append(event.offset)  # type: ignore[attr-defined]
            if len(got) % 50 == 0:
                await asyncio.sleep(0.001)

    reader = asyncio.ensure_future(slow_reader())
    for chunk in range(50):  # what the log follower does: wait for room, then a chunk
        await bus.wait_for_room()
        assert queue.qsize() < 100
        for i in range(100):
            bus.publish(LogLine(text="x", offset=chunk * 100 + i))
    await asyncio.wait_for(reader, 10)
    assert got == list(range(5000)) and bus.dropped == 0


def test_a_lossy_reader_gets_a_dropped_marker_and_every_state_change() -> None:
    bus = EventBus(queue_size=10)
    queue = bus.subscribe(lossy=True)
    for i in range(30):
        bus.publish(LogLine(text=f"line {i}", offset=i))
    bus.publish(Ready())
    bus.publish(RunState(run_id="r", state="ready"))
    events = [queue.get_nowait()[1] for _ in range(queue.qsize())]
    assert [e.offset for e in events[:10]] == list(range(10))  # type: ignore[attr-defined]
    assert events[10] == Dropped(count=20)  # where the skipped lines were
    assert isinstance(events[11], Ready) and isinstance(events[12], RunState)
    bus.publish(LogLine(text="after", offset=99))
    assert queue.get_nowait()[1] == LogLine(text="after", offset=99)
    assert bus.dropped == 20 and bus.store.run_state == "ready"


async def test_the_console_marks_where_it_skipped_lines() -> None:
    controller = ReplayController(recorded_session(ready=True))
    app = SpecmonApp(controller, None, clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.5)
        queue = app.view.queue
        assert queue is not None
        for _ in range(4):
            app.tick()  # the replayed session drained
        assert queue.empty()
        queue.limit = 10  # type: ignore[attr-defined]
        for i in range(50):
            app.controller.bus.publish(LogLine(text=f"burst {i}", offset=i))
        for _ in range(4):
            app.tick()
        app.controller.bus.publish(LogLine(text="burst after", offset=50))
        for _ in range(4):
            app.tick()
        await pilot.pause()
        shown = "\n".join(s.text for s in app.main.query_one(LogPane).log_view.lines)
        assert "40 log lines and samples skipped here" in shown, shown[-500:]
        assert "burst after" in shown


def test_watch_prints_every_line_of_a_60k_line_burst_and_its_ready(tmp_path: Path) -> None:
    config = tmp_path / "specmon.toml"
    config.write_text(hostile_profile_toml(f"sleep:3,flood:{FLOOD},ready,serve"))
    state = tmp_path / "state"
    argv = [sys.executable, "-m", "specmon", "--config", str(config)]
    where = ["local", "--state-dir", str(state)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        launched = subprocess.run(
            [*argv, "launch", *where, "-p", "hostile"],
            capture_output=True, text=True, timeout=90, env=env,
        )  # fmt: skip
        assert launched.returncode == 0, launched.stdout[-2000:] + launched.stderr
        watched = subprocess.run(
            [*argv, "watch", *where, "--json", "--log", "--until", "ready"],
            capture_output=True, text=True, timeout=90, env=env,
        )  # fmt: skip
        assert watched.returncode == 0, watched.stderr
        events = [json.loads(line) for line in watched.stdout.splitlines()]
        flood = [e["text"] for e in events if e["kind"] == "log" and e["text"].startswith("flood")]
        assert flood == [f"flood {i}" for i in range(FLOOD)]
        assert events[-1]["kind"] == "ready"  # the burst did not push it out
        assert not [e for e in events if e["kind"] == "dropped"]
    finally:
        kill_everything_under(state)

"""The console over a real local host session, for Pilot tests against the simulator."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from support.hosts import kill_everything_under

from specmon.session import SessionOptions, open_session
from specmon.tui.app import SpecmonApp


@contextmanager
def local_console(config: Any, state_dir: Path, *, gpu_agent: str) -> Iterator[SpecmonApp]:
    """A SpecmonApp over a local HostSession with a private state dir; every server and
    helper it started is killed at the end, whatever the test did."""
    options = SessionOptions(
        state_dir=str(state_dir),
        gpu_agent=gpu_agent,
        stop_grace_s=5.0,
        gpu_release_timeout_s=20.0,
    )
    session = open_session("local", config, options=options, stop_server_on_close=True)
    try:
        yield SpecmonApp(session, config)
    finally:
        kill_everything_under(state_dir)


async def wait_until(
    pilot: Any, check: Callable[[], bool], timeout: float, what: str, *, step: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await pilot.pause(step)

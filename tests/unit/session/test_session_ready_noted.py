"""Several clients on one host: the launcher sees the ready line live and notes the ready time
on the host; a second client (the exporter, another console) that came in the window between
the ready line reaching the log and that note landing read the line only in its replay, so
its load time was unknown. The note, once it lands, gives every client the load time, and
the second client's own late note never overwrites it (the flaky
`specmon_loading_elapsed_seconds` of tests/e2e/test_exporter_prometheus.py).

The ordering is forced, not timed: the launcher's port check (which comes before its note)
waits on an event the test sets; the second client's late note waits on another."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from support.hosts import kill_everything_under, local_session, sim_profiles

from specmon.backends import get_backend
from specmon.model.events import Ready
from specmon.session.host import HostSession
from specmon.session.listener import ListenerCheck


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    try:
        yield path
    finally:
        kill_everything_under(path)


def gate_listener_check(session: HostSession, gate: asyncio.Event) -> None:
    """``session`` confirms its run's port (and so notes the ready time) only once ``gate``
    is set: a launcher slowed by a loaded CPU."""
    real = session.listener_check

    async def gated(run_id: str) -> ListenerCheck:
        await gate.wait()
        return await real(run_id)

    session.listener_check = gated  # type: ignore[method-assign]


def gate_notes(session: HostSession, gate: asyncio.Event, landed: asyncio.Event) -> None:
    """``session``'s notes on the host wait for ``gate``; ``landed`` once one has landed."""
    real = session.note_run

    async def gated(run_id: str, notes: Mapping[str, Any], **kwargs: Any) -> None:
        await gate.wait()
        try:
            await real(run_id, notes, **kwargs)
        finally:
            landed.set()

    session.note_run = gated  # type: ignore[method-assign]


async def wait_ready_line(log_path: Path, backend: str, timeout: float = 60.0) -> None:
    """Until the run's log holds its ready line (the launcher read it, its note not sent)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        parser = get_backend(backend).new_log_parser()
        if log_path.exists() and any(
            isinstance(e, Ready) for e in parser.feed(log_path.read_bytes())
        ):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no ready line in {log_path} within {timeout}s")


async def test_a_client_that_saw_the_ready_line_only_replayed_gets_the_launchers_load_time(
    state_dir: Path,
) -> None:
    profiles = sim_profiles()
    launcher = local_session(state_dir, profiles, gpu_agent="none")
    other = local_session(state_dir, profiles, gpu_agent="none")
    launcher_checks, other_notes, other_noted = asyncio.Event(), asyncio.Event(), asyncio.Event()
    gate_listener_check(launcher, launcher_checks)
    gate_notes(other, other_notes, other_noted)
    await launcher.start()
    try:
        run_id = await launcher.launch("fast")
        run = launcher.current_run
        assert run is not None and run.run_dir is not None
        await wait_ready_line(Path(run.run_dir) / "server.log", run.backend)
        # The other client comes now: the ready line is in the log, no ready time noted.
        await other.start()
        store = await other.wait_for(lambda s: s.run_state == "ready", 30)
        assert store.run is not None and store.run.run_id == run_id
        assert store.loading.elapsed(time.time()) is None  # read in the replay: not known yet
        # The launcher confirms its port and notes the ready time it saw live.
        launcher_checks.set()
        launched = await launcher.wait_for(lambda s: s.loading.load_seconds is not None, 30)
        load_seconds = launched.loading.load_seconds
        assert load_seconds is not None and load_seconds > 0
        # ... which the other client's store takes as its load time.
        store = await other.wait_for(lambda s: s.loading.load_seconds is not None, 30)
        assert store.loading.elapsed(time.time()) == pytest.approx(load_seconds, abs=1e-3)
        assert store.last_load_seconds == pytest.approx(load_seconds, abs=1e-3)
        # The other client's late note ("ready, time unknown") lands after the launcher's:
        # the host's record keeps the ready time seen live.
        other_notes.set()
        await asyncio.wait_for(other_noted.wait(), 30)
        recorded = {r.run_id: r for r in await other.status()}[run_id]
        assert not recorded.ready_late
        assert recorded.load_seconds == pytest.approx(load_seconds, abs=1e-3)
    finally:
        launcher_checks.set()
        other_notes.set()
        await other.close()
        await launcher.close()

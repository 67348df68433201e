"""A run that became ready while no console watched is recorded as ready when a console comes
back (issue 12 item 14): from its replayed ready line, or, when the replay no longer holds
that line, from the first healthy answer of the health endpoint."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.hosts import kill_everything_under, local_session, sim_profiles

from specmon.session.host import HostSession


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    try:
        yield path
    finally:
        kill_everything_under(path)


async def _launch_and_leave(state_dir: Path, profiles: dict) -> str:
    """Launch, then close the console before the server is ready (the server keeps running)."""
    session = local_session(state_dir, profiles, gpu_agent="none")
    await session.start()
    try:
        run_id = await session.launch("fast")
    finally:
        await session.close()
    return run_id


async def _wait_healthy(port: int, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    async with httpx.AsyncClient(trust_env=False, timeout=2.0) as client:
        while asyncio.get_running_loop().time() < deadline:
            try:
                if (await client.get(f"http://127.0.0.1:{port}/health")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    raise AssertionError("the simulator never became healthy")


async def _recorded_state(session: HostSession, run_id: str, timeout: float = 20.0) -> str:
    """The run's state as the host records it, once it says ready (or at the timeout)."""
    state = "unknown"
    for _ in range(int(timeout / 0.25)):
        runs = {r.run_id: r for r in await session.status()}
        state = runs[run_id].state
        if state == "ready":
            break
        await asyncio.sleep(0.25)
    return state


@pytest.mark.parametrize(
    "replay_log_bytes",
    [16 << 20, 64],  # the whole log (ready line replayed) / only its tail (health tells)
    ids=["replayed-ready-line", "first-healthy-answer"],
)
async def test_a_run_that_became_ready_unwatched_is_recorded_ready_on_reattach(
    state_dir: Path, replay_log_bytes: int
) -> None:
    profiles = sim_profiles()
    run_id = await _launch_and_leave(state_dir, profiles)
    await _wait_healthy(profiles["fast"].port)
    await asyncio.sleep(0.5)  # let the ready line reach the log file
    session = local_session(
        state_dir, profiles, gpu_agent="none", replay_log_bytes=replay_log_bytes
    )
    await session.start()
    try:
        await session.wait_for(lambda s: s.run_state == "ready", 30)
        assert await _recorded_state(session, run_id) == "ready"
        runs = {r.run_id: r for r in await session.status()}
        assert runs[run_id].load_seconds is None  # when it became ready is not known
    finally:
        await session.close()

"""No orphans: relaunch the simulator again and again; after each relaunch the previous run's
process group is gone and every GPU is back near idle before the next run loads; after the
last stop and close, no process of the session is left. 50 cycles with
SPECMON_RELIABILITY_FULL=1, 5 otherwise."""

from __future__ import annotations

import time
from pathlib import Path

from support.hosts import (
    Recorder,
    group_alive,
    kill_everything_under,
    local_session,
    processes_mentioning,
    sim_profiles,
)
from support.reliability import count

CYCLES = count(50, 5)


async def test_relaunch_cycles_leave_no_process_and_release_the_gpus(tmp_path: Path) -> None:
    state = tmp_path / "state"
    profiles = sim_profiles(shards=2)
    session = local_session(state, profiles, gpu_agent="sim", gpu_release_timeout_s=15.0)
    await session.start()
    recorder = Recorder(session)
    started = time.monotonic()
    try:
        previous = None
        for cycle in range(CYCLES):
            released_before = len(
                [e for e in recorder.kinds("stop_progress") if e.step == "gpu_released"]
            )
            await session.launch("fast")  # stops the previous run first
            run = session.current_run
            if previous is not None:
                assert not group_alive(previous.pgid), f"cycle {cycle}: old group alive"
                steps = [e for e in recorder.kinds("stop_progress") if e.step == "gpu_released"]
                assert len(steps) == released_before + 1, f"cycle {cycle}: no GPU check"
                assert "back near idle" in (steps[-1].detail or ""), steps[-1]
            await session.wait_for(lambda s: s.run_state in ("ready", "failed"), 60)
            assert session.bus.store.run_state == "ready", f"cycle {cycle}"
            previous = run
        await session.stop()
        assert previous is not None and not group_alive(previous.pgid)
        assert all(not r.alive for r in await session.status())
    finally:
        recorder.close()
        await session.close()
    deadline = time.monotonic() + 5  # the agent's supervisor ends it once its pipe closes
    while processes_mentioning(str(state)) and time.monotonic() < deadline:
        time.sleep(0.05)
    leftovers = processes_mentioning(str(state))
    kill_everything_under(state)
    print(f"{CYCLES} relaunch cycles in {time.monotonic() - started:.1f}s")
    assert leftovers == []

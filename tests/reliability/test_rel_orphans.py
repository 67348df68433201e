"""No orphans from a forking server: a stop takes the whole process group, children included
(SGLang's scheduler and detokenizer are children of its launcher)."""

from __future__ import annotations

from pathlib import Path

from support.hostile import hostile_profile_toml
from support.hosts import group_alive, kill_everything_under, local_session

from specmon.launch.config import parse_config_text


async def test_stop_takes_the_servers_children_too(tmp_path: Path) -> None:
    state = tmp_path / "state"
    profiles = parse_config_text(
        hostile_profile_toml("fork,fork,ready,serve"), None, environ={}
    ).profiles
    session = local_session(state, profiles, gpu_agent="none")
    await session.start()
    try:
        await session.launch("hostile")
        await session.wait_for(lambda s: s.run_state == "ready", 30)
        run = session.current_run
        assert run is not None and run.pgid is not None
        members = _group_members(run.pgid)
        assert len(members) >= 3, members  # the leader and its two children
        await session.stop()
        assert not group_alive(run.pgid)
    finally:
        await session.close()
        kill_everything_under(state)


def _group_members(pgid: int) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = (proc / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2 :].split()[2]) == pgid:
                found.append(int(proc.name))
    return found

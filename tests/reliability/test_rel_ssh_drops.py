"""No lost lines over a flaky link: forced SSH drops (sshd's session processes killed) while a
server logs steadily; every log line arrives once, in order, and each reconnect takes at most
2 s. 100 drops with SPECMON_RELIABILITY_FULL=1, 10 otherwise."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.hostile import hostile_profile_toml
from support.hosts import Recorder, kill_everything_under, ssh_session
from support.reliability import count
from support.sshd import SshdServer, start_sshd, stop_sshd

from specmon.launch.config import parse_config_text

DROPS = count(100, 10)
MAX_RECONNECT_S = 2.0


@pytest.fixture
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdServer]:
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    try:
        yield server
    finally:
        server.drop_connections()
        stop_sshd(server.proc)


async def test_forced_ssh_drops_lose_and_repeat_no_line(sshd: SshdServer, tmp_path: Path) -> None:
    state = tmp_path / "state"
    profiles = parse_config_text(hostile_profile_toml("ready,tick:2"), None, environ={}).profiles
    session = ssh_session(sshd, state, profiles, gpu_agent="none")
    await session.start()
    recorder = Recorder(session)
    reconnects: list[float] = []
    try:
        run_id = await session.launch("hostile")
        await session.wait_for(lambda s: s.run_state == "ready", 30)
        for drop in range(DROPS):
            before = len(recorder.kinds("connection"))
            dropped_at = time.monotonic()
            assert sshd.drop_connections() >= 1, f"drop {drop}: no sshd session to kill"
            deadline = dropped_at + 30
            while not any(e.state == "connected" for e in recorder.kinds("connection")[before:]):
                assert time.monotonic() < deadline, f"no reconnect after drop {drop}"
                await asyncio.sleep(0.01)
            reconnects.append(time.monotonic() - dropped_at)
            await asyncio.sleep(0.1)  # a few lines logged between drops
        await session.stop()  # drains the tail to the server's exit
        await recorder.settle()
        log = (state / "runs" / run_id / "server.log").read_bytes().decode(errors="replace")
        expected = log.split("\n")
        if expected[-1] == "":
            expected.pop()
        seen = [e.text for e in recorder.kinds("log")]
        assert seen == expected, (len(seen), len(expected))
        assert sum(line.startswith("tick ") for line in seen) > DROPS * 20
        print(f"{DROPS} drops: reconnect max {max(reconnects):.2f}s, lines {len(seen)}")
        assert max(reconnects) <= MAX_RECONNECT_S, sorted(reconnects)[-5:]
    finally:
        recorder.close()
        await session.close()
        kill_everything_under(state)

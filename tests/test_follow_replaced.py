"""Several clients on one host, over the real sshd: a run that another client replaces or
stops is told as that (never as a crash), and every view follows the new run at once; a
reattach tells the load time from the run record (issue 25 items 1, 2, 4 and 6)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.hosts import Recorder, kill_everything_under, sim_profiles, ssh_session
from support.sshd import SshdServer, start_sshd, stop_sshd

from specmon.events import Ready, RunState, ServerFailed

SWITCH_S = 2.0  # every view is on the new run within this of its launch


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdServer]:
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    try:
        yield server
    finally:
        server.drop_connections()
        stop_sshd(server.proc)


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    try:
        yield path
    finally:
        kill_everything_under(path)


def failures(recorder: Recorder) -> list[object]:
    """Every failure a session told: a ServerFailed, or a run state "failed"/"hung"."""
    return [
        e
        for _, e in recorder.events
        if isinstance(e, ServerFailed)
        or (isinstance(e, RunState) and e.state in ("failed", "hung"))
    ]


async def test_a_run_replaced_by_another_client_is_followed_and_told_as_a_replacement(
    sshd: SshdServer, state_dir: Path
) -> None:
    profiles = sim_profiles()
    watcher = ssh_session(sshd, state_dir, profiles, gpu_agent="none", owner="ann@box pid 1")
    other = ssh_session(sshd, state_dir, profiles, gpu_agent="none", owner="bob@desk pid 2")
    other.command_name = "specmon launch"
    await watcher.start()
    recorder = Recorder(watcher)
    try:
        old = await watcher.launch("fast")
        await watcher.wait_for(lambda s: s.run_state == "ready", 30)
        await other.start()
        new = await other.launch("fast")
        launched = time.monotonic()
        store = await watcher.wait_for(
            lambda s: s.run is not None and s.run.run_id == new, SWITCH_S
        )
        assert time.monotonic() - launched < SWITCH_S
        assert failures(recorder) == []
        assert store.run_end is not None and store.run_end_id == old
        assert store.run_end.kind == "replaced" and store.run_end.replaced_by == new
        assert f"replaced by run {new} (profile fast, by bob@desk pid 2" in store.run_end.text()
        assert store.end_notice() is not None and "following run " + new in store.end_notice()
        await watcher.wait_for(lambda s: s.run_state == "ready", 30)  # its log, its phases
        assert watcher.current_run is not None and watcher.current_run.run_id == new

        runs = {r.run_id: r for r in await watcher.status()}
        assert runs[old].end is not None and runs[old].end.kind == "replaced"
        assert runs[old].state.startswith(f"replaced by run {new}"), runs[old].state
        assert "signal" not in runs[old].state

        await other.stop()  # `specmon stop` from another terminal: a stop, not a crash
        store = await watcher.wait_for(lambda s: s.run_state == "stopped", SWITCH_S + 3)
        assert failures(recorder) == []
        assert store.run_end is not None and store.run_end_id == new
        assert store.run_end.kind == "stopped" and store.run_end.by == "bob@desk pid 2"
        assert store.end_notice() == (
            f"run {new} stopped by bob@desk pid 2 (specmon launch); no server is running"
        )
        ended = [e for _, e in recorder.events if isinstance(e, RunState) and e.end is not None]
        assert {e.run_id: e.end.kind for e in ended} == {old: "replaced", new: "stopped"}
        status = {r.run_id: r for r in await watcher.status()}
        assert status[new].state == "stopped by bob@desk pid 2 (specmon launch)"
        assert json.loads(json.dumps(status[new].to_dict()))["end"]["kind"] == "stopped"
    finally:
        recorder.close()
        await asyncio.gather(watcher.close(), other.close())


async def test_a_clean_stop_of_an_sglang_run_is_a_stop_not_a_kill_by_signal_9(
    sshd: SshdServer, state_dir: Path
) -> None:
    """SGLang ends itself with SIGKILL after a SIGTERM: the stop record tells it apart."""
    session = ssh_session(sshd, state_dir, sim_profiles(), gpu_agent="none")
    session.command_name = "specmon stop"
    await session.start()
    try:
        run_id = await session.launch("fast")
        await session.wait_for(lambda s: s.run_state == "ready", 30)
        await session.stop()
        run = next(r for r in await session.status() if r.run_id == run_id)
        assert run.exit_signal == 9  # the leader's own end, as the monitor saw it
        assert run.end is not None and run.end.kind == "stopped" and not run.end.failed
        assert run.state == f"stopped by {session.options.owner} (specmon stop)"
    finally:
        await session.close()


async def test_a_reattach_tells_the_load_time_of_the_run_record_or_that_it_is_unknown(
    sshd: SshdServer, state_dir: Path
) -> None:
    profiles = sim_profiles()
    first = ssh_session(sshd, state_dir, profiles, gpu_agent="none")
    await first.start()
    try:
        await first.launch("fast")
        await first.wait_for(lambda s: s.run_state == "ready", 30)
        await asyncio.sleep(0.5)  # the ready time reaches the run record
    finally:
        await first.close()
    record = next(r for r in await _status(sshd, state_dir, profiles) if r.alive)
    assert record.load_seconds is not None

    await asyncio.sleep(1.5)  # a reattach comes well after the load: not a longer load
    second = ssh_session(sshd, state_dir, profiles, gpu_agent="none")
    recorder = Recorder(second)
    await second.start()
    try:
        store = await second.wait_for(lambda s: s.loading.ready_at is not None, 20)
        ready = [e for e in recorder.kinds("ready") if isinstance(e, Ready)]
        assert ready and ready[0].replayed
        assert ready[0].load_seconds == pytest.approx(record.load_seconds)
        assert store.loading.elapsed(time.time()) == pytest.approx(record.load_seconds)
    finally:
        recorder.close()
        await second.close()

    # A record without a ready time (nobody saw the ready line live): unknown, not guessed.
    (Path(record.run_dir or "") / "meta.json").write_text(json.dumps({"owner": "x"}))
    third = ssh_session(sshd, state_dir, profiles, gpu_agent="none")
    recorder = Recorder(third)
    await third.start()
    try:
        store = await third.wait_for(lambda s: s.loading.ready_at is not None, 20)
        await asyncio.sleep(0.3)  # the replay's last chunk and the record's times
        ready = [e for e in recorder.kinds("ready") if isinstance(e, Ready)]
        assert ready and ready[0].load_seconds is None
        assert store.loading.load_seconds is None and store.loading.elapsed(time.time()) is None
        await third.stop()
    finally:
        recorder.close()
        await third.close()


async def _status(sshd: SshdServer, state_dir: Path, profiles: dict[str, object]) -> list:
    session = ssh_session(sshd, state_dir, profiles, gpu_agent="none")
    await session.start(streams=False)
    try:
        return await session.status()
    finally:
        await session.close()

"""The host session end to end through a real OpenSSH sshd on 127.0.0.1, with the simulator as
the server: launch, phases, stop, relaunch, dropped connections, reattach, the race, the lock."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.hosts import (
    Recorder,
    group_alive,
    kill_everything_under,
    processes_mentioning,
    sim_profiles,
    ssh_session,
)
from support.sshd import SshdServer

from specmon.session import LockBusyError, RunConflictError
from specmon.state.store import PHASES

PHASE_KINDS = ["load_begin", "shard_progress", "load_end", "kv_cache", "graph_begin", "http_up"]


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    try:
        yield path
    finally:
        kill_everything_under(path)


def first_index(kinds: list[str], kind: str) -> int:
    return kinds.index(kind)


async def test_launch_shows_every_phase_then_stop_and_relaunch_with_other_flags(
    sshd: SshdServer, state_dir: Path
) -> None:
    profiles = sim_profiles()
    session = ssh_session(sshd, state_dir, profiles)
    await session.start()
    recorder = Recorder(session)
    try:
        first = await session.launch("fast")
        await session.wait_for(lambda s: s.run_state in ("ready", "failed"), 60)
        store = session.bus.store
        assert store.run_state == "ready", store.failure
        await recorder.wait_kind("ready", 10)  # the store has it; the recorder's drain may lag
        kinds = [e.kind for _, e in recorder.events]
        order = [first_index(kinds, k) for k in [*PHASE_KINDS, "ready"]]
        assert order == sorted(order), kinds
        assert store.loading.done_phases == list(PHASES)
        assert store.loading.shards_total == 8 and store.loading.shards_done == 8
        old = session.current_run
        assert old is not None and old.pgid is not None and group_alive(old.pgid)
        base = await session.http_base_url()
        assert base is not None and base != f"http://127.0.0.1:{old.port}"  # via the forward
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            assert (await client.get(f"{base}/health")).status_code == 200
        info = dict((await recorder.wait_kind("server_info", 15))[0].values)
        assert info["speculative_num_steps"] == "5" and info["tp_size"] == "8"
        metrics = dict((await recorder.wait_kind("metrics", 15))[0].values)
        assert any(name.startswith("sglang:") for name in metrics)

        report = await session.stop()
        assert report is not None and report.run_id == first
        steps = [s for s, _, _ in report.steps]
        assert steps[0] == "sigterm" and steps[-2:] == ["group_gone", "gpu_released"]
        assert not group_alive(old.pgid)
        released = dict((s, d) for s, _, d in report.steps)["gpu_released"]
        assert "back near idle" in (released or ""), released

        second = await session.launch(
            "fast",
            flags={"speculative-num-steps": "2", "speculative-num-draft-tokens": "3"},
            env={"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"},
        )
        assert second != first
        await session.wait_for(lambda s: s.run_state in ("ready", "failed"), 60)
        assert session.bus.store.run_state == "ready"
        run_json = json.loads((state_dir / "runs" / second / "run.json").read_text())
        argv = run_json["argv"]
        assert argv[argv.index("--speculative-num-steps") + 1] == "2"
        assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "3"
        assert run_json["env"]["NCCL_PROTO"] == "LL" and run_json["env"]["NCCL_ALGO"] == "Ring"
        assert not group_alive(old.pgid)
        assert [r.run_id for r in await session.status() if r.alive] == [second]
        assert recorder.kinds("gpu"), "the sim GPU agent streamed no samples"
        await session.stop()
    finally:
        recorder.close()
        await session.close()
    # The run's monitor looks for members of its group every 0.5 s: it leaves just after them.
    deadline = time.monotonic() + 5
    while processes_mentioning(str(state_dir)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not processes_mentioning(str(state_dir)), "a helper or agent outlived the session"


async def _generate_load(port: int, stop: asyncio.Event) -> int:
    """Keep one long generation running so the server logs decode lines continuously."""
    done = 0
    async with httpx.AsyncClient(timeout=120, trust_env=False) as client:
        while not stop.is_set():
            body = {"text": "Tell me a long story.", "sampling_params": {"max_new_tokens": 200}}
            await client.post(f"http://127.0.0.1:{port}/generate", json=body)
            done += 1
    return done


async def test_dropped_connections_under_load_lose_and_repeat_no_line(
    sshd: SshdServer, state_dir: Path
) -> None:
    profiles = sim_profiles(extra_args=("--decode-log-interval", "1"))
    session = ssh_session(sshd, state_dir, profiles, gpu_agent="none")
    await session.start()
    recorder = Recorder(session)
    stop_load = asyncio.Event()
    load = None
    try:
        run_id = await session.launch("fast")
        await session.wait_for(lambda s: s.run_state in ("ready", "failed"), 60)
        assert session.bus.store.run_state == "ready"
        pid = session.current_run.pid
        load = asyncio.get_running_loop().create_task(
            _generate_load(profiles["fast"].port, stop_load)
        )
        await recorder.wait_kind("decode", 30)
        # five drops under HTTP load (each ~1.3 s): the drop count is the reliability suite's
        # (tests/reliability/test_rel_ssh_drops.py: 10, or 100 with SPECMON_RELIABILITY_FULL=1)
        for drop in range(5):
            before = len(recorder.kinds("connection"))
            assert sshd.drop_connections() >= 1, f"drop {drop}: no sshd session to kill"
            deadline = time.monotonic() + 30
            while not any(e.state == "connected" for e in recorder.kinds("connection")[before:]):
                assert time.monotonic() < deadline, f"no reconnect after drop {drop}"
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.15)
        reconnecting = [e for e in recorder.kinds("connection") if e.state == "reconnecting"]
        assert len({e.attempt for e in reconnecting}) >= 1 and len(reconnecting) >= 5
        stop_load.set()
        load.cancel()
        await session.stop()  # drains the tail to the server's exit
        await recorder.settle()
        log_bytes = (state_dir / "runs" / run_id / "server.log").read_bytes()
        expected = log_bytes.decode(errors="replace").split("\n")
        if expected[-1] == "":
            expected.pop()
        seen = [e.text for e in recorder.kinds("log")]
        assert len(seen) == len(expected), (len(seen), len(expected))
        assert seen == expected
        offsets = [e.offset for e in recorder.kinds("log")]
        assert offsets == sorted(set(offsets))
        assert sum(1 for line in expected if "Decode batch" in line) > 40  # logged across drops
        runs = recorder.kinds("run")
        assert [r.run_id for r in runs] == [run_id] and runs[0].pid == pid
        assert sum("Load weight begin" in line and "TP0" in line for line in expected) == 2
    finally:
        stop_load.set()
        if load is not None and not load.done():
            load.cancel()
        recorder.close()
        await session.close()


async def test_console_exit_then_reconnect_reattaches_instead_of_relaunching(
    sshd: SshdServer, state_dir: Path
) -> None:
    profiles = sim_profiles()
    first = ssh_session(sshd, state_dir, profiles)
    await first.start()
    run_id = await first.launch("fast")
    await first.wait_for(lambda s: s.run_state in ("ready", "failed"), 60)
    pid = first.current_run.pid
    await first.close()
    assert group_alive(pid), "the server must outlive the console"

    second = ssh_session(sshd, state_dir, profiles)
    recorder = Recorder(second)
    await second.start()
    try:
        runs = await recorder.wait_kind("run", 10)
        assert runs[0].run_id == run_id and runs[0].reattached and runs[0].pid == pid
        await second.wait_for(lambda s: s.run_state == "ready", 20)
        store = await second.wait_for(lambda s: s.loading.ready_at is not None, 20)
        await asyncio.sleep(0.3)  # the replay's last chunk
        run = second.current_run
        assert run is not None and run.ready_at is not None
        # the replayed log keeps the real start and ready times (elapsed/ETA stay right)
        assert store.loading.started_at == pytest.approx(run.started_at)
        assert store.loading.ready_at == pytest.approx(run.ready_at)
        assert [r.run_id for r in await second.status() if r.alive] == [run_id]
        assert len(list((state_dir / "runs").iterdir())) == 1
        await second.stop()
    finally:
        recorder.close()
        await second.close()


async def test_two_consoles_racing_to_launch_exactly_one_wins(
    sshd: SshdServer, state_dir: Path
) -> None:
    profiles = sim_profiles()
    a = ssh_session(sshd, state_dir, profiles, gpu_agent="none")
    b = ssh_session(sshd, state_dir, profiles, gpu_agent="none", owner="console-b")
    await asyncio.gather(a.start(), b.start())
    try:
        results = await asyncio.gather(a.launch("fast"), b.launch("fast"), return_exceptions=True)
        wins = [r for r in results if isinstance(r, str)]
        losses = [r for r in results if isinstance(r, BaseException)]
        assert len(wins) == 1 and len(losses) == 1, results
        assert isinstance(losses[0], (LockBusyError, RunConflictError)), losses[0]
        message = str(losses[0])
        assert "holds its launch/stop lock since" in message or "another console" in message
        live = [r for r in await a.status() if r.alive]
        assert [r.run_id for r in live] == wins
    finally:
        for session in (a, b):
            if session.current_run is not None:
                # The loser follows the winner's run without owning it: only the winner stops it.
                with contextlib.suppress(RunConflictError):
                    await session.stop()
        await asyncio.gather(a.close(), b.close())


async def test_lock_holder_is_named_to_the_second_console(
    sshd: SshdServer, state_dir: Path
) -> None:
    profiles = sim_profiles()
    a = ssh_session(sshd, state_dir, profiles, gpu_agent="none", owner="alice@laptop")
    b = ssh_session(sshd, state_dir, profiles, gpu_agent="none", owner="bob@desk")
    await asyncio.gather(a.start(), b.start())
    try:
        async with a._host_lock("launch"):
            with pytest.raises(LockBusyError, match=r"alice@laptop \(launch\) holds its"):
                await b.launch("fast")
        assert b.current_run is None
    finally:
        await asyncio.gather(a.close(), b.close())

"""A session attached to a server specmon did not launch (``--attach``), over the local
transport: the pieces (the helper's arguments, the log follower starting over) and one real
simulator started by a plain shell, whose log file is rotated and truncated under the session,
whose stop and relaunch are refused, and whose end is told without calling it a failure."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
from support.by_hand import alive, kill_group, start_by_hand, wait_listening
from support.hosts import Recorder, free_port, kill_everything_under, local_session

from specmon.backends import get_backend
from specmon.model.errors import UsageError
from specmon.model.events import LogLine
from specmon.session.foreign import follow_foreign_args
from specmon.session.host import RunConflictError
from specmon.session.log_follower import LogFollower
from specmon.state.foreign import Container, ForeignServer, LogSource


def server(
    log: LogSource, *, pid: int | None = 42, started_at: float | None = 1700000000.4
) -> ForeignServer:
    return ForeignServer(
        pid=pid, user="ops", backend="sglang", argv=("python", "-m", "sglang.launch_server"),
        port=30000, port_source="socket", ports=(30000,), started_at=started_at, gpus=None,
        log=log, container=None if pid else Container(id="c" * 64, name="llm", image="i", ports=""),
    )  # fmt: skip


def test_follow_foreign_arguments_per_log_source() -> None:
    base = ["--offset=7", "--inode=9", "--interval=0.05"]
    file = server(LogSource(kind="file", path="-odd name.log", size=3))
    assert follow_foreign_args(file, offset=7, inode=9, interval=0.05) == [
        "--pid=42", *base, "--path=-odd name.log",
    ]  # fmt: skip
    unit = server(
        LogSource(kind="journal", unit="sglang.service", follow="journalctl -fu sglang.service")
    )
    assert follow_foreign_args(unit, offset=7, inode=9, interval=0.05) == [
        "--pid=42", *base, "--unit=sglang.service", "--since=1700000000",
    ]  # fmt: skip
    user = server(
        LogSource(kind="journal", unit="llm.service", follow="journalctl --user -fu llm.service")
    )
    assert follow_foreign_args(user, offset=0, inode=0, interval=0.05)[-1] == "--user-unit"
    boxed = server(LogSource(kind="docker", container="llm"), pid=None, started_at=None)
    assert follow_foreign_args(boxed, offset=0, inode=0, interval=0.05) == [
        "--pid=0", "--offset=0", "--inode=0", "--interval=0.05", "--container=llm",
    ]  # fmt: skip
    nowhere = server(LogSource(kind="none", detail="stdout: a pipe"))
    assert follow_foreign_args(nowhere, offset=0, inode=0, interval=0.05)[-1] == "--interval=0.05"


def test_log_follower_restart_finishes_the_old_file_and_counts_from_zero() -> None:
    follower = LogFollower(parser=get_backend("sglang").new_log_parser())
    follower.feed_log(0, b"one\ntwo without end")
    events = follower.restart()
    assert [e.text for e in events if isinstance(e, LogLine)] == ["two without end"]
    assert follower.log_offset == 0 and follower.line_start == 0
    lines = [e for e in follower.feed_log(0, b"new\n") if isinstance(e, LogLine)]
    assert [(e.text, e.offset) for e in lines] == [("new", 0)]
    # a restart while a replay (summary) was still being read ends that replay first
    replaying = LogFollower.reattached(
        get_backend("sglang").new_log_parser(), 100, 1 << 20, summary=True
    )
    replaying.feed_log(0, b"a\nb\n")
    ended = replaying.restart()
    assert [e.text for e in ended if isinstance(e, LogLine)] == ["a", "b"]
    assert not replaying.replaying and replaying.replayed is None


SIM = "--model-path moonshotai/Kimi-K2.5 --tp 2"


async def test_attached_sim_rotation_truncation_refusals_and_its_end(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    port = free_port()
    started = start_by_hand(
        tmp_path, "sim", f"{sys.executable} -m specmon.sim {SIM} --port {port}", port,
        env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"},
    )  # fmt: skip
    session = local_session(state_dir, {}, attach=str(started.pid), gpu_agent="none")
    try:
        wait_listening(port)
        await session.start()
        recorder = Recorder(session)
        await session.wait_for(lambda s: s.run_state == "ready", 30)
        run = session.bus.store.run
        assert run is not None and run.foreign and run.run_id == f"pid-{started.pid}"
        assert session.current_run is not None and session.current_run.port == port

        def said(text: str) -> bool:
            return any(text in e.text for e in recorder.kinds("log"))

        # logrotate: rename, then a new file at the path (the sim still writes the old one)
        started.log.rename(tmp_path / "sim.log.1")
        started.log.write_bytes(b"a line in the new file\n")
        await recorder.wait_until("rotated", lambda: said("a line in the new file"), 10)
        assert said(f"[specmon] log rotated: reading {started.log.resolve()} from its start")
        started.log.write_bytes(b"t\n")  # truncated: shorter than what was read
        await recorder.wait_until("truncated", lambda: said("[specmon] log truncated"), 10)

        with pytest.raises(
            RunConflictError, match=f"^pid {started.pid} on local is not specmon's run"
        ):
            await session.stop()
        with pytest.raises(RunConflictError, match="take-over"):
            await session.check_launch()
        assert alive(started.pid)

        kill_group(started.pgid)
        await recorder.wait_until(
            "its end", lambda: any(e.state == "stopped" for e in recorder.kinds("run_state")), 15
        )
        end = [e for e in recorder.kinds("run_state") if e.state == "stopped"][-1]
        assert "not specmon's run" in (end.detail or "")
        assert not recorder.kinds("server_failed")
        recorder.close()
    finally:
        await session.close()
        kill_group(started.pgid)
        kill_everything_under(state_dir)
    deadline = time.monotonic() + 5
    while alive(started.pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


async def test_the_attached_servers_own_profile_is_read_as_adopt_reads_it(tmp_path: Path) -> None:
    """What the console's take-over form starts from when no profile names the server: its
    argv and allowed environment as a profile in memory, a secret as *** (never read)."""
    state_dir = tmp_path / "state"
    port = free_port()
    started = start_by_hand(
        tmp_path, "sim", f"{sys.executable} -m specmon.sim {SIM} --port {port}", port,
        env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1", "HF_TOKEN": "hf_never_read"},
    )  # fmt: skip
    session = local_session(state_dir, {}, attach=str(started.pid), gpu_agent="none")
    try:
        wait_listening(port)
        await session.start()
        await session.wait_for(lambda s: s.run is not None, 30)
        name = f"running-pid-{started.pid}"
        profile = await session.running_profile(name)
        assert profile.name == name and profile.backend == "sglang"
        assert profile.port == port and profile.tp == 2
        assert profile.command == (sys.executable, "-m", "specmon.sim")
        assert profile.env["HF_TOKEN"] == "***" and "hf_never_read" not in repr(profile)
        assert profile.env["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"] == "1"
        assert profile.unfilled == ()  # the form asks for the *** (not refused at the plan)
        spec = profile.to_launch_spec()
        assert spec.flag("port") == str(port) and spec.flag("model-path") == profile.model_path
        kill_group(started.pgid)
        await session.wait_for(lambda s: s.run_state == "stopped", 15)
        with pytest.raises(UsageError, match="no server specmon did not launch is attached"):
            await session.running_profile(name)
    finally:
        await session.close()
        kill_group(started.pgid)
        kill_everything_under(state_dir)

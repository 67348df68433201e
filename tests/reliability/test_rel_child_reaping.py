"""No "Unknown child process pid N, will report returncode 255" on stderr: specmon never reaps
a child behind asyncio's child watcher (it did, through Popen.send_signal's poll, when it
killed a helper that had just exited: the log follower after a run's exit, the lock holder)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading

import pytest

from specmon.session.local import LocalTransport


async def test_killing_a_child_that_just_exited_leaves_the_reaping_to_the_watcher(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The race made certain: the watcher's blocking waitpid is held back until the child is
    a zombie and specmon has killed it, as happens when the watcher thread is scheduled late."""
    real_waitpid = os.waitpid
    zombie_killed = threading.Event()

    def waitpid(pid: int, options: int) -> tuple[int, int]:
        if options == 0 and threading.current_thread() is not threading.main_thread():
            zombie_killed.wait(10)  # the watcher thread, blocking: let specmon go first
        return real_waitpid(pid, options)

    monkeypatch.setattr(os, "waitpid", waitpid)
    transport = LocalTransport()
    await transport.connect()
    process = await transport.start([sys.executable, "-c", "pass"])
    pid = process._proc.pid  # type: ignore[attr-defined]
    while not _is_zombie(pid):
        await asyncio.sleep(0.01)
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        kill = asyncio.ensure_future(process.kill())
        await asyncio.sleep(0.2)  # kill() has signalled (or reaped) and now waits
        zombie_killed.set()
        await kill
        await transport.close()
    assert not [r for r in caplog.records if "Unknown child process" in r.getMessage()]
    assert process._proc.returncode == 0  # type: ignore[attr-defined]  # the real status


def _is_zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return stat[stat.rfind(")") + 2] == "Z"

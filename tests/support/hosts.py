"""Test helpers for host sessions: a fast simulator profile, sessions over the real sshd or the
local transport, an event recorder, and a clean-up that kills every run a test started."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.sshd import SshdServer

from specmon.launch.config import BUILTIN_CONFIG_TOML, parse_config_text
from specmon.model.events import Event
from specmon.session import HostSession, SessionOptions
from specmon.session.local import LocalTransport
from specmon.session.ssh import SshTarget, SshTransport

FAST_SCALE = "0.003"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sim_profiles(
    *, shards: int = 8, extra_args: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> dict[str, Any]:
    """The shipped demo profile, made fast (scaled start-up, few shards) on a free port."""
    demo = parse_config_text(BUILTIN_CONFIG_TOML, None, environ={}).profiles["demo"]
    fast = dataclasses.replace(
        demo,
        name="fast",
        port=free_port(),
        stop_grace_s=5.0,
        extra_args=(*demo.extra_args, *extra_args),
        env={
            **demo.env,
            "SPECMON_SIM_TIME_SCALE": FAST_SCALE,
            "SPECMON_SIM_SHARDS": str(shards),
            **(env or {}),
        },
    )
    return {"fast": fast}


def test_options(state_dir: Path, **overrides: Any) -> SessionOptions:
    values: dict[str, Any] = {
        "state_dir": str(state_dir),
        # The "remote" host is this machine: its python is the test interpreter, which has the
        # simulator's packages (the login python3 of a CI machine need not).
        "python": sys.executable,
        "gpu_agent": "sim",
        "gpu_rate_hz": 10.0,
        "health_interval_s": 0.25,
        "backoff_initial_s": 0.05,
        "backoff_max_s": 0.5,
        "reconnect_max_attempts": 40,
        "stop_grace_s": 5.0,
        "gpu_release_timeout_s": 15.0,
        "call_timeout_s": 30.0,
    }
    values.update(overrides)
    return SessionOptions(**values)


def ssh_transport(server: SshdServer, **overrides: Any) -> SshTransport:
    target: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": server.port,
        "username": server.user,
        "identity_files": (str(server.client_key),),
        "known_hosts": str(server.known_hosts),
        "config_files": (),
    }
    target.update(overrides)
    return SshTransport(SshTarget(**target))


def ssh_session(
    server: SshdServer, state_dir: Path, profiles: dict[str, Any], **options: Any
) -> HostSession:
    return HostSession(
        ssh_transport(server), profiles=profiles, options=test_options(state_dir, **options)
    )


def local_session(state_dir: Path, profiles: dict[str, Any], **options: Any) -> HostSession:
    return HostSession(
        LocalTransport(), profiles=profiles, options=test_options(state_dir, **options)
    )


class Recorder:
    """Every event a session publishes, with its arrival time (a drained bus subscriber)."""

    def __init__(self, session: HostSession) -> None:
        self.events: list[tuple[float, Event]] = []
        self._bus = session.bus
        self._queue = session.bus.subscribe()
        self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while True:
            self.events.append(await self._queue.get())

    def kinds(self, kind: str) -> list[Any]:
        return [e for _, e in self.events if e.kind == kind]

    async def settle(self) -> None:
        await asyncio.sleep(0)
        while not self._queue.empty():
            await asyncio.sleep(0.01)

    async def wait_kind(self, kind: str, timeout: float, count: int = 1) -> list[Any]:
        deadline = time.monotonic() + timeout
        while len(self.kinds(kind)) < count:
            if time.monotonic() > deadline:
                seen = sorted({e.kind for _, e in self.events})
                raise AssertionError(f"no {kind!r} event within {timeout}s; saw {seen}")
            await asyncio.sleep(0.02)
        return self.kinds(kind)

    async def wait_until(self, what: str, met: Callable[[], bool], timeout: float) -> None:
        """Wait, bounded, for `met` to hold over what has arrived (e.g. a given log line)."""
        deadline = time.monotonic() + timeout
        while not met():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not seen within {timeout}s")
            await asyncio.sleep(0.02)

    def close(self) -> None:
        """Stop recording; unsubscribed, so an undrained queue never holds the log tail back."""
        self._task.cancel()
        self._bus.unsubscribe(self._queue)


def run_pgids(state_dir: Path) -> list[int]:
    pgids = []
    for run_json in (state_dir / "runs").glob("*/run.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            pgids.append(int(json.loads(run_json.read_text())["pgid"]))
    return pgids


def group_alive(pgid: int) -> bool:
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """Live processes whose command line contains ``text`` (e.g. a test's state dir) or whose
    working directory is under it (a server runs in its run dir)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        try:
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            cwd = ""
        if (text in cmdline or cwd.startswith(text)) and state[state.rfind(")") + 2] != "Z":
            found.append((int(name), cmdline))
    return found


def kill_everything_under(state_dir: Path) -> None:
    """Teardown: kill every run's process group and any helper that names the state dir."""
    for pgid in run_pgids(state_dir):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    for pid, _ in processes_mentioning(str(state_dir)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)

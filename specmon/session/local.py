"""The local transport: the host is this machine (``specmon demo``, ``specmon launch local``).

It runs the very same helper and commands as SSH, only through subprocesses, so the demo
exercises the same supervisor code path a real host does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from specmon.model.errors import TransportError
from specmon.model.user_dirs import make_private_dirs
from specmon.session.transport import CommandResult, RemoteProcess, Transport


def _expand(arg: str) -> str:
    return os.path.expanduser(arg) if arg.startswith("~/") else arg


def kill_child(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL a child of this process without reaping it.

    ``Process.kill()`` goes through ``Popen.send_signal``, which polls first: when the child
    has just exited, that poll reaps it behind the back of asyncio's child watcher, whose own
    ``waitpid`` then fails and logs "Unknown child process pid N, will report returncode 255"
    on stderr. Only the watcher reaps here, and it has not reported while ``returncode`` is
    None: the pid is still this child (a zombie at worst), short of the instant between the
    watcher's reap and its report, the same window ``Popen.send_signal`` leaves after its poll.
    """
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)


class LocalProcess(RemoteProcess):
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc

    async def readline(self) -> bytes:
        assert self._proc.stdout is not None
        try:
            return await self._proc.stdout.readline()
        except (ValueError, asyncio.LimitOverrunError):
            return await self._proc.stdout.read(1 << 20)

    async def write(self, data: bytes) -> None:
        stdin = self._proc.stdin
        if stdin is not None and not stdin.is_closing():
            with contextlib.suppress(OSError, BrokenPipeError, ConnectionResetError):
                stdin.write(data)
                await stdin.drain()

    async def close_stdin(self) -> None:
        if self._proc.stdin is not None and not self._proc.stdin.is_closing():
            self._proc.stdin.close()

    async def wait(self, timeout: float) -> int | None:
        try:
            return await asyncio.wait_for(self._proc.wait(), timeout)
        except asyncio.TimeoutError:
            return None

    async def kill(self) -> None:
        await self.close_stdin()
        if self._proc.returncode is None:
            kill_child(self._proc)
            await self.wait(5.0)


class LocalTransport(Transport):
    """Subprocesses on this machine. ``python3`` means this interpreter, so an installed
    specmon (a venv) runs the simulator and the sim GPU agent without activating anything."""

    is_local = True

    def __init__(self, label: str = "local") -> None:
        self.label = label
        self._open = False
        self._closed = asyncio.Event()
        self._children: set[asyncio.subprocess.Process] = set()

    async def connect(self) -> None:
        self._open = True
        self._closed.clear()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    @property
    def connected(self) -> bool:
        return self._open

    async def close(self) -> None:
        self._open = False
        self._closed.set()
        for proc in list(self._children):
            if proc.returncode is None:
                kill_child(proc)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(proc.wait(), 5.0)
        self._children.clear()

    def python_argv(self, python: str) -> list[str]:
        return [sys.executable]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])
        current = env.get("PYTHONPATH")
        env["PYTHONPATH"] = package_root if not current else f"{package_root}{os.pathsep}{current}"
        return env

    async def run(
        self, argv: Sequence[str], *, input: bytes | None = None, timeout: float
    ) -> CommandResult:
        proc = await asyncio.create_subprocess_exec(
            *[_expand(a) for a in argv],
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._env(),
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(input or b""), timeout)
        except asyncio.TimeoutError:
            kill_child(proc)
            await proc.wait()
            raise TransportError(
                f"local command timed out after {timeout:.0f}s: {argv[0]}"
            ) from None
        return CommandResult(proc.returncode if proc.returncode is not None else -1, out, err)

    async def start(self, argv: Sequence[str]) -> RemoteProcess:
        proc = await asyncio.create_subprocess_exec(
            *[_expand(a) for a in argv],
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=self._env(),
            limit=4 << 20,
        )
        self._children.add(proc)
        proc_ref = proc
        asyncio.get_running_loop().create_task(self._forget_when_done(proc_ref))
        return LocalProcess(proc)

    async def _forget_when_done(self, proc: asyncio.subprocess.Process) -> None:
        await proc.wait()
        self._children.discard(proc)

    async def write_file(self, path: str, data: bytes, *, timeout: float) -> None:
        target = Path(_expand(path))
        try:
            make_private_dirs(target.parent)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".upload.")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o600)
            os.replace(tmp, target)
        except OSError as exc:
            raise TransportError(f"cannot write {target}: {exc.strerror}") from None

    async def forward_port(self, remote_port: int) -> int:
        return remote_port  # the server is on this machine: nothing to forward

    async def close_forward(self, local_port: int) -> None:
        return None

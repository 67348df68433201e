"""One interface for running things on a host, whether over SSH or on this machine.

The host session only speaks to a ``Transport``: run a command with a timeout, start a long
process and read its lines, write a file, reach a TCP port on the host. The SSH and local
transports implement it, so every test can run against both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CommandResult:
    returncode: int
    stdout: bytes
    stderr: bytes


class RemoteProcess(ABC):
    """A long-running command on the host (log follower, GPU agent, lock holder)."""

    @abstractmethod
    async def readline(self) -> bytes:
        """The next line of stdout with its newline; b"" at end of stream."""

    @abstractmethod
    async def write(self, data: bytes) -> None:
        """Write to the process's stdin (a closed or broken one is ignored)."""

    @abstractmethod
    async def close_stdin(self) -> None:
        """EOF on the process's stdin: our helper subcommands end on it."""

    @abstractmethod
    async def wait(self, timeout: float) -> int | None:
        """Exit status, or None if it did not end within ``timeout``."""

    @abstractmethod
    async def kill(self) -> None:
        """End it now (close the channel / kill the local process)."""


class Transport(ABC):
    label: str
    is_local: bool = False

    @abstractmethod
    async def connect(self) -> None:
        """Open the connection; raises TransportError with a one-line reason."""

    @abstractmethod
    async def wait_closed(self) -> None:
        """Returns when the connection has dropped or been closed."""

    @property
    @abstractmethod
    def connected(self) -> bool: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def run(
        self, argv: Sequence[str], *, input: bytes | None = None, timeout: float
    ) -> CommandResult:
        """Run to completion; raises TransportError on timeout or a dropped connection."""

    @abstractmethod
    async def start(self, argv: Sequence[str]) -> RemoteProcess:
        """Start a process whose stdout is read line by line."""

    @abstractmethod
    async def write_file(self, path: str, data: bytes, *, timeout: float) -> None:
        """Write atomically (temp file + rename), mode 0600 in a 0700 directory; ``~/`` ok."""

    @abstractmethod
    async def forward_port(self, remote_port: int) -> int:
        """A local port that reaches 127.0.0.1:remote_port on the host."""

    @abstractmethod
    async def close_forward(self, local_port: int) -> None:
        """Stop forwarding ``local_port``."""

    @abstractmethod
    def python_argv(self, python: str) -> list[str]:
        """How to invoke the host's Python (the configured name, or this interpreter)."""

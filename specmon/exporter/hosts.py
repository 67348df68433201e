"""One host session per exported host, kept connected: a first connection that fails is
retried with capped backoff (an unreachable host is exported as down, never fatal), and
after that the session reconnects by itself, as it does for the console. Nothing is
launched or stopped: the sessions only watch."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

from specmon.exporter.collector import WatchedHost
from specmon.model.errors import SpecmonError, TransportError
from specmon.state.controller import HostController

if TYPE_CHECKING:
    from specmon.launch.config import Config

RETRY_INITIAL_S = 1.0
RETRY_MAX_S = 60.0
RECONNECT_ATTEMPTS = 1_000_000  # the session's own reconnect loop, bounded but near-forever


@dataclass
class Fleet:
    """The watched hosts and the tasks that bring their sessions up."""

    hosts: list[tuple[str, HostController]]
    out: IO[str] = field(default_factory=lambda: sys.stderr)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def watched(self) -> list[WatchedHost]:
        return [WatchedHost(name, controller.bus) for name, controller in self.hosts]

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for name, controller in self.hosts:
            self._tasks.append(loop.create_task(self._keep_started(name, controller)))

    async def _keep_started(self, name: str, controller: HostController) -> None:
        delay = RETRY_INITIAL_S
        while True:
            try:
                await controller.start()
                return
            except (SpecmonError, TransportError, OSError, asyncio.TimeoutError) as exc:
                text = _one_line(str(exc) or type(exc).__name__)
                self.out.write(f"specmon export: {name}: {text}; retrying in {delay:.0f}s\n")
                self.out.flush()
            await asyncio.sleep(delay)
            delay = min(RETRY_MAX_S, delay * 2)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await asyncio.gather(
            *(controller.close() for _, controller in self.hosts), return_exceptions=True
        )


def _one_line(text: str, limit: int = 300) -> str:
    """Error text from a host as one printable line (no control characters reach the terminal)."""
    clean = "".join(c if c.isprintable() else " " for c in text.replace("\n", " | "))
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"


def backend_of_profile(config: Config) -> dict[str, str]:
    """Profile name -> backend name, for the run-info labels."""
    return {name: profile.backend for name, profile in config.profiles.items()}


Clock = Callable[[], float]

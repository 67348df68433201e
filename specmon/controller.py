"""What a console (TUI, `specmon watch`, `specmon sweep`) can ask of a host: the one seam
between the UI and the core. The host session implements it for SSH and local hosts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from specmon.store import EventBus


class HostController(ABC):
    """A connected host: its event bus (with the state store) and the actions on its server."""

    bus: EventBus
    host_label: str  # e.g. "root@gpu-host:22" or "local"

    @abstractmethod
    async def start(self) -> None:
        """Connect, reattach to a live run if any, start log tail, HTTP polling and the agent."""

    @abstractmethod
    async def close(self) -> None:
        """Stop streams and the agent; the server itself keeps running (except in the demo)."""

    @abstractmethod
    async def launch(
        self,
        profile: str,
        *,
        flags: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> str:
        """Stop any run (verified gone, GPU memory released), then launch; returns the run id."""

    @abstractmethod
    async def stop(self) -> None:
        """SIGTERM the run's process group, escalate to SIGKILL, verify it is gone."""

    @abstractmethod
    def profiles(self) -> list[str]:
        """Launch profile names available for this host."""

    async def status(self) -> list[Any]:
        """The runs on the host (``RunStatus``: id, owner, alive, exit); a controller that
        cannot list them knows of none."""
        return []

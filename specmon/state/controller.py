"""What a console (TUI, `specmon watch`, `specmon sweep`) can ask of a host: the one seam
between the UI and the core. The host session implements it for SSH and local hosts; the
console, the sweep runner and the Experiments screen use nothing else of it.
"""

from __future__ import annotations

import contextlib
import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from specmon.model.errors import SpecmonError, UsageError
from specmon.state.store import EventBus

if TYPE_CHECKING:
    from specmon.launch.config import Profile
    from specmon.launch.spec import FlagValue, LaunchSpec
    from specmon.model.events import AcceptanceCollapse
    from specmon.state.foreign import TakeOverPlan
    from specmon.state.run_status import RunStatus, StopReport


class SweepLease:
    """A held lease; ``name`` adds the sweep's id to what a refused sweep is told."""

    def __init__(self, proc: Any = None) -> None:
        self._proc = proc

    async def name(self, sweep: str) -> None:
        if self._proc is not None:
            with contextlib.suppress(SpecmonError, OSError):
                await self._proc.write((json.dumps({"sweep": sweep}) + "\n").encode())


class BesideService(Protocol):
    """Something served next to a watch or the console on its event loop (e.g. the metrics
    exporter)."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class Traffic(Protocol):
    """Simulated client traffic (the demo's); a benchmark pauses it to have the server alone."""

    def start(self) -> None: ...
    async def stop(self) -> None: ...


class HostController(ABC):
    """A connected host: its event bus (with the state store) and the actions on its server."""

    bus: EventBus
    host_label: str  # e.g. "root@gpu-host:22" or "local"
    traffic: Traffic | None = None  # client traffic this console generates itself (demo)
    can_launch: bool = True  # False for a console that only shows recorded events
    autolaunch: str | None = None  # a profile launched on start when no run is live (demo)
    # Why this console can change nothing, said when an action is refused (a server watched
    # by its URL); None: the read-only console's general words.
    read_only_reason: str | None = None

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
        flags: Mapping[str, FlagValue] | None = None,
        env: Mapping[str, str | None] | None = None,
    ) -> str:
        """Stop any run (verified gone, GPU memory released), then launch; returns the run id."""

    @abstractmethod
    async def launch_spec(self, spec: LaunchSpec, *, profile: str | None = None) -> str:
        """Launch a ready-made spec (validated first), replacing this console's run."""

    async def take_over_plan(self, profile: str) -> TakeOverPlan:
        """The take-over of the attached server specmon did not launch by ``profile``, checked
        on the host with nothing stopped (the relaunch form's confirmation shows it); a
        SpecmonError in one line when it is refused. A controller that cannot take a server
        over refuses."""
        raise UsageError(f"{self.host_label}: this console cannot take over a server")

    async def running_profile(self, name: str) -> Profile:
        """The attached server specmon did not launch as an in-memory profile ``name`` (its
        command line and environment as `specmon adopt` reads them): what the take-over form
        starts from when no profile names the server. A controller that cannot read one
        refuses."""
        raise UsageError(f"{self.host_label}: this console cannot read a server's command line")

    async def take_over_spec(self, plan: TakeOverPlan, spec: LaunchSpec) -> str:
        """Stop ``plan``'s server (told as taken over, never as a crash), wait for its GPU
        memory, then launch ``spec`` (the one confirmed) as profile ``plan.profile``;
        returns the new run's id."""
        raise UsageError(f"{self.host_label}: this console cannot take over a server")

    async def check_launch(self) -> None:
        """Raise the SpecmonError a launch would meet now (the host's lock busy, a live run
        that another console owns), changing nothing: a fleet relaunch asks every host first
        when the operator wants all hosts or none. A controller that cannot tell accepts."""
        return None

    @contextlib.asynccontextmanager
    async def sweep_lease(self, sweep: str) -> AsyncIterator[SweepLease]:
        """Hold the host's sweep lease for the block (SweepBusyError naming the sweep that
        holds it): a second sweep would replace the first's server. A controller that
        cannot tell holds nothing."""

        yield SweepLease()

    async def check_listener(self) -> None:
        """Raise the SpecmonError that says why the current run's port is not the run's (its
        leader ended, another process listens there), before a benchmark trusts it. A
        controller that cannot tell (recorded events, no host) accepts."""
        return None

    @abstractmethod
    async def stop(self) -> StopReport | None:
        """SIGTERM the run's process group, escalate to SIGKILL, verify it is gone."""

    @abstractmethod
    def profiles(self) -> list[str]:
        """Launch profile names available for this host."""

    @abstractmethod
    def add_profile(self, name: str, profile: Profile) -> None:
        """Offer ``profile`` under ``name`` from now on (e.g. one saved from the console)."""

    @property
    @abstractmethod
    def current_run(self) -> RunStatus | None:
        """The run this console follows, as the host recorded it (None: no run)."""

    async def status(self) -> list[RunStatus]:
        """The runs on the host (id, owner, alive, exit); a controller that cannot list them
        knows of none."""
        return []

    async def acceptance_collapse(self) -> AcceptanceCollapse | None:
        """The followed run's acceptance collapse against the best earlier run with the same
        draft, as of now (docs/run-diff.md); a controller with no run records has none."""
        return None

    @abstractmethod
    async def http_base_url(self) -> str | None:
        """The current run's HTTP base URL as reachable from here; None when no run."""

    @property
    @abstractmethod
    def connected(self) -> bool:
        """Whether the connection to the host is up now."""

    @property
    @abstractmethod
    def is_local(self) -> bool:
        """Whether the host is this machine."""

    @property
    @abstractmethod
    def host_python(self) -> str:
        """The interpreter a profile's "{python}" command word means on this host."""

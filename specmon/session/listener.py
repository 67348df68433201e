"""Who listens on a run's port, as the remote helper's ``listener`` found it: a server that
could not bind its port dies, and whatever else holds the port would answer its health
checks, so ready, bench and sweep ask this before trusting the port (see
docs/reliability-security.md, "the server specmon started, and no other")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specmon.model.errors import SpecmonError


class ForeignListenerError(SpecmonError):
    """The run's port is not served by the run (its leader ended, or another process holds
    the port): benchmarking it would measure some other server."""


@dataclass(frozen=True, slots=True)
class ListenerCheck:
    """The run's port on its host: whether the run serves it, and who else listens there."""

    run_id: str
    port: int | None
    leader_alive: bool
    listening: bool  # anything listens on the port
    ours: bool  # the leader lives and every listener is a process of the run's session
    foreign: tuple[str, ...]  # the other listeners, named (pid, user, command where readable)

    @classmethod
    def from_helper(cls, run_id: str, reply: Mapping[str, Any]) -> ListenerCheck:
        foreign = reply.get("foreign") or []
        return cls(
            run_id=run_id,
            port=reply.get("port"),
            leader_alive=bool(reply.get("leader_alive")),
            listening=bool(reply.get("listening")),
            ours=bool(reply.get("ours")),
            foreign=tuple(str(f.get("text") or "an unknown process") for f in foreign),
        )

    def problem(self) -> str | None:
        """Why the port is not the run's, in one line (None when it is)."""
        if self.ours:
            return None
        where = f"port {self.port}" if self.port else "its port"
        if not self.leader_alive:
            return f"run {self.run_id} has ended (its leader process is gone)"
        if self.foreign:
            return (
                f"{where} is held by {'; '.join(self.foreign)}, not by run {self.run_id}: "
                "what answers there is not the server specmon started"
            )
        return f"nothing of run {self.run_id} listens on {where} yet"

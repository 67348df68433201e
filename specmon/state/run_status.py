"""A run on the host as the remote helper recorded it, and the report of a stop."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specmon.backends import DEFAULT_BACKEND
from specmon.model.run_end import RunEnd, run_end
from specmon.model.secrets import redact_argv, redact_env

__all__ = ["RunEnd", "RunStatus", "StopReport", "run_end"]


@dataclass(frozen=True, slots=True)
class RunStatus:
    """One run on the host, as the supervisor recorded it."""

    run_id: str
    profile: str | None
    argv: tuple[str, ...]
    env: dict[str, str]
    pid: int | None
    pgid: int | None
    started_at: float | None
    alive: bool
    port: int | None
    exit_code: int | None = None
    exit_signal: int | None = None
    ended_at: float | None = None
    ready_at: float | None = None
    log_size: int = 0
    owner: str | None = None
    run_dir: str | None = None
    backend: str = DEFAULT_BACKEND  # recorded at launch; runs from before the record: default
    ready_late: bool = False  # readiness seen after the fact (replayed log, first /health)
    group_left: int = 0  # live processes of the group once the leader has exited
    node_rank: int | None = None  # a node of a multi-node server: its rank (0 serves HTTP)
    nnodes: int | None = None
    # A node whose multi-node launch never finished (the launcher was killed between nodes):
    # it runs, but as part of a server whose other nodes may never have started.
    multinode_incomplete: bool = False
    stop: Mapping[str, Any] | None = None  # the helper's stop record (stop.json), if stopped
    replaces: tuple[str, ...] = ()  # the runs its launch stopped to make room
    client: str | None = None  # the launching session's token
    # What a client noted on the host (meta.json) for ``specmon diff`` and the collapse
    # banner (docs/run-diff.md): the draft's and target's fingerprint, the server's version,
    # the run's acceptance summary (state/collapse.py).
    fingerprint: Mapping[str, Any] | None = None
    server_version: str | None = None
    acceptance: Mapping[str, Any] | None = None

    @property
    def end(self) -> RunEnd | None:
        """How the run ended (None while it runs)."""
        if self.alive and not self.group_left:
            return None
        return run_end(
            {"code": self.exit_code, "signal": self.exit_signal, "ended_at": self.ended_at},
            self.stop,
        )

    @property
    def load_seconds(self) -> float | None:
        if self.ready_at is None or self.started_at is None or self.ready_late:
            return None
        return self.ready_at - self.started_at

    @property
    def state(self) -> str:
        end = self.end
        if self.alive and self.group_left and end is not None:
            return f"leader {end.text()}, {self.group_left} processes of its group still alive"
        if self.alive and self.multinode_incomplete:
            return (
                f"running as node {self.node_rank} of an incomplete {self.nnodes}-node run "
                "(its launch did not finish; see status --profile)"
            )
        if self.alive:
            return "ready" if self.ready_at is not None else "running"
        return end.text() if end is not None else "gone"

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "profile": self.profile,
            "state": self.state,
            "alive": self.alive,
            "argv": list(redact_argv(self.argv)),  # shown: secret flag values as ***
            "env": self.env,
            "pid": self.pid,
            "pgid": self.pgid,
            "port": self.port,
            "started_at": self.started_at,
            "ready_at": self.ready_at,
            "load_seconds": self.load_seconds,
            "ended_at": self.ended_at,
            "exit_code": self.exit_code,
            "exit_signal": self.exit_signal,
            "end": self.end.to_dict() if self.end is not None else None,
            "owner": self.owner,
            "run_dir": self.run_dir,
            "backend": self.backend,
            "group_left": self.group_left,
            "node_rank": self.node_rank,
            "nnodes": self.nnodes,
            "multinode_incomplete": self.multinode_incomplete,
            "server_version": self.server_version,
            "acceptance": dict(self.acceptance) if self.acceptance else None,
            "fingerprint": dict(self.fingerprint) if self.fingerprint else None,
        }

    @classmethod
    def from_helper(cls, data: Mapping[str, Any]) -> RunStatus:
        exit_info = data.get("exit") or {}
        notes = data.get("annotations") or {}
        meta = data.get("meta") or {}
        node = meta.get("node") if isinstance(meta.get("node"), dict) else {}
        return cls(
            run_id=str(data["run_id"]),
            profile=data.get("profile"),
            argv=tuple(data.get("argv") or ()),
            env=redact_env(data.get("env") or {}),
            pid=data.get("pid"),
            pgid=data.get("pgid"),
            started_at=data.get("started_at"),
            alive=bool(data.get("alive")),
            port=data.get("port"),
            exit_code=exit_info.get("code"),
            exit_signal=exit_info.get("signal"),
            ended_at=exit_info.get("ended_at"),
            ready_at=notes.get("ready_at"),
            log_size=int(data.get("log_size") or 0),
            owner=meta.get("owner"),
            run_dir=data.get("run_dir"),
            backend=str(meta.get("backend") or DEFAULT_BACKEND),
            ready_late=bool(notes.get("ready_late")),
            group_left=int(data.get("group_left") or 0),
            node_rank=node.get("rank"),
            nnodes=node.get("nnodes"),
            multinode_incomplete=(
                node.get("launch_complete") is False and not notes.get("nodes_launched")
            ),
            stop=data.get("stop") if isinstance(data.get("stop"), dict) else None,
            replaces=tuple(str(r) for r in meta.get("replaces") or ()),
            client=meta.get("client"),
            fingerprint=_mapping(notes.get("fingerprint")),
            server_version=(
                str(notes["server_version"])[:80] if notes.get("server_version") else None
            ),
            acceptance=_mapping(notes.get("acceptance")),
        )


def _mapping(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, dict) else None


@dataclass(frozen=True, slots=True)
class StopReport:
    run_id: str
    steps: tuple[tuple[str, float, str | None], ...]

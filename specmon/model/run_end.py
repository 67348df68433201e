"""How a server run ended, in the one vocabulary that `status`, `watch`, the console, the
ledger and the exporter share.

A run ends one of five ways:

- ``stopped``: specmon stopped it (``by`` user@host, with ``command``), and its leader ended
  within the grace period, whatever its exit status (SGLang ends itself with SIGKILL after a
  SIGTERM: that is still a clean stop);
- ``replaced``: stopped so that run ``replaced_by`` could start (launched by
  ``replaced_by_owner``, profile ``replaced_by_profile``);
- ``killed``: specmon stopped it, but the leader outlived the grace period and was SIGKILLed;
- ``exited``: it exited on its own with ``code`` (0: a clean exit; else a failure);
- ``crashed``: it died of ``signal`` that specmon did not send (the root cause is the log's);
- ``unknown``: its end was not recorded (the host rebooted, its monitor was killed).

The JSON form (``to_dict``) is ``{"kind": ..., "by": ..., "command": ..., "replaced_by": ...,
"replaced_by_profile": ..., "replaced_by_owner": ..., "code": ..., "signal": ..., "at": ...,
"text": ...}`` with ``text`` the one line every view prints. Pure: no I/O, no imports of
specmon, so every layer may use it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

RunEndKind = Literal["stopped", "replaced", "killed", "exited", "crashed", "unknown"]
# Ends that specmon asked for: information, never a failure.
REQUESTED_ENDS: frozenset[str] = frozenset(("stopped", "replaced", "killed"))
SIGKILL = 9


def who_of(owner: str | None) -> str | None:
    """The client an owner string names ("user@host pid 123", as sessions record it), or
    None when it is empty."""
    return owner.strip() or None if owner else None


def _clock(at: float | None) -> str | None:
    return time.strftime("%H:%M:%S", time.localtime(at)) if at else None


@dataclass(frozen=True, slots=True)
class RunEnd:
    """How one run ended (see the module docstring for the kinds)."""

    kind: RunEndKind
    by: str | None = None  # the client that stopped it: "user@host pid N"
    command: str | None = None  # what it ran: "console", "specmon stop", "specmon launch"
    replaced_by: str | None = None  # the run that replaced it
    replaced_by_profile: str | None = None
    replaced_by_owner: str | None = None  # the client that launched that run
    code: int | None = None  # the leader's exit code, when it exited
    signal: int | None = None  # the signal that ended the leader
    at: float | None = None  # epoch seconds: when it ended (or was replaced)

    @property
    def failed(self) -> bool:
        """Whether this end is a failure of the server (never for a stop specmon asked for)."""
        if self.kind == "crashed":
            return True
        return self.kind == "exited" and self.code != 0

    def text(self) -> str:
        """One line: "replaced by run R (profile P, by u@h, at 10:01:02)", "stopped by u@h
        (specmon stop)", "exited 0" (its own exit code), "crashed (signal 11)", ..."""
        if self.kind == "replaced":
            parts = [f"profile {self.replaced_by_profile or '-'}"]
            who = self.replaced_by_owner or self.by
            if who:
                parts.append(f"by {who}")
            if self.at:
                parts.append(f"at {_clock(self.at)}")
            return f"replaced by run {self.replaced_by} ({', '.join(parts)})"
        if self.kind in ("stopped", "killed"):
            who = f" by {self.by}" if self.by else " by specmon"
            how = f" ({self.command})" if self.command else ""
            if self.kind == "killed":
                return f"killed after the grace period (stopped{who}{how})"
            return f"stopped{who}{how}"
        if self.kind == "exited":
            return f"exited {self.code}"
        if self.kind == "crashed":
            return f"crashed (signal {self.signal})"
        return "ended (exit status unknown)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "by": self.by,
            "command": self.command,
            "replaced_by": self.replaced_by,
            "replaced_by_profile": self.replaced_by_profile,
            "replaced_by_owner": self.replaced_by_owner,
            "code": self.code,
            "signal": self.signal,
            "at": self.at,
            "text": self.text(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunEnd:
        kind = str(data.get("kind") or "unknown")
        return cls(
            kind=kind if kind in RUN_END_KINDS else "unknown",  # type: ignore[arg-type]
            by=data.get("by"),
            command=data.get("command"),
            replaced_by=data.get("replaced_by"),
            replaced_by_profile=data.get("replaced_by_profile"),
            replaced_by_owner=data.get("replaced_by_owner"),
            code=data.get("code"),
            signal=data.get("signal"),
            at=data.get("at"),
        )

    def replaced(
        self, run_id: str, *, profile: str | None, owner: str | None, at: float | None
    ) -> RunEnd:
        """This stop, told as the replacement by ``run_id`` once that run is known."""
        return RunEnd(
            kind="replaced",
            by=self.by,
            command=self.command,
            replaced_by=run_id,
            replaced_by_profile=profile,
            replaced_by_owner=who_of(owner),
            code=self.code,
            signal=self.signal,
            at=at or self.at,
        )


RUN_END_KINDS: frozenset[str] = frozenset(
    ("stopped", "replaced", "killed", "exited", "crashed", "unknown")
)


def run_end(exit_info: Mapping[str, Any] | None, stop: Mapping[str, Any] | None) -> RunEnd:
    """The end of a run from the helper's records: ``exit_info`` (exit.json, the leader's own
    wait status) and ``stop`` (stop.json, written by specmon's stop before its SIGTERM, with
    ``sigkill_at`` once the grace ran out and ``replaced_by`` once a launch replaced it).
    A leader that had died before the stop began (its group lived on) ended on its own."""
    exit_info = exit_info or {}
    code, sig = exit_info.get("code"), exit_info.get("signal")
    ended_at = exit_info.get("ended_at")
    stopped_at = (stop or {}).get("at")
    if stop and (ended_at is None or stopped_at is None or ended_at >= stopped_at):
        by, command = who_of(stop.get("by")), stop.get("command") or None
        kill_at = stop.get("sigkill_at")
        # The leader's own end came first unless it ended after the group's SIGKILL went.
        killed = kill_at is not None and (ended_at is None or ended_at >= kill_at)
        if killed:
            return RunEnd("killed", by=by, command=command, code=code, signal=sig, at=ended_at)
        end = RunEnd("stopped", by=by, command=command, code=code, signal=sig, at=ended_at)
        if stop.get("replaced_by"):
            return end.replaced(
                str(stop["replaced_by"]),
                profile=stop.get("replaced_by_profile"),
                owner=stop.get("replaced_by_owner"),
                at=stop.get("replaced_at"),
            )
        return end
    if sig is not None:
        return RunEnd("crashed", signal=sig, at=ended_at)
    if code is not None:
        return RunEnd("exited", code=code, at=ended_at)
    return RunEnd("unknown", at=ended_at)

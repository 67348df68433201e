"""What changed between two runs, and the diagnosis an operator reads from it: the words the
collapse banner, ``specmon diff`` and ``advise --json`` share (docs/run-diff.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Change:
    """One recorded difference between two runs: ``field`` names where ("flag
    --speculative-num-steps", "draft.config.eagle_config.eagle_aux_hidden_state_layer_ids",
    "env NCCL_PROTO"); None on a side where it was absent."""

    field: str
    before: Any
    after: Any

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "before": self.before, "after": self.after}

    def text(self) -> str:
        return f"{self.field} {_shown(self.before)} -> {_shown(self.after)}"


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """One likely cause, most likely first in a list: ``code`` for scripts
    (``aux_layers_changed``), ``message`` for people, ``changed`` the differences behind it."""

    code: str
    message: str
    changed: tuple[Change, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "changed": [c.to_dict() for c in self.changed],
        }


def _shown(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


def shown_value(value: Any) -> str:
    """A recorded value as a diff line shows it: lists in brackets, an absent one "(none)"."""
    return _shown(value)

"""Which server specmon did not launch a console watches: ``--attach`` and the host key
``attach`` share this one grammar, so the CLI and specmon.toml refuse the same text the same
way (one line each).

    auto              the only such server on the host (several or none: refused)
    4242 | pid:4242   that process (refused unless it is a server: state/foreign.py)
    unit:NAME         the server a systemd unit runs (its journal is the log)
    container:NAME    the server a docker container runs (name or id prefix; docker logs)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

AttachKind = Literal["auto", "pid", "unit", "container"]

# A unit's or a container's name: what systemd and docker accept, and nothing a command line
# could take for an option (no leading '-') or a shell for something else.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@:\\-]{0,254}")

SYNTAX = '"auto", a pid, "unit:NAME" or "container:NAME"'


@dataclass(frozen=True, slots=True)
class AttachTarget:
    """A parsed attach target; ``text()`` gives it back as typed."""

    kind: AttachKind
    pid: int | None = None
    name: str | None = None

    def text(self) -> str:
        if self.kind == "auto":
            return "auto"
        if self.kind == "pid":
            return str(self.pid)
        return f"{self.kind}:{self.name}"


def parse_attach_target(value: object) -> AttachTarget:
    """``value`` (a str, or an int pid from TOML) as an AttachTarget; ValueError with the
    reason in one line otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not an attach target (expected {SYNTAX})")
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise ValueError(f"expected {SYNTAX}, got {type(value).__name__}")
    if text == "auto":
        return AttachTarget("auto")
    digits = text[4:] if text.startswith("pid:") else text
    if digits.isdigit() and digits.isascii():
        pid = int(digits)
        if not 0 < pid < 2**31:
            raise ValueError(f"{text!r:.40} is not a process id")
        return AttachTarget("pid", pid=pid)
    kind, sep, name = text.partition(":")
    if sep and kind in ("unit", "container"):
        if not _NAME.fullmatch(name):
            raise ValueError(f"{text!r:.60}: not a {kind} name")
        return AttachTarget(kind, name=name)  # type: ignore[arg-type]
    raise ValueError(f"{text!r:.60} is not an attach target (expected {SYNTAX})")

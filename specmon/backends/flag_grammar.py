"""The grammar of a flat argv tail of flags, shared by every backend.

A flag is ``--name`` followed by its value, ``--name=value`` (used for values that start with
``-``), or a bare ``--name`` (a switch). Which flags are switches is the backend's schema;
this module only splits and renders tokens.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

FLAG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
NEGATIVE_NUMBER = re.compile(r"^-\d+(?:\.\d*)?(?:[eE][-+]?\d+)?$|^-\.\d+$")


FlagValue = str | bool | None


@dataclass(frozen=True, slots=True)
class FlagItem:
    """One parsed flag: its name without dashes and its value (None for a boolean flag)."""

    name: str
    value: str | None
    index: int  # position of the flag token in the args tuple


def _is_value_token(token: str) -> bool:
    return not token.startswith("-") or bool(NEGATIVE_NUMBER.match(token))


def parse_flags(args: Sequence[str]) -> tuple[list[FlagItem], list[str]]:
    """Split a flat argv tail into flags; also returns problems with its grammar."""
    items: list[FlagItem] = []
    problems: list[str] = []
    index = 0
    while index < len(args):
        token = args[index]
        if not token.startswith("--"):
            problems.append(f"{token!r}: not a flag; flags look like --name or --name=value")
            index += 1
            continue
        name, has_inline, inline_value = token[2:].partition("=")
        if not FLAG_NAME.match(name):
            problems.append(f"{token[:60]!r}: not a valid flag name")
            index += 1
            continue
        if has_inline:
            items.append(FlagItem(name, inline_value, index))
            index += 1
        elif index + 1 < len(args) and _is_value_token(args[index + 1]):
            items.append(FlagItem(name, args[index + 1], index))
            index += 2
        else:
            items.append(FlagItem(name, None, index))
            index += 1
    return items, problems


AUTO_PORT = "auto"
"""A profile's ``port = "auto"``: the host's helper picks a port free there at launch and
writes it into the server's argv and the run record (two users of one machine never collide)."""


def render_flag(name: str, value: str | bool) -> tuple[str, ...]:
    """The argv tokens of one flag; values starting with '-' use the unambiguous --name=value."""
    name = name.lstrip("-")
    if value is True:
        return (f"--{name}",)
    if isinstance(value, bool):
        raise ValueError("False removes a flag; it has no tokens")
    if value.startswith("-") and not NEGATIVE_NUMBER.match(value):
        return (f"--{name}={value}",)
    return (f"--{name}", value)

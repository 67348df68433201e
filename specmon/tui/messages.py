"""Messages the console's screens send to the app: small dataclasses, handled with @on."""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.message import Message


@dataclass
class RelaunchRequested(Message):
    """The relaunch form was confirmed: stop the run and launch ``profile`` with overrides."""

    profile: str
    flags: dict[str, str | None] = field(default_factory=dict)
    env: dict[str, str | None] = field(default_factory=dict)

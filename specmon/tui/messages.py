"""Messages the console's screens send to the app: small dataclasses, handled with @on."""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.message import Message

from specmon.advisor import Advice


@dataclass
class RelaunchRequested(Message):
    """The relaunch form was confirmed: stop the run and launch ``profile`` with overrides."""

    profile: str
    flags: dict[str, str | None] = field(default_factory=dict)
    env: dict[str, str | None] = field(default_factory=dict)


@dataclass
class SweepRequested(Message):
    """Open the Experiments screen with this grid filled in (the advisor's check of its advice;
    ``prediction`` is stored in the ledger when the sweep starts)."""

    grid: list[str]
    baseline: bool = True
    prediction: Advice | None = None

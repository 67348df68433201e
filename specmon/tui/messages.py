"""Messages of the console: screens to the app, and a running sweep to the Experiments
screen; small dataclasses, handled with @on."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from specmon.experiments.advisor import Advice
from specmon.experiments.sweep import (
    BaselineFound,
    PointBenchmarking,
    PointFinished,
    PointLoading,
    PointRetrying,
    PointSkipped,
    PointStarted,
    SweepEvent,
    SweepFinished,
    SweepStarted,
)
from specmon.launch.spec import LaunchSpec
from specmon.state.foreign import TakeOverPlan


@dataclass
class RelaunchRequested(Message):
    """The relaunch form was confirmed: stop the run and launch ``spec``, the very spec whose
    command the form showed (built once, with the host's python), as profile ``profile``."""

    profile: str
    spec: LaunchSpec


@dataclass
class TakeOverAsked(Message):
    """The relaunch form on a server specmon did not launch was submitted: the app asks the
    host whether it may be taken over by ``profile`` (nothing stopped) and answers the form
    with TakeOverChecked, carrying ``spec`` back unchanged."""

    profile: str
    spec: LaunchSpec


@dataclass
class TakeOverChecked(Message):
    """The host's answer to TakeOverAsked: the ``plan`` to confirm, or ``refusal`` (one
    line; nothing stopped); ``spec`` is the one the form sent."""

    profile: str
    spec: LaunchSpec
    plan: TakeOverPlan | None = None
    refusal: str | None = None


@dataclass
class TakeOverRequested(Message):
    """The take-over was confirmed: stop ``plan``'s process, then launch ``spec``, the very
    spec whose command the confirmation showed."""

    plan: TakeOverPlan
    spec: LaunchSpec


# --- a running sweep's progress (specmon.experiments.sweep's events), posted to the Experiments screen ---


@dataclass
class SweepBegan(Message):
    event: SweepStarted


@dataclass
class SweepPointSkipped(Message):
    """Done in the sweep this one resumes; the result carries its speed-up (baseline known)."""

    event: PointSkipped


@dataclass
class SweepPointStarted(Message):
    event: PointStarted


@dataclass
class SweepPointLoading(Message):
    event: PointLoading


@dataclass
class SweepPointBenchmarking(Message):
    event: PointBenchmarking


@dataclass
class SweepPointRetrying(Message):
    event: PointRetrying


@dataclass
class SweepPointFinished(Message):
    """A point done; the result carries its speed-up against the baseline known so far."""

    event: PointFinished


@dataclass
class SweepBaselineFound(Message):
    """The comparable measured baseline became known: earlier rows gain their speed-ups."""

    event: BaselineFound


@dataclass
class SweepEnded(Message):
    event: SweepFinished


_SWEEP_MESSAGES: dict[type, type[Message]] = {
    SweepStarted: SweepBegan,
    PointSkipped: SweepPointSkipped,
    PointStarted: SweepPointStarted,
    PointLoading: SweepPointLoading,
    PointBenchmarking: SweepPointBenchmarking,
    PointRetrying: SweepPointRetrying,
    PointFinished: SweepPointFinished,
    BaselineFound: SweepBaselineFound,
    SweepFinished: SweepEnded,
}


def sweep_message(event: SweepEvent) -> Message:
    """The message that carries a sweep event to the screen."""
    return _SWEEP_MESSAGES[type(event)](event)  # type: ignore[call-arg]


@dataclass
class SweepRequested(Message):
    """Open the Experiments screen with this grid filled in (the advisor's check of its advice;
    ``prediction`` is stored in the ledger when the sweep starts)."""

    grid: list[str]
    baseline: bool = True
    prediction: Advice | None = None


@dataclass
class HostChosen(Message):
    """The fleet overview asks to open a host's full console."""

    name: str


@dataclass
class FleetRelaunchAsked(Message):
    """The fleet overview asks for the relaunch form for these hosts."""

    names: list[str]


@dataclass
class FleetRelaunchRequested(Message):
    """The operator confirmed one relaunch on several hosts: launch ``specs`` (host -> the
    very spec whose command the confirmation showed, built with that host's python) as
    profile ``profile``; ``all_or_none``: launch none if one host refuses (else the others
    proceed)."""

    profile: str
    specs: dict[str, LaunchSpec]
    all_or_none: bool = False

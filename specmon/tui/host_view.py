"""What the console keeps per host: its controller, main screen, event queue, history and
launch state. The single-host console has one; the fleet console one per host, so a relaunch,
a sweep or a failure on one host never touches another's."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specmon.model.events import Dropped, Event, LogLine
from specmon.state.controller import HostController
from specmon.tui.history import SessionHistory
from specmon.tui.screens.main import MainScreen

if TYPE_CHECKING:
    from specmon.tui.screens.experiments import ExperimentsScreen


@dataclass(eq=False)
class HostView:
    name: str
    controller: HostController
    main: MainScreen
    history: SessionHistory = field(default_factory=SessionHistory)
    queue: asyncio.Queue[tuple[float, Event]] | None = None
    pending_lines: list[LogLine | Dropped] = field(default_factory=list)
    experiments: ExperimentsScreen | None = None  # installed on first `e`; kept
    relaunch_in_progress: bool = False
    panels_ready: bool = False  # the fleet console: its screen is composed and has the log

    @property
    def sweep_running(self) -> bool:
        return self.experiments is not None and self.experiments.running

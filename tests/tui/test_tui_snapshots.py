"""Snapshots (pytest-textual-snapshot) of the main screen, the relaunch form and the help screen
at 80x24 and 160x48, from the replayed session with a frozen clock: no wall time in them; and
of the main screen with a saturated server's latency figures (the Latency & capacity panel,
shown with `c` at 80x24, and the header's badges).

Update after an intended change with ``pytest tests/tui/test_tui_snapshots.py --snapshot-update``
and look at the SVGs in tests/snapshots/ before committing them.
"""

from __future__ import annotations

import pytest
import pytest_textual_snapshot
from support.latency_sample import saturated_latency, session_with_latency
from support.paths import REPO, TESTS
from support.tui_replay import FROZEN_NOW, ReplayController, recorded_session

from specmon.launch.config import load_config
from specmon.tui.app import SpecmonApp

SNAPSHOT_DIR = TESTS / "snapshots"


class TuiSnapshotExtension(pytest_textual_snapshot.SVGImageExtension):
    """Keeps the SVGs in tests/snapshots/<test file>/ rather than syrupy's __snapshots__."""

    @classmethod
    def dirname(cls, *, test_location) -> str:  # type: ignore[override]
        return str(SNAPSHOT_DIR / test_location.basename)


@pytest.fixture(autouse=True)
def _snapshot_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pytest_textual_snapshot, "SVGImageExtension", TuiSnapshotExtension)


def replayed_app(*, saturated: bool = False) -> SpecmonApp:
    """The whole recorded session is in the store before the app starts: no toasts, no timers.
    ``saturated``: then a /metrics scrape of a server with every saturation flag up."""
    events = recorded_session(ready=True)
    if saturated:
        events = session_with_latency(saturated_latency())
    controller = ReplayController(events)
    controller.replay()
    config = load_config(REPO / "specmon.toml")
    return SpecmonApp(controller, config, clock=lambda: FROZEN_NOW, start_controller=False)


SIZES = [(80, 24), (160, 48)]


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "160x48"])
def test_main_screen(snap_compare, size):
    assert snap_compare(replayed_app(), terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "160x48"])
def test_main_screen_latency(snap_compare, size):
    press = ["c"] if size == (80, 24) else []  # shown by default only where it fits
    assert snap_compare(replayed_app(saturated=True), terminal_size=size, press=press)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "160x48"])
def test_relaunch_form(snap_compare, size):
    assert snap_compare(replayed_app(), terminal_size=size, press=["r"])


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "160x48"])
def test_help_screen(snap_compare, size):
    assert snap_compare(replayed_app(), terminal_size=size, press=["question_mark"])

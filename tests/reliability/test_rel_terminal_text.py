"""No raw terminal bytes: a server's log lines, error lines and argv reach the terminal without
escape sequences or control characters (tab kept), in the CLI and in the console; JSON output
escapes them; Rich markup in a line stays literal."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.console import local_console, wait_until
from support.hostile import hostile_profile_toml
from support.hosts import kill_everything_under

from specmon.launch.config import parse_config_text
from specmon.model.terminal_text import safe_text
from specmon.tui.widgets.banner import Banner
from specmon.tui.widgets.log_pane import LogPane

REPO = Path(__file__).resolve().parents[2]
RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what must never reach a terminal


@pytest.mark.parametrize(
    ("hostile", "shown"),
    [
        ("a\x1b]0;title\x07b", "ab"),
        ("a\x1b]0;title\x1b\\b", "ab"),
        ("a\x1b[2J\x1b[1;1Hb", "ab"),
        ("a\x1b]52;c;aGk=\x07b", "ab"),
        ("a\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\b", "alinkb"),
        ("a\x1bPq#0\x1b\\b", "ab"),
        ("a\x9b2Jb\x9d0;t\x9c", "ab"),
        ("a\x1b]0;never terminated", "a"),
        ("tab\tkept\r\x00\x07\x7f\x85", "tab\tkept"),
        ("[bold]literal[/bold]", "[bold]literal[/bold]"),
        ("unicode ✓ — kept", "unicode ✓ — kept"),
    ],
)
def test_safe_text_removes_sequences_and_controls(hostile: str, shown: str) -> None:
    assert safe_text(hostile) == shown


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=200))
def test_safe_text_never_leaves_a_control(text: str) -> None:
    assert not RAW.search(safe_text(text).replace("\n", ""))


@pytest.fixture
def hostile_box(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    config = tmp_path / "specmon.toml"
    config.write_text(
        hostile_profile_toml("escapes,ready,serve")
        + hostile_profile_toml("escapes,crash:3", name="crasher")
    )
    state = tmp_path / "state"
    try:
        yield config, state
    finally:
        kill_everything_under(state)


def _specmon(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specmon", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_launch_watch_status_and_parse_print_no_raw_bytes(
    hostile_box: tuple[Path, Path], tmp_path: Path
) -> None:
    config, state = hostile_box
    where = ["local", "--state-dir", str(state)]
    crashed = _specmon(config, "launch", *where, "-p", "crasher", "--wait", "ready")
    assert crashed.returncode == 1  # it crashed before any ready line
    assert "hostile crash" in crashed.stdout and not RAW.search(crashed.stdout.replace("\n", ""))
    log = next(state.glob("runs/*/*.log"))
    parsed = _specmon(config, "parse", str(log))
    assert "hostile crash" in parsed.stdout and not RAW.search(parsed.stdout.replace("\n", ""))
    launched = _specmon(config, "launch", *where, "-p", "hostile", "--wait", "ready")
    assert launched.returncode == 0, launched.stderr
    watched = _specmon(config, "watch", *where, "--log", "--duration", "3")
    assert "clipboard  end" in watched.stdout and "[bold red]not markup[/]" in watched.stdout
    assert not RAW.search(watched.stdout.replace("\n", "")), watched.stdout
    as_json = _specmon(config, "watch", *where, "--log", "--json", "--duration", "3")
    texts = [json.loads(line).get("text") for line in as_json.stdout.splitlines()]
    assert "title \x1b]0;pwned title\x07 end" in texts  # escaped in JSON, exact once decoded
    assert not RAW.search(as_json.stdout.replace("\n", ""))
    status = _specmon(config, "status", *where)
    assert "exited 3" in status.stdout and not RAW.search(status.stdout.replace("\n", ""))
    assert _specmon(config, "stop", *where).returncode == 0


async def test_console_log_pane_and_banner_show_no_raw_bytes(tmp_path: Path) -> None:
    config = parse_config_text(hostile_profile_toml("escapes,crash:3"), None, environ={})
    with local_console(config, tmp_path / "state", gpu_agent="none") as app:
        async with app.run_test(size=(140, 40)) as pilot:
            await wait_until(
                pilot,
                lambda: getattr(app.controller.bus.store.connection, "state", "") == "connected",
                10,
                "connect",
            )
            await app.controller.launch("hostile")
            await wait_until(
                pilot, lambda: app.controller.bus.store.failure is not None, 20, "the crash"
            )
            await pilot.pause(0.5)
            lines = [strip.text for strip in app.main.query_one(LogPane).log_view.lines]
            shown = "\n".join(lines)
            assert "clipboard  end" in shown and "[bold red]not markup[/] end" in shown, shown
            assert not RAW.search(shown.replace("\n", "")), shown
            banner = str(app.main.query_one(Banner).render())
            assert "hostile crash" in banner and not RAW.search(banner.replace("\n", ""))


async def test_sweep_progress_on_the_experiments_screen_is_plain_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from support.tui_replay import FROZEN_NOW, ReplayController, recorded_session
    from textual.widgets import Static

    from specmon.launch.config import load_config
    from specmon.tui.app import SpecmonApp

    monkeypatch.setenv("SPECMON_DATA_DIR", str(tmp_path / "data"))  # the screen's ledger
    config = load_config(REPO / "specmon.toml")
    app = SpecmonApp(ReplayController(recorded_session()), config, clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("e")
        await pilot.pause(0.3)
        screen = app.screen
        screen._say("Sweep stopped: [/bold] server said \x1b]0;title\x07[red]x")  # type: ignore[attr-defined]
        await pilot.pause(0.1)
        shown = str(screen.query_one("#sweep-state", Static).render())
        assert shown == "Sweep stopped: [/bold] server said [red]x"


def test_ledger_show_prints_a_stored_root_cause_without_raw_bytes(tmp_path: Path) -> None:
    from specmon.experiments.ledger import Ledger, RunRecord

    path = tmp_path / "ledger.sqlite3"
    with Ledger(path) as ledger:
        ledger.record_run(
            RunRecord(
                host="h",
                profile="p",
                argv=("python3", "-m", "x\x1b]0;argv title\x07"),
                env={},
                status="failed",
                error="server failed \x1b[2J",
                root_cause=("RuntimeError: \x1b]52;c;aGk=\x07 boom",),
            )
        )
    shown = subprocess.run(
        [sys.executable, "-m", "specmon", "ledger", "--ledger", str(path), "show", "r1"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert shown.returncode == 0, shown.stderr
    assert "RuntimeError:  boom" in shown.stdout
    assert not RAW.search(shown.stdout.replace("\n", "")), shown.stdout


async def test_the_loading_panels_last_line_is_safe_text() -> None:
    from support.tui_replay import FROZEN_NOW, ReplayController, recorded_session
    from textual.widgets import Static

    from specmon.model.events import LogLine
    from specmon.tui.app import SpecmonApp
    from specmon.tui.widgets.loading import LoadingPanel

    app = SpecmonApp(
        ReplayController(recorded_session(ready=False)), None, clock=lambda: FROZEN_NOW
    )
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause(0.3)
        app.controller.bus.publish(LogLine(text="loading \x1b]0;title\x07\x1b[2J[b]x", offset=0))
        await pilot.pause(0.5)
        panel = app.main.query_one(LoadingPanel)
        shown = "\n".join(str(w.render()) for w in panel.query(Static))
        assert "loading [b]x" in shown, shown
        assert not RAW.search(shown.replace("\n", "")), shown


async def test_the_header_shows_a_runs_profile_and_flags_as_safe_text() -> None:
    from support.tui_replay import FROZEN_NOW, ReplayController, recorded_session

    from specmon.model.events import RunInfo
    from specmon.tui.app import SpecmonApp
    from specmon.tui.widgets.header import HeaderBar

    app = SpecmonApp(ReplayController(recorded_session()), None, clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause(0.3)
        argv = ("python3", "--speculative-num-steps", "2\x1b[2J", "--tp", "8")
        app.controller.bus.publish(RunInfo(run_id="r2", profile="p\x1b]0;t\x07q", argv=argv))
        await pilot.pause(0.5)
        shown = str(app.main.query_one(HeaderBar).render())
        assert "pq" in shown and not RAW.search(shown), shown

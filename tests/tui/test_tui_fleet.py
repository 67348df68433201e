"""The fleet console driven by Pilot over replayed hosts: the overview's rows, sorting,
filtering, opening a host and coming back, stepping through hosts, and a host that cannot be
reached shown on its own row while the others work."""

from __future__ import annotations

import dataclasses

from support.paths import REPO
from support.tui_replay import FROZEN_NOW, ReplayController, failure_event, recorded_session
from textual.widgets import Input, Static

from specmon.launch.config import load_config
from specmon.launch.spec import LaunchSpec
from specmon.model.errors import HostKeyError, TransportError
from specmon.model.events import ConnectionState, RunInfo
from specmon.tui import fleet_app
from specmon.tui.fleet_app import FleetApp
from specmon.tui.screens.fleet import FleetScreen
from specmon.tui.screens.fleet_relaunch import FleetConfirmScreen, FleetRelaunchScreen
from specmon.tui.screens.main import MainScreen
from specmon.tui.screens.relaunch import field_id
from specmon.tui.widgets.fleet_table import FleetTable
from specmon.tui.widgets.header import HeaderBar


class UnreachableController(ReplayController):
    """A host whose connection fails as an SSH host's does when nothing answers."""

    async def start(self) -> None:
        raise TransportError("ssh to gpu-gone:22 failed: connection refused")


class CrashingController(ReplayController):
    """A host whose controller crashes with a bug, not a SpecmonError."""

    async def start(self) -> None:
        raise RuntimeError("boom")


def make_fleet() -> FleetApp:
    failed = [*recorded_session(ready=False), (FROZEN_NOW, failure_event())]
    hosts = [
        ("alpha", ReplayController(recorded_session(), host_label="root@alpha:22")),
        ("beta", ReplayController(failed, host_label="root@beta:22")),
        ("gone", UnreachableController([], host_label="root@gone:22")),
        ("crash", CrashingController([], host_label="root@crash:22")),
    ]
    return FleetApp(hosts, load_config(REPO / "specmon.toml"), clock=lambda: FROZEN_NOW)


def row_text(table: FleetTable, name: str) -> str:
    row = table.get_row(name)
    return " | ".join(str(cell) for cell in row)


def shown_hosts(table: FleetTable) -> list[str]:
    return list(table.host_order)


async def test_overview_rows_show_each_hosts_own_state() -> None:
    app = make_fleet()
    async with app.run_test(size=(200, 30)) as pilot:
        await pilot.pause(0.3)
        assert isinstance(app.screen, FleetScreen)
        table = app.screen.query_one(FleetTable)
        alpha = row_text(table, "alpha")
        assert "ready" in alpha and "sglang" in alpha and "kimi" in alpha
        assert "8/8" in alpha  # GPUs busy/total from the replayed samples
        beta = row_text(table, "beta")
        assert "failed" in beta and "OutOfMemory" in beta  # the root cause, on its own row
        gone = row_text(table, "gone")
        assert "unreachable" in gone and "connection refused" in gone
        crash = row_text(table, "crash")
        assert "unreachable" in crash and "RuntimeError: boom" in crash
        assert app.is_running  # neither failure ended the console


async def test_sort_filter_open_return_and_step() -> None:
    app = make_fleet()
    async with app.run_test(size=(200, 30)) as pilot:
        await pilot.pause(0.3)
        table = app.screen.query_one(FleetTable)
        assert shown_hosts(table) == ["alpha", "beta", "crash", "gone"]  # by host
        await pilot.press("o")  # by state: worst first
        assert shown_hosts(table)[-1] == "alpha"
        assert set(shown_hosts(table)[:2]) == {"crash", "gone"}
        await pilot.press("o")  # by tok/s: the one serving first
        assert shown_hosts(table)[0] == "alpha"
        await pilot.press("slash")
        await pilot.press(*"memory")
        assert shown_hosts(table) == ["beta"]
        await pilot.press("enter")  # closes the filter, keeps it
        assert shown_hosts(table) == ["beta"]
        await pilot.press("enter")  # opens beta's full console
        await pilot.pause(0.1)
        assert isinstance(app.screen, MainScreen) and app.controller.host_label == "root@beta:22"
        assert "beta" in str(app.screen.query_one(HeaderBar).render())
        await pilot.press("right_square_bracket")
        await pilot.pause(0.1)
        assert app.screen is app.view_named("gone").main and app.view.name == "gone"
        await pilot.press("left_square_bracket", "left_square_bracket")
        await pilot.pause(0.1)
        assert app.view.name == "alpha" and app.screen is app.view_named("alpha").main
        await pilot.press("f")
        await pilot.pause(0.1)
        assert isinstance(app.screen, FleetScreen)
        await pilot.press("s")  # stop: a host's action, not the overview's
        assert isinstance(app.screen, FleetScreen)


class FlakyController(ReplayController):
    """A host down for its first two connection attempts (rebooting), then up."""

    def __init__(self, events, **kwargs) -> None:
        super().__init__(events, **kwargs)
        self.attempts = 0

    async def start(self) -> None:
        self.attempts += 1
        if self.attempts <= 2:
            raise TransportError("ssh to gpu-late:22 failed: no route to host")
        self.bus.publish(ConnectionState(host=self.host_label, state="connected"))
        self.replay()


class RefusedKeyController(ReplayController):
    async def start(self) -> None:
        raise HostKeyError("host key for gpu-new:22 is not in known_hosts")


async def test_a_host_down_at_start_is_tried_again_a_refused_key_is_not(monkeypatch) -> None:
    monkeypatch.setattr(fleet_app, "START_BACKOFF_S", 0.05)
    late = FlakyController(recorded_session(), host_label="root@late:22")
    refused = RefusedKeyController([], host_label="root@new:22")
    app = FleetApp([("late", late), ("new", refused)], None, clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(200, 30)) as pilot:
        table = app.overview.query_one(FleetTable)
        await pilot.pause(0.05)
        deadline = 50
        while "ready" not in row_text(table, "late") and deadline:
            await pilot.pause(0.1)
            deadline -= 1
        assert "ready" in row_text(table, "late") and late.attempts == 3
        assert "unreachable" in row_text(table, "new") and "known_hosts" in row_text(table, "new")
        new_store = refused.bus.store
        assert new_store.connection is not None and new_store.connection.state == "disconnected"


async def test_help_on_the_overview_lists_its_keys_and_read_only_hides_relaunch() -> None:
    from specmon.tui.screens.help import HelpScreen

    app = make_fleet()
    app.read_only = True
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause(0.1)
        assert isinstance(app.screen, HelpScreen)
        actions = {b.action for b in app.screen.bindings}
        assert {"cycle_sort", "filter", "toggle_select", "open_host"} <= actions
        assert "relaunch" not in actions and "stop" not in actions
        await pilot.press("escape")
        await pilot.press("r")  # refused: no form opens
        await pilot.pause(0.1)
        assert isinstance(app.screen, FleetScreen)


def reattached_session() -> list:
    """The recorded session as a console that found the run already live sees it."""
    return [
        (at, dataclasses.replace(event, reattached=True) if isinstance(event, RunInfo) else event)
        for at, event in recorded_session()
    ]


async def test_a_fleet_reattach_gives_one_toast_per_kind_not_one_per_host() -> None:
    """Issue 26 item 3: three hosts reattached stacked six toasts (3x Reattached, 3x Ready)
    over half the screen."""
    hosts = [
        (name, ReplayController(reattached_session(), host_label=f"root@{name}:22"))
        for name in ("alpha", "beta", "gamma")
    ]
    app = FleetApp(hosts, load_config(REPO / "specmon.toml"), clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(200, 40)) as pilot:
        for _ in range(40):  # bounded: the toasts come within a second
            await pilot.pause(0.1)
            if {n.title for n in app._notifications} >= {"Reattached", "Ready"}:
                break
        await pilot.pause(0.7)  # a late per-host toast would show by now
        toasts = [(n.title, n.message) for n in app._notifications]
        assert [t for t, _ in toasts].count("Reattached") == 1, toasts
        assert [t for t, _ in toasts].count("Ready") == 1, toasts
        reattached = next(m for t, m in toasts if t == "Reattached")
        assert reattached.startswith("Reattached 3 hosts: ")
        assert all(name in reattached for name in ("alpha", "beta", "gamma"))
        ready = next(m for t, m in toasts if t == "Ready")
        assert ready.startswith("3 servers ready: ")


async def open_fleet_form(pilot, app: FleetApp, names) -> FleetRelaunchScreen:
    """Mark ``names`` on the overview and press `r`: the fleet relaunch form."""
    await pilot.pause(0.3)
    table = app.overview.query_one(FleetTable)
    for name in names:
        table.move_cursor(row=table.host_order.index(name), animate=False)
        await pilot.press("space")
    await pilot.press("r")
    await pilot.pause(0.3)
    form = app.screen
    assert isinstance(form, FleetRelaunchScreen)
    return form


async def test_fleet_relaunch_warns_of_unreachable_hosts_and_can_leave_them_out() -> None:
    """Issue 26 item 4: an unreachable host among the selected is named, with why, before
    the confirmation, and `x` leaves it out (the confirmation then lists the others only)."""
    app = make_fleet()
    async with app.run_test(size=(200, 40)) as pilot:
        form = await open_fleet_form(pilot, app, ("alpha", "gone"))
        await pilot.press("ctrl+s")
        await pilot.pause(0.2)
        confirm = app.screen
        assert isinstance(confirm, FleetConfirmScreen)
        changes = str(confirm.query_one("#changes", Static).render())
        assert changes.startswith("Changes: none")  # the form was not edited
        warning = str(confirm.query_one("#unreachable", Static).render())
        assert "1 of the selected hosts cannot be reached now: gone" in warning
        assert "connection refused" in warning
        await pilot.press("x")
        await pilot.pause(0.2)
        again = app.screen
        assert isinstance(again, FleetConfirmScreen) and again is not confirm
        assert [host for host, _ in again.commands] == ["alpha"]
        assert not again.query("#unreachable")
        assert [t.name for t in form.targets] == ["alpha"]


class SpecRecordingController(ReplayController):
    """A host with a python of its own that records what it is asked to launch: a ready spec
    (``launch_spec``), or a profile to build its spec from again (``launch``)."""

    def __init__(self, python: str) -> None:
        super().__init__([], host_label=f"root@{python}:22", profiles=["demo"])
        self.python = python
        self.launched: list[LaunchSpec] = []
        self.launched_by_profile: list[str] = []

    @property
    def host_python(self) -> str:
        return self.python

    async def launch_spec(self, spec: LaunchSpec, *, profile: str | None = None) -> str:
        self.launched.append(spec)
        return f"run-{len(self.launched)}"

    async def launch(self, profile, *, flags=None, env=None) -> str:  # type: ignore[override]
        self.launched_by_profile.append(profile)
        return "run-rebuilt"


async def test_a_fleet_relaunch_launches_the_very_specs_it_confirmed() -> None:
    """Each host's spec is built once, with that host's python, for the confirmation; the
    launch carries those very specs (it built each host's spec again, from the profile)."""
    hosts = {
        "a": SpecRecordingController("/opt/a/bin/python"),
        "b": SpecRecordingController("/opt/b/bin/python"),
    }
    config = load_config(REPO / "specmon.toml")
    app = FleetApp(list(hosts.items()), config, clock=lambda: FROZEN_NOW)  # type: ignore[arg-type]
    async with app.run_test(size=(200, 40)) as pilot:
        form = await open_fleet_form(pilot, app, hosts)
        form.query_one("#" + field_id("speculative-num-steps"), Input).value = "2"
        form.query_one("#" + field_id("speculative-num-draft-tokens"), Input).value = "3"
        await pilot.pause(0.2)
        await pilot.press("ctrl+s")
        await pilot.pause(0.2)
        confirm = app.screen
        assert isinstance(confirm, FleetConfirmScreen)
        listed = dict(confirm.commands)
        await pilot.press("y")
        for _ in range(50):
            if app.last_fleet_outcomes:
                break
            await pilot.pause(0.1)
    assert [(o.name, o.run_id) for o in app.last_fleet_outcomes] == [("a", "run-1"), ("b", "run-1")]
    for name, controller in hosts.items():
        assert controller.launched_by_profile == []
        [launched] = controller.launched
        assert launched is confirm.specs[name]
        assert launched.argv[0] == controller.python
        assert listed[name] == launched.shown().shell_command()
        assert "--speculative-num-steps 2" in listed[name]


async def test_a_secret_known_only_from_one_hosts_run_is_asked_for_not_sent_to_every_host() -> None:
    """Host a's run was launched with `--api-key` beyond its profile: the form shows it as ***.
    The fleet form built each host's spec without the secrets it knew, so ctrl+s raised out of
    the screen; and host a's secret must not go to host b either. The form now marks the field
    (type the value) and nothing is confirmed or launched."""
    config = load_config(REPO / "specmon.toml")
    base = config.profiles["demo"].to_launch_spec()
    run = RunInfo(run_id="r1", profile="demo", argv=(*base.argv, "--api-key", "k-of-host-a"))
    hosts = {
        "a": SpecRecordingController("/opt/a/bin/python"),
        "b": SpecRecordingController("/opt/b/bin/python"),
    }
    hosts["a"].events = [(FROZEN_NOW, run)]
    app = FleetApp(list(hosts.items()), config, clock=lambda: FROZEN_NOW)  # type: ignore[arg-type]
    async with app.run_test(size=(200, 40)) as pilot:
        form = await open_fleet_form(pilot, app, hosts)
        extra = form.query_one("#" + field_id("extra-args"), Input)
        assert "--api-key '***'" in extra.value and "k-of-host-a" not in extra.value
        await pilot.press("ctrl+s")
        await pilot.pause(0.3)
        assert app.screen is form  # not confirmed
        problem = str(form.query_one("#spec-problems", Static).render())
        assert "api-key" in problem and "***" in problem
        # typed in, the same value goes to every host
        extra.value = extra.value.replace("--api-key '***'", "--api-key typed-for-all")
        await pilot.pause(0.2)
        await pilot.press("ctrl+s")
        await pilot.pause(0.3)
        confirm = app.screen
        assert isinstance(confirm, FleetConfirmScreen)
        assert all("typed-for-all" not in command for _, command in confirm.commands)
        assert all(spec.flag("api-key") == "typed-for-all" for spec in confirm.specs.values())

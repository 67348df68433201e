"""Several real hosts at once: two local hosts (each its own state dir), two SSH aliases to the
test sshd (different state dirs, the test interpreter as their python) and one host that never
answers. Headless `status`/`watch` over several hosts, and the fleet console's relaunch on
several hosts with one refusing."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.console import wait_until
from support.hosts import free_port, kill_everything_under
from support.hosts import test_options as fast_options
from support.paths import REPO
from support.sshd import SshdServer, start_sshd, stop_sshd
from textual.widgets import Select

from specmon.launch.config import load_config
from specmon.session import SessionOptions, open_session
from specmon.tui.fleet_app import FleetApp
from specmon.tui.screens.fleet import FleetScreen
from specmon.tui.screens.fleet_relaunch import FleetConfirmScreen, FleetRelaunchScreen
from specmon.tui.widgets.fleet_table import FleetTable

SSH_HOST = """
[hosts.{name}]
address = "127.0.0.1"
port = {port}
user = "{user}"
identity_file = "{key}"
known_hosts = "{known_hosts}"
python = "{python}"
state_dir = "{state_dir}"
"""
LOCAL_HOST = """
[hosts.{name}]
transport = "local"
state_dir = "{state_dir}"
"""
PROFILE = """
[profiles.{name}]
command = ["{{python}}", "-m", "specmon.sim"]
model_path = "sim/Kimi-K2.5"
draft_model_path = "/models/kimi-k2.5-eagle3"
tp = 8
port = {port}
gpu_agent = "none"
stop_grace_s = 5.0

[profiles.{name}.speculative]
algorithm = "EAGLE3"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4

[profiles.{name}.env]
SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN = "1"
SPECMON_SIM_TIME_SCALE = "0.002"
SPECMON_SIM_SHARDS = "4"
"""
LOCAL = ("loc-a", "loc-b")
SSH = ("box-a", "box-b")


@dataclasses.dataclass
class Fleet:
    config_path: Path
    state_dirs: dict[str, Path]
    sshd: SshdServer


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    sshd = start_sshd(tmp_path / "sshd")
    dirs = {name: tmp_path / f"state-{name}" for name in (*LOCAL, *SSH, "dead")}
    ssh = {"user": sshd.user, "key": sshd.client_key, "known_hosts": sshd.known_hosts}
    text = "".join(
        SSH_HOST.format(name=n, port=sshd.port, python=sys.executable, state_dir=dirs[n], **ssh)
        for n in SSH
    )
    text += "".join(LOCAL_HOST.format(name=n, state_dir=dirs[n]) for n in LOCAL)
    # Nothing listens on this port: connecting is refused at once.
    text += SSH_HOST.format(
        name="dead", port=free_port(), python=sys.executable, state_dir=dirs["dead"], **ssh
    )
    text += PROFILE.format(name="fast-a", port=free_port())
    text += PROFILE.format(name="fast-b", port=free_port())
    config_path = tmp_path / "specmon.toml"
    config_path.write_text(text)
    try:
        yield Fleet(config_path, dirs, sshd)
    finally:
        for path in dirs.values():
            kill_everything_under(path)
        sshd.drop_connections()
        stop_sshd(sshd.proc)


def specmon(fleet: Fleet, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specmon", "--config", str(fleet.config_path), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )


def test_headless_status_and_watch_over_several_hosts(fleet: Fleet) -> None:
    for host, profile in (("box-a", "fast-a"), ("loc-b", "fast-b")):
        launched = specmon(fleet, "launch", host, "--profile", profile, "--wait", "ready")
        assert launched.returncode == 0, launched.stderr

    status = specmon(fleet, "status", "box-a", "loc-b", "dead", "--json")
    assert status.returncode == 1  # one host could not be asked
    answers = {d["host"]: d for d in map(json.loads, status.stdout.splitlines())}
    assert set(answers) == {"box-a", "loc-b", "dead"}
    assert [r["profile"] for r in answers["box-a"]["runs"] if r["alive"]] == ["fast-a"]
    assert [r["profile"] for r in answers["loc-b"]["runs"] if r["alive"]] == ["fast-b"]
    assert "error" in answers["dead"] and "runs" not in answers["dead"]

    watch = specmon(fleet, "watch", "box-a", "loc-b", "dead", "--json", "--duration", "4")
    assert watch.returncode == 1  # the dead host's watch ended early; the others ran on
    lines = [json.loads(line) for line in watch.stdout.splitlines()]
    assert lines and all("host" in line for line in lines)
    by_host = {h: [ln for ln in lines if ln["host"] == h] for h in ("box-a", "loc-b", "dead")}
    for host in ("box-a", "loc-b"):
        kinds = {ln["kind"] for ln in by_host[host]}
        assert {"connection", "run"} <= kinds, (host, kinds)
        assert any(ln["kind"] == "run" and ln["reattached"] for ln in by_host[host])
    dead = [ln for ln in by_host["dead"] if ln.get("state") == "disconnected"]
    assert dead and dead[-1]["detail"]  # why, on the dead host's own line

    text = specmon(fleet, "watch", "box-a", "loc-b", "--duration", "2")
    assert text.returncode == 0
    assert any("  box-a  run " in line for line in text.stdout.splitlines())
    assert any("  loc-b  run " in line for line in text.stdout.splitlines())

    # One host: the lines are exactly the single-host shape (no "host" added to them).
    single = specmon(fleet, "watch", "box-a", "--json", "--duration", "2")
    single_lines = [json.loads(line) for line in single.stdout.splitlines()]
    assert single_lines and all(
        "host" not in ln for ln in single_lines if ln["kind"] != "connection"
    )
    for host in ("box-a", "loc-b"):
        assert specmon(fleet, "stop", host).returncode == 0


def fleet_sessions(fleet: Fleet, names: tuple[str, ...]) -> list[tuple[str, object]]:
    config = load_config(fleet.config_path)
    # Quick polling and reconnects; each host keeps the state dir its config names.
    options = dataclasses.replace(
        fast_options(Path("unused")), state_dir=SessionOptions().state_dir, gpu_agent="none"
    )
    return [(n, open_session(n, config, options=options)) for n in names]


def table_row(app: FleetApp, name: str) -> str:
    table = app.overview.query_one(FleetTable)
    if name not in table.host_order:
        return ""
    return " | ".join(str(c) for c in app.overview.query_one(FleetTable).get_row(name))


async def relaunch_on(pilot, app: FleetApp, names: list[str], answer: str) -> list[str]:
    """Select ``names`` on the overview, relaunch fast-a on them, confirm with ``answer``;
    returns the commands the confirmation listed."""
    table = app.overview.query_one(FleetTable)
    app.overview.selected.clear()
    for name in names:
        table.move_cursor(row=table.host_order.index(name), animate=False)
        await pilot.press("space")
    await pilot.press("r")
    await wait_until(pilot, lambda: isinstance(app.screen, FleetRelaunchScreen), 5, "the form")
    app.screen.query_one("#profile", Select).value = "fast-a"
    await pilot.pause(0.2)
    await pilot.press("ctrl+s")
    await wait_until(pilot, lambda: isinstance(app.screen, FleetConfirmScreen), 5, "confirm")
    listed = [f"{host}: {command}" for host, command in app.screen.commands]  # type: ignore[attr-defined]
    app.last_fleet_outcomes = []
    await pilot.press(answer)
    await wait_until(pilot, lambda: bool(app.last_fleet_outcomes), 60, "the fleet relaunch")
    return listed


async def test_fleet_console_unreachable_row_and_relaunch_with_a_refusal(fleet: Fleet) -> None:
    config = load_config(fleet.config_path)
    app = FleetApp(fleet_sessions(fleet, ("loc-a", "loc-b", "box-b", "dead")), config)  # type: ignore[arg-type]
    holder = open_session("loc-b", config)
    await holder.start(streams=False)
    try:
        async with app.run_test(size=(200, 40)) as pilot:
            assert isinstance(app.screen, FleetScreen)
            await wait_until(
                pilot, lambda: "unreachable" in table_row(app, "dead"), 20, "dead unreachable"
            )
            await wait_until(
                pilot,
                lambda: all("no server" in table_row(app, n) for n in ("loc-a", "loc-b", "box-b")),
                30,
                "the reachable hosts connected",
            )
            async with holder.helper.host_lock("another console"):  # loc-b refuses now
                listed = await relaunch_on(pilot, app, ["loc-a", "loc-b"], "a")  # all or none
                outcomes = {o.name: o for o in app.last_fleet_outcomes}
                assert "busy" in (outcomes["loc-b"].refusal or "").lower() or "lock" in (
                    outcomes["loc-b"].refusal or ""
                )
                assert outcomes["loc-a"].skipped and outcomes["loc-a"].run_id is None
                assert app.view_named("loc-a").controller.bus.store.run is None  # not launched
                assert len(listed) == 2 and all("specmon.sim" in c for c in listed)
                assert listed[0].startswith("loc-a: ") and listed[1].startswith("loc-b: ")

                await relaunch_on(pilot, app, ["loc-a", "loc-b"], "y")  # the others proceed
                outcomes = {o.name: o for o in app.last_fleet_outcomes}
                assert outcomes["loc-a"].run_id is not None
                assert outcomes["loc-b"].refusal and outcomes["loc-b"].run_id is None
            await wait_until(
                pilot, lambda: "ready" in table_row(app, "loc-a"), 60, "loc-a ready on its row"
            )
            assert "no server" in table_row(app, "loc-b")
            assert "unreachable" in table_row(app, "dead")  # and it disturbed nothing
            await app.view_named("loc-a").controller.stop()
            await pilot.press("q")
    finally:
        await holder.close()
        await asyncio.sleep(0)

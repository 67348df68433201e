"""Several clients on one host, over the real sshd: a run that another client replaces or
stops is told as that (never as a crash), and every view follows the new run at once; a
reattach tells the load time from the run record (issue 25 items 1, 2, 4 and 6)."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.console import wait_until
from support.hosts import Recorder, free_port, kill_everything_under, sim_profiles, ssh_session
from support.paths import REPO
from support.profiles import SIMBENCH_PROFILE_TOML
from support.sshd import SshdServer

from specmon.launch.config import load_config
from specmon.model.events import Ready, RunInfo, RunState, ServerFailed
from specmon.session import RunConflictError, open_session
from specmon.state.fleet import fleet_row
from specmon.state.store import StateStore
from specmon.tui.app import SpecmonApp
from specmon.tui.widgets.banner import Banner

SWITCH_S = 2.0  # every view is on the new run within this of its launch


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    try:
        yield path
    finally:
        kill_everything_under(path)


def failures(recorder: Recorder) -> list[object]:
    """Every failure a session told: a ServerFailed, or a run state "failed"/"hung"."""
    return [
        e
        for _, e in recorder.events
        if isinstance(e, ServerFailed)
        or (isinstance(e, RunState) and e.state in ("failed", "hung"))
    ]


async def test_a_run_replaced_by_another_client_is_followed_and_told_as_a_replacement(
    sshd: SshdServer, state_dir: Path
) -> None:
    profiles = sim_profiles()
    watcher = ssh_session(sshd, state_dir, profiles, gpu_agent="none", owner="ann@box pid 1")
    other = ssh_session(sshd, state_dir, profiles, gpu_agent="none", owner="bob@desk pid 2")
    other.command_name = "specmon launch"
    await watcher.start()
    recorder = Recorder(watcher)
    try:
        old = await watcher.launch("fast")
        await watcher.wait_for(lambda s: s.run_state == "ready", 30)
        await other.start()
        new = await other.launch("fast")
        launched = time.monotonic()
        store = await watcher.wait_for(
            lambda s: s.run is not None and s.run.run_id == new, SWITCH_S
        )
        assert time.monotonic() - launched < SWITCH_S
        assert failures(recorder) == []
        assert store.run_end is not None and store.run_end_id == old
        assert store.run_end.kind == "replaced" and store.run_end.replaced_by == new
        assert f"replaced by run {new} (profile fast, by bob@desk pid 2" in store.run_end.text()
        assert store.end_notice() is not None and "following run " + new in store.end_notice()
        await watcher.wait_for(lambda s: s.run_state == "ready", 30)  # its log, its phases
        assert watcher.current_run is not None and watcher.current_run.run_id == new

        runs = {r.run_id: r for r in await watcher.status()}
        assert runs[old].end is not None and runs[old].end.kind == "replaced"
        assert runs[old].state.startswith(f"replaced by run {new}"), runs[old].state
        assert "signal" not in runs[old].state

        # Followed, not taken over: replacing another client's run takes asking for it.
        with pytest.raises(RunConflictError, match="this console only follows it"):
            await watcher.launch("fast")

        await other.stop()  # `specmon stop` from another terminal: a stop, not a crash
        store = await watcher.wait_for(lambda s: s.run_state == "stopped", SWITCH_S + 3)
        assert failures(recorder) == []
        assert store.run_end is not None and store.run_end_id == new
        assert store.run_end.kind == "stopped" and store.run_end.by == "bob@desk pid 2"
        assert store.end_notice() == (
            f"run {new} stopped by bob@desk pid 2 (specmon launch); no server is running"
        )
        ended = [e for _, e in recorder.events if isinstance(e, RunState) and e.end is not None]
        assert {e.run_id: e.end.kind for e in ended} == {old: "replaced", new: "stopped"}
        status = {r.run_id: r for r in await watcher.status()}
        assert status[new].state == "stopped by bob@desk pid 2 (specmon launch)"
        assert json.loads(json.dumps(status[new].to_dict()))["end"]["kind"] == "stopped"
    finally:
        recorder.close()
        await asyncio.gather(watcher.close(), other.close())


async def test_a_clean_stop_of_an_sglang_run_is_a_stop_not_a_kill_by_signal_9(
    sshd: SshdServer, state_dir: Path
) -> None:
    """SGLang ends itself with SIGKILL after a SIGTERM: the stop record tells it apart."""
    session = ssh_session(sshd, state_dir, sim_profiles(), gpu_agent="none")
    session.command_name = "specmon stop"
    await session.start()
    try:
        run_id = await session.launch("fast")
        await session.wait_for(lambda s: s.run_state == "ready", 30)
        await session.stop()
        run = next(r for r in await session.status() if r.run_id == run_id)
        assert run.state == f"stopped by {session.options.owner} (specmon stop)"
        assert run.exit_signal == 9  # the leader's own end, as the monitor saw it
        assert run.end is not None and run.end.kind == "stopped" and not run.end.failed
    finally:
        await session.close()


async def test_a_reattach_tells_the_load_time_of_the_run_record_or_that_it_is_unknown(
    sshd: SshdServer, state_dir: Path
) -> None:
    profiles = sim_profiles()
    first = ssh_session(sshd, state_dir, profiles, gpu_agent="none")
    await first.start()
    try:
        await first.launch("fast")
        await first.wait_for(lambda s: s.run_state == "ready", 30)
        await asyncio.sleep(0.5)  # the ready time reaches the run record
    finally:
        await first.close()
    record = next(r for r in await _status(sshd, state_dir, profiles) if r.alive)
    assert record.load_seconds is not None

    await asyncio.sleep(1.5)  # a reattach comes well after the load: not a longer load
    second = ssh_session(sshd, state_dir, profiles, gpu_agent="none")
    recorder = Recorder(second)
    await second.start()
    try:
        store = await second.wait_for(lambda s: s.loading.ready_at is not None, 20)
        ready = [e for e in recorder.kinds("ready") if isinstance(e, Ready)]
        assert ready and ready[0].replayed
        assert ready[0].load_seconds == pytest.approx(record.load_seconds)
        assert store.loading.elapsed(time.time()) == pytest.approx(record.load_seconds)
    finally:
        recorder.close()
        await second.close()

    # A record without a ready time (nobody saw the ready line live): unknown, not guessed.
    (Path(record.run_dir or "") / "meta.json").write_text(json.dumps({"owner": "x"}))
    third = ssh_session(sshd, state_dir, profiles, gpu_agent="none")
    recorder = Recorder(third)
    await third.start()
    try:
        store = await third.wait_for(lambda s: s.loading.ready_at is not None, 20)
        await asyncio.sleep(0.3)  # the replay's last chunk and the record's times
        assert store.loading.elapsed(time.time()) is None  # not "since the run started"
        ready = [e for e in recorder.kinds("ready") if isinstance(e, Ready)]
        assert ready and ready[0].load_seconds is None and store.loading.load_seconds is None
        await third.stop()
    finally:
        recorder.close()
        await third.close()


async def _status(sshd: SshdServer, state_dir: Path, profiles: dict[str, object]) -> list:
    session = ssh_session(sshd, state_dir, profiles, gpu_agent="none")
    await session.start(streams=False)
    try:
        return await session.status()
    finally:
        await session.close()


# --- two consoles, a headless launch between them, `watch --json`, `stop` and `status` ------

HOSTS = """
[hosts.testbox]
address = "127.0.0.1"
port = {ssh_port}
user = "{user}"
identity_file = "{key}"
known_hosts = "{known_hosts}"
python = "{python}"
state_dir = "{remote_state}"
"""


def specmon_argv(config: Path, command: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "specmon", "--config", str(config), command, "testbox", *args]


async def run_specmon(config: Path, command: str, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *specmon_argv(config, command, *args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


class JsonWatch:
    """`specmon watch testbox --json` as a subprocess: its lines, read as they come."""

    def __init__(self, config: Path) -> None:
        self.config = config
        self.lines: list[dict[str, Any]] = []
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *specmon_argv(self.config, "watch", "--json"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            self.lines.append(json.loads(line))

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("kind") == kind]

    def on_run(self) -> str | None:
        runs = self.kinds("run")
        return runs[-1]["run_id"] if runs else None

    async def close(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.proc.wait(), 10)
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
        if self._reader is not None:
            self._reader.cancel()


def console_failure(app: SpecmonApp) -> str | None:
    """What a console shows as a failure, if anything: its store's state or its banner."""
    store = app.controller.bus.store
    if store.run_state in ("failed", "hung") or store.failure is not None:
        return f"{store.run_state}: {store.failure}"
    if app.main.query_one(Banner).has_class("-failed"):
        return "the failure banner"
    return None


def banner_text(app: SpecmonApp) -> str:
    banner = app.main.query_one(Banner)
    return str(banner.render()) if banner.has_class("-info") else ""


def toasts_of(app: SpecmonApp) -> list[str]:
    """Every toast message ``app`` shows from now on (a toast leaves the screen after its
    timeout; this list keeps it)."""
    shown: list[str] = []
    notify = app.notify

    def keep(message: str, **options: Any) -> None:
        shown.append(message)
        notify(message, **options)

    app.notify = keep  # type: ignore[method-assign]
    return shown


async def test_two_consoles_a_headless_launch_watch_and_stop_agree_on_the_new_run(
    sshd: SshdServer, tmp_path: Path
) -> None:
    state = tmp_path / "remote-state"
    config_path = tmp_path / "specmon.toml"
    config_path.write_text(
        HOSTS.format(
            ssh_port=sshd.port,
            user=sshd.user,
            key=sshd.client_key,
            known_hosts=sshd.known_hosts,
            python=sys.executable,
            remote_state=state,
        )
        + SIMBENCH_PROFILE_TOML.format(server_port=free_port(), time_scale=0.003)
    )
    config = load_config(config_path)
    me = f"{getpass.getuser()}@{socket.gethostname()}"
    first = SpecmonApp(open_session("testbox", config), config)
    second = SpecmonApp(open_session("testbox", config), config)
    toasts = {id(first): toasts_of(first), id(second): toasts_of(second)}
    watch = JsonWatch(config_path)
    try:
        async with first.run_test() as one, second.run_test() as two:
            for app, pilot in ((first, one), (second, two)):
                await wait_until(pilot, lambda app=app: connected(app), 20, "console connected")
            old = await first.controller.launch("simbench")
            await wait_until(one, lambda: store_of(first).run_state == "ready", 30, "ready")
            await wait_until(
                two, lambda: store_of(second).run_state == "ready", 20, "console 2 reattached"
            )
            await watch.start()
            await wait_until(one, lambda: watch.on_run() == old, 20, "watch on the run")

            recorders = [Recorder(app.controller) for app in (first, second)]
            code, out, err = await run_specmon(config_path, "launch", "-p", "simbench")
            assert code == 0, err
            new = out.split()[1]
            assert out.startswith(f"launched {new} ") and new != old

            def every_view_on_the_new_run() -> bool:
                return (
                    store_of(first).run is not None
                    and store_of(first).run.run_id == new
                    and store_of(second).run is not None
                    and store_of(second).run.run_id == new
                    and watch.on_run() == new
                )

            await wait_until(one, every_view_on_the_new_run, SWITCH_S, "every view on the run")
            started_at = store_of(first).run.started_at
            # When each view took the new run, from its launch (the run record's start).
            switched = [
                at - started_at
                for recorder in recorders
                for at, event in recorder.events
                if isinstance(event, RunInfo) and event.run_id == new
            ] + [line["at"] - started_at for line in watch.kinds("run") if line["run_id"] == new]
            assert len(switched) == 3 and max(switched) < SWITCH_S, switched
            # The consoles draw their queued events on their own tick: wait (bounded) for the
            # toast rather than assume a tick came within a fixed pause on a loaded machine;
            # every toast shown is kept (one shown early may have timed out by now).
            await wait_until(
                one,
                lambda: all(
                    any(f"replaced by run {new}" in message for message in toasts[id(app)])
                    for app in (first, second)
                ),
                10,
                "the replacement toast in both consoles",
            )
            for app in (first, second):
                assert console_failure(app) is None, console_failure(app)
                assert store_of(app).run_end is not None
                assert store_of(app).run_end.replaced_by == new
                text = banner_text(app)
                assert f"Run {old} replaced by run {new} (profile simbench, by {me}" in text
                row = fleet_row("testbox", store_of(app), time.time(), {})
                assert row.state in ("loading", "ready") and "replaced by run" in row.detail
            assert not watch.kinds("server_failed")
            assert not [s for s in watch.kinds("run_state") if s["state"] in ("failed", "hung")]
            ends = {s["run_id"]: s["end"] for s in watch.kinds("run_state") if s.get("end")}
            assert ends[old]["kind"] == "replaced" and ends[old]["replaced_by"] == new
            assert ends[old]["text"].startswith(f"replaced by run {new} (profile simbench")

            await wait_until(one, lambda: store_of(first).run_state == "ready", 30, "new ready")
            code, out, err = await run_specmon(config_path, "stop")
            assert code == 0, err
            for app, pilot in ((first, one), (second, two)):
                await wait_until(
                    pilot, lambda app=app: store_of(app).run_state == "stopped", 5, "stopped"
                )
                assert console_failure(app) is None, console_failure(app)
                text = banner_text(app)
                assert f"Run {new} stopped by {me}" in text and "(specmon stop)" in text, text
            await wait_until(one, lambda: new in {s["run_id"] for s in ends_of(watch)}, 5, "w")
            end = next(s for s in ends_of(watch) if s["run_id"] == new)["end"]
            assert end["kind"] == "stopped" and end["by"].startswith(me)
            assert end["command"] == "specmon stop"
            assert not watch.kinds("server_failed")
            for recorder in recorders:
                assert failures(recorder) == []
                recorder.close()

            code, out, err = await run_specmon(config_path, "status", "--json")
            assert code == 0, err
            runs = {r["run_id"]: r for r in json.loads(out)["runs"]}
            assert runs[old]["end"]["kind"] == "replaced", runs[old]
            assert runs[old]["end"]["replaced_by"] == new
            assert runs[new]["end"]["kind"] == "stopped" and runs[new]["end"]["by"].startswith(me)
            assert runs[new]["state"].startswith(f"stopped by {me}"), runs[new]["state"]
            code, out, err = await run_specmon(config_path, "status")
            assert "signal" not in out and f"replaced by run {new}" in out, out
        shown = ", ".join(f"{s:.2f}" for s in switched)
        print(f"consoles 1 and 2, watch on the new run {shown} s after its launch")
    finally:
        await watch.close()
        kill_everything_under(state)


def ends_of(watch: JsonWatch) -> list[dict[str, Any]]:
    return [s for s in watch.kinds("run_state") if s.get("end")]


def connected(app: SpecmonApp) -> bool:
    connection = store_of(app).connection
    return connection is not None and connection.state == "connected"


def store_of(app: SpecmonApp) -> StateStore:
    return app.controller.bus.store

"""`specmon launch HOST -p P --take-over PID --yes` over the real test sshd (issue 28 item 4):
a simulator started by a plain shell (`nohup ... > log &`, SGLang personality, 5 speculative
steps, its simulated GPUs in the state dir's sim-gpus.json) is stopped (SIGTERM to its process
tree: its group is the shell's) and the profile (2 steps) launched on its port as a specmon
run, ready; the stop told as a take-over. Refused in one line: a pid that is no server, a pid
that is gone, a take-over with no TTY and no --yes; a launch on the port it holds names it as
a server.

The console's take-over (Pilot, a console attached to such a simulator): `r` opens the
relaunch form as a take-over; 2 steps, confirmed after the confirmation named the process,
stop it (and its group) and the new run is followed to ready, no longer foreign, with the
take-over in the session's history and the run's record. Cancelling stops nothing; a profile
spanning nodes and another user's process (the host's helper run as `nobody` by setpriv) are
refused in one line on the form, nothing stopped.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from support.by_hand import Started, alive, kill_group, start_by_hand, wait_listening
from support.console import wait_until
from support.hosts import Recorder, free_port, kill_everything_under, ssh_session
from support.paths import REPO
from support.sshd import SshdServer
from textual.widgets import Button, Select, Static

from specmon.launch.config import load_config
from specmon.tui.app import SpecmonApp
from specmon.tui.screens.confirm import ConfirmScreen
from specmon.tui.screens.relaunch import RelaunchScreen
from specmon.tui.widgets.loading import LoadingPanel
from specmon.tui.widgets.timing import TimingPanel


def write_config(
    tmp_path: Path, sshd: SshdServer, state_dir: Path, port: int, extra: str = ""
) -> Path:
    path = tmp_path / "specmon.toml"
    path.write_text(
        f"""
{sshd.host_toml(state_dir)}

[profiles.fast]
command = ["{{python}}", "-m", "specmon.sim"]
model_path = "sim/Kimi-K2.5"
draft_model_path = "/models/kimi-k2.5-eagle3"
tp = 2
port = {port}
gpu_agent = "sim"
stop_grace_s = 5.0

[profiles.fast.speculative]
algorithm = "EAGLE3"
num_steps = 2
eagle_topk = 1
num_draft_tokens = 3

[profiles.fast.env]
SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN = "1"
SPECMON_SIM_TIME_SCALE = "0.003"
SPECMON_SIM_SHARDS = "4"
{extra}"""
    )
    return path


def specmon(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specmon", "--config", str(config), *args],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_take_over_relaunch_stops_the_foreign_server_and_the_new_run_is_ready(
    sshd: SshdServer, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    port = free_port()
    config = write_config(tmp_path, sshd, state_dir, port)
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    server = start_by_hand(
        tmp_path, "sglang", f"{sys.executable} -m specmon.sim --model-path sim/Kimi-K2.5 "
        "--speculative-draft-model-path /models/kimi-k2.5-eagle3 --tp 2 "
        f"--port {port} --speculative-algorithm EAGLE3 --speculative-num-steps 5 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 6", port,
        env={
            "SPECMON_SIM_GPU_STATE": str(state_dir / "sim-gpus.json"),
            "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1",
        },
    )  # fmt: skip
    try:
        wait_listening(port)
        assert server.pgid != server.pid  # the shell's group: its tree is signalled, not it

        # A plain launch on its port is refused, naming it as a server.
        plain = specmon(config, "launch", "testbox", "-p", "fast")
        assert plain.returncode != 0
        line = plain.stderr.strip()
        assert len(line.splitlines()) == 1, plain.stderr
        assert f"a sglang server, pid {server.pid}" in line, line
        assert "specmon.sim" in line and f"--take-over {server.pid}" in line, line

        # Refusals: no TTY and no --yes; a pid that is no server; a pid that is gone.
        no_tty = specmon(config, "launch", "testbox", "-p", "fast", "--take-over", str(server.pid))
        assert no_tty.returncode == 2 and "add --yes" in no_tty.stderr, no_tty.stderr
        not_server = specmon(
            config, "launch", "testbox", "-p", "fast", "--take-over", str(sleeper.pid), "--yes"
        )
        assert not_server.returncode == 2, not_server.stderr
        assert len(not_server.stderr.splitlines()) == 1, not_server.stderr
        assert f"pid {sleeper.pid}" in not_server.stderr and "not a server" in not_server.stderr
        assert alive(sleeper.pid)
        gone = subprocess.Popen(["true"])
        gone.wait()
        missing = specmon(
            config, "launch", "testbox", "-p", "fast", "--take-over", str(gone.pid), "--yes"
        )
        assert missing.returncode == 2 and f"no process {gone.pid}" in missing.stderr
        assert alive(server.pid)

        taken = specmon(
            config, "launch", "testbox", "-p", "fast", "--take-over", str(server.pid),
            "--yes", "--wait", "ready", "--json",
        )  # fmt: skip
        assert taken.returncode == 0, taken.stderr + taken.stdout
        assert "Traceback" not in taken.stderr
        assert f"take over pid {server.pid}" in taken.stderr and "sglang" in taken.stderr
        assert not alive(server.pid)
        events = [json.loads(x) for x in taken.stdout.splitlines()]
        run_id = events[0]["run_id"]
        old = f"pid-{server.pid}"
        steps = [
            e["step"] for e in events if e.get("kind") == "stop_progress" and e["run_id"] == old
        ]
        assert steps[0] == "sigterm" and "group_gone" in steps and steps[-1] == "gpu_released"
        stopped = [e for e in events if e.get("kind") == "run_state" and e["run_id"] == old]
        assert stopped and "taken over" in stopped[-1]["detail"], stopped
        assert stopped[-1]["end"]["kind"] in ("stopped", "killed")
        assert any(e.get("kind") == "ready" for e in events), [e.get("kind") for e in events]

        status = specmon(config, "status", "testbox", "--json")
        assert status.returncode == 0, status.stderr
        runs = {r["run_id"]: r for r in json.loads(status.stdout)["runs"]}
        run = runs[run_id]
        assert run["alive"] and run["ready_at"], run
        argv = run["argv"]
        assert argv[argv.index("--speculative-num-steps") + 1] == "2", argv
        record = json.loads((state_dir / "runs" / run_id / "run.json").read_text())
        foreign = record["meta"]["replaces_foreign"]
        assert foreign["pid"] == server.pid and "--speculative-num-steps" in foreign["argv"]
    finally:
        sleeper.kill()
        sleeper.wait(5)
        kill_group(server.pgid)
        kill_everything_under(state_dir)


# --- the console's take-over (Pilot) -----------------------------------------------------------

SPANNING = """
[profiles.spanning]
command = ["{python}", "-m", "specmon.sim"]
model_path = "sim/Kimi-K2.5"
tp = 2
nodes = ["node-a.example", "node-b.example"]
"""
FIVE_STEPS = (
    "--model-path sim/Kimi-K2.5 --speculative-draft-model-path /models/kimi-k2.5-eagle3 --tp 2 "
    "--speculative-algorithm EAGLE3 --speculative-num-steps 5 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 6"
)


def by_hand_sim(tmp_path: Path, port: int, gpu_state: Path | None) -> Started:
    """The simulator (5 steps) started by a plain shell with `nohup ... > log &`, listening
    and ready; with ``gpu_state``, its simulated GPUs written there (the sim agent reads it)."""
    env = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    if gpu_state is not None:
        env["SPECMON_SIM_GPU_STATE"] = str(gpu_state)
    command = f"{sys.executable} -m specmon.sim {FIVE_STEPS} --port {port}"
    server = start_by_hand(tmp_path, "sglang", command, port, env=env)
    wait_listening(port)
    deadline = time.monotonic() + 30
    while "fired up and ready" not in server.log.read_text(errors="replace"):
        assert time.monotonic() < deadline, server.log.read_text()[-2000:]
        time.sleep(0.05)
    return server


def group_members(pgid: int) -> list[int]:
    """Live processes (not zombies) of process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def said(app: SpecmonApp) -> list[str]:
    return [n.message for n in app._notifications]


async def open_take_over_form(pilot: object, app: SpecmonApp, profile: str) -> RelaunchScreen:
    await pilot.press("r")  # type: ignore[attr-defined]
    # the form opens once the host has read the server's own command line, filled in once
    # mounted (its loaded values set)
    await wait_until(
        pilot,
        lambda: isinstance(app.screen, RelaunchScreen) and bool(app.screen.loaded_values),
        15,
        "the form",
    )
    form = app.screen
    assert isinstance(form, RelaunchScreen) and form.take_over
    form.query_one("#profile", Select).value = profile
    await pilot.pause(0.2)  # type: ignore[attr-defined]
    return form


def form_problem(form: RelaunchScreen) -> str:
    return str(form.query_one("#take-over-problem", Static).render())


async def test_console_take_over_relaunch_follows_the_new_run(
    sshd: SshdServer, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    port = free_port()
    config = load_config(write_config(tmp_path, sshd, state_dir, port))
    server = by_hand_sim(tmp_path, port, state_dir / "sim-gpus.json")
    assert server.pgid != server.pid and server.pid in group_members(server.pgid)
    session = ssh_session(sshd, state_dir, dict(config.profiles), attach=str(server.pid))
    app = SpecmonApp(session, config)
    store = session.bus.store
    recorder = Recorder(session)
    try:
        async with app.run_test(size=(140, 44)) as pilot:
            await wait_until(
                pilot,
                lambda: store.run is not None and store.run.foreign and store.run_state == "ready",
                30,
                "attached and ready",
            )
            await pilot.pause(0.3)
            timing = str(app.main.query_one(TimingPanel).render())
            assert "press r for a" in timing and "take-over relaunch" in timing, timing
            await pilot.press("s")  # stop stays refused, naming r
            await pilot.pause(0.2)
            assert any("not specmon's run" in m and "Press r" in m for m in said(app)), said(app)

            form = await open_take_over_form(pilot, app, "fast")
            assert f"pid {server.pid}" in str(form.query_one("#take-over", Static).render())
            steps = form.first_input()
            steps.value = "2"
            await pilot.pause(0.2)
            assert not form.query_one("#launch", Button).disabled, form.problems
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), 30, "confirm")
            question = app.screen.question  # type: ignore[attr-defined]
            lines = question.splitlines()
            assert lines[0].startswith(f"take over pid {server.pid} on "), question
            assert "(user root, sglang" in lines[0], question
            assert "specmon.sim" in lines[1] and "--speculative-num-steps 5" in lines[1]
            assert "num steps 2" not in lines[1]
            assert "--speculative-num-steps 2" in question.split("\n\n")[-1], question
            assert "Changes to profile fast:" in question, question
            assert alive(server.pid)  # nothing stopped before the confirmation
            await pilot.press("y")
            await wait_until(
                pilot,
                lambda: (
                    store.run is not None and not store.run.foreign and store.run_state == "ready"
                ),
                90,
                "the new run ready",
            )
            run = store.run
            assert (
                run is not None and run.profile == "fast" and run.took_over == f"pid {server.pid}"
            )
            assert run.argv[run.argv.index("--speculative-num-steps") + 1] == "2", run.argv
            assert not alive(server.pid)
            assert group_members(server.pgid) == [], "the foreign server's group outlived it"
            # The stop told as a take-over, steps shown as a relaunch's, never a failure.
            assert store.run_end_id == f"pid-{server.pid}" and store.run_end is not None
            assert store.run_end.kind in ("stopped", "killed")
            assert store.run_end.command == "console take-over", store.run_end
            assert store.failure is None and not recorder.kinds("server_failed")
            old = [e for e in recorder.kinds("run_state") if e.run_id == f"pid-{server.pid}"]
            began = [i for i, e in enumerate(old) if e.state == "stopping"]
            assert began and old[began[0]].detail == "take-over", old
            ended = old[began[0] + 1 :]  # its end as the follow saw it, then the take-over's
            assert ended and all(
                e.state == "stopped" and "take-over" in (e.detail or "") for e in ended
            ), ended
            assert (ended[-1].detail or "").startswith("taken over: "), ended
            stop_steps = [e.step for e in app.main.query_one(LoadingPanel).stop_steps]
            assert stop_steps[0] == "sigterm" and stop_steps[-1] == "gpu_released", stop_steps
            assert any(f"Took over pid {server.pid}" in m for m in said(app)), said(app)
            # The session's history and the host's record name the server it replaced.
            marks = [m.label for m in app.session_history.launches]
            assert marks and marks[-1].endswith(f"(took over pid {server.pid})"), marks
            record = json.loads((state_dir / "runs" / run.run_id / "run.json").read_text())
            assert record["meta"]["replaces_foreign"]["pid"] == server.pid
            # Now specmon's run: stop works as for any run.
            await pilot.press("s")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), 10, "stop?")
            await pilot.press("y")
            await wait_until(pilot, lambda: store.run_state == "stopped", 40, "stopped")
            await pilot.press("q")
            await pilot.pause(0.3)
    finally:
        recorder.close()
        await asyncio.wait_for(session.close(), 30)
        kill_group(server.pgid)
        kill_everything_under(state_dir)


async def test_console_take_over_cancelled_or_refused_stops_nothing(
    sshd: SshdServer, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    port = free_port()
    config = load_config(write_config(tmp_path, sshd, state_dir, port, SPANNING))
    server = by_hand_sim(tmp_path, port, state_dir / "sim-gpus.json")
    session = ssh_session(sshd, state_dir, dict(config.profiles), attach=str(server.pid))
    app = SpecmonApp(session, config)
    store = session.bus.store
    try:
        async with app.run_test(size=(140, 44)) as pilot:
            await wait_until(
                pilot,
                lambda: store.run is not None and store.run.foreign and store.run_state == "ready",
                30,
                "attached and ready",
            )
            # Cancelled at the confirmation: nothing stopped, still attached.
            form = await open_take_over_form(pilot, app, "fast")
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), 30, "confirm")
            assert f"take over pid {server.pid}" in app.screen.question  # type: ignore[attr-defined]
            await pilot.press("n")
            await wait_until(pilot, lambda: app.screen is form, 10, "back to the form")
            assert "Not taken over" in form_problem(form), form_problem(form)
            # A profile spanning nodes: refused in one line on the form, nothing asked.
            form.query_one("#profile", Select).value = "spanning"
            await pilot.pause(0.2)
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: "spans nodes" in form_problem(form), 30, "refusal")
            text = form_problem(form)
            assert "\n" not in text and text.startswith("profile spanning spans nodes"), text
            assert any("spans nodes" in m for m in said(app)), said(app)
            assert app.screen is form
            await pilot.press("escape")
            await pilot.pause(0.5)
            assert app.screen is app.main
            assert alive(server.pid) and store.run is not None and store.run.foreign
            assert store.run_state == "ready" and not app.relaunch_in_progress
            await pilot.press("q")
            await pilot.pause(0.3)
    finally:
        await asyncio.wait_for(session.close(), 30)
    try:
        assert alive(server.pid), "a cancelled take-over stopped the server"
        assert not (state_dir / "runs").exists() or not list((state_dir / "runs").iterdir())
    finally:
        kill_group(server.pgid)
        kill_everything_under(state_dir)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None or not _has_user("nobody"),
    reason="needs root, setpriv and the nobody user",
)
async def test_console_take_over_of_another_users_process_is_refused(
    sshd: SshdServer, tmp_path: Path
) -> None:
    """The host's python is run as ``nobody`` (setpriv): the helper may not signal root's
    simulator, so the form shows the host's one-line refusal and nothing is stopped."""
    work = Path(tempfile.mkdtemp(prefix="specmon-nobody-", dir="/tmp"))
    work.chmod(0o755)
    state_dir = work / "state"
    state_dir.mkdir(mode=0o700)
    nobody = pwd.getpwnam("nobody")
    os.chown(state_dir, nobody.pw_uid, nobody.pw_gid)
    port = free_port()
    config = load_config(write_config(tmp_path, sshd, state_dir, port))
    server = by_hand_sim(tmp_path, port, None)
    system = Path("/usr/bin/python3")  # the helper is standard library only
    interpreter = system if system.exists() else Path(sys.base_prefix, "bin", "python3")
    python = f"setpriv --reuid=nobody --regid={nobody.pw_gid} --clear-groups {interpreter}"
    session = ssh_session(
        sshd, state_dir, dict(config.profiles), attach=str(server.pid), python=python,
        gpu_agent="none",
    )  # fmt: skip
    app = SpecmonApp(session, config)
    store = session.bus.store
    try:
        async with app.run_test(size=(140, 44)) as pilot:
            await wait_until(
                pilot, lambda: store.run is not None and store.run.foreign, 30, "attached"
            )
            assert store.run is not None and store.run.owner == "root"
            form = await open_take_over_form(pilot, app, "fast")
            await pilot.press("ctrl+s")
            await wait_until(
                pilot, lambda: "no permission" in form_problem(form), 30, "the host's refusal"
            )
            text = form_problem(form)
            assert "\n" not in text, text
            assert f"no permission to signal pid {server.pid} (user root)" in text, text
            assert any("no permission to signal" in m for m in said(app)), said(app)
            assert not isinstance(app.screen, ConfirmScreen) and app.screen is form
            assert alive(server.pid)
            await pilot.press("escape")
            await pilot.press("q")
            await pilot.pause(0.3)
    finally:
        await asyncio.wait_for(session.close(), 30)
        try:
            assert alive(server.pid), "a refused take-over stopped the server"
        finally:
            kill_group(server.pgid)
            kill_everything_under(state_dir)
            shutil.rmtree(work, ignore_errors=True)

"""The host session over the local transport (the demo's path): every simulator fault becomes
a failed or hung event with its root cause, the GPU agent's life, the supervisor's refusals,
load-time memory, and `specmon demo --headless` leaving nothing behind."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.hosts import (
    Recorder,
    group_alive,
    kill_everything_under,
    local_session,
    processes_mentioning,
    sim_profiles,
)
from support.paths import REPO

from specmon.model.errors import UsageError
from specmon.session import parse_host
from specmon.session.helper_client import HELPER_SOURCE

REPO_ROOT = REPO


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    try:
        yield path
    finally:
        kill_everything_under(path)


FAULTS = [
    # (SPECMON_SIM_FAULT, hung, category, a root-cause fragment, exit code or signal).
    # SGLang ends with kill_process_tree (SIGKILL: a shell would say 137).
    ("oom", False, "oom", "CUDA out of memory", ("signal", 9)),
    ("oom:load", False, "oom", "CUDA out of memory", ("signal", 9)),
    ("nccl", False, "nccl", "NCCL error", ("signal", 9)),
    ("crash", False, None, "illegal memory access", ("signal", 9)),
    ("crash:segv", False, None, None, ("signal", 11)),
    ("hang:load", True, None, "no log output and no HTTP answer", None),
    ("hang:graphs", True, None, "no log output and no HTTP answer", None),
    ("hang:decode", True, None, "no log output and no HTTP answer", None),
]


async def _poke(port: int) -> None:
    """A request, so decode-time faults (crash, hang:decode) get their decode iterations."""
    async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
        body = {"text": "Hello", "sampling_params": {"max_new_tokens": 32}}
        with contextlib.suppress(httpx.HTTPError):
            await client.post(f"http://127.0.0.1:{port}/generate", json=body)


@pytest.mark.parametrize(("fault", "hung", "category", "cause", "ending"), FAULTS)
async def test_each_simulator_fault_surfaces_with_its_root_cause(
    state_dir: Path,
    fault: str,
    hung: bool,
    category: str | None,
    cause: str | None,
    ending: tuple[str, int] | None,
) -> None:
    profiles = sim_profiles(
        extra_args=("--decode-log-interval", "2"), env={"SPECMON_SIM_FAULT": fault}
    )
    session = local_session(state_dir, profiles, gpu_agent="none", hang_after_s=1.5)
    await session.start()
    try:
        await session.launch("fast")
        poked = False
        deadline = time.monotonic() + 60
        while session.bus.store.failure is None:
            assert time.monotonic() < deadline, f"{fault}: no failure event"
            if session.bus.store.run_state == "ready" and not poked:
                poked = True
                asyncio.get_running_loop().create_task(_poke(profiles["fast"].port))
            await asyncio.sleep(0.05)
        failure = session.bus.store.failure
        assert failure.hung is hung, failure
        if category is not None:
            assert failure.category == category, failure
        if cause is not None:
            assert any(cause in line for line in failure.root_cause), failure.root_cause
        assert failure.root_cause, failure
        if ending is not None:
            kind, value = ending
            assert (failure.exit_code if kind == "code" else failure.signal) == value, failure
        if hung:
            assert failure.last_phase is not None
            expected_phase = {
                "hang:load": "weights",
                "hang:graphs": "graphs",
                "hang:decode": "ready",
            }
            assert expected_phase[fault] in failure.last_phase, failure.last_phase
            await session.stop()  # a hung server is still running: stop must clean it up
        assert all(not group_alive(pgid) for pgid in _pgids(state_dir))
    finally:
        await session.close()


def _pgids(state_dir: Path) -> list[int]:
    return [json.loads(p.read_text())["pgid"] for p in (state_dir / "runs").glob("*/run.json")]


async def test_second_load_of_a_profile_gets_an_eta_from_the_first(state_dir: Path) -> None:
    profiles = sim_profiles()
    session = local_session(state_dir, profiles, gpu_agent="none")
    await session.start()
    try:
        first = await session.launch("fast")
        await session.wait_for(lambda s: s.run_state == "ready", 60)
        await asyncio.sleep(0.5)  # the ready time is annotated on the host in the background
        runs = {r.run_id: r for r in await session.status()}
        load = runs[first].load_seconds
        assert load is not None and 0 < load < 60
        await session.launch("fast")
        store = session.bus.store
        assert store.loading.previous_load_seconds is not None
        assert abs(store.loading.previous_load_seconds - load) < 1.0
        await session.stop()
    finally:
        await session.close()


async def test_gpu_agent_without_nvidia_driver_reports_an_error_not_a_crash(
    state_dir: Path,
) -> None:
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has an NVIDIA driver")
    session = local_session(state_dir, {}, gpu_agent="nvml")
    recorder = Recorder(session)
    await session.start()
    try:
        deadline = time.monotonic() + 30
        while not any("not restarted" in (e.detail or "") for e in recorder.kinds("agent")):
            assert time.monotonic() < deadline, [e.detail for e in recorder.kinds("agent")]
            await asyncio.sleep(0.05)
        # told once, never restarted: nothing on this host for an agent to read
        assert [e.state for e in recorder.kinds("agent")] == ["error"]
        errors = [e.detail for e in recorder.kinds("agent") if e.state == "error"]
        assert any("no NVIDIA" in (d or "") for d in errors), errors
        assert session.bus.store.connection.state == "connected"
        assert await session.status() == []
    finally:
        recorder.close()
        await session.close()


async def test_sim_gpu_agent_streams_samples_and_is_gone_after_close(state_dir: Path) -> None:
    session = local_session(state_dir, {}, gpu_agent="sim")
    recorder = Recorder(session)
    await session.start()
    try:
        samples = await recorder.wait_kind("gpu", 20, count=3)
        assert len(samples[-1].gpus) >= 1
        assert processes_mentioning(str(state_dir)), "the agent should run while connected"
    finally:
        recorder.close()
        await session.close()
    deadline = time.monotonic() + 5
    while processes_mentioning(str(state_dir)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert processes_mentioning(str(state_dir)) == []


def _helper(state_dir: Path, *args: str) -> list[dict]:
    result = subprocess.run(
        [sys.executable, str(HELPER_SOURCE), args[0], "--state-dir", str(state_dir), *args[1:]],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_supervisor_never_signals_a_process_group_it_did_not_start(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    bystander = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        run_dir = state_dir / "runs" / "forged-run"
        run_dir.mkdir(parents=True)
        # A record naming the bystander's group, but not its process (start time differs):
        # as after a reboot or a pid reused by someone else.
        (run_dir / "run.json").write_text(
            json.dumps({"pid": bystander.pid, "pgid": bystander.pid, "start_ticks": 1})
        )
        replies = _helper(state_dir, "stop", "--run-id", "forged-run", "--grace", "1")
        assert replies[-1]["ok"] and replies[-1]["already"]
        assert bystander.poll() is None, "the helper signalled a process it did not start"
        replies = _helper(state_dir, "stop", "--run-id", "no-such-run")
        assert replies[-1]["ok"] is False and "no record" in replies[-1]["error"]
        replies = _helper(state_dir, "stop", "--run-id", "../../etc")
        assert replies[-1]["ok"] is False and "bad run id" in replies[-1]["error"]
        # The test made the state dir: its mode is the test's, not the helper's to change.
        assert oct(state_dir.stat().st_mode & 0o777) == oct(0o777 & ~_umask())
    finally:
        os.killpg(bystander.pid, signal.SIGKILL)
        bystander.wait()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu-box", (None, "gpu-box", None)),
        ("root@10.0.0.7", ("root", "10.0.0.7", None)),
        ("ubuntu@gpu.example.com:2222", ("ubuntu", "gpu.example.com", 2222)),
        ("[::1]:22", (None, "::1", 22)),
    ],
)
def test_host_strings_parse(text: str, expected: tuple) -> None:
    assert parse_host(text) == expected


@pytest.mark.parametrize("text", ["", "root@", "host:99999", "a b", "x;rm -rf /", "@host", "h:-1"])
def test_bad_host_strings_are_clear_usage_errors(text: str) -> None:
    with pytest.raises(UsageError, match="bad host"):
        parse_host(text)


def test_demo_headless_reaches_ready_serves_traffic_and_leaves_no_process(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TMPDIR": str(tmp_path)}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "specmon",
            "demo",
            "--headless",
            "--json",
            "--duration",
            "12",
            "--time-scale",
            "0.003",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    kinds = [json.loads(line)["kind"] for line in result.stdout.splitlines()]
    assert "ready" in kinds and "run" in kinds and "shard_progress" in kinds
    assert kinds.index("run") < kinds.index("ready")
    # The demo's simulated clients make the server decode, so the live panels have data:
    after_ready = kinds[kinds.index("ready") :]
    assert "decode" in after_ready and "probe" in after_ready
    assert processes_mentioning(str(tmp_path)) == []
    assert not any(p.name.startswith("specmon-demo-") for p in tmp_path.iterdir())


@settings(max_examples=60, deadline=None)
@given(
    text=st.lists(
        st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40), max_size=30
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
    rewind=st.integers(min_value=0, max_value=50),
)
def test_log_chunks_become_each_line_once_however_they_are_cut_or_resent(
    text: list[str], cuts: list[int], rewind: int
) -> None:
    from specmon.backends.sglang.parser import SGLangLogParser
    from specmon.model.events import LogLine
    from specmon.session.log_follower import LogFollower

    data = "\n".join(text).encode()
    follower = LogFollower(parser=SGLangLogParser())
    points = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    lines: list[str] = []
    for start, end in itertools.pairwise(points):
        resent = max(0, start - rewind)  # a resend from an earlier offset, as after a reconnect
        events = follower.feed_log(resent, data[resent:end])
        lines += [e.text for e in events if isinstance(e, LogLine)]
    complete = data.decode(errors="replace").split("\n")[:-1]
    assert lines == complete
    assert bytes(follower.partial) == data[data.rfind(b"\n") + 1 :]


def test_demo_killed_outright_still_takes_its_server_down(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TMPDIR": str(tmp_path)}
    demo = subprocess.Popen(
        [sys.executable, "-m", "specmon", "demo", "--headless", "--json", "--time-scale", "0.003"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        assert demo.stdout is not None
        pgid = None
        deadline = time.monotonic() + 60
        while pgid is None and time.monotonic() < deadline:
            line = demo.stdout.readline()
            if not line:
                break
            event = json.loads(line)
            if event["kind"] == "run":
                pgid = event["pgid"]
        assert pgid is not None and group_alive(pgid)
    finally:
        demo.kill()  # SIGKILL: no clean-up code of the demo runs
        demo.wait()
    deadline = time.monotonic() + 30
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group_alive(pgid), "the demo's simulator outlived the demo"
    deadline = time.monotonic() + 10
    while processes_mentioning(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(str(tmp_path)) == []


async def test_a_launch_cancelled_while_taking_the_lock_leaves_the_host_unlocked(
    state_dir: Path,
) -> None:
    profiles = sim_profiles()
    session = local_session(state_dir, profiles, gpu_agent="none")
    await session.start(streams=False)
    try:
        for delay in (0.0, 0.01, 0.03, 0.06, 0.1):
            launch = asyncio.get_running_loop().create_task(session.launch("fast"))
            await asyncio.sleep(delay)
            launch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await launch
        # Whatever point each cancel hit, the host lock is free: a launch goes through.
        await session.stop_all_runs()
        assert await session.launch("fast")
    finally:
        await session.stop_all_runs()
        await session.close()


def test_a_state_dir_the_caller_chose_wins_over_the_hosts_configured_one(tmp_path: Path) -> None:
    from specmon.launch.config import load_config
    from specmon.session import SessionOptions, open_session

    config = load_config(REPO_ROOT / "specmon.toml")
    chosen = open_session("local", config, options=SessionOptions(state_dir=str(tmp_path)))
    assert chosen.options.state_dir == str(tmp_path)  # tests and --state-dir stay private
    default = open_session("local", config)
    assert default.options.state_dir == str(config.hosts["local"].state_dir)


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM])
def test_the_demo_console_cleans_up_when_its_terminal_closes_or_it_is_killed(
    tmp_path: Path, signum: int
) -> None:
    import pty

    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "TMPDIR": str(tmp_path),
        "SPECMON_SIM_TIME_SCALE": "0.003",
        "TERM": "xterm-256color",
        "COLUMNS": "120",
        "LINES": "40",
    }
    controller, terminal = pty.openpty()
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specmon", "demo"],
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
            env=env,
            cwd=tmp_path,
            start_new_session=True,
        )
        os.close(terminal)
        terminal = -1
        deadline = time.monotonic() + 60
        while not processes_mentioning(str(tmp_path / "specmon-demo-")):  # the sim is up
            assert time.monotonic() < deadline, "the demo never started its simulator"
            with contextlib.suppress(OSError):
                os.read(controller, 65536)  # keep the terminal drained
            time.sleep(0.1)
        proc.send_signal(signum)
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the demo did not exit"
            with contextlib.suppress(OSError):
                os.read(controller, 65536)
            time.sleep(0.05)
    finally:
        if terminal >= 0:
            os.close(terminal)
        os.close(controller)
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert processes_mentioning(str(tmp_path)) == []
    assert not any(p.name.startswith("specmon-demo-") for p in tmp_path.iterdir())


ROOT_GUARD = REPO_ROOT / "tests" / "support" / "root_guard"


def _specmon(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    shipped = ("--config", str(REPO_ROOT / "specmon.toml"))  # ./specmon.toml needs trust
    return subprocess.run(
        [sys.executable, "-m", "specmon", *shipped, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{ROOT_GUARD}"},
    )


def test_a_state_dir_specmon_did_not_create_keeps_its_mode(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # a shared /tmp-like directory: mode and sticky bit must stay
    result = _specmon("status", "local", "--state-dir", str(shared))
    assert result.returncode == 0, result.stderr
    assert oct(shared.stat().st_mode & 0o7777) == oct(0o1777)
    for own in ("runs", "bin"):  # specmon's own entries are created private
        assert oct((shared / own).stat().st_mode & 0o777) == oct(0o700)
    fresh = tmp_path / "fresh" / "state"  # one specmon creates is private
    assert _specmon("status", "local", "--state-dir", str(fresh)).returncode == 0
    assert oct(fresh.stat().st_mode & 0o777) == oct(0o700)


@pytest.mark.parametrize("path", ["/", "//", "/./", " "])
def test_the_root_or_an_empty_state_dir_is_refused_before_anything_is_written(
    path: str, tmp_path: Path
) -> None:
    # Every process runs under ROOT_GUARD, so a regression fails here instead of chmod-ing /.
    before = os.stat("/").st_mode
    result = _specmon("status", "local", "--state-dir", path, cwd=tmp_path)
    assert result.returncode == 2 and "refused" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    helper = subprocess.run(  # the helper on a host refuses on its own too
        [sys.executable, str(HELPER_SOURCE), "hello", "--state-dir", path],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT_GUARD)},
    )
    reply = json.loads(helper.stdout.splitlines()[-1])
    assert reply["ok"] is False and "refused" in reply["error"]
    assert os.stat("/").st_mode == before and list(tmp_path.iterdir()) == []


def test_the_helper_refuses_a_runs_dir_of_another_user(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "runs").mkdir(parents=True)
    os.chmod(state / "runs", 0o755)
    if os.geteuid() == 0:
        os.chown(state / "runs", 65534, 65534)
    else:
        (state / "runs").rmdir()
        (state / "runs").write_text("not a directory")
    replies = _helper(state, "hello")
    assert replies[-1]["ok"] is False and "not a directory of this user" in replies[-1]["error"]


def _helper_launch(state: Path, argv: list[str]) -> dict:
    spec = {"argv": argv, "env": {}, "profile": None, "port": None, "meta": {}}
    result = subprocess.run(
        [sys.executable, str(HELPER_SOURCE), "launch", "--state-dir", str(state)],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        timeout=30,
    )
    return json.loads(result.stdout.splitlines()[-1])


def test_a_run_whose_leader_crashed_lives_while_its_group_does_and_stop_ends_it(
    state_dir: Path,
) -> None:
    # SGLang's usual crash: the launcher dies, scheduler/worker processes keep the GPUs.
    run = _helper_launch(state_dir, ["sh", "-c", "sleep 300 & sleep 300 & sleep 0.3; exit 1"])
    assert run["ok"], run
    pgid = run["pgid"]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        (status,) = _helper(state_dir, "status")[-1]["runs"]
        if status["exit"] is not None and status.get("group_left") == 2:
            break
        time.sleep(0.1)
    assert status["alive"] and status["exit"]["code"] == 1 and status["group_left"] == 2
    common = ["local", "--state-dir", str(state_dir), "--gpu-agent", "none"]
    shown = _specmon("status", *common)
    assert "leader exited 1, 2 processes of its group still alive" in shown.stdout, shown
    stopped = _specmon("stop", *common, "--json")
    assert stopped.returncode == 0, stopped.stderr
    steps = {s["step"]: s for s in json.loads(stopped.stdout)["steps"]}
    assert steps["group_gone"]["detail"] == "no process left" and "gpu_released" in steps
    assert not group_alive(pgid)
    deadline = time.monotonic() + 5  # the monitor leaves once the group is empty
    while processes_mentioning(str(state_dir)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(str(state_dir)) == []
    (status,) = _helper(state_dir, "status")[-1]["runs"]
    assert not status["alive"] and status["group_left"] == 0


def test_two_live_runs_in_one_state_dir_can_be_stopped_as_the_refusal_says(
    state_dir: Path,
) -> None:
    import shlex

    # e.g. a late launch that finished after its console died: two live runs, one state dir.
    first = _helper_launch(state_dir, ["sleep", "300"])
    second = _helper_launch(state_dir, ["sleep", "300"])
    assert first["ok"] and second["ok"]
    common = ["local", "--state-dir", str(state_dir), "--gpu-agent", "none"]
    refused = _specmon("stop", *common)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    message = refused.stderr.strip()
    assert first["run_id"] in message and "\n" not in message
    advice = message.split("Stop it with: ", 1)[1].split("  (", 1)[0]
    # --config (given by _specmon) is an option of specmon, so it comes before `stop`.
    assert advice.startswith("specmon --config ") and " stop local " in advice
    assert f"--run-id {first['run_id']}" in advice
    words = shlex.split(advice)[1:]  # run exactly what it said, as `specmon ...`
    done = _specmon(*words, "--gpu-agent", "none")
    assert done.returncode == 0 and f"stopped {first['run_id']}" in done.stdout, done.stderr
    assert not group_alive(first["pgid"]) and group_alive(second["pgid"])
    gone = _specmon("stop", *common, "--run-id", first["run_id"])
    assert gone.returncode == 0 and "is not running" in gone.stdout
    third = _helper_launch(state_dir, ["sleep", "300"])
    everything = _specmon("stop", *common, "--all", "--json")
    assert everything.returncode == 0, everything.stderr
    stopped = {json.loads(line)["stopped"] for line in everything.stdout.splitlines()}
    assert stopped == {second["run_id"], third["run_id"]}
    assert not group_alive(second["pgid"]) and not group_alive(third["pgid"])
    unknown = _specmon("stop", *common, "--run-id", "no-such-run")
    assert unknown.returncode == 2 and "no run 'no-such-run'" in unknown.stderr


async def test_a_launch_over_another_consoles_run_is_refused_with_advice_that_works(
    state_dir: Path,
) -> None:
    first = _helper_launch(state_dir, ["sleep", "300"])
    second = _helper_launch(state_dir, ["sleep", "300"])
    session = local_session(state_dir, sim_profiles(), gpu_agent="none")
    await session.start()
    try:
        with pytest.raises(Exception, match="Stop it with: specmon stop local") as caught:
            await session.launch("fast")
        assert f"--run-id {first['run_id']}" in str(caught.value)
        assert "Reconnect" not in str(caught.value)
        report = await session.stop_run(first["run_id"])
        assert report is not None and not group_alive(first["pgid"])
        assert group_alive(second["pgid"])
    finally:
        await session.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MiB filesystem (tmpfs) to fill: root only, as the tests run in CI."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"mount not permitted here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        kill_everything_under(mount_point)
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(directory: Path) -> None:
    # suppress outermost: closing the file flushes its buffer, which fails on a full disk too
    # (whether it does depends on what else is on the disk, e.g. the helper's size)
    with contextlib.suppress(OSError), (directory / "filler").open("wb") as f:
        while True:
            f.write(b"x" * 65536)
            f.flush()


def test_the_exit_status_survives_a_log_that_fills_the_disk(small_disk: Path) -> None:
    state = small_disk / "state"
    run = _helper_launch(state, ["sh", "-c", "cat /dev/zero; exit 7"])
    assert run["ok"], run
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        runs = _helper(state, "status")[-1]["runs"]
        if runs and runs[0]["exit"] is not None and not runs[0]["alive"]:
            break
        time.sleep(0.1)
    assert runs[0]["exit"]["code"] == 7, runs
    assert (state / "runs" / run["run_id"] / "server.log").stat().st_size > 1 << 20
    assert not list((state / "runs" / run["run_id"]).glob("*.tmp.*"))


async def test_a_full_disk_on_the_host_is_reported_with_the_helpers_error(
    small_disk: Path,
) -> None:
    state = small_disk / "state"
    session = local_session(state, sim_profiles(), gpu_agent="none")
    await session.start(streams=False)
    try:
        _fill(small_disk)
        with pytest.raises(Exception, match="No space left on device") as caught:
            await session.stop()
        assert "could not take the host lock" in str(caught.value)
    finally:
        await session.close()


async def test_a_relaunch_over_a_crashed_leaders_group_kills_the_whole_group(
    state_dir: Path,
) -> None:
    crashed = _helper_launch(state_dir, ["sh", "-c", "sleep 300 & sleep 300 & sleep 0.3; exit 1"])
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        (status,) = _helper(state_dir, "status")[-1]["runs"]
        if status["exit"] is not None:
            break
        time.sleep(0.1)
    assert status["alive"] and status["group_left"] == 2
    session = local_session(state_dir, sim_profiles(), gpu_agent="none")
    await session.start()  # reattaches the crashed run: it is alive
    try:
        assert session.current_run is not None
        assert session.current_run.run_id == crashed["run_id"]
        new_run = await session.launch("fast")
        assert not group_alive(crashed["pgid"])
        assert [r.run_id for r in await session.status() if r.alive] == [new_run]
        await session.stop()
    finally:
        await session.close()


async def test_a_misspelt_profile_is_refused_before_the_host_is_touched(tmp_path: Path) -> None:
    """One lookup for single-host and multi-node launch (launch.config.profile_named): the
    refusal names the known profiles and the closest one."""
    from specmon.launch.config import load_config
    from specmon.session import SessionOptions, open_session

    config = load_config(REPO_ROOT / "specmon.toml")
    session = open_session("local", config, options=SessionOptions(state_dir=str(tmp_path)))
    with pytest.raises(UsageError) as refused:
        await session.launch("dmeo")
    message = str(refused.value)
    assert message.startswith("unknown profile 'dmeo'; did you mean 'demo'?; known: ")
    assert "kimi-eagle3" in message
    assert not any(tmp_path.iterdir())  # nothing was written on the host

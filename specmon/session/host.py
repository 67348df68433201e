"""HostSession: one connected GPU host, as the console, `watch`, `sweep` and tests see it.

It owns the transport and the remote supervisor (the uploaded helper), reattaches to a live
run on connect, follows the run's log by byte offset (so a dropped connection loses and repeats
nothing), polls HTTP, runs the GPU agent, and publishes everything as typed events on one bus.
Every remote call has a timeout; reconnection backs off exponentially with a cap.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import getpass
import hashlib
import json
import os
import shlex
import socket
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from specmon.controller import HostController
from specmon.errors import SpecmonError, UsageError
from specmon.events import (
    AgentStatus,
    ConnectionState,
    Event,
    LogLine,
    Ready,
    RunInfo,
    RunState,
    ServerError,
    ServerFailed,
    StopProgress,
)
from specmon.secrets import redact_env, shown_spec
from specmon.session.agent_runner import GpuAgentRunner
from specmon.session.http import HttpPoller
from specmon.session.state_dir import checked_state_dir
from specmon.session.transport import ConnectionLost, HostKeyError, Transport, TransportError
from specmon.store import EventBus, StateStore

HELPER_NAME = "specmon_helper.py"
HELPER_SOURCE = Path(__file__).with_name("remote_helper.py")
DEFAULT_PORT = 30000
MAX_PARTIAL_LINE = 1 << 20  # a "line" longer than this is emitted in pieces

GpuAgentKind = Literal["nvml", "sim", "none"]


class RemoteCallError(SpecmonError):
    """The helper on the host failed or answered nonsense."""


class LockBusyError(SpecmonError):
    """Another console holds the host's launch/stop lock."""


class RunConflictError(SpecmonError):
    """A live run appeared that this console neither launched nor reattached."""


@dataclass(frozen=True, slots=True)
class SessionOptions:
    """Knobs of a host session; every timeout and retry bound lives here."""

    state_dir: str = "~/.local/state/specmon"
    python: str = "python3"
    gpu_agent: GpuAgentKind = "nvml"
    gpu_rate_hz: float = 4.0
    health_interval_s: float = 2.0  # SGLang's /health runs a 1-token generation: keep it calm
    http_timeout_s: float = 5.0
    call_timeout_s: float = 20.0
    stop_grace_s: float = 30.0
    kill_wait_s: float = 10.0
    hang_after_s: float = 300.0  # CUDA-graph capture can be quiet for minutes
    gpu_idle_mb: float = 2048.0
    gpu_release_timeout_s: float = 60.0
    reconnect_max_attempts: int = 100
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    follow_interval_s: float = 0.05
    replay_log_bytes: int = 16 << 20
    agent_max_failures: int = 5
    owner: str = field(
        default_factory=lambda: f"{getpass.getuser()}@{socket.gethostname()} pid {os.getpid()}"
    )


@dataclass(frozen=True, slots=True)
class RunStatus:
    """One run on the host, as the supervisor recorded it."""

    run_id: str
    profile: str | None
    argv: tuple[str, ...]
    env: dict[str, str]
    pid: int | None
    pgid: int | None
    started_at: float | None
    alive: bool
    port: int | None
    exit_code: int | None = None
    exit_signal: int | None = None
    ended_at: float | None = None
    ready_at: float | None = None
    log_size: int = 0
    owner: str | None = None
    run_dir: str | None = None
    group_left: int = 0  # live processes of the group once the leader has exited

    @property
    def load_seconds(self) -> float | None:
        if self.ready_at is None or self.started_at is None:
            return None
        return self.ready_at - self.started_at

    @property
    def state(self) -> str:
        if self.alive and self.group_left:
            if self.exit_signal is not None:
                ended = f"killed by signal {self.exit_signal}"
            else:
                ended = "gone" if self.exit_code is None else f"exited {self.exit_code}"
            return f"leader {ended}, {self.group_left} processes of its group still alive"
        if self.alive:
            return "ready" if self.ready_at is not None else "running"
        if self.exit_signal is not None:
            return f"killed by signal {self.exit_signal}"
        if self.exit_code is not None:
            return f"exited {self.exit_code}"
        return "gone"

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "profile": self.profile,
            "state": self.state,
            "alive": self.alive,
            "argv": list(self.argv),
            "env": self.env,
            "pid": self.pid,
            "pgid": self.pgid,
            "port": self.port,
            "started_at": self.started_at,
            "ready_at": self.ready_at,
            "load_seconds": self.load_seconds,
            "ended_at": self.ended_at,
            "exit_code": self.exit_code,
            "exit_signal": self.exit_signal,
            "owner": self.owner,
            "run_dir": self.run_dir,
            "group_left": self.group_left,
        }

    @classmethod
    def from_helper(cls, data: Mapping[str, Any]) -> RunStatus:
        exit_info = data.get("exit") or {}
        notes = data.get("annotations") or {}
        return cls(
            run_id=str(data["run_id"]),
            profile=data.get("profile"),
            argv=tuple(data.get("argv") or ()),
            env=redact_env(data.get("env") or {}),
            pid=data.get("pid"),
            pgid=data.get("pgid"),
            started_at=data.get("started_at"),
            alive=bool(data.get("alive")),
            port=data.get("port"),
            exit_code=exit_info.get("code"),
            exit_signal=exit_info.get("signal"),
            ended_at=exit_info.get("ended_at"),
            ready_at=notes.get("ready_at"),
            log_size=int(data.get("log_size") or 0),
            owner=(data.get("meta") or {}).get("owner"),
            run_dir=data.get("run_dir"),
            group_left=int(data.get("group_left") or 0),
        )


@dataclass(frozen=True, slots=True)
class StopReport:
    run_id: str
    steps: tuple[tuple[str, float, str | None], ...]


@dataclass(slots=True)
class _Follow:
    """Where the log tail of the current run stands; survives reconnects."""

    run: RunStatus
    log_offset: int = 0
    probe_offset: int = 0
    line_start: int = 0
    partial: bytearray = field(default_factory=bytearray)
    probe_partial: bytearray = field(default_factory=bytearray)
    parser: Any = None
    errors: deque[ServerError] = field(default_factory=lambda: deque(maxlen=20))
    ended: bool = False
    failed_reported: bool = False
    last_output: float = field(default_factory=time.monotonic)
    skip_to_newline: bool = False
    ready_known: bool = False
    replay_end: int = 0  # on reattach: the log bytes that were written before we came


def _backoff(attempt: int, initial: float, cap: float) -> float:
    return min(cap, initial * (2 ** max(0, attempt - 1)))


class HostSession(HostController):
    """A connected host: launch/stop/status, and the event stream of its server."""

    def __init__(
        self,
        transport: Transport,
        *,
        profiles: Mapping[str, Any] | None = None,
        options: SessionOptions | None = None,
        bus: EventBus | None = None,
        stop_server_on_close: bool = False,
        autolaunch: str | None = None,
    ) -> None:
        self.transport = transport
        self.autolaunch = autolaunch  # a profile launched on start when no run is live (demo)
        self.autolaunch_flags: dict[str, str] = {}
        self.host_label = transport.label
        self.options = options or SessionOptions()
        self.bus = bus if bus is not None else EventBus(StateStore())
        self.stop_server_on_close = stop_server_on_close
        self._profiles: dict[str, Any] = dict(profiles or {})
        self._helper: list[str] = []
        self._state_dir: str = self.options.state_dir
        self._follow: _Follow | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._supervisor: asyncio.Task[None] | None = None
        self._closing = False
        self._started = False
        self._stopping_run: str | None = None
        self._op_lock = asyncio.Lock()
        self._connected_at = 0.0
        self._load_times: dict[str, float] = {}  # profile -> start-to-ready of its last load
        self._background: set[asyncio.Task[None]] = set()  # e.g. ready-time annotations
        self._agent_kind: GpuAgentKind = self.options.gpu_agent
        self.agent = GpuAgentRunner(self)
        self.http = HttpPoller(self)
        # How the operator runs `specmon stop` for this host (set by the CLI from its own
        # arguments), so refusals print advice that works; "" builds one from the label.
        self.stop_command = ""

    # --- HostController ------------------------------------------------------------------

    def profiles(self) -> list[str]:
        return sorted(self._profiles)

    def add_profile(self, name: str, profile: Any) -> None:
        """Offer ``profile`` under ``name`` from now on (replacing one of that name): a profile
        saved from the console's relaunch form is launchable without restarting specmon."""
        self._profiles[name] = profile

    async def start(self, *, streams: bool = True) -> None:
        """Connect and install the helper; with ``streams`` (the default) also reattach a live
        run and start the log tail, HTTP polling, the GPU agent and reconnection. Without,
        the session answers ``status()`` only (quick headless queries)."""
        if self._started:
            return
        self._started = True
        self._publish(ConnectionState(host=self.host_label, state="connecting"))
        try:
            await self.transport.connect()
            if not streams:
                await self._install_helper()
                self._publish(ConnectionState(host=self.host_label, state="connected"))
                return
            await self._on_connected(first=True)
        except BaseException:
            self._started = False
            await self._cancel_tasks()
            await self.transport.close()
            self._publish(ConnectionState(host=self.host_label, state="disconnected"))
            raise
        self._publish(ConnectionState(host=self.host_label, state="connected"))
        self._supervisor = asyncio.get_running_loop().create_task(self._supervise())
        if self.autolaunch and self._follow is None:
            await self.launch(self.autolaunch, flags=self.autolaunch_flags)

    async def close(self) -> None:
        if self._closing:
            return
        if self.stop_server_on_close and self.transport.connected:
            with contextlib.suppress(SpecmonError, asyncio.TimeoutError):
                await asyncio.wait_for(self.stop(), self.options.stop_grace_s + 30)
        if self._background:  # let the ready-time note reach the host (later ETAs use it)
            await asyncio.wait(list(self._background), timeout=self.options.call_timeout_s)
        self._closing = True
        await self._cancel_tasks()
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._supervisor
        await self.transport.close()
        self._publish(ConnectionState(host=self.host_label, state="closed"))

    async def launch(
        self,
        profile: str,
        *,
        flags: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> str:
        try:
            chosen = self._profiles[profile]
        except KeyError:
            known = ", ".join(self.profiles()) or "none"
            raise UsageError(f"unknown profile {profile!r}; known: {known}") from None
        python = sys.executable if self.transport.is_local else self.options.python
        spec = chosen.to_launch_spec(flags=flags, env=env, python=python)
        return await self.launch_spec(spec, profile=profile)

    async def launch_spec(self, spec: Any, *, profile: str | None = None) -> str:
        """Launch a ready-made LaunchSpec (validated here), replacing this console's run."""
        spec.validate()
        chosen = self._profiles.get(profile) if profile else None
        async with self._op_lock, self._host_lock("launch"):
            runs = await self.status()
            await self._stop_live_runs(runs)
            result = await self._helper_launch(spec, profile, chosen)
        kind = getattr(chosen, "gpu_agent", None)
        if kind in ("nvml", "sim", "none") and kind != self._agent_kind:
            self._agent_kind = kind
            self._restart_task("agent", self.agent.run)
        return result

    async def stop(self) -> StopReport | None:
        async with self._op_lock, self._host_lock("stop"):
            runs = await self.status()
            live = [r for r in runs if r.alive]
            self._check_ownership(live)
            report = None
            for run in live:
                report = await self._stop_run(run)
            return report

    async def stop_run(self, run_id: str) -> StopReport | None:
        """Stop one run of this state dir by id, whoever launched it (``stop --run-id``);
        None when it is not running, UsageError when there is no such run."""
        async with self._op_lock, self._host_lock("stop"):
            for run in await self.status():
                if run.run_id == run_id:
                    return await self._stop_run(run) if run.alive else None
        raise UsageError(f"no run {run_id!r} on {self.host_label} (see specmon status)")

    async def stop_all_runs(self) -> list[StopReport]:
        """Stop every live run in this state dir, whoever launched it: the demo's clean-up of
        its private state dir, and ``stop --all`` when the operator asks for it."""
        async with self._op_lock, self._host_lock("stop"):
            return [await self._stop_run(r) for r in await self.status() if r.alive]

    # --- status ----------------------------------------------------------------------------

    async def status(self) -> list[RunStatus]:
        reply = await self._call(["status"])
        return [RunStatus.from_helper(r) for r in reply.get("runs", [])]

    async def wait_for(self, predicate: Callable[[StateStore], bool], timeout: float) -> StateStore:
        """Wait until ``predicate(store)`` holds (checked after each event); TimeoutError else."""
        store = self.bus.store
        if predicate(store):
            return store
        queue = self.bus.subscribe()

        async def until_true() -> None:
            while not predicate(store):
                await queue.get()

        try:
            await asyncio.wait_for(until_true(), timeout)
        finally:
            self.bus.unsubscribe(queue)
        return store

    async def http_base_url(self) -> str | None:
        """The current run's HTTP base URL as reachable from here (through the SSH forward the
        poller holds, or plain localhost); None when no run is followed."""
        follow = self._follow
        if follow is None:
            return None
        if self.http.base_url and self.http.run_id == follow.run.run_id:
            return self.http.base_url
        port = await self.transport.forward_port(follow.run.port or DEFAULT_PORT)
        return f"http://127.0.0.1:{port}"

    @property
    def current_run(self) -> RunStatus | None:
        return self._follow.run if self._follow else None

    @property
    def state_dir(self) -> str:
        return self._state_dir

    # --- connection ------------------------------------------------------------------------

    async def _supervise(self) -> None:
        """Watch the connection; on a drop, reconnect with capped backoff and resume."""
        opts = self.options
        while not self._closing:
            await self.transport.wait_closed()
            if self._closing:
                return
            await self._cancel_tasks()
            attempt = 0
            while not self._closing:
                attempt += 1
                if attempt > opts.reconnect_max_attempts:
                    self._publish(
                        ConnectionState(
                            host=self.host_label,
                            state="disconnected",
                            attempt=attempt - 1,
                            detail="gave up reconnecting",
                        )
                    )
                    return
                delay = _backoff(attempt, opts.backoff_initial_s, opts.backoff_max_s)
                self._publish(
                    ConnectionState(
                        host=self.host_label,
                        state="reconnecting",
                        attempt=attempt,
                        detail=f"next try in {delay:.1f}s",
                    )
                )
                await asyncio.sleep(delay)
                try:
                    await self.transport.close()
                    await self.transport.connect()
                    await self._on_connected(first=False)
                except (TransportError, RemoteCallError, OSError) as exc:
                    await self._cancel_tasks()
                    if isinstance(exc, HostKeyError):  # retrying cannot help; it may be an attack
                        self._publish(
                            ConnectionState(
                                host=self.host_label,
                                state="disconnected",
                                attempt=attempt,
                                detail=str(exc),
                            )
                        )
                        return
                    self._publish(
                        ConnectionState(
                            host=self.host_label,
                            state="reconnecting",
                            attempt=attempt,
                            detail=str(exc),
                        )
                    )
                    continue
                self._publish(
                    ConnectionState(host=self.host_label, state="connected", attempt=attempt)
                )
                break

    async def _on_connected(self, *, first: bool) -> None:
        self._connected_at = time.monotonic()  # silence while we were away proves nothing
        runs = await self._install_helper()
        self._remember_load_times(runs)
        follow = self._follow
        if follow is not None:
            known = {r.run_id: r for r in runs}
            if follow.run.run_id in known:
                follow.run = known[follow.run.run_id]
            self._start_follow()
        else:
            live = [r for r in runs if r.alive]
            if live:
                self._attach(live[-1], reattached=True)
        if first and self._follow is not None and self._follow.run.profile in self._profiles:
            kind = getattr(self._profiles[self._follow.run.profile], "gpu_agent", None)
            if kind in ("nvml", "sim", "none"):
                self._agent_kind = kind
        self._restart_task("agent", self.agent.run)
        self._restart_task("http", self.http.run)
        self._restart_task("watchdog", self._watchdog)

    async def _install_helper(self) -> list[RunStatus]:
        """Make sure the host runs this exact helper (uploading it only when it differs) and
        return the runs, all in one round trip when the helper is already there."""
        source = HELPER_SOURCE.read_bytes()
        digest = hashlib.sha256(source).hexdigest()
        base = checked_state_dir(self.options.state_dir)
        remote = f"{base}/bin/{HELPER_NAME}"
        python = self.transport.python_argv(self.options.python)
        self._helper = [*python, remote]
        reply: dict[str, Any] | None = None
        with contextlib.suppress(RemoteCallError):
            reply = await self._call(["hello", "--with-status"], state_dir=base)
        if reply is None or reply.get("sha256") != digest:
            await self.transport.write_file(remote, source, timeout=self.options.call_timeout_s)
            reply = await self._call(["hello", "--with-status"], state_dir=base)
            if reply.get("sha256") != digest:
                raise RemoteCallError(
                    f"the helper on {self.host_label} does not match what was sent "
                    f"(sha256 {reply.get('sha256')} != {digest})"
                )
        self._state_dir = str(reply["state_dir"])
        self._helper = [*python, f"{self._state_dir}/bin/{HELPER_NAME}"]
        return [RunStatus.from_helper(r) for r in reply.get("runs", [])]

    # --- remote calls ------------------------------------------------------------------------

    async def _call(
        self,
        args: Sequence[str],
        *,
        input: bytes | None = None,
        timeout: float | None = None,
        state_dir: str | None = None,
    ) -> dict[str, Any]:
        argv = [
            *self._helper,
            args[0],
            "--state-dir",
            state_dir or self._state_dir,
            *args[1:],
        ]
        result = await self.transport.run(
            argv, input=input, timeout=timeout or self.options.call_timeout_s
        )
        lines = [ln for ln in result.stdout.decode(errors="replace").splitlines() if ln.strip()]
        try:
            reply = json.loads(lines[-1]) if lines else None
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            err = result.stderr.decode(errors="replace").strip().splitlines()
            raise RemoteCallError(
                f"helper {args[0]} on {self.host_label} failed (exit {result.returncode}): "
                f"{err[-1] if err else 'no output'}"
            )
        if reply.get("ok") is False and "error" in reply:
            raise RemoteCallError(f"{self.host_label}: {reply['error']}")
        return reply

    @contextlib.asynccontextmanager
    async def _host_lock(self, action: str) -> AsyncIterator[None]:
        """The host-wide lock, held by a helper process for the length of the action."""
        proc = await self.transport.start(
            [
                *self._helper,
                "hold-lock",
                "--state-dir",
                self._state_dir,
                "--owner",
                f"{self.options.owner} ({action})",
            ]
        )
        try:
            line = await asyncio.wait_for(proc.readline(), self.options.call_timeout_s)
        except asyncio.TimeoutError:
            await proc.kill()
            raise RemoteCallError(f"{self.host_label}: the lock helper did not answer") from None
        except BaseException:
            # A launch cancelled while waiting for the lock must not leave its holder alive,
            # or every later launch from any console is refused as "busy".
            await asyncio.shield(proc.kill())
            raise
        try:
            reply = json.loads(line) if line else {}
        except ValueError:
            reply = {}
        if not reply.get("ok"):
            await proc.kill()
            if "owner" in reply:
                since = reply.get("since")
                when = (
                    time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since))
                    if isinstance(since, (int, float))
                    else "an unknown time"
                )
                raise LockBusyError(
                    f"{self.host_label} is busy: {reply.get('owner') or 'another console'} "
                    f"holds its launch/stop lock since {when}; try again when it is done"
                )
            why = reply.get("error") or "the lock helper gave no answer"
            raise RemoteCallError(f"{self.host_label}: could not take the host lock: {why}")
        try:
            yield
        finally:
            await proc.close_stdin()
            if await proc.wait(5.0) is None:
                await proc.kill()

    # --- launch and stop ---------------------------------------------------------------------

    def _check_ownership(self, live: list[RunStatus]) -> None:
        mine = self._follow.run.run_id if self._follow else None
        for run in live:
            if run.run_id != mine:
                started = (
                    time.strftime("%H:%M:%S UTC", time.gmtime(run.started_at))
                    if run.started_at
                    else "?"
                )
                stop = self.stop_command or (
                    f"specmon stop {shlex.quote(self.host_label)} "
                    f"--state-dir {shlex.quote(self._state_dir)}"
                )
                raise RunConflictError(
                    f"run {run.run_id} on {self.host_label} (started {started}"
                    f"{' by ' + run.owner if run.owner else ''}) is live but is not the run "
                    "this console is attached to (another console launched it). Stop it "
                    f"with: {stop} --run-id {run.run_id}  (or every live run: {stop} --all)"
                )

    async def _stop_live_runs(self, runs: list[RunStatus]) -> None:
        live = [r for r in runs if r.alive]
        self._check_ownership(live)
        for run in live:
            await self._stop_run(run)

    async def _stop_run(self, run: RunStatus) -> StopReport:
        opts = self.options
        self._stopping_run = run.run_id
        self._publish(RunState(run_id=run.run_id, state="stopping"))
        steps: list[tuple[str, float, str | None]] = []
        proc = await self.transport.start(
            [
                *self._helper,
                "stop",
                "--state-dir",
                self._state_dir,
                "--run-id",
                run.run_id,
                "--grace",
                str(self._grace_for(run)),
                "--kill-wait",
                str(opts.kill_wait_s),
            ]
        )
        final: dict[str, Any] = {}
        deadline = time.monotonic() + self._grace_for(run) + opts.kill_wait_s + opts.call_timeout_s
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RemoteCallError(f"{self.host_label}: stop of {run.run_id} timed out")
                try:
                    line = await asyncio.wait_for(proc.readline(), left)
                except asyncio.TimeoutError:
                    continue
                if not line:
                    break
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if "step" in msg:
                    step = (str(msg["step"]), float(msg.get("seconds") or 0.0), msg.get("detail"))
                    steps.append(step)
                    self._publish(
                        StopProgress(
                            run_id=run.run_id, step=step[0], seconds=step[1], detail=step[2]
                        )
                    )
                elif "ok" in msg:
                    final = msg
        finally:
            await proc.kill()
        if not final.get("ok"):
            detail = final.get("error") or f"processes left: {final.get('left')}"
            raise RemoteCallError(f"{self.host_label}: stopping {run.run_id} failed: {detail}")
        gone_at = time.time()
        released, detail = await self.agent.wait_gpu_released(gone_at)
        seconds = round(time.time() - gone_at, 3)
        steps.append(("gpu_released", seconds, detail))
        self._publish(
            StopProgress(run_id=run.run_id, step="gpu_released", seconds=seconds, detail=detail)
        )
        if self._follow is not None and self._follow.run.run_id == run.run_id:
            await self._drain_follow()
            self._follow.ended = True
        self._publish(RunState(run_id=run.run_id, state="stopped", detail="stopped by specmon"))
        if not released:
            raise RemoteCallError(
                f"{self.host_label}: the server's processes are gone but GPU memory was not "
                f"released within {self.options.gpu_release_timeout_s:.0f}s ({detail}); "
                "not relaunching"
            )
        return StopReport(run.run_id, tuple(steps))

    def _grace_for(self, run: RunStatus) -> float:
        """The profile's stop grace if it has one, else the session's."""
        return self._grace_for_profile(run.profile)

    def _grace_for_profile(self, name: str | None) -> float:
        profile = self._profiles.get(name) if name else None
        grace = getattr(profile, "stop_grace_s", None)
        return float(grace) if isinstance(grace, (int, float)) else self.options.stop_grace_s

    async def _drain_follow(self, timeout: float = 10.0) -> None:
        """Let the log tail read the stopped run's last bytes and its exit, then end it."""
        task = self._tasks.get("follow")
        if task is not None and not task.done():
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), timeout)
        self._cancel_task("follow")

    async def _helper_launch(self, spec: Any, profile: str | None, chosen: Any) -> str:
        argv = list(spec.argv)
        if self.transport.is_local and argv and argv[0] in ("python3", "python"):
            argv[0] = sys.executable  # the demo's simulator runs in specmon's own interpreter
        port = _port_of(spec, chosen)
        payload: dict[str, Any] = {
            "argv": argv,
            "env": spec.env_dict(),
            "record_env": redact_env(spec.env),  # what run.json keeps: secrets as ***
            "profile": profile,
            "port": port,
            "meta": {
                "owner": self.options.owner,
                "backend": spec.backend,
                "spec": shown_spec(spec).to_json(),
            },
            "run_env": {"SPECMON_PROBE_FILE": "{run_dir}/probe.jsonl"},
            "extra_env": {},
            "prepend_path": {},
            "files": {},
        }
        if self.stop_server_on_close and self.transport.is_local:
            # The demo's server must not outlive this process, even if it is killed.
            payload["tether"] = {
                "pid": os.getpid(),
                "ticks": _start_ticks(os.getpid()),
                "grace": self._grace_for_profile(profile),
            }
        if self._agent_kind_for(chosen) == "sim":
            payload["extra_env"]["SPECMON_SIM_GPU_STATE"] = self.sim_gpu_state_path
        if getattr(chosen, "probe", False):
            files = _probe_files()
            if files:
                payload["files"] = {
                    f"probe/{name}": base64.b64encode(data).decode() for name, data in files.items()
                }
                payload["prepend_path"]["PYTHONPATH"] = "{run_dir}/probe"
        reply = await self._call(["launch"], input=json.dumps(payload).encode())
        run = RunStatus.from_helper({**reply, "alive": True})
        self._attach(run, reattached=False)
        return run.run_id

    def _agent_kind_for(self, chosen: Any) -> GpuAgentKind:
        kind = getattr(chosen, "gpu_agent", None)
        return kind if kind in ("nvml", "sim", "none") else self._agent_kind

    @property
    def sim_gpu_state_path(self) -> str:
        return f"{self._state_dir}/sim-gpus.json"

    @property
    def agent_kind(self) -> GpuAgentKind:
        return self._agent_kind

    # --- following a run ---------------------------------------------------------------------

    def _attach(self, run: RunStatus, *, reattached: bool) -> None:
        from specmon.backends import get_backend

        self._cancel_task("follow")
        follow = _Follow(run=run, parser=get_backend("sglang").new_log_parser())
        follow.ready_known = run.ready_at is not None
        if reattached:
            follow.replay_end = run.log_size
        if reattached and run.log_size > self.options.replay_log_bytes:
            follow.log_offset = run.log_size - self.options.replay_log_bytes
            follow.line_start = follow.log_offset
            follow.skip_to_newline = True
        self._follow = follow
        self._stopping_run = None
        self._publish(
            RunInfo(
                run_id=run.run_id,
                profile=run.profile,
                argv=run.argv,
                env=tuple(sorted(run.env.items())),
                pid=run.pid,
                pgid=run.pgid,
                started_at=run.started_at,
                reattached=reattached,
            )
        )
        if reattached:
            self._publish(RunState(run_id=run.run_id, state="ready" if run.ready_at else "loading"))
        self._start_follow()
        self._restart_task("http", self.http.run)

    def _start_follow(self) -> None:
        follow = self._follow
        if follow is None or follow.ended:
            return
        self._restart_task("follow", lambda: self._follow_loop(follow))

    async def _follow_loop(self, follow: _Follow) -> None:
        proc = await self.transport.start(
            [
                *self._helper,
                "follow",
                "--state-dir",
                self._state_dir,
                "--run-id",
                follow.run.run_id,
                "--log-offset",
                str(follow.log_offset),
                "--probe-offset",
                str(follow.probe_offset),
                "--interval",
                str(self.options.follow_interval_s),
            ]
        )
        try:
            while True:
                line = await proc.readline()
                if not line:
                    return  # the connection dropped: the supervisor resumes from our offsets
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                kind = msg.get("t")
                if kind == "log":
                    self._on_log_chunk(follow, int(msg["o"]), base64.b64decode(msg["b"]))
                elif kind == "probe":
                    self._on_probe_chunk(follow, int(msg["o"]), base64.b64decode(msg["b"]))
                elif kind == "exit":
                    self._on_exit(follow, msg.get("exit") or {})
                    return
        finally:
            await proc.kill()

    def _on_log_chunk(self, follow: _Follow, offset: int, data: bytes) -> None:
        if offset > follow.log_offset:
            raise RemoteCallError(f"log gap at byte {follow.log_offset} (got {offset})")
        if offset < follow.log_offset:
            data = data[follow.log_offset - offset :]  # already seen before a reconnect
        if not data:
            return
        now = time.time()
        follow.log_offset += len(data)
        follow.last_output = time.monotonic()
        if follow.skip_to_newline:
            cut = data.find(b"\n")
            if cut < 0:
                follow.line_start += len(data)
                return
            follow.line_start += cut + 1
            data = data[cut + 1 :]
            follow.skip_to_newline = False
        buf = follow.partial
        buf.extend(data)
        start = 0
        while True:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            text = bytes(buf[start:end]).decode(errors="replace")
            self._publish(LogLine(text=text, offset=follow.line_start), now)
            follow.line_start += end + 1 - start
            start = end + 1
        del buf[:start]
        if len(buf) > MAX_PARTIAL_LINE:
            self._publish(
                LogLine(text=bytes(buf).decode(errors="replace"), offset=follow.line_start), now
            )
            follow.line_start += len(buf)
            buf.clear()
        for event in follow.parser.feed(data):
            self._on_server_event(follow, event, now)
        if follow.replay_end and follow.log_offset >= follow.replay_end:
            follow.replay_end = 0
            self._fix_replayed_times(follow.run)

    def _fix_replayed_times(self, run: RunStatus) -> None:
        """A replayed log arrives all at once: put the real start (and ready) times back, so
        elapsed time and the ETA are right after a reattach."""
        loading = self.bus.store.loading
        if loading.started_at is not None and run.started_at is not None:
            loading.started_at = run.started_at
        if loading.ready_at is not None and run.ready_at is not None:
            loading.ready_at = run.ready_at

    def _on_server_event(self, follow: _Follow, event: Event, now: float) -> None:
        if isinstance(event, ServerError):
            follow.errors.append(event)
        self._publish(event, now)
        if isinstance(event, Ready) and not follow.ready_known:
            follow.ready_known = True
            if follow.replay_end:
                return  # replayed on reattach: when it became ready is not known here
            started = follow.run.started_at
            notes = {"ready_at": now, "load_seconds": now - started if started else None}
            if started and follow.run.profile:
                self._load_times[follow.run.profile] = now - started
            follow.run = replace(follow.run, ready_at=now)
            task = asyncio.get_running_loop().create_task(self._annotate(follow.run.run_id, notes))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _annotate(self, run_id: str, notes: dict[str, Any]) -> None:
        with contextlib.suppress(SpecmonError):
            await self._call(["annotate", "--run-id", run_id, "--json", json.dumps(notes)])

    def _on_probe_chunk(self, follow: _Follow, offset: int, data: bytes) -> None:
        from specmon.probe.records import ProbeWarning, parse_probe_line

        if offset < follow.probe_offset:
            data = data[follow.probe_offset - offset :]
        follow.probe_offset += len(data)
        buf = follow.probe_partial
        buf.extend(data)
        *complete, rest = bytes(buf).split(b"\n")
        buf[:] = rest[-MAX_PARTIAL_LINE:]
        now = time.time()
        for raw in complete:
            record = parse_probe_line(raw.decode(errors="replace"))
            if record is None or isinstance(record, ProbeWarning):
                continue
            self._publish(record, now)

    def _on_exit(self, follow: _Follow, info: Mapping[str, Any]) -> None:
        now = time.time()
        for event in follow.parser.flush():
            self._on_server_event(follow, event, now)
        if follow.partial:
            self._publish(
                LogLine(
                    text=bytes(follow.partial).decode(errors="replace"), offset=follow.line_start
                ),
                now,
            )
            follow.line_start += len(follow.partial)
            follow.partial.clear()
        follow.ended = True
        code, sig = info.get("code"), info.get("signal")
        run_id = follow.run.run_id
        follow.run = replace(follow.run, alive=False, exit_code=code, exit_signal=sig)
        if self._stopping_run == run_id:
            self._publish(RunState(run_id=run_id, state="stopped", detail=_exit_text(code, sig)))
            return
        if code == 0 and not follow.errors:
            self._publish(RunState(run_id=run_id, state="stopped", detail="exited 0"))
            return
        self._report_failure(follow, exit_code=code, signal=sig)

    def _report_failure(
        self,
        follow: _Follow,
        *,
        exit_code: int | None = None,
        signal: int | None = None,
        hung: bool = False,
        reason: str | None = None,
    ) -> None:
        errors = list(follow.errors)
        category = errors[0].category if errors else "other"
        root = tuple(e.message for e in errors)
        if not root:
            root = (reason or f"the server {_exit_text(exit_code, signal)} with no error line",)
        elif reason:
            root = (*root, reason)
        follow.failed_reported = True
        self._publish(
            ServerFailed(
                run_id=follow.run.run_id,
                category=category,
                exit_code=exit_code,
                signal=signal,
                root_cause=root,
                command=" ".join(follow.run.argv) or None,
                hung=hung,
                last_phase=self.bus.store.loading.phase,
            )
        )

    async def _watchdog(self) -> None:
        """Hung: a live run that neither logs nor answers HTTP for ``hang_after_s``."""
        limit = self.options.hang_after_s
        while True:
            await asyncio.sleep(min(1.0, limit / 4))
            follow = self._follow
            if follow is None or follow.ended or follow.failed_reported:
                continue
            if self._stopping_run == follow.run.run_id:
                continue
            now = time.monotonic()
            quiet = now - max(follow.last_output, self._connected_at)
            no_http = now - max(self.http.last_answer(follow.run.run_id), self._connected_at)
            if quiet >= limit and no_http >= limit:
                phase = self.bus.store.loading.phase or "start-up"
                state = "loading" if self.bus.store.run_state == "loading" else "serving"
                self._report_failure(
                    follow,
                    hung=True,
                    reason=f"no log output and no HTTP answer for {quiet:.0f}s while {state} "
                    f"(last phase: {phase})",
                )

    # --- plumbing -----------------------------------------------------------------------------

    def _remember_load_times(self, runs: list[RunStatus]) -> None:
        self._load_times.update(
            {r.profile: r.load_seconds for r in runs if r.profile and r.load_seconds is not None}
        )
        follow_profile = self._follow.run.profile if self._follow else None
        latest = self._load_times.get(follow_profile) if follow_profile else None
        if latest is not None and self.bus.store.loading.previous_load_seconds is None:
            self.bus.store.loading.previous_load_seconds = latest

    def previous_load_seconds(self, profile: str | None) -> float | None:
        return self._load_times.get(profile) if profile else None

    def _publish(self, event: Event, at: float | None = None) -> None:
        if isinstance(event, RunInfo) and not event.reattached:
            previous = self.previous_load_seconds(event.profile)
            if previous is not None:
                self.bus.store.loading.previous_load_seconds = previous
        self.bus.publish(event, at)

    def publish(self, event: Event, at: float | None = None) -> None:
        """For the session's parts (agent runner, HTTP poller)."""
        self._publish(event, at)

    def _restart_task(self, name: str, factory: Callable[[], Any]) -> None:
        self._cancel_task(name)
        if self._closing:
            return
        self._tasks[name] = asyncio.get_running_loop().create_task(
            self._guard(name, factory), name=f"specmon-{name}"
        )

    async def _guard(self, name: str, factory: Callable[[], Any]) -> None:
        try:
            await factory()
        except asyncio.CancelledError:
            raise
        except (ConnectionLost, TransportError):
            pass  # the supervisor notices the drop and restarts every stream
        except SpecmonError as exc:
            if name == "agent":
                self._publish(AgentStatus(state="error", detail=str(exc)))
            else:
                self._publish(ServerError(category="other", message=f"specmon {name}: {exc}"))

    def _cancel_task(self, name: str) -> None:
        task = self._tasks.pop(name, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _cancel_tasks(self) -> None:
        tasks = [t for t in self._tasks.values() if t is not asyncio.current_task()]
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 10.0)


def _port_of(spec: Any, chosen: Any) -> int:
    value = spec.flag("port") if hasattr(spec, "flag") else None
    if value is None:
        value = getattr(chosen, "port", None)
    try:
        return int(value) if value is not None else DEFAULT_PORT
    except ValueError:
        return DEFAULT_PORT


def _start_ticks(pid: int) -> int | None:
    """This machine's /proc start time of ``pid`` (what the helper compares against)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2 :].split()[19])


def _probe_files() -> dict[str, bytes]:
    try:
        from specmon.probe import injection_files  # type: ignore[attr-defined]
    except ImportError:
        return {}
    return dict(injection_files())


def _exit_text(code: int | None, sig: int | None) -> str:
    if sig is not None:
        return f"was killed by signal {sig}"
    if code is not None:
        return f"exited with code {code}"
    return "ended (exit status unknown)"

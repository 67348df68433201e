"""HostSession: one connected GPU host, as the console, `watch`, `sweep` and tests see it.

It owns the transport and the remote helper's client (helper_client.py), reattaches to a live
run on connect, follows the run's log by byte offset (log_follower.py: a dropped connection
loses and repeats nothing), polls HTTP, runs the GPU agent, tells failures and hangs
(failure.py), and publishes everything as typed events on one bus; it never writes into the
store. Every remote call has a timeout; reconnection backs off exponentially with a cap.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import json
import secrets
import shlex
import sys
import time
import zlib
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from specmon.backends import get_backend
from specmon.backends.draft_info import (
    config_request,
    draft_info,
    launch_wiring_problems,
    run_fingerprint,
)
from specmon.launch.config import profile_named
from specmon.model.attach_target import parse_attach_target
from specmon.model.errors import (
    ConnectionLost,
    HostKeyError,
    LaunchSpecError,
    SpecmonError,
    TransportError,
    UsageError,
)
from specmon.model.events import (
    AcceptanceCollapse,
    AgentStatus,
    ConnectionState,
    DraftInfo,
    Event,
    LoadTimes,
    LogLine,
    Notice,
    Ready,
    RunInfo,
    RunState,
    ServerError,
    StopProgress,
)
from specmon.model.run_end import REQUESTED_ENDS, RunEnd, run_end
from specmon.model.secrets import redact_argv
from specmon.session.agent_runner import GpuAgentRunner
from specmon.session.collapse_watch import CollapseWatch
from specmon.session.failure import failure_event, hang_reason
from specmon.session.foreign import (
    check_take_over,
    follow_foreign_args,
    running_profile,
    stop_foreign,
    survey_host,
)
from specmon.session.helper_client import HelperClient, LockBusyError, RemoteCallError
from specmon.session.http import HttpPoller, PollTarget
from specmon.session.launch_request import launch_payload
from specmon.session.listener import ForeignListenerError, ListenerCheck
from specmon.session.log_follower import LogFollower
from specmon.session.options import GpuAgentKind, SessionOptions
from specmon.session.sweep_lease import SweepLease, hold_sweep_lease
from specmon.session.transport import Transport
from specmon.state.controller import HostController
from specmon.state.foreign import (
    ForeignServer,
    TakeOverPlan,
    choose_server,
    foreign_refusal,
    foreign_run_id,
    foreign_run_status,
    server_name,
    start_ticks_of,
)
from specmon.state.run_status import RunStatus, StopReport
from specmon.state.store import EventBus, StateStore

if TYPE_CHECKING:
    from specmon.launch.config import Profile
    from specmon.launch.spec import FlagValue, LaunchSpec

# Seconds without a decode line in the log after which a server's /metrics speaks for it
# (vLLM logs its stats every 10 s, and at DEBUG only while idle).
LOG_STATS_QUIET_S = 25.0
# After the port was found not the run's (the server still loading, or another process on
# it), how long before the health endpoint's next "ready" is looked into again.
LISTENER_RECHECK_S = 2.0

__all__ = [
    "HostSession",
    "LockBusyError",
    "RemoteCallError",
    "RunConflictError",
    "RunStatus",
    "SessionOptions",
    "StopReport",
]


class RunConflictError(SpecmonError):
    """A live run appeared that this console neither launched nor reattached."""


@dataclass(slots=True)
class _Follow:
    """The run this session follows: its record, its log follower, and what was reported."""

    run: RunStatus
    log: LogFollower
    ended: bool = False
    failed_reported: bool = False
    ready_known: bool = False
    # Who listens on the run's port, asked of the helper once the health endpoint first says
    # ready (and on reattach): a health answer alone may come from another server.
    listener_checking: bool = False
    listener_next_check: float = 0.0  # time.monotonic() before which no new check starts
    listener_warned: str | None = None  # the last problem published (said once)
    listener_confirmed: bool = False  # the port was found the run's own
    held_ready: tuple[Event, float] | None = None  # the log's ready line, until confirmed
    # A ready line was published without a load time (read in a replay before any client
    # noted when the run became ready): a ready time noted later gives it (_on_ready_noted).
    untimed_ready: bool = False
    listener_recheck: bool = False  # asked again while a question was in flight
    stop: Mapping[str, Any] | None = None  # another client's stop record, once it began
    end: RunEnd | None = None  # how it ended, once it did
    # Launched or reattached by this console: its to replace or stop. A run another client
    # launched while this console watched is followed, never replaced from here unasked.
    owned: bool = True
    # A server specmon did not launch (``--attach``): its log is followed by the helper's
    # follow-foreign, never stopped or relaunched; ``inode``: the log file being read.
    foreign: ForeignServer | None = None
    inode: int = 0
    foreign_ticks: int | None = None  # its start ticks, as the survey read them: a take-over's


async def _helper_messages(proc: Any) -> AsyncIterator[dict[str, Any]]:
    """The JSON messages of a helper's follow stream, one a line, until the stream ends (a
    dropped connection: the supervisor resumes from the offsets read); a line that is not a
    JSON object is skipped."""
    while True:
        line = await proc.readline()
        if not line:
            return
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if isinstance(msg, dict):
            yield msg


def _chunk_bytes(msg: Mapping[str, Any]) -> bytes:
    """A follow message's bytes: base64 ("b"), or zlib then base64 ("z", long chunks)."""
    if "z" in msg:
        return zlib.decompress(base64.b64decode(msg["z"]))
    return base64.b64decode(msg["b"])


def _log_source_text(server: ForeignServer) -> str:
    """Where a foreign server's log is read, for RunInfo.log_source: "file: PATH",
    "journal: UNIT", "docker: NAME" or "none: why"."""
    log = server.log
    if log.kind == "file":
        return f"file: {log.path}"
    if log.kind == "journal":
        return f"journal: {log.unit}"
    if log.kind == "docker":
        return f"docker: {log.container}"
    return f"none: {log.detail or 'not readable'}"


def _backoff(attempt: int, initial: float, cap: float) -> float:
    return min(cap, initial * (2 ** max(0, attempt - 1)))


class HostSession(HostController):
    """A connected host: launch/stop/status, and the event stream of its server."""

    def __init__(
        self,
        transport: Transport,
        *,
        profiles: Mapping[str, Profile] | None = None,
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
        self._profiles: dict[str, Profile] = dict(profiles or {})
        self.helper = HelperClient(
            transport,
            python=self.options.python,
            state_dir=self.options.state_dir,
            call_timeout_s=self.options.call_timeout_s,
        )
        self._follow: _Follow | None = None
        # This session's token in the runs it launches (two consoles of one process share
        # the owner's pid), and the runs it has seen: another client's new run is followed.
        self.client_token = secrets.token_hex(8)
        self._seen_runs: set[str] = set()
        # What this client is, in the stop records of the runs it stops ("specmon stop").
        self.command_name = "console"
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._supervisor: asyncio.Task[None] | None = None
        self._closing = False
        self._started = False
        self._stopping_run: str | None = None
        self._op_lock = asyncio.Lock()
        self._connected_at = 0.0
        self._load_times: dict[str, float] = {}  # profile -> start-to-ready of its last load
        self._background: set[asyncio.Task[None]] = set()  # e.g. ready-time annotations
        self._collapse = CollapseWatch(self, self.bus.store)  # docs/run-diff.md
        self._agent_kind: GpuAgentKind = self.options.gpu_agent
        self.agent = GpuAgentRunner(self)
        self.http = HttpPoller(
            self,
            interval_s=lambda: self.options.health_interval_s,
            timeout_s=self.options.http_timeout_s,
            log_stats_quiet=self._log_stats_quiet,
            latency_window_s=lambda: self.options.latency_window_s,
        )
        # How the operator runs `specmon stop` for this host (set by the CLI from its own
        # arguments), so refusals print advice that works; "" builds one from the label.
        self.stop_command = ""
        # False for a node of a multi-node server other than node 0: it serves no HTTP, so
        # it is not polled, and its silence once loaded is not a hang (node 0's HTTP tells).
        self.serves_http = True

    def _log_stats_quiet(self, own: Event | None) -> bool:
        """Whether the server's log has said nothing about decoding for a while (its stats
        lines are off, or at DEBUG while idle): the latest decode in the store is none, the
        poller's own (``own``), or older than LOG_STATS_QUIET_S."""
        store = self.bus.store
        last = store.last_decode
        if last is None or last is own or store.last_decode_at is None:
            return True
        return time.time() - store.last_decode_at > LOG_STATS_QUIET_S

    # --- HostController ------------------------------------------------------------------

    def profiles(self) -> list[str]:
        return sorted(self._profiles)

    def add_profile(self, name: str, profile: Profile) -> None:
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
                await self.helper.install()
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
        self._collapse.flush()  # the run's acceptance, for later runs' comparison
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
        flags: Mapping[str, FlagValue] | None = None,
        env: Mapping[str, str | None] | None = None,
    ) -> str:
        chosen = profile_named(self._profiles, profile)
        spec = chosen.to_launch_spec(flags=flags, env=env, python=self.host_python)
        return await self.launch_spec(spec, profile=profile)

    async def launch_spec(self, spec: LaunchSpec, *, profile: str | None = None) -> str:
        """Launch a ready-made LaunchSpec (validated here), replacing this console's run."""
        spec.validate()
        await self.check_draft_wiring(spec)
        async with self.action_lock("launch"):
            return await self.replace_run(spec, profile=profile)

    async def take_over(
        self,
        profile: str,
        server: ForeignServer,
        ticks: int,
        *,
        flags: Mapping[str, FlagValue] | None = None,
        env: Mapping[str, str | None] | None = None,
    ) -> str:
        """Replace a server specmon did not launch (``launch --take-over``): stop process
        ``server.pid`` started at ``ticks``, then launch ``profile`` (``_take_over``)."""
        chosen = profile_named(self._profiles, profile)
        spec = chosen.to_launch_spec(flags=flags, env=env, python=self.host_python)
        spec.validate()
        return await self._take_over(
            spec, profile, server, ticks, command=f"{self.command_name} --take-over"
        )

    async def take_over_plan(self, profile: str) -> TakeOverPlan:
        """The take-over of the server this console is attached to (``--attach``) by
        ``profile``, checked on the host with nothing signalled (the relaunch form confirms
        it): named by the pid and start ticks the attach survey read, so a process gone or a
        pid reused since is refused in one line, as are another user's process, a container
        or unit the profile does not let specmon stop, and a profile spanning nodes."""
        follow = self._follow
        if follow is None or follow.foreign is None or follow.ended:
            raise UsageError(
                f"no server specmon did not launch is attached on {self.host_label}: "
                "nothing to take over"
            )
        return await check_take_over(
            self.helper,
            follow.foreign,
            follow.foreign_ticks,
            host=self.host_label,
            profile_name=profile,
            profile=profile_named(self._profiles, profile),
        )

    async def running_profile(self, name: str) -> Profile:
        """The attached server's command line and environment as profile ``name`` (in memory;
        session.foreign.running_profile)."""
        follow = self._follow
        if follow is None or follow.foreign is None or follow.ended or follow.foreign.pid is None:
            raise UsageError(f"no server specmon did not launch is attached on {self.host_label}")
        return await running_profile(self.helper, follow.foreign.pid, name, host=self.host_label)

    async def take_over_spec(self, plan: TakeOverPlan, spec: LaunchSpec) -> str:
        """The confirmed take-over: ``plan``'s server stopped, then ``spec`` launched as
        profile ``plan.profile`` (the spec the confirmation showed, validated here)."""
        spec.validate()
        await self.check_draft_wiring(spec)
        return await self._take_over(
            spec, plan.profile, plan.server, plan.ticks, command=f"{self.command_name} take-over"
        )

    async def _take_over(
        self, spec: LaunchSpec, profile: str, server: ForeignServer, ticks: int, *, command: str
    ) -> str:
        """Stop process ``server.pid`` started at ``ticks`` (the helper's stop-foreign:
        SIGTERM, the profile's grace, SIGKILL, all gone; or its supervisor's stop command when
        the profile's ``take_over`` says so), wait for its GPU memory as a run's stop does,
        then launch ``spec`` as a specmon run whose record names the process it replaced.
        When this console follows that server, its end is told as the take-over (``command``),
        never as a crash, and the console follows the new run."""
        chosen = profile_named(self._profiles, profile)
        assert server.pid is not None
        old = foreign_run_id(server)
        async with self.action_lock("launch"):
            follow = self._follow
            watched = (
                follow
                if follow is not None
                and follow.foreign is not None
                and follow.foreign.pid == server.pid
                and not follow.ended
                else None
            )
            before = self.bus.store.run_state  # the attached server's, told again if refused
            self._stopping_run = old  # its end, when the follow sees it, is a requested one
            if watched is not None:
                watched.stop = {"by": self.options.owner, "command": command, "at": time.time()}
            self._publish(RunState(run_id=old, state="stopping", detail="take-over"))
            try:
                reply = await stop_foreign(
                    self.helper,
                    server.pid,
                    ticks,
                    grace=chosen.stop_grace_s,
                    kill_wait=self.options.kill_wait_s,
                    supervisor=chosen.take_over,
                )
            except BaseException:
                self._stopping_run = None
                if watched is not None and not watched.ended:  # refused: it still runs
                    watched.stop = None
                    self._publish(RunState(run_id=old, state=before, detail="not taken over"))
                raise
            for step in reply.get("steps") or ():
                self._publish(
                    StopProgress(
                        run_id=old,
                        step=str(step.get("step")),
                        seconds=float(step.get("seconds") or 0.0),
                        detail=step.get("detail"),
                    )
                )
            if watched is not None:
                await self._drain_follow()  # its last lines; its end already told as asked
                watched.ended = True
            gone_at = time.time()
            released, detail = await self.agent.wait_gpu_released(gone_at)
            seconds = round(time.time() - gone_at, 3)
            self._publish(
                StopProgress(run_id=old, step="gpu_released", seconds=seconds, detail=detail)
            )
            killed = any(step.get("step") == "sigkill" for step in reply.get("steps") or ())
            end = RunEnd(
                "killed" if killed else "stopped",
                by=self.options.owner,
                command=command,
                at=gone_at,
            )
            self._publish(
                RunState(run_id=old, state="stopped", detail=f"taken over: {end.text()}", end=end)
            )
            if not released:
                raise RemoteCallError(
                    f"{self.host_label}: pid {server.pid} is gone but GPU memory was not released "
                    f"within {self.options.gpu_release_timeout_s:.0f}s ({detail}); not launching"
                )
            foreign = {"pid": server.pid, "argv": list(server.argv), "user": server.user}
            return await self.replace_run(spec, profile=profile, foreign=foreign)

    async def read_draft_info(
        self, run_id: str, backend: str, argv: Sequence[str], env: Mapping[str, str]
    ) -> DraftInfo | None:
        """The draft's wiring for a command line, read on the host (the helper's
        ``model-configs``); None when it names no draft model."""
        read = await self.read_wiring(run_id, backend, argv, env)
        return read[0] if read is not None else None

    async def read_wiring(
        self, run_id: str, backend: str, argv: Sequence[str], env: Mapping[str, str]
    ) -> tuple[DraftInfo, dict[str, Any]] | None:
        """The draft's wiring and the run's fingerprint (``run_fingerprint``), read on the
        host in one helper call; None when the command line names no draft model."""
        rules = get_backend(backend)
        target, draft = rules.model_paths(argv)
        request = config_request(target, draft, env)
        if request is None:
            return None
        reply = await self.helper.call(["model-configs"], input=json.dumps(request).encode())
        models = reply.get("models") or {}
        info = draft_info(run_id, rules.name, models)
        return info, run_fingerprint(info, models, rules.name)

    async def check_draft_wiring(self, spec: LaunchSpec) -> None:
        """Refuse, before anything starts, a draft that cannot work with its target (hidden
        size, auxiliary layers past the target's): LaunchSpecError, one line each. A host
        whose files cannot be read refuses nothing here (the server says then)."""
        try:
            info = await self.read_draft_info("", spec.backend.name, spec.argv, spec.env_dict())
        except RemoteCallError:
            return
        if info is not None and info.problems:
            raise LaunchSpecError(launch_wiring_problems(info))

    def _spawn_draft_info(self, run: RunStatus) -> None:
        """Publish the run's DraftInfo in the background (launch and reattach)."""

        async def publish() -> None:
            try:
                read = await self.read_wiring(run.run_id, run.backend, run.argv, run.env)
            except (RemoteCallError, TransportError):
                return
            if read is not None:
                self._publish(read[0])
                self._collapse.set_fingerprint(run.run_id, read[1])

        task = asyncio.get_running_loop().create_task(publish())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    @contextlib.asynccontextmanager
    async def action_lock(self, action: str) -> AsyncIterator[None]:
        """This console's operation lock and the host-wide launch/stop lock, for ``action``
        (a multi-node controller takes every node's, in a fixed order, then calls
        ``replace_run`` and ``stop_owned_runs``)."""
        async with self._op_lock, self._host_lock(action):
            yield

    async def replace_run(
        self,
        spec: LaunchSpec,
        *,
        profile: str | None = None,
        run_id: str | None = None,
        node: Mapping[str, Any] | None = None,
        foreign: Mapping[str, Any] | None = None,
    ) -> str:
        """With ``action_lock`` held: stop this console's live run (verified gone, GPU memory
        released), then launch ``spec`` (already validated); ``run_id`` and ``node`` make it
        one node of a multi-node run; ``foreign``: the server a take-over stopped for it."""
        chosen = self._profiles.get(profile) if profile else None
        replaced = await self._stop_live_runs(await self.status())
        result = await self._helper_launch(
            spec, profile, chosen, run_id=run_id, node=node, replaces=replaced, foreign=foreign
        )
        kind = chosen.gpu_agent if chosen is not None else None
        if kind is not None and kind != self._agent_kind:
            self._agent_kind = kind
            self._restart_task("agent", self.agent.run)
        return result

    async def check_launch(self) -> None:
        async with self._op_lock, self._host_lock("check"):
            self._check_ownership([r for r in await self.status() if r.alive])

    async def stop(self) -> StopReport | None:
        async with self.action_lock("stop"):
            return await self.stop_owned_runs()

    async def stop_owned_runs(self) -> StopReport | None:
        """With ``action_lock`` held: stop this console's live run (refusing another's)."""
        runs = await self.status()
        live = [r for r in runs if r.alive]
        self._check_ownership(live)
        report = None
        for run in live:
            report = await self._stop_run(run)
        return report

    async def free_port(self) -> tuple[str, int]:
        """(the address this host was reached at, a TCP port free on it now): where node 0
        of a multi-node server waits for the others."""
        reply = await self.helper.call(["free-port"])
        return str(reply["address"]), int(reply["port"])

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
        reply = await self.helper.call(["status"])
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
        port = await self.transport.forward_port(
            follow.run.port or get_backend(follow.run.backend).default_port
        )
        return f"http://127.0.0.1:{port}"

    def poll_target(self) -> PollTarget | None:
        """The followed run, for the HTTP poller (None when none is followed or it ended)."""
        follow = self._follow
        if follow is None or follow.ended or not self.serves_http:
            return None
        backend = follow.run.backend
        port = follow.run.port or get_backend(backend).default_port
        return PollTarget(
            run_id=follow.run.run_id, port=port, backend=backend, argv=tuple(follow.run.argv)
        )

    def is_following(self, run_id: str) -> bool:
        """Whether ``run_id`` is the run followed now and it has not ended."""
        follow = self._follow
        return follow is not None and follow.run.run_id == run_id and not follow.ended

    @property
    def connected(self) -> bool:
        return self.transport.connected

    @property
    def is_local(self) -> bool:
        return self.transport.is_local

    @property
    def host_python(self) -> str:
        """The interpreter "{python}" means here: specmon's own on a local host (the demo's
        simulator runs in it), the configured one on a remote host."""
        return sys.executable if self.transport.is_local else self.options.python

    def use_state_dir(self, state_dir: str) -> None:
        """Keep runs under ``state_dir`` on the host (before ``start``)."""
        self.options = replace(self.options, state_dir=state_dir)
        self.helper = HelperClient(
            self.transport,
            python=self.options.python,
            state_dir=state_dir,
            call_timeout_s=self.options.call_timeout_s,
        )

    @property
    def current_run(self) -> RunStatus | None:
        return self._follow.run if self._follow else None

    @property
    def state_dir(self) -> str:
        return self.helper.state_dir

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
        runs = [RunStatus.from_helper(r) for r in await self.helper.install()]
        self._remember_load_times(runs)
        follow = self._follow
        if follow is not None:
            known = {r.run_id: r for r in runs}
            if follow.run.run_id in known:
                follow.run = known[follow.run.run_id]
            self._start_follow()
        elif self.options.attach:
            await self._attach_foreign(self.options.attach)
        else:
            live = [r for r in runs if r.alive]
            if live:
                self._attach(live[-1], reattached=True)
        if first and self._follow is not None and self._follow.run.profile in self._profiles:
            self._agent_kind = self._profiles[self._follow.run.profile].gpu_agent
        self._restart_task("agent", self.agent.run)
        self._restart_task("http", self.http.run)
        self._restart_task("watchdog", self._watchdog)
        # Every live run first (one launched while the connection was down included), then
        # each new one: another client's run is followed (_on_new_run).
        self._restart_task("runs", self._watch_runs)

    # --- remote calls ------------------------------------------------------------------------

    def _host_lock(self, action: str) -> contextlib.AbstractAsyncContextManager[None]:
        """The host-wide launch/stop lock, taken in this console's name for ``action``."""
        return self.helper.host_lock(f"{self.options.owner} ({action})")

    # --- launch and stop ---------------------------------------------------------------------

    def _check_ownership(self, live: list[RunStatus]) -> None:
        follow = self._follow
        if follow is not None and follow.foreign is not None and not follow.ended:
            raise RunConflictError(
                foreign_refusal(server_name(follow.foreign), self.host_label, "stop or relaunch")
            )
        mine = follow.run.run_id if follow is not None and follow.owned else None
        for run in live:
            if run.run_id != mine:
                followed = follow is not None and follow.run.run_id == run.run_id
                started = (
                    time.strftime("%H:%M:%S UTC", time.gmtime(run.started_at))
                    if run.started_at
                    else "?"
                )
                stop = self.stop_command or (
                    f"specmon stop {shlex.quote(self.host_label)} "
                    f"--state-dir {shlex.quote(self.state_dir)}"
                )
                raise RunConflictError(
                    f"run {run.run_id} on {self.host_label} (started {started}"
                    f"{' by ' + run.owner if run.owner else ''}) is live but is not a run "
                    "this console launched or attached to (another console launched it"
                    f"{'; this console only follows it' if followed else ''})"
                    ". Stop it "
                    f"with: {stop} --run-id {run.run_id}  (or every live run: {stop} --all)"
                )

    async def _stop_live_runs(self, runs: list[RunStatus]) -> tuple[str, ...]:
        """Stop this console's live runs to make room for a launch; the ids stopped."""
        live = [r for r in runs if r.alive]
        self._check_ownership(live)
        for run in live:
            await self._stop_run(run, reason="replace")
        return tuple(r.run_id for r in live)

    async def _stop_run(self, run: RunStatus, *, reason: str = "stop") -> StopReport:
        opts = self.options
        self._stopping_run = run.run_id
        self._publish(RunState(run_id=run.run_id, state="stopping"))
        steps: list[tuple[str, float, str | None]] = []
        proc = await self.transport.start(
            self.helper.argv(
                "stop",
                "--run-id",
                run.run_id,
                "--grace",
                str(self._grace_for(run)),
                "--kill-wait",
                str(opts.kill_wait_s),
                "--by",
                self.options.owner,
                "--command",
                self.command_name,
                "--reason",
                reason,
            )
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
        end = RunEnd(
            "killed" if any(step[0] == "sigkill" for step in steps) else "stopped",
            by=self.options.owner,
            command=self.command_name,
            at=gone_at,
        )
        if self._follow is not None and self._follow.run.run_id == run.run_id:
            await self._drain_follow()
            self._follow.ended = True
            end = self._follow.end or end
        self._publish(RunState(run_id=run.run_id, state="stopped", detail=end.text(), end=end))
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
        return profile.stop_grace_s if profile is not None else self.options.stop_grace_s

    async def _drain_follow(self, timeout: float = 10.0) -> None:
        """Let the log tail read the stopped run's last bytes and its exit, then end it."""
        task = self._tasks.get("follow")
        if task is not None and not task.done():
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), timeout)
        self._cancel_task("follow")

    async def _helper_launch(
        self,
        spec: LaunchSpec,
        profile: str | None,
        chosen: Profile | None,
        *,
        run_id: str | None = None,
        node: Mapping[str, Any] | None = None,
        replaces: tuple[str, ...] = (),
        foreign: Mapping[str, Any] | None = None,
    ) -> str:
        local = self.transport.is_local
        payload = launch_payload(
            spec,
            profile=profile,
            chosen=chosen,
            owner=self.options.owner,
            local_python=sys.executable if local else None,
            sim_gpu_state_path=(
                self.sim_gpu_state_path if self._agent_kind_for(chosen) == "sim" else None
            ),
            # The demo's server must not outlive this process, even if it is killed.
            tether_grace_s=(
                self._grace_for_profile(profile) if self.stop_server_on_close and local else None
            ),
            run_id=run_id,
            node=node,
            replaces=replaces,
            client=self.client_token,
            replaces_foreign=foreign,
        )
        reply = await self.helper.call(["launch"], input=json.dumps(payload).encode())
        run = RunStatus.from_helper({**reply, "alive": True})
        self._seen_runs.add(run.run_id)
        previous = self._follow
        if previous is not None and previous.run.run_id in replaces:
            self._tell_replaced(previous, run)
        took_over = f"pid {foreign['pid']}" if foreign is not None else None
        self._attach(run, reattached=False, took_over=took_over)
        return run.run_id

    def _agent_kind_for(self, chosen: Profile | None) -> GpuAgentKind:
        return chosen.gpu_agent if chosen is not None else self._agent_kind

    @property
    def sim_gpu_state_path(self) -> str:
        return f"{self.helper.state_dir}/sim-gpus.json"

    @property
    def agent_kind(self) -> GpuAgentKind:
        return self._agent_kind

    # --- following a run ---------------------------------------------------------------------

    def _attach(
        self,
        run: RunStatus,
        *,
        reattached: bool,
        replaces: str | None = None,
        owned: bool = True,
        foreign: ForeignServer | None = None,
        took_over: str | None = None,
    ) -> None:
        self._cancel_task("follow")
        self._seen_runs.add(run.run_id)
        parser = get_backend(run.backend).new_log_parser()
        log = (
            LogFollower.reattached(
                parser,
                run.log_size,
                self.options.replay_log_bytes,
                summary=not self.bus.lossless,  # a lossless reader gets every replayed line
            )
            if reattached
            else LogFollower(parser=parser)
        )
        follow = _Follow(run=run, log=log, ready_known=run.ready_at is not None, owned=owned)
        if foreign is not None:
            # Its port is the one its own process listens on (the survey's): no run dir to
            # ask the helper's listener about, and its ready line is shown as it comes.
            follow.foreign, follow.listener_confirmed = foreign, True
        self._follow = follow
        self._stopping_run = None
        self._publish(
            RunInfo(
                run_id=run.run_id,
                profile=run.profile,
                backend=run.backend,
                argv=run.argv,
                env=tuple(sorted(run.env.items())),
                pid=run.pid,
                pgid=run.pgid,
                started_at=run.started_at,
                reattached=reattached,
                owner=run.owner,
                replaces=replaces,
                foreign=foreign is not None,
                log_source=_log_source_text(foreign) if foreign is not None else None,
                took_over=took_over,
            )
        )
        if reattached:
            self._publish(RunState(run_id=run.run_id, state="ready" if run.ready_at else "loading"))
            if run.ready_at:  # its port looked into again: another process may hold it now
                self._spawn_listener_check(follow)
        self._start_follow()
        self._restart_task("http", self.http.run)
        self._spawn_draft_info(run)

    async def _attach_foreign(self, text: str) -> None:
        """Follow the server specmon did not launch that ``text`` names (``--attach``, the
        host's ``attach`` key): one survey of the host, the target chosen (or refused in one
        line), then followed as a reattached run that this console does not own."""
        try:
            target = parse_attach_target(text)
        except ValueError as exc:
            raise UsageError(f"--attach {text}: {exc}") from None
        survey = await survey_host(self.helper, pid=target.pid, host=self.host_label)
        server = choose_server(survey, target)
        self._attach(foreign_run_status(server), reattached=True, owned=False, foreign=server)
        if self._follow is not None and server.pid is not None:
            self._follow.foreign_ticks = start_ticks_of(survey, server.pid)

    async def _follow_foreign_loop(self, follow: _Follow, server: ForeignServer) -> None:
        """The helper's follow-foreign stream, as _follow_loop reads a run's: log chunks by
        offset; a reset (rotated, truncated) starts the lines over at 0; the end of its pid."""
        args = follow_foreign_args(
            server,
            offset=follow.log.log_offset,
            inode=follow.inode,
            interval=self.options.follow_interval_s,
        )
        proc = await self.transport.start(self.helper.argv("follow-foreign", *args))
        try:
            async for msg in _helper_messages(proc):
                kind = msg.get("t")
                if kind == "log":
                    await self.bus.wait_for_room()
                    self._on_log_chunk(follow, int(msg["o"]), _chunk_bytes(msg))
                elif kind == "source":
                    follow.inode = int(msg.get("inode") or 0)
                elif kind == "reset":
                    follow.inode = int(msg.get("inode") or 0)
                    self._on_log_restart(follow, str(msg.get("why") or "restarted"))
                elif kind == "nolog":
                    why = str(msg.get("why") or "not readable")
                    self._publish(
                        Notice(
                            source="log",
                            message=f"the log of {server_name(server)} cannot be followed "
                            f"({why}): health, metrics and GPUs only",
                        )
                    )
                elif kind == "exit":
                    self._on_exit(follow, msg.get("exit") or {})
                    return
        finally:
            await proc.kill()

    def _on_log_restart(self, follow: _Follow, why: str) -> None:
        """The foreign server's log file was rotated or truncated: the old file's last line
        and replay are finished, a marker line says so, and the new bytes count from 0."""
        now = time.time()
        for event in follow.log.restart():
            self._on_server_event(follow, event, now)
        where = follow.foreign.log.path if follow.foreign is not None else None
        self._publish(
            LogLine(text=f"[specmon] log {why}: reading {where or 'it'} from its start", offset=0),
            now,
        )

    def _start_follow(self) -> None:
        follow = self._follow
        if follow is None or follow.ended:
            return
        self._restart_task("follow", lambda: self._follow_loop(follow))

    async def _follow_loop(self, follow: _Follow) -> None:
        if follow.foreign is not None:
            await self._follow_foreign_loop(follow, follow.foreign)
            return
        proc = await self.transport.start(
            self.helper.argv(
                "follow",
                "--run-id",
                follow.run.run_id,
                "--log-offset",
                str(follow.log.log_offset),
                "--probe-offset",
                str(follow.log.probe_offset),
                "--interval",
                str(self.options.follow_interval_s),
            )
        )
        try:
            async for msg in _helper_messages(proc):
                kind = msg.get("t")
                if kind == "log":
                    await self.bus.wait_for_room()  # a slow lossless reader slows the tail
                    self._on_log_chunk(follow, int(msg["o"]), _chunk_bytes(msg))
                elif kind == "probe":
                    self._on_probe_chunk(follow, int(msg["o"]), _chunk_bytes(msg))
                elif kind == "stopping":
                    self._on_stopping(follow, msg.get("stop") or {})
                elif kind == "ready":
                    self._on_ready_noted(follow, msg)
                elif kind == "exit":
                    self._on_exit(follow, msg.get("exit") or {}, msg.get("stop"))
                    return
        finally:
            await proc.kill()

    def _on_log_chunk(self, follow: _Follow, offset: int, data: bytes) -> None:
        now = time.time()
        # A chunk makes up to ~2,000 events (a replay's: 256 KiB of lines) that hold no cycles
        # and that queues keep alive: the collector's passes over them were ~40% of a replay's
        # CPU (profile of a lossless 16 MiB replay: 0.76-0.88 s with, 0.45 s without). It
        # runs again once the chunk is published; nothing else runs in between (no await).
        collecting = gc.isenabled()
        gc.disable()
        try:
            for event in follow.log.feed_log(offset, data):
                self._on_server_event(follow, event, now)
        finally:
            if collecting:
                gc.enable()
        if follow.log.replay_finished():
            self._publish_replayed_times(follow)

    def _publish_replayed_times(self, follow: _Follow) -> None:
        """A replayed log arrives all at once: put the real start (and ready) times back, so
        elapsed time, the ETA and the load time are right after a reattach, even when the
        replay no longer holds the start-up lines. A ready time noticed late (not when the
        run became ready) is no load time: it is not sent."""
        run = follow.run
        ready_at = None if run.ready_late else run.ready_at
        if ready_at is not None:
            follow.untimed_ready = False
        self._publish(LoadTimes(run_id=run.run_id, started_at=run.started_at, ready_at=ready_at))

    def _on_ready_noted(self, follow: _Follow, note: Mapping[str, Any]) -> None:
        """A client noted on the host when the run became ready (the helper's follow tells
        each change of meta.json). A time seen live is the run's load time for every client:
        one that came between the ready line reaching the log and that note read the line
        only in its replay, with no load time, until now. A late note is no load time."""
        at = note.get("ready_at")
        if note.get("ready_late") or not isinstance(at, int | float) or follow.ended:
            return
        run = follow.run
        if run.ready_at == at and not run.ready_late:
            return
        follow.run = replace(run, ready_at=float(at), ready_late=False)
        follow.ready_known = True  # noted by another client: this one need not note it
        if follow.untimed_ready and not follow.log.replaying:  # a replay's end tells it
            follow.untimed_ready = False
            self._publish(
                LoadTimes(run_id=run.run_id, started_at=run.started_at, ready_at=float(at))
            )

    def _on_server_event(self, follow: _Follow, event: Event, now: float) -> None:
        if (
            isinstance(event, Ready)
            and self.serves_http
            and not follow.listener_confirmed
            and not follow.log.replaying
        ):
            # The server's own ready line is shown once its port is found its own.
            if follow.held_ready is None:
                follow.held_ready = (event, now)
                self._spawn_listener_check(follow, force=True)
            return
        if isinstance(event, Ready):
            event = self._timed_ready(follow, event, now)
            follow.untimed_ready = event.load_seconds is None
        self._publish(event, now)
        if not isinstance(event, Ready):
            return
        if not follow.ready_known:
            # A ready line replayed on reattach: the run is ready, but when it became ready
            # is not known here, so no load time is recorded.
            self._record_ready(follow, now, late=follow.log.replaying)
        elif follow.run.ready_late and not follow.log.replaying:
            # The health endpoint told first; the line seen live gives the load time.
            self._record_ready(follow, now, late=False)

    def _timed_ready(self, follow: _Follow, event: Ready, now: float) -> Ready:
        """The ready line with the load time from the run record: its start to now for a
        line seen live; for one read in a reattach's replay, the record's ready time if it
        has one (seen live by some console), else unknown (None)."""
        run = follow.run
        if follow.log.replaying:
            return replace(event, replayed=True, load_seconds=run.load_seconds)
        if run.ready_at is not None and not run.ready_late:
            return replace(event, load_seconds=run.load_seconds)
        started = run.started_at
        return replace(event, load_seconds=now - started if started else None)

    def on_healthy(self, run_id: str) -> None:
        """The health endpoint said ready: a run whose ready line nobody saw (it became
        ready while no console watched, or its log was cut) is recorded as ready."""
        follow = self._follow
        if follow is None or follow.run.run_id != run_id or follow.ready_known or follow.ended:
            return
        if follow.log.replaying:
            return  # the replayed log may still hold the ready line
        if follow.foreign is not None:  # its own port (the survey's): ready, noticed late
            self._record_ready(follow, time.time(), late=True)
            self._publish(RunState(run_id=run_id, state="ready"))
            return
        self._spawn_listener_check(follow)

    def _spawn_listener_check(self, follow: _Follow, *, force: bool = False) -> None:
        """Ask the host, in the background, whether the run's port is the run's own; at most
        one question at a time, and (unless ``force``) not again within LISTENER_RECHECK_S
        of a "no"."""
        if follow.foreign is not None:
            return  # no run of specmon's: its port is its own process's (the survey's)
        if follow.listener_checking:
            if force:
                follow.listener_next_check = 0.0  # the question in flight is asked again
                follow.listener_recheck = True
            return
        if not force and time.monotonic() < follow.listener_next_check:
            return
        follow.listener_checking = True
        task = asyncio.get_running_loop().create_task(self._confirm_ready(follow))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _confirm_ready(self, follow: _Follow) -> None:
        """Ready only when the run's leader lives and every socket listening on its port is
        held by a process of the run's session: an unrelated server on the port answers the
        health check while the launched one dies of "Address already in use"."""
        try:
            check: ListenerCheck | None = await self.listener_check(follow.run.run_id)
        except SpecmonError:
            check = None  # the host did not answer: asked again on the next health "ready"
        finally:
            follow.listener_checking = False
        if follow is not self._follow or follow.ended or follow.failed_reported:
            return
        if check is not None and check.ours:
            follow.listener_confirmed = True
            held, follow.held_ready = follow.held_ready, None
            if held is not None:  # the ready line, seen live: it gives the load time
                self._on_server_event(follow, *held)
            elif not follow.ready_known:
                self._record_ready(follow, time.time(), late=True)
                self._publish(RunState(run_id=follow.run.run_id, state="ready"))
            return
        if follow.listener_recheck:  # the ready line came while this question was asked
            follow.listener_recheck = False
            self._spawn_listener_check(follow, force=True)
            return
        follow.listener_next_check = time.monotonic() + LISTENER_RECHECK_S
        if check is None or not check.leader_alive:
            return  # the host did not answer (asked again later), or the exit is on its way
        problem = check.problem()
        if check.foreign and follow.held_ready is not None:
            # The server says it is ready, yet another process answers on its port: it can
            # never serve there. Failed, with the listener named.
            self._report_failure(follow, reason=f"specmon: {problem}")
            return
        if check.foreign and problem != follow.listener_warned:
            follow.listener_warned = problem
            self._publish(ServerError(category="other", message=f"specmon: {problem}; not ready"))

    @contextlib.asynccontextmanager
    async def sweep_lease(self, sweep: str) -> AsyncIterator[SweepLease]:
        """The host's sweep lease (sweep_lease.py), in this console's name."""
        async with hold_sweep_lease(self.helper, owner=self.options.owner, sweep=sweep) as lease:
            yield lease

    async def listener_check(self, run_id: str) -> ListenerCheck:
        """Who listens on ``run_id``'s port on the host now (one helper call; the helper
        reads /proc/net/tcp{,6} and maps the sockets to processes)."""
        reply = await self.helper.call(["listener", "--run-id", run_id])
        return ListenerCheck.from_helper(run_id, reply)

    async def check_listener(self) -> None:
        """Refuse (ForeignListenerError) unless the followed run's leader lives and its port
        is held by the run's own processes: bench and sweep measure the run, not whatever
        answers on the port."""
        follow = self._follow
        if follow is None:
            raise ForeignListenerError(f"no run is followed on {self.host_label}")
        if follow.foreign is not None:
            return  # the port its own process listens on (the survey's): benchmarked as is
        problem = (await self.listener_check(follow.run.run_id)).problem()
        if problem is not None:
            raise ForeignListenerError(f"{self.host_label}: {problem}; not benchmarking it")

    def _record_ready(self, follow: _Follow, now: float, *, late: bool) -> None:
        """Note on the host that the run is ready (and, seen live, its load time)."""
        follow.ready_known = True
        started = follow.run.started_at
        notes: dict[str, Any] = {"ready_at": now, "ready_late": late}
        if not late:
            notes["load_seconds"] = now - started if started else None
            if started and follow.run.profile:
                self._load_times[follow.run.profile] = now - started
        follow.run = replace(follow.run, ready_at=now, ready_late=late)
        if follow.foreign is not None:
            return  # no run dir on the host to note it in
        # A late note never overwrites a ready time another client noted (seen live).
        keep = "ready_at" if late else None
        task = asyncio.get_running_loop().create_task(
            self._annotate(follow.run.run_id, notes, unless_set=keep)
        )
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _annotate(
        self, run_id: str, notes: dict[str, Any], *, unless_set: str | None = None
    ) -> None:
        with contextlib.suppress(SpecmonError):
            await self.note_run(run_id, notes, unless_set=unless_set)

    async def note_run(
        self, run_id: str, notes: Mapping[str, Any], *, unless_set: str | None = None
    ) -> None:
        """Merge ``notes`` into the run's annotations on the host (meta.json); with
        ``unless_set``, nothing when they already hold that key."""
        args = ["annotate", "--run-id", run_id, "--json", json.dumps(notes)]
        if unless_set:
            args += ["--unless-set", unless_set]
        await self.helper.call(args)

    async def mark_nodes_launched(self, run_id: str) -> None:
        """Every node of this multi-node run is launched: noted on the host, so `status`
        stops calling this node's part incomplete."""
        await self.note_run(run_id, {"nodes_launched": True})
        follow = self._follow
        if follow is not None and follow.run.run_id == run_id:
            follow.run = replace(follow.run, multinode_incomplete=False)

    def _on_probe_chunk(self, follow: _Follow, offset: int, data: bytes) -> None:
        now = time.time()
        for event in follow.log.feed_probe(offset, data):
            self._publish(event, now)

    def _on_stopping(self, follow: _Follow, stop: Mapping[str, Any]) -> None:
        """Some client (this one, or another console, `specmon stop`, a launch replacing
        the run) began stopping the run: what follows is a stop, not a crash."""
        follow.stop = stop
        if self._stopping_run == follow.run.run_id or follow.ended:
            return
        asked = RunEnd("stopped", by=stop.get("by"), command=stop.get("command"))
        detail = asked.text().replace("stopped", "being stopped", 1)
        self._publish(RunState(run_id=follow.run.run_id, state="stopping", detail=detail))

    def _on_exit(
        self, follow: _Follow, info: Mapping[str, Any], stop: Mapping[str, Any] | None = None
    ) -> None:
        now = time.time()
        for event in follow.log.finish():
            self._on_server_event(follow, event, now)
        if follow.ended:
            return  # already told (replaced by a run that was seen first)
        follow.ended = True
        code, sig = info.get("code"), info.get("signal")
        run_id = follow.run.run_id
        stop = stop or follow.stop
        follow.run = replace(
            follow.run,
            alive=False,
            exit_code=code,
            exit_signal=sig,
            ended_at=info.get("ended_at"),
            stop=stop,
        )
        end = follow.end = run_end(info, stop)
        if self._stopping_run == run_id or end.kind in REQUESTED_ENDS:
            # Stopped by specmon (this client or another): information, never a failure.
            self._publish(RunState(run_id=run_id, state="stopped", detail=end.text(), end=end))
            return
        if (code == 0 or follow.foreign is not None) and not follow.log.errors:
            # A server specmon did not launch that ended without an error in its log: its
            # exit status is not specmon's to know (not its child, no monitor).
            detail = end.text() if follow.foreign is None else f"{end.text()}; not specmon's run"
            self._publish(RunState(run_id=run_id, state="stopped", detail=detail, end=end))
            return
        self._report_failure(follow, exit_code=code, signal=sig)
        self._publish(RunState(run_id=run_id, state="failed", detail=end.text(), end=end))

    def _tell_replaced(self, old: _Follow, new: RunStatus) -> None:
        """``old`` was stopped so that ``new`` could run: its end is told as that."""
        base = old.end or run_end(None, old.stop or {})
        end = base.replaced(new.run_id, profile=new.profile, owner=new.owner, at=new.started_at)
        old.end = end
        old.ended = True
        self._publish(RunState(run_id=old.run.run_id, state="stopped", detail=end.text(), end=end))

    async def _watch_runs(self) -> None:
        """Follow the runs another client launches in this state dir: the helper tells each
        new run as soon as its record is written (a 0.25 s poll on the host)."""
        proc = await self.transport.start(self.helper.argv("watch-runs"))
        try:
            while True:
                line = await proc.readline()
                if not line:
                    return  # the connection dropped: the supervisor restarts this
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    msg = json.loads(line)
                    if msg.get("t") == "run":
                        self._on_new_run(RunStatus.from_helper(msg["run"]))
        finally:
            await proc.kill()

    def _on_new_run(self, run: RunStatus) -> None:
        """A run appeared in the state dir. Another client's live run is followed at once
        when it replaced the followed run, or when no live run is followed (the old one was
        stopped or ended); one that runs beside a live followed run is left alone."""
        if run.run_id in self._seen_runs or run.client == self.client_token or not run.alive:
            self._seen_runs.add(run.run_id)
            return
        self._seen_runs.add(run.run_id)
        follow = self._follow
        replaced = follow is not None and follow.run.run_id in run.replaces
        if follow is not None and not follow.ended and not replaced:
            return
        if follow is not None and replaced:
            self._tell_replaced(follow, run)
        self._attach(
            run,
            reattached=True,
            replaces=follow.run.run_id if follow and replaced else None,
            owned=False,
        )
        if run.profile in self._profiles:
            kind = self._profiles[run.profile].gpu_agent
            if kind != self._agent_kind:
                self._agent_kind = kind
                self._restart_task("agent", self.agent.run)

    def _report_failure(
        self,
        follow: _Follow,
        *,
        exit_code: int | None = None,
        signal: int | None = None,
        hung: bool = False,
        reason: str | None = None,
    ) -> None:
        follow.failed_reported = True
        self._publish(
            failure_event(
                follow.run.run_id,
                follow.log.errors,
                follow.log.recent,
                command=" ".join(redact_argv(follow.run.argv)) or None,
                last_phase=self.bus.store.loading.phase,
                exit_code=exit_code,
                signal=signal,
                hung=hung,
                reason=reason,
            )
        )

    async def _watchdog(self) -> None:
        """Hung: a live run that neither logs nor answers HTTP for ``hang_after_s``."""
        limit = self.options.hang_after_s
        while True:
            await asyncio.sleep(min(1.0, limit / 4))
            follow = self._follow
            if follow is None or follow.ended or follow.failed_reported or follow.stop:
                continue
            if self._stopping_run == follow.run.run_id or not self.serves_http:
                continue
            hung = hang_reason(
                time.monotonic(),
                follow.log.last_output,
                self.http.last_answer(follow.run.run_id),
                self._connected_at,
                limit,
            )
            if hung is not None:
                phase = self.bus.store.loading.phase or "start-up"
                state = "loading" if self.bus.store.run_state == "loading" else "serving"
                self._report_failure(
                    follow, hung=True, reason=f"{hung} while {state} (last phase: {phase})"
                )

    # --- plumbing -----------------------------------------------------------------------------

    def _remember_load_times(self, runs: list[RunStatus]) -> None:
        self._load_times.update(
            {r.profile: r.load_seconds for r in runs if r.profile and r.load_seconds is not None}
        )
        follow_profile = self._follow.run.profile if self._follow else None
        latest = self._load_times.get(follow_profile) if follow_profile else None
        if latest is not None and self.bus.store.loading.previous_load_seconds is None:
            self._publish(LoadTimes(previous_load_seconds=latest))

    def previous_load_seconds(self, profile: str | None) -> float | None:
        return self._load_times.get(profile) if profile else None

    def _publish(self, event: Event, at: float | None = None) -> None:
        if isinstance(event, RunInfo) and not event.reattached:
            previous = self.previous_load_seconds(event.profile)
            if previous is not None:
                self.bus.publish(LoadTimes(previous_load_seconds=previous), at)
        self.bus.publish(event, at)
        self._collapse.on_event(event)

    @property
    def run_fingerprint(self) -> Mapping[str, Any] | None:
        """The followed run's draft and target fingerprint (docs/run-diff.md), once read."""
        return self._collapse.fingerprint

    async def acceptance_collapse(self) -> AcceptanceCollapse | None:
        """The followed run's acceptance collapse as of now, with its diagnosis (None: its
        acceptance is within DROP of the best earlier run, or there is none to compare)."""
        return await self._collapse.compare_now()

    def follows_own_run(self) -> bool:
        """Whether the followed run is one of specmon's (it has a record to note things in)."""
        follow = self._follow
        return follow is not None and follow.foreign is None

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in the background; the session's close waits for it (a note)."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

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

"""One server spanning several nodes, shown and driven as one run (see docs/host-session.md).

``MultiNodeController`` implements the ``HostController`` seam over one ``HostSession`` per
node (node 0 first: it serves HTTP). Each node's session keeps its own store; everything it
publishes also reaches ``_on_node_event``, which merges it into this controller's bus: node
0's run, HTTP, metrics and loading phases as they are, shard progress as the slowest node's,
each node's log lines and errors tagged with the node, GPUs renumbered node-major (node i's
GPU g is ``i * stride + g``, the stride being the largest GPU count a node reported), and a
``NodeStatus`` per node (connection, run state, phase, shards, GPU ids) so a lagging node is
visible.

Launch and stop take every node's locks in one fixed order (sorted by host label, so two
consoles cannot deadlock), stop every node's run (verified gone, GPU memory released) before
launching, and launch node 0 first with the backend's multi-node flags (node 0's address and
a port free there). When a node's process fails, or its host stays unreachable longer than
the profile's ``node_grace_s``, the run is reported failed with that node's root cause and
the other nodes are stopped, so no half-server is left holding GPUs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from specmon.backends import NodePlacement, get_backend
from specmon.backends.flag_grammar import parse_flags
from specmon.launch.config import profile_named
from specmon.model.errors import SpecmonError, UsageError
from specmon.model.events import (
    AcceptanceCollapse,
    AgentStatus,
    ConnectionState,
    Event,
    GpuSample,
    LogLine,
    NodeStatus,
    RunInfo,
    RunState,
    ServerError,
    ServerFailed,
    ShardProgress,
    StopProgress,
)
from specmon.session.sweep_lease import SweepLease
from specmon.state.controller import HostController
from specmon.state.run_status import RunStatus, StopReport
from specmon.state.store import EventBus, StateStore

if TYPE_CHECKING:
    from specmon.launch.config import Config, Profile
    from specmon.launch.spec import FlagValue, LaunchSpec
    from specmon.session.host import HostSession, SessionOptions

SETTLE_S = 2.0  # after a node fails, how long the others' failures may still arrive


class _NodeBus(EventBus):
    """A node session's bus: its own store as usual, and every event to the controller."""

    def __init__(self, owner: MultiNodeController, rank: int, store: StateStore) -> None:
        super().__init__(store)
        self._owner = owner
        self._rank = rank

        self._rank_base = 0  # the node's first TP rank (TP8 on node 1 of 2x8)

    def publish(self, event: Event, at: float | None = None) -> None:
        now = time.time() if at is None else at
        if isinstance(event, RunInfo):
            self._rank_base = _rank_base(event, self._owner.nodes[self._rank].session)
        local = event
        if self._rank_base and event.rank is not None and event.rank >= self._rank_base:
            # The node's store reads its first rank as "TP0" (it speaks for the node).
            local = replace(event, rank=event.rank - self._rank_base)
        super().publish(local, now)
        self._owner._on_node_event(self._rank, event, now)


def _rank_base(info: RunInfo, session: HostSession) -> int:
    """The first TP rank a node runs: node rank x TP ranks per node."""
    run = session.current_run
    if run is None or run.run_id != info.run_id or not run.node_rank or not run.nnodes:
        return 0
    tp = get_backend(run.backend).key_flags(run.argv, {}).get("tp")
    return run.node_rank * (int(tp) // run.nnodes) if tp and tp.isdigit() else 0


@dataclass(slots=True)
class _Node:
    """What the controller tracks of one node."""

    rank: int
    session: HostSession
    connection: str | None = None
    lost_since: float | None = None  # monotonic time the link went down
    lost_detail: str | None = None
    gpus: tuple[int, ...] = ()
    shown: NodeStatus | None = None  # the last NodeStatus published
    failure: ServerFailed | None = None

    @property
    def label(self) -> str:
        return self.session.host_label


def new_run_id() -> str:
    """A run id in the helper's form, chosen here so that every node records the same one."""
    suffix = int.from_bytes(os.urandom(2), "big")
    return f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{suffix:04x}"


class MultiNodeController(HostController):
    """Several node sessions as one host: one run, one event stream, one set of actions."""

    def __init__(
        self,
        sessions: Sequence[HostSession],
        *,
        profiles: Mapping[str, Profile] | None = None,
        node_grace_s: float = 60.0,
        settle_s: float = SETTLE_S,
        bus: EventBus | None = None,
    ) -> None:
        if len(sessions) < 2:
            raise UsageError("a multi-node server needs two or more nodes")
        self.bus = bus if bus is not None else EventBus(StateStore())
        self.host_label = " + ".join(s.host_label for s in sessions)
        self.node_grace_s = node_grace_s
        self.settle_s = settle_s
        self.nodes = [_Node(rank, session) for rank, session in enumerate(sessions)]
        for node in self.nodes:
            node.session.bus = _NodeBus(self, node.rank, node.session.bus.store)
            node.session.serves_http = node.rank == 0
        self._profiles: dict[str, Profile] = dict(profiles or {})
        self._gpu_stride = 0
        self._run_id: str | None = None
        self._failure_reported = False
        self._stopping = False
        self._connection_shown: tuple[str, str | None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._grace_task: asyncio.Task[None] | None = None

    # --- HostController ----------------------------------------------------------------

    def profiles(self) -> list[str]:
        return sorted(self._profiles)

    def add_profile(self, name: str, profile: Profile) -> None:
        self._profiles[name] = profile

    async def start(self) -> None:
        """Connect every node in parallel; if one cannot be reached, none stays connected."""
        results = await asyncio.gather(
            *(node.session.start() for node in self.nodes), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self.close()
            raise errors[0]
        run = self.current_run
        self._run_id = run.run_id if run is not None else None
        self._grace_task = asyncio.get_running_loop().create_task(self._watch_links())
        self._check_whole()

    def _check_whole(self) -> None:
        """A run found live on some nodes but not on all (a node died while no console
        watched) is a half-server: reported failed, and the live parts are stopped."""
        runs = [node.session.current_run for node in self.nodes]
        live = [r for r in runs if r is not None and r.alive and (r.nnodes or 1) > 1]
        if not live:
            return  # nothing, or a one-node run (someone else's to stop)
        run_id = live[0].run_id
        for node, run in zip(self.nodes, runs, strict=True):
            if run is None or run.run_id != run_id or not run.alive:
                self._run_id = run_id
                self._report(node, None, f"its part of run {run_id} is not running")
                self._spawn(self._stop_after_failure())
                return

    async def close(self) -> None:
        if self._grace_task is not None:
            self._grace_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._grace_task
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 60.0)
        await asyncio.gather(*(n.session.close() for n in self.nodes), return_exceptions=True)

    async def launch(
        self,
        profile: str,
        *,
        flags: Mapping[str, FlagValue] | None = None,
        env: Mapping[str, str | None] | None = None,
    ) -> str:
        chosen = profile_named(self._profiles, profile)
        specs = [
            chosen.to_launch_spec(flags=flags, env=env, python=node.session.host_python)
            for node in self.nodes
        ]
        return await self._launch(specs, profile)

    async def launch_spec(self, spec: LaunchSpec, *, profile: str | None = None) -> str:
        """The same spec on every node, each with its own multi-node flags and its own python
        where the spec runs node 0's (as ``launch`` builds each node's from the profile):
        a node whose interpreter lives elsewhere was handed node 0's path."""
        return await self._launch([self._for_node(spec, node) for node in self.nodes], profile)

    def _for_node(self, spec: LaunchSpec, node: _Node) -> LaunchSpec:
        python = node.session.host_python
        if spec.command and spec.command[0] == self.host_python and python != self.host_python:
            return replace(spec, command=(python, *spec.command[1:]))
        return spec

    async def stop(self) -> StopReport | None:
        """Stop every node's run (SIGTERM, then SIGKILL, GPU memory released on each)."""
        async with self._locked("stop"):
            return await self._stop_all()

    @property
    def current_run(self) -> RunStatus | None:
        return self.nodes[0].session.current_run

    async def http_base_url(self) -> str | None:
        return await self.nodes[0].session.http_base_url()

    @contextlib.asynccontextmanager
    async def sweep_lease(self, sweep: str) -> AsyncIterator[SweepLease]:
        """Every node's sweep lease, taken in the order of their labels (as the locks)."""
        async with contextlib.AsyncExitStack() as stack:
            leases = [
                await stack.enter_async_context(node.session.sweep_lease(sweep))
                for node in sorted(self.nodes, key=lambda n: n.label)
            ]
            yield _Leases(leases)

    async def acceptance_collapse(self) -> AcceptanceCollapse | None:
        """Node 0's run record speaks for the server (its rank 0 logs the acceptance)."""
        return await self.nodes[0].session.acceptance_collapse()

    async def check_listener(self) -> None:
        """Node 0 serves HTTP: its port must be its run's."""
        await self.nodes[0].session.check_listener()

    @property
    def connected(self) -> bool:
        return all(node.session.connected for node in self.nodes)

    @property
    def is_local(self) -> bool:
        return all(node.session.is_local for node in self.nodes)

    @property
    def host_python(self) -> str:
        return self.nodes[0].session.host_python

    # --- launch and stop ---------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _locked(self, action: str) -> AsyncIterator[None]:
        """Every node's locks, taken in the order of their labels (the same in every
        console), so two consoles acting on overlapping nodes cannot deadlock."""
        async with contextlib.AsyncExitStack() as stack:
            for node in sorted(self.nodes, key=lambda n: n.label):
                await stack.enter_async_context(node.session.action_lock(action))
            yield

    def _node_specs(self, specs: Sequence[LaunchSpec], address: str, port: int) -> list[LaunchSpec]:
        """Each node's spec with the backend's multi-node flags, all validated first."""
        count = len(self.nodes)
        out = []
        for rank, spec in enumerate(specs):
            backend = spec.backend
            typed = {item.name for item in parse_flags(spec.args)[0]} & backend.multinode_flags()
            if typed:
                raise UsageError(
                    f"--{sorted(typed)[0]} is set by specmon for each node; do not give it"
                )
            extra = backend.multinode_args(NodePlacement(rank, count, address, port))
            if extra is None:
                raise UsageError(
                    f"{backend.display_name} servers cannot span nodes in specmon; run one "
                    "server per host instead"
                )
            node_spec = replace(spec, args=(*spec.args, *extra))
            node_spec.validate()
            out.append(node_spec)
        return out

    async def _launch(self, specs: Sequence[LaunchSpec], profile: str | None) -> str:
        for node, spec in zip(self.nodes, specs, strict=True):
            # each node reads its own disk: a draft that cannot work is refused on any node
            # before anything is stopped or started (one-host launches: launch_spec)
            await node.session.check_draft_wiring(spec)
        if profile in self._profiles:  # a profile's own grace for its nodes, however launched
            self.node_grace_s = self._profiles[profile].node_grace_s
        labels = [node.label for node in self.nodes]
        async with self._locked("launch"):
            await self._stop_all()  # a relaunch waits for every node's run to be gone
            address, port = await self.nodes[0].session.free_port()
            node_specs = self._node_specs(specs, address, port)
            run_id = new_run_id()
            self._new_run(run_id)
            launched: list[_Node] = []
            try:
                for node, spec in zip(self.nodes, node_specs, strict=True):
                    record = {
                        "rank": node.rank,
                        "nnodes": len(self.nodes),
                        "nodes": labels,
                        "init_addr": f"{address}:{port}",
                        # Until every node is launched (then noted on each): a launcher
                        # killed between nodes leaves a node that says it is a part.
                        "launch_complete": False,
                    }
                    await node.session.replace_run(
                        spec, profile=profile, run_id=run_id, node=record
                    )
                    launched.append(node)
                await asyncio.gather(
                    *(node.session.mark_nodes_launched(run_id) for node in launched),
                    return_exceptions=True,  # unnoted, a node is only shown as incomplete
                )
            except BaseException:
                self._stopping = True
                try:
                    for node in launched:
                        with contextlib.suppress(SpecmonError):
                            await node.session.stop_owned_runs()
                finally:
                    self._stopping = False
                raise
        return run_id

    def _new_run(self, run_id: str) -> None:
        self._run_id = run_id
        self._failure_reported = False
        for node in self.nodes:
            node.failure = None

    async def _stop_all(self) -> StopReport | None:
        """With the locks held: stop every node's run in parallel; the first error after all
        were tried."""
        self._stopping = True
        try:
            results = await asyncio.gather(
                *(node.session.stop_owned_runs() for node in self.nodes), return_exceptions=True
            )
        finally:
            self._stopping = False
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]
        reports = [(node, r) for node, r in zip(self.nodes, results, strict=True) if r]
        if not reports:
            return None
        steps = tuple(
            (f"{node.label}: {step}", seconds, detail)
            for node, report in reports
            for step, seconds, detail in report.steps  # type: ignore[union-attr]
        )
        return StopReport(reports[0][1].run_id, steps)  # type: ignore[union-attr]

    # --- failure -------------------------------------------------------------------------

    def _node_failed(self, node: _Node, failure: ServerFailed) -> None:
        """A node's server failed: after a short settle (its peers die of it too), report the
        first to fail and stop the others."""
        if self._stopping or self._failure_reported or node.failure is not None:
            return
        node.failure = failure
        if not any(n.failure is not None for n in self.nodes if n is not node):
            self._spawn(self._settle_and_fail())

    async def _settle_and_fail(self) -> None:
        await asyncio.sleep(self.settle_s)
        failed = [n for n in self.nodes if n.failure is not None]
        if not failed or self._failure_reported or self._stopping:
            return

        def ended(n: _Node) -> float:
            run = n.session.current_run
            return run.ended_at if run is not None and run.ended_at else float("inf")

        first = min(failed, key=ended)
        assert first.failure is not None
        self._report(first, first.failure, None)
        await self._stop_after_failure()

    def _report(self, node: _Node, failure: ServerFailed | None, reason: str | None) -> None:
        self._failure_reported = True
        head = f"node {node.rank} ({node.label})"
        cause = failure.root_cause if failure is not None else ()
        self.bus.publish(
            ServerFailed(
                run_id=self._run_id,
                category=failure.category if failure is not None else "other",
                exit_code=failure.exit_code if failure is not None else None,
                signal=failure.signal if failure is not None else None,
                root_cause=(f"{head}: {reason}" if reason else f"{head} failed", *cause),
                command=failure.command if failure is not None else None,
                hung=failure.hung if failure is not None else False,
                last_phase=failure.last_phase if failure is not None else None,
            )
        )

    async def _stop_after_failure(self) -> None:
        """Stop what is left on every reachable node, so no half-server holds GPUs."""
        reachable = [n for n in self.nodes if n.session.connected]
        self._stopping = True
        try:
            async with contextlib.AsyncExitStack() as stack:
                for node in sorted(reachable, key=lambda n: n.label):
                    await stack.enter_async_context(
                        node.session.action_lock("stop after a node failed")
                    )
                results = await asyncio.gather(
                    *(n.session.stop_owned_runs() for n in reachable), return_exceptions=True
                )
        except SpecmonError as exc:
            results = [exc]
        finally:
            self._stopping = False
        for result in results:
            if isinstance(result, BaseException):
                self.bus.publish(
                    ServerError(
                        category="other",
                        message=f"specmon: stopping the other nodes after a failure: {result}",
                    )
                )

    async def _watch_links(self) -> None:
        """A node whose host stays unreachable past the grace fails the run."""
        while True:
            await asyncio.sleep(max(0.05, min(1.0, self.node_grace_s / 4)))
            run = self.current_run
            if run is None or not run.alive or self._failure_reported or self._stopping:
                continue
            if self.bus.store.run_state in ("stopped", "failed", "hung"):
                continue
            for node in self.nodes:
                lost = node.lost_since
                if lost is not None and time.monotonic() - lost > self.node_grace_s:
                    self._report(
                        node,
                        None,
                        f"unreachable for more than {self.node_grace_s:g}s"
                        + (f" ({node.lost_detail})" if node.lost_detail else ""),
                    )
                    self._spawn(self._stop_after_failure())
                    break

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- merging events ------------------------------------------------------------------

    def _on_node_event(self, rank: int, event: Event, now: float) -> None:
        node = self.nodes[rank]
        merged = self._merge(node, event, now)
        if merged is not None:
            self.bus.publish(merged, now)
        for each in self.nodes:  # node 0 ready means every node finished loading
            self._publish_node_status(each, now)

    def _merge(self, node: _Node, event: Event, now: float) -> Event | None:
        """The event as the merged stream shows it (None: this node's copy is not shown)."""
        tag = f"[node{node.rank} {node.label}]"
        if isinstance(event, ConnectionState):
            self._on_connection(node, event, now)
            return None
        if isinstance(event, LogLine):
            return replace(event, text=f"{tag} {event.text}")
        if isinstance(event, GpuSample):
            return self._renumber(node, event)
        if isinstance(event, ServerFailed):
            self._node_failed(node, event)
            return None
        if isinstance(event, ServerError):
            return replace(event, message=f"{tag} {event.message}")
        if isinstance(event, (AgentStatus, StopProgress)):
            detail = f"{tag} {event.detail}" if event.detail else tag
            return replace(event, detail=detail)
        if isinstance(event, RunState):
            if node.rank > 0 and event.state == "stopped" and not self._stopping:
                run = node.session.current_run
                if run is not None and run.run_id == self._run_id and not self._failure_reported:
                    self._node_failed(node, _exited(event))
                return None
            return event if node.rank == 0 and not self._failure_reported else None
        if isinstance(event, ShardProgress):
            return self._slowest_shards(event)
        if isinstance(event, RunInfo) and node.rank == 0:
            self._run_id = event.run_id
        return event if node.rank == 0 else None

    def _on_connection(self, node: _Node, event: ConnectionState, now: float) -> None:
        node.connection = event.state
        if event.state in ("reconnecting", "disconnected"):
            if node.lost_since is None:
                node.lost_since = time.monotonic()
            node.lost_detail = event.detail
        elif event.state == "connected":
            node.lost_since = None
            node.lost_detail = None
        states = [(n.connection or "connecting", n) for n in self.nodes]
        down = [(state, n) for state, n in states if state != "connected"]
        if not down:
            shown: tuple[str, str | None] = ("connected", None)
        elif all(state == "closed" for state, _ in down) and len(down) == len(self.nodes):
            shown = ("closed", None)
        else:
            state, worst = down[0]
            shown = (state, f"node{worst.rank} {worst.label}: {state}")
        if shown != self._connection_shown:
            self._connection_shown = shown
            self.bus.publish(
                ConnectionState(host=self.host_label, state=shown[0], detail=shown[1]),  # type: ignore[arg-type]
                now,
            )

    def _renumber(self, node: _Node, event: GpuSample) -> GpuSample:
        self._gpu_stride = max(self._gpu_stride, len(event.gpus), 1)
        base = node.rank * self._gpu_stride
        gpus = tuple(replace(g, index=base + g.index) for g in event.gpus)
        node.gpus = tuple(g.index for g in gpus)
        return replace(event, gpus=gpus)

    def _slowest_shards(self, event: ShardProgress) -> ShardProgress | None:
        """Target-weight shards as the slowest node has them (draft weights: node 0's)."""
        loads = [n.session.bus.store.loading for n in self.nodes]
        if loads[0].loads_seen > 1:
            return event
        done = min(load.shards_done for load in loads)
        total = max((load.shards_total or 0) for load in loads) or event.total
        return replace(event, done=min(done, total), total=total)

    def _publish_node_status(self, node: _Node, now: float) -> None:
        store = node.session.bus.store
        run = node.session.current_run
        state = store.run_state
        if node.rank > 0 and state == "loading" and self.bus.store.run_state == "ready":
            state = "ready"  # only node 0 says so; node 0 cannot be ready without the others
        status = NodeStatus(
            node_rank=node.rank,
            host=node.label,
            connection=node.connection,
            state=state if run is not None else None,
            phase=store.loading.phase,
            shards_done=store.loading.shards_done,
            shards_total=store.loading.shards_total,
            gpus=node.gpus,
        )
        if status != node.shown or self.bus.store.loading.nodes.get(node.rank) != status:
            node.shown = status
            self.bus.publish(status, now)


class _Leases(SweepLease):
    """Every node's sweep lease, named together."""

    def __init__(self, leases: Sequence[SweepLease]) -> None:
        super().__init__()
        self._leases = tuple(leases)

    async def name(self, sweep: str) -> None:
        for lease in self._leases:
            await lease.name(sweep)


def _exited(event: RunState) -> ServerFailed:
    """A node other than 0 that ended on its own (no failure of its own reported)."""
    return ServerFailed(run_id=event.run_id, root_cause=(f"its server {event.detail or 'ended'}",))


def open_nodes(
    profile: Profile,
    config: Config,
    *,
    options: SessionOptions | None = None,
    known_hosts: str | None = None,
    ssh_config: tuple[str, ...] | None = None,
    identity_files: tuple[str, ...] = (),
) -> MultiNodeController:
    """A controller over ``profile``'s nodes (not yet started): each node a host from the
    config or an ssh alias, reached as ``open_session`` reaches one host."""
    from specmon.session import open_session

    sessions = [
        open_session(
            name,
            config,
            options=options,
            known_hosts=known_hosts,
            ssh_config=ssh_config,
            identity_files=identity_files,
        )
        for name in profile.nodes
    ]
    same_nodes = {name: p for name, p in config.profiles.items() if p.nodes == profile.nodes}
    return MultiNodeController(sessions, profiles=same_nodes, node_grace_s=profile.node_grace_s)

"""Sweeps of a collective benchmark: one launch per NCCL setting, latency read from the log.

`specmon sweep` measures a server over HTTP; an all-reduce benchmark is no server: it runs,
prints its per-size latencies and exits. This runner keeps everything else of a sweep: the
grid (:func:`specmon.experiments.sweep.parse_grid`, "unset" removes a variable), each point launched
through the host session (so the run is recorded, followed and stoppable like a server), one
ledger transaction per point (the point, its run and its per-size latencies) and resuming an
interrupted sweep. The result comes from the run's log as the host session streams it: the
benchmark's result lines and NCCL's own ``NCCL INFO`` lines, which also show (see
:func:`specmon.experiments.collective.check_settings`) that the setting reached every rank. A point whose
setting did not reach the ranks is recorded as failed, never as a measurement.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specmon.experiments.collective import CollectiveResult, check_settings, read_log
from specmon.experiments.ledger import Ledger, RunRecord
from specmon.experiments.sweep import (
    GridAxis,
    KeyedPlan,
    PointFailed,
    PointStarted,
    SweepPoint,
    SweepStarted,
    combinations,
    grid_spec,
    mark_interrupted,
    open_sweep,
    refuse_invalid,
)
from specmon.model.errors import SpecmonError, UsageError
from specmon.model.events import LogLine, RunInfo
from specmon.state.controller import HostController

if TYPE_CHECKING:
    from specmon.launch.config import Config

UNSET = "unset"  # a grid value that removes the variable from the launch
POLL_S = 0.1


@dataclass(frozen=True)
class CollectivePlan(KeyedPlan):
    """What one collective sweep measures; its ``key`` identifies it for resuming."""

    host: str
    profile: str
    axes: tuple[GridAxis, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "collective",
            "host": self.host,
            "profile": self.profile,
            "grid": grid_spec(self.axes),
        }


def plan_collective_points(
    config: Config, plan: CollectivePlan, *, python: str = "python3"
) -> list[SweepPoint]:
    """Every launch of the sweep, validated before anything runs. Only environment variables
    may vary (the benchmark's settings are the profile's; NCCL's knobs are variables)."""
    profile = config.profile(plan.profile)
    flags = [axis.name for axis in plan.axes if not axis.is_env]
    if flags:
        raise UsageError(
            f"nccl-sweep varies environment variables only; {', '.join(flags)} is a flag"
        )
    points: list[SweepPoint] = []
    for params in combinations(plan.axes):
        env = {k: (None if v == UNSET else v) for k, v in params.items()}
        spec = profile.to_launch_spec(env=env, python=python)
        points.append(SweepPoint(params, False, spec, plan.profile))
    refuse_invalid(points)
    return points


@dataclass(frozen=True, slots=True)
class CollectivePointResult:
    """One point: its per-size latencies (ok) or why it failed, and the evidence that its
    settings reached the ranks."""

    params: dict[str, str]
    status: str  # "ok" | "failed"
    results: tuple[CollectiveResult, ...] = ()
    evidence: tuple[str, ...] = ()
    error: str | None = None
    root_cause: tuple[str, ...] = ()
    seconds: float = 0.0

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "status": self.status,
            "results": [
                {
                    "batch": r.batch,
                    "bytes": r.bytes,
                    "p50_us": r.p50_us,
                    "p90_us": r.p90_us,
                    "p99_us": r.p99_us,
                    "mean_us": r.mean_us,
                }
                for r in self.results
            ],
            "evidence": list(self.evidence),
            "error": self.error,
            "seconds": self.seconds,
        }


# Events: SweepStarted and PointStarted (specmon.experiments.sweep), then these.


@dataclass(frozen=True, slots=True)
class CollectivePointFinished:
    index: int
    point: SweepPoint
    result: CollectivePointResult
    skipped: bool = False


@dataclass(frozen=True, slots=True)
class CollectiveFinished:
    sweep_id: int
    results: tuple[CollectivePointResult, ...] = field(default_factory=tuple)


def point_result_from_ledger(ledger: Ledger, row: Any) -> CollectivePointResult:
    """A recorded point (a ledger PointRow) with its per-size results."""
    rows = ledger.collective_results(row.id)
    results = tuple(CollectiveResult.from_record(r) for r in rows)
    evidence = tuple(rows[0]["evidence"]) if rows else ()
    return CollectivePointResult(
        dict(row.params),
        row.status,
        results,
        evidence,
        row.error,
        tuple(row.root_cause),
        row.load_seconds or 0.0,
    )


class CollectiveSweepRunner:
    """Runs a collective sweep on a connected host session, recording every point."""

    def __init__(
        self,
        controller: HostController,
        ledger: Ledger,
        plan: CollectivePlan,
        points: Sequence[SweepPoint],
        *,
        on_event: Callable[[Any], None] | None = None,
        run_timeout_s: float = 600.0,
        fresh: bool = False,
    ) -> None:
        self.controller = controller
        self.ledger = ledger
        self.plan = plan
        self.points = list(points)
        self.on_event = on_event
        self.run_timeout_s = run_timeout_s
        self.fresh = fresh
        self.sweep_id: int | None = None
        self._live_run: str | None = None  # the point's run while it may still be running

    def _emit(self, event: Any) -> None:
        if self.on_event is not None:
            self.on_event(event)

    async def run(self) -> CollectiveFinished:
        sweep_id, done, resumed = open_sweep(self.ledger, self.plan, fresh=self.fresh)
        self.sweep_id = sweep_id
        self._emit(SweepStarted(sweep_id, tuple(self.points), resumed, frozenset(done)))
        results: list[CollectivePointResult] = []
        try:
            for index, point in enumerate(self.points):
                row = done.get(point.key)
                if row is not None:
                    result = self._from_ledger(row)
                    self._emit(CollectivePointFinished(index, point, result, skipped=True))
                else:
                    result = await self._run_point(sweep_id, index, point)
                    self._emit(CollectivePointFinished(index, point, result))
                results.append(result)
        except BaseException as exc:
            mark_interrupted(self.ledger, sweep_id, exc)
            if self._live_run is not None:  # Ctrl-C, SIGTERM: the ranks go with the sweep
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.controller.stop())
            raise
        self.ledger.set_sweep_status(sweep_id, "finished")
        finished = CollectiveFinished(sweep_id, tuple(results))
        self._emit(finished)
        return finished

    def _from_ledger(self, row: Any) -> CollectivePointResult:
        return point_result_from_ledger(self.ledger, row)

    async def _run_point(
        self, sweep_id: int, index: int, point: SweepPoint
    ) -> CollectivePointResult:
        self._emit(PointStarted(index, point, point.spec.shown().shell_command()))
        started = time.monotonic()
        run_id: str | None = None
        lines: list[str] = []
        bus = self.controller.bus
        queue = bus.subscribe(bounded=False)
        try:
            try:
                self._live_run = "launching"
                run_id = await self.controller.launch_spec(point.spec, profile=point.profile)
                self._live_run = run_id
                await self._until_exit(run_id, queue, lines)
                self._live_run = None
                log = read_log(lines)
                check = check_settings(
                    log, {k: (None if v == UNSET else v) for k, v in point.params.items()}
                )
                if not check.reached:
                    raise PointFailed("setting not confirmed: " + "; ".join(check.problems))
                if not log.results:
                    raise PointFailed("the benchmark printed no result line")
            except (SpecmonError, OSError) as exc:
                seconds = time.monotonic() - started
                root_cause = exc.root_cause if isinstance(exc, PointFailed) else ()
                message = str(exc) or type(exc).__name__
                if run_id is not None:
                    with contextlib.suppress(SpecmonError):
                        await self.controller.stop()
                self._live_run = None
                self.ledger.record_collective_point(
                    sweep_id,
                    point.params,
                    status="failed",
                    run=self._run_record(point, run_id, "failed", seconds, message, root_cause),
                    load_seconds=seconds,
                    error=message,
                    root_cause=root_cause,
                )
                return CollectivePointResult(
                    dict(point.params),
                    "failed",
                    error=message,
                    root_cause=root_cause,
                    seconds=seconds,
                )
        finally:
            bus.unsubscribe(queue)
        seconds = time.monotonic() - started
        self.ledger.record_collective_point(
            sweep_id,
            point.params,
            status="ok",
            run=self._run_record(point, run_id, "exited", seconds),
            results=log.results,
            evidence=check.evidence,
            load_seconds=seconds,
        )
        return CollectivePointResult(
            dict(point.params), "ok", tuple(log.results), check.evidence, seconds=seconds
        )

    def _run_record(
        self,
        point: SweepPoint,
        run_id: str | None,
        status: str,
        seconds: float,
        error: str | None = None,
        root_cause: Sequence[str] = (),
    ) -> RunRecord:
        return RunRecord(
            host=self.plan.host,
            profile=point.profile,
            argv=point.spec.argv,
            env=point.spec.env_dict(),
            status=status,
            run_id=run_id,
            load_seconds=seconds,
            error=error,
            root_cause=tuple(root_cause),
        )

    async def _until_exit(self, run_id: str, queue: Any, lines: list[str]) -> None:
        """Collect the run's log lines until it exits; PointFailed if it fails or outlives
        ``run_timeout_s`` (then it is stopped)."""
        store = self.controller.bus.store
        deadline = time.monotonic() + self.run_timeout_s
        ours = False
        while True:
            while not queue.empty():
                _, event = queue.get_nowait()
                if isinstance(event, RunInfo):
                    ours = event.run_id == run_id
                elif isinstance(event, LogLine) and ours:
                    lines.append(event.text)
            current = store.run.run_id if store.run is not None else None
            if current == run_id and store.run_state in ("stopped", "failed", "hung"):
                while not queue.empty():  # lines published together with the exit
                    _, event = queue.get_nowait()
                    if isinstance(event, LogLine) and ours:
                        lines.append(event.text)
                if store.run_state == "stopped":
                    return
                failure = store.failure
                cause = failure.root_cause if failure is not None else ()
                what = "hung" if failure is not None and failure.hung else "failed"
                first = f": {cause[0]}" if cause else ""
                raise PointFailed(f"benchmark {what}{first}", cause)
            if time.monotonic() > deadline:
                await self.controller.stop()
                raise PointFailed(f"still running after {self.run_timeout_s:.0f} s; stopped")
            await asyncio.sleep(POLL_S)

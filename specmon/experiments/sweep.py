"""Unattended sweeps: relaunch a profile over a grid of settings, benchmark each, record all.

The loop an operator used to run by hand (change a flag, wait for the server, benchmark,
compare) made reliable: every point is launched through the host session, waited for with an
ETA, benchmarked with the fixed prompt set and written to the ledger in one transaction. A
failed combination is recorded with its root cause and the sweep moves on; an interrupted sweep
(same host, profile, grid and settings) resumes without redoing finished points.

UI-free: :class:`SweepRunner` reports progress through ``on_event`` callbacks (the dataclasses
below), which `specmon sweep` prints and the console's Experiments screen can show.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from specmon.backends import all_backends
from specmon.experiments.advisor import Advice, AdvisorError, predict_loads
from specmon.experiments.advisor_inputs import advise_from_store, enough_data, model_of
from specmon.experiments.bench.runner import (
    BenchError,
    BenchProgress,
    BenchResult,
    BenchSettings,
    merge_repeats,
    run_benchmark,
)
from specmon.experiments.ledger import (
    Baseline,
    BenchContext,
    Ledger,
    PointRow,
    RunRecord,
    load_point_key,
    params_key,
)
from specmon.experiments.load import (
    LoadFigures,
    figures_from_benchmark_row,
    load_figures,
    requests_at,
)
from specmon.model.errors import SpecmonError, UsageError
from specmon.model.run_end import REQUESTED_ENDS, RunEnd
from specmon.model.secrets import redact_params
from specmon.state.controller import HostController

if TYPE_CHECKING:
    from specmon.launch.config import Config
    from specmon.launch.spec import LaunchSpec
    from specmon.session.sweep_lease import SweepLease

_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_FLAG_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")  # underscores: a backend's named settings
MAX_POINTS = 1000
READY_POLL_S = 0.2
MAX_ATTEMPTS = 3  # per point, when the connection to the host drops mid-point
RECONNECT_WAIT_S = 900.0
DROP_NOTICE_POLLS = 10  # x READY_POLL_S: how long a failed benchmark waits to see a drop
LOADING_REPORT_S = 1.0
REPLACEMENT_POLLS = 25  # x READY_POLL_S: how long a stopped point waits to see who replaced it
SIGTERM = 15  # what a stop sends; a server ending on its own is killed (9) or exits


# --- the grid -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GridAxis:
    """One ``--grid name=v1,v2``: an env var if the name starts uppercase, else a flag."""

    name: str
    values: tuple[str, ...]

    @property
    def is_env(self) -> bool:
        return self.name[:1].isupper()


def parse_grid(texts: Sequence[str]) -> tuple[GridAxis, ...]:
    """``["speculative-num-steps=1,2", "NCCL_PROTO=LL,Simple"]`` -> axes; UsageError if bad."""
    axes: list[GridAxis] = []
    seen: set[str] = set()
    for text in texts:
        name, sep, raw_values = text.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UsageError(f"--grid {text!r}: expected NAME=VALUE[,VALUE...]")
        if name.startswith("-"):
            raise UsageError(f"--grid {text!r}: write flags without the leading '--' ({name})")
        pattern = _ENV_NAME if name[:1].isupper() else _FLAG_NAME
        if not pattern.match(name):
            kind = "environment variable" if name[:1].isupper() else "flag"
            raise UsageError(f"--grid {text!r}: {name!r} is not a valid {kind} name")
        if name in seen:
            raise UsageError(f"--grid: {name} is given twice; list all its values in one --grid")
        values = tuple(v.strip() for v in raw_values.split(","))
        if not values or any(not v for v in values):
            raise UsageError(f"--grid {text!r}: empty value in the list")
        if len(set(values)) != len(values):
            raise UsageError(f"--grid {text!r}: a value is listed twice")
        seen.add(name)
        axes.append(GridAxis(name, values))
    if not axes:
        raise UsageError("give at least one --grid NAME=VALUE[,VALUE...]")
    total = 1
    for axis in axes:
        total *= len(axis.values)
    if total > MAX_POINTS:
        raise UsageError(f"the grid has {total} combinations; at most {MAX_POINTS} per sweep")
    return tuple(axes)


def combinations(axes: Sequence[GridAxis]) -> list[dict[str, str]]:
    """Every combination, in grid order (the last axis varies fastest)."""
    names = [axis.name for axis in axes]
    return [
        dict(zip(names, values, strict=True))
        for values in itertools.product(*(a.values for a in axes))
    ]


# --- the plan -------------------------------------------------------------------------------


def grid_spec(axes: Sequence[GridAxis]) -> list[dict[str, Any]]:
    """The grid as a plan records it (the ledger's spec, the resume key)."""
    return [{"name": a.name, "values": list(a.values)} for a in axes]


class KeyedPlan:
    """A sweep plan (this one, the collective one): its ``key``, a hash of what it measures
    (``to_dict``), finds the interrupted sweep of the same plan to resume."""

    host: str
    profile: str

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    @property
    def key(self) -> str:
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class SweepPlan(KeyedPlan):
    """What one sweep measures; its ``key`` identifies it for resuming. ``loads``: a sweep at
    several loads measures every setting at each of these concurrencies (``repeats`` times
    each) from one launch; empty: the single load of ``bench``."""

    host: str
    profile: str
    axes: tuple[GridAxis, ...]
    baseline: bool
    bench: BenchSettings
    loads: tuple[int, ...] = ()
    repeats: int = 1

    def to_dict(self) -> dict[str, Any]:
        out = {
            "host": self.host,
            "profile": self.profile,
            "grid": grid_spec(self.axes),
            "baseline": self.baseline,
            "bench": asdict(self.bench),
        }
        if self.loads:
            out["loads"] = list(self.loads)
            out["repeats"] = self.repeats
        return out

    def bench_at(self, load: int) -> BenchSettings:
        """What is measured at one load of a sweep at several loads."""
        return replace(
            self.bench, concurrency=load, requests=requests_at(self.bench.requests, load)
        )


@dataclass(frozen=True)
class SweepPoint:
    """One launch of the sweep: the grid values, and the exact spec that realises them."""

    params: dict[str, str]
    is_baseline: bool
    spec: LaunchSpec
    profile: str
    notes: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The ledger's key for this point; the baseline's grid values are empty."""
        return params_key({} if self.is_baseline else self.params)

    def label(self) -> str:
        if self.is_baseline:
            return "baseline (speculation off)"
        return " ".join(f"{k}={v}" for k, v in redact_params(self.params).items())


def baseline_profile_name(config: Config, profile_name: str) -> str | None:
    """The profile that measures ``profile_name``'s baseline, if the config names one.

    A profile's own ``baseline_profile`` key wins; otherwise a profile called
    ``<name>-baseline`` is used. None: the baseline is the profile with speculation removed.
    """
    profile = config.profiles[profile_name]
    named = profile.baseline_profile
    if named:
        if named not in config.profiles:
            raise UsageError(
                f"profile {profile_name!r}: baseline_profile {named!r} is not a profile"
            )
        return str(named)
    candidate = f"{profile_name}-baseline"
    return candidate if candidate in config.profiles else None


def plan_points(config: Config, plan: SweepPlan, *, python: str = "python3") -> list[SweepPoint]:
    """The sweep's launches (baseline first), each validated before anything runs.

    With ``--speculative-eagle-topk 1`` SGLang needs draft tokens = steps + 1; when the grid
    varies the steps but not the draft tokens, the draft tokens follow (as SGLang itself would
    adjust them) and the point says so in its notes. ``python`` is the host's interpreter,
    for profiles whose command starts with "{python}".
    """
    profile = config.profile(plan.profile)
    points: list[SweepPoint] = []
    if plan.baseline:
        name = baseline_profile_name(config, plan.profile)
        if name is not None:
            spec = config.profiles[name].to_launch_spec(python=python)
            note = f"baseline profile {name}"
        else:
            spec = profile.to_launch_spec(python=python).without_speculation()
            name = plan.profile
            note = f"profile {plan.profile} with its speculative decoding flags removed"
        speculating = sorted(spec.backend.speculation_flags(spec.args))
        if speculating:
            shown = " ".join(f"--{flag} {spec.flag(flag) or ''}".strip() for flag in speculating)
            raise UsageError(
                f"baseline profile {name!r} runs speculative decoding ({shown[:120]}); a "
                "baseline must have speculation off"
            )
        points.append(SweepPoint({}, True, spec, name, (note,)))
    for params in combinations(plan.axes):
        flags = {k: v for k, v in params.items() if not k[:1].isupper()}
        env = {k: v for k, v in params.items() if k[:1].isupper()}
        notes: list[str] = []
        spec = profile.to_launch_spec(flags=flags, env=env, python=python)
        backend = spec.backend
        if backend.steps_setting is not None and backend.steps_setting in flags:
            follow = backend.steps_follow_ups(spec.args, flags)
            if follow:
                spec = spec.with_flags({name: value for name, (value, _) in follow.items()})
                notes.extend(f"{name}={value} ({why})" for name, (value, why) in follow.items())
        points.append(SweepPoint(params, False, spec, plan.profile, tuple(notes)))
    refuse_invalid(points)
    return points


def refuse_invalid(points: Sequence[SweepPoint]) -> None:
    """A UsageError naming every grid combination whose launch is invalid (the baseline is
    checked where it is chosen), before anything runs."""
    problems = [
        f"[{' '.join(f'{k}={v}' for k, v in point.params.items())}] {problem}"
        for point in points
        if not point.is_baseline
        for problem in point.spec.problems()
    ]
    if problems:
        raise UsageError("the grid has invalid combinations: " + "; ".join(problems))


def steps_axis(names: Iterable[str]) -> str | None:
    """The axis among a grid's ``names`` that sets the draft step count (a backend's
    ``steps_setting``): the axis the tuning advisor predicts; None when none does."""
    settings = {b.steps_setting for b in all_backends() if b.steps_setting}
    return next((name for name in names if name in settings), None)


# --- progress events (for the console's Experiments screen and the CLI) --------------------


@dataclass(frozen=True, slots=True)
class SweepStarted:
    sweep_id: int
    points: tuple[SweepPoint, ...]
    resumed: bool
    done_keys: frozenset[str]


@dataclass(frozen=True, slots=True)
class PointSkipped:
    """Already finished in the interrupted sweep this one resumes. ``result`` carries its
    speed-up against ``baseline``, the measured baseline known so far (None: none yet)."""

    index: int
    point: SweepPoint
    result: SweepPointResult
    baseline: Baseline | None = None


@dataclass(frozen=True, slots=True)
class PointStarted:
    index: int
    point: SweepPoint
    command: str


@dataclass(frozen=True, slots=True)
class PointLoading:
    index: int
    phase: str | None
    elapsed_s: float
    eta_s: float | None
    shards_done: int
    shards_total: int | None


@dataclass(frozen=True, slots=True)
class PointBenchmarking:
    index: int
    progress: BenchProgress


@dataclass(frozen=True, slots=True)
class PointRetrying:
    """The connection dropped during the point; it runs again once the session reconnects."""

    index: int
    point: SweepPoint
    attempt: int
    reason: str


@dataclass(frozen=True, slots=True)
class PointFinished:
    """A point done; ``result`` carries its speed-up against ``baseline`` (as PointSkipped)."""

    index: int
    point: SweepPoint
    result: SweepPointResult
    baseline: Baseline | None = None


@dataclass(frozen=True, slots=True)
class BaselineFound:
    """The measured baseline comparable with this sweep became known (e.g. its baseline point
    finished): the points finished before it, with their speed-ups now (index -> result)."""

    baseline: Baseline
    results: tuple[tuple[int, SweepPointResult], ...]


@dataclass(frozen=True, slots=True)
class SweepFinished:
    sweep_id: int
    results: tuple[SweepPointResult, ...]
    baseline: Baseline | None
    baselines: Mapping[int, Baseline] = field(default_factory=dict)  # per load (load sweeps)


SWEEP_EVENT_TYPES = (
    SweepStarted,
    PointSkipped,
    PointStarted,
    PointLoading,
    PointBenchmarking,
    PointRetrying,
    PointFinished,
    BaselineFound,
    SweepFinished,
)
SweepEvent = (
    SweepStarted
    | PointSkipped
    | PointStarted
    | PointLoading
    | PointBenchmarking
    | PointRetrying
    | PointFinished
    | BaselineFound
    | SweepFinished
)


@dataclass(frozen=True, slots=True)
class SweepPointResult:
    """A finished point as shown in the final table and written by ``--json``."""

    params: dict[str, str]
    is_baseline: bool
    status: str  # "ok" | "failed"
    tok_s: float | None
    accept_len: float | None
    verify_ms: float | None
    load_seconds: float | None
    error: str | None = None
    root_cause: tuple[str, ...] = ()
    speedup_vs_baseline: float | None = None
    benchmark_id: int | None = None
    speculative: bool | None = None
    model: str | None = None
    concurrency: int | None = None  # the load of a point of a sweep at several loads
    load: LoadFigures | None = None  # its figures at that load

    def with_baseline(self, baseline: Baseline | None) -> SweepPointResult:
        """Speed-up only against a measured baseline of the same coordinates (a load
        sweep's point: at the same load); else None."""
        speedup = None
        if (
            baseline is not None
            and self.status == "ok"
            and self.tok_s is not None
            and not self.is_baseline
            and self.model == baseline.model
            and (self.concurrency is None or self.concurrency == baseline.concurrency)
        ):
            speedup = baseline.speedup(self.tok_s)
        return replace(self, speedup_vs_baseline=speedup)

    def to_json_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "params": dict(self.params),
            "status": self.status,
            "tok_s": self.tok_s,
            "speedup_vs_baseline": self.speedup_vs_baseline,
            "accept_len": self.accept_len,
            "verify_ms": self.verify_ms,
            "load_seconds": self.load_seconds,
            "error": self.error,
        }
        if self.is_baseline:
            out["baseline"] = True
        if self.concurrency is not None:  # a sweep at several loads: the load's figures
            out["concurrency"] = self.concurrency
            if self.load is not None:
                out.update(self.load.to_json_dict())
        return out


def result_from_row(row: PointRow, load: LoadFigures | None = None) -> SweepPointResult:
    """A stored point as a result; ``load``: its figures, for a point of a load sweep."""
    return SweepPointResult(
        params=dict(row.params),
        is_baseline=row.is_baseline,
        status=row.status,
        tok_s=row.tok_s,
        accept_len=row.accept_len,
        verify_ms=row.verify_ms,
        load_seconds=row.load_seconds,
        error=row.error,
        root_cause=row.root_cause,
        benchmark_id=row.benchmark_ref,
        speculative=row.speculative,
        model=row.model,
        concurrency=row.concurrency if row.load else None,
        load=load,
    )


def stored_result(ledger: Ledger, row: PointRow) -> SweepPointResult:
    """A stored point as a result, with its figures when it is one load of a load sweep."""
    if not row.load:
        return result_from_row(row)
    bench = ledger.get_benchmark(row.benchmark_ref) if row.benchmark_ref else None
    return result_from_row(row, figures_from_benchmark_row(bench) if bench else None)


def best_first(results: Sequence[Any], score: Callable[[Any], float | None]) -> list[Any]:
    """The measured results by ``score``, lowest first (ties in sweep order); those it gives
    None (failed) after them, in sweep order: the order of a sweep's table, server or
    collective."""
    measured: list[tuple[float, Any]] = []
    rest: list[Any] = []
    for result in results:
        value = score(result)
        if value is None:
            rest.append(result)
        else:
            measured.append((value, result))
    return [result for _, result in sorted(measured, key=lambda pair: pair[0])] + rest


def rank_results(results: Sequence[SweepPointResult]) -> list[SweepPointResult]:
    """Finished points by tok/s, fastest first; failed points last, in sweep order."""
    return best_first(results, lambda r: -(r.tok_s or 0.0) if r.status == "ok" else None)


# --- running --------------------------------------------------------------------------------


class _ConnectionTrouble(Exception):
    """The console lost the host mid-point: retry the point, record nothing."""


def _is_transport_error(exc: BaseException) -> bool:
    from specmon.model.errors import TransportError

    return isinstance(exc, TransportError)


class SweepAborted(SpecmonError):
    """The sweep cannot go on (the host refuses launches); it stays resumable."""


class PointInterrupted(SweepAborted):
    """Another console stopped or replaced the point's server: no verdict on the combination;
    the sweep stops, resumable, saying who."""


class PointFailed(SpecmonError):
    """A verdict on the point's combination: recorded as failed, with its root cause."""

    def __init__(self, message: str, root_cause: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.root_cause = tuple(root_cause)


def open_sweep(
    ledger: Ledger, plan: KeyedPlan, *, fresh: bool
) -> tuple[int, dict[str, PointRow], bool]:
    """(sweep id, its recorded points by params key, resumed): the newest unfinished sweep of
    the same plan, resumed (unless ``fresh``), else a new one (server and collective sweeps)."""
    existing = None if fresh else ledger.resumable_sweep(plan.key)
    if existing is None:
        return ledger.start_sweep(plan.key, plan.host, plan.profile, plan.to_dict()), {}, False
    rows = {row.params_key: row for row in ledger.sweep_points(existing.id)}
    ledger.set_sweep_status(existing.id, "running")
    return existing.id, rows, True


def mark_interrupted(ledger: Ledger, sweep_id: int, exc: BaseException) -> None:
    """The sweep ended before its last point (Ctrl-C, SIGTERM, an error): resumable; when
    another console interrupted the point, the note says who."""
    note = str(exc) if isinstance(exc, PointInterrupted) else None
    ledger.set_sweep_status(sweep_id, "interrupted", note=note)


@dataclass
class SweepRunner:
    """Runs a planned sweep over a connected host; one point at a time, every point recorded.

    ``controller`` is the host (HostController: launch_spec, http_base_url, connected...).
    ``on_event`` receives the progress dataclasses above, on the event
    loop's thread. The ledger (an sqlite3 connection) must be used from that same thread.

    ``request_cancel()`` cancels the sweep at once while a point waits for ready or
    benchmarks; a launch or stop in progress is let finish first (cancelled midway, the host
    session could keep the host lock) and the sweep is cancelled at the next safe moment.
    """

    controller: HostController
    ledger: Ledger
    plan: SweepPlan
    points: list[SweepPoint]
    on_event: Callable[[SweepEvent], None] | None = None
    ready_timeout_s: float = 3600.0
    fresh: bool = False
    stop_at_end: bool = True
    prediction: Advice | None = None  # the advisor's, when the sweep was started from it
    sweep_id: int | None = field(default=None, init=False)
    _launched: bool = field(default=False, init=False)
    _task: asyncio.Task[Any] | None = field(default=None, init=False)
    _cancel_safe: bool = field(default=False, init=False)  # waiting for ready or benchmarking
    _cancel_pending: bool = field(default=False, init=False)
    _baseline: Baseline | None = field(default=None, init=False)
    _results: dict[int, SweepPointResult] = field(default_factory=dict, init=False)
    # A sweep at several loads: the baseline known at each load, and the results by
    # (point index, load).
    _baselines: dict[int, Baseline] = field(default_factory=dict, init=False)
    _load_results: dict[tuple[int, int], SweepPointResult] = field(default_factory=dict, init=False)

    def _emit(self, event: SweepEvent) -> None:
        self._cancel_safe = isinstance(event, PointLoading | PointBenchmarking)
        if self.on_event is not None:
            self.on_event(event)
        if self._cancel_safe and self._cancel_pending and self._task is not None:
            self._task.cancel()

    def request_cancel(self) -> bool:
        """Cancel the running sweep: True when cancelled now, False when deferred to the end
        of the launch or stop in progress."""
        if self._task is None or self._task.done():
            return True
        self._cancel_pending = True
        if self._cancel_safe:
            self._task.cancel()
            return True
        return False

    def _finished(
        self, index: int, point: SweepPoint, result: SweepPointResult, *, skipped: bool
    ) -> None:
        """Record a point's result, with its speed-up against the baseline known so far."""
        if self._baseline is None and result.status == "ok" and result.model:
            self._baseline = self.ledger.find_baseline(
                host=self.plan.host,
                model=result.model,
                prompt_set=self.plan.bench.prompt_set,
                concurrency=self.plan.bench.concurrency,
            )
            if self._baseline is not None and self._results:
                earlier = {i: r.with_baseline(self._baseline) for i, r in self._results.items()}
                self._results.update(earlier)
                self._emit(BaselineFound(self._baseline, tuple(sorted(earlier.items()))))
        self._results[index] = result.with_baseline(self._baseline)
        kind = PointSkipped if skipped else PointFinished
        self._emit(kind(index, point, self._results[index], self._baseline))

    async def run(self) -> SweepFinished:
        """Run every unfinished point; returns the final results (resumed points included).
        The host's sweep lease is held throughout: a second sweep on the host is refused
        (SweepBusyError naming this one) instead of replacing this sweep's server."""
        async with self.controller.sweep_lease(f"of profile {self.plan.profile}") as lease:
            finished = await self._run_leased(lease)
        self._emit(finished)  # the lease released first: a console then sees it ended
        return finished

    async def _run_leased(self, lease: SweepLease) -> SweepFinished:
        sweep_id, rows, resumed = open_sweep(self.ledger, self.plan, fresh=self.fresh)
        if not resumed:
            self._record_prediction(sweep_id)
        self.sweep_id = sweep_id
        await lease.name(f"s{sweep_id} (profile {self.plan.profile})")
        self._task = asyncio.current_task()
        self._emit(SweepStarted(sweep_id, tuple(self.points), resumed, frozenset(rows)))
        results: list[SweepPointResult] = []
        try:
            for index, point in enumerate(self.points):
                if self.plan.loads:
                    await self._run_loads(sweep_id, index, point, rows)
                    continue
                row = rows.get(point.key)
                if row is not None:
                    result = result_from_row(row)
                    self._finished(index, point, result, skipped=True)
                else:
                    (result,) = await self._run_point_surviving_drops(sweep_id, index, point)
                    self._finished(index, point, result, skipped=False)
                results.append(result)
            if self.stop_at_end and self._launched:
                await self.controller.stop()
        except BaseException as exc:
            mark_interrupted(self.ledger, sweep_id, exc)
            raise
        self.ledger.set_sweep_status(sweep_id, "finished")
        if self.plan.loads:
            final = tuple(
                self._load_results[index, load].with_baseline(self._baselines.get(load))
                for index in range(len(self.points))
                for load in self.plan.loads
            )
            return SweepFinished(sweep_id, final, None, dict(self._baselines))
        baseline = self._baseline_for(results)
        final = tuple(r.with_baseline(baseline) for r in results)
        return SweepFinished(sweep_id, final, baseline)

    async def _run_loads(
        self, sweep_id: int, index: int, point: SweepPoint, rows: Mapping[str, PointRow]
    ) -> None:
        """One setting of a sweep at several loads: the loads already recorded (a resumed
        sweep) as they were, the others measured from one launch, in the plan's order."""
        pending: list[int] = []
        for load in self.plan.loads:
            row = rows.get(load_point_key({} if point.is_baseline else point.params, load))
            if row is None:
                pending.append(load)
            else:
                self._finished_load(index, point, stored_result(self.ledger, row), skipped=True)
        if pending:
            await self._run_point_surviving_drops(sweep_id, index, point, pending)

    def _finished_load(
        self, index: int, point: SweepPoint, result: SweepPointResult, *, skipped: bool
    ) -> None:
        """A load sweep's point at one load, with its speed-up against the baseline measured
        at that same load (the sweep's own baseline point, else the ledger's newest)."""
        load = result.concurrency
        assert load is not None
        baseline = self._baselines.get(load)
        if baseline is None and result.status == "ok" and result.model:
            baseline = self.ledger.find_baseline(
                host=self.plan.host,
                model=result.model,
                prompt_set=self.plan.bench.prompt_set,
                concurrency=load,
            )
            if baseline is not None:
                self._baselines[load] = baseline
                earlier = {
                    i: r.with_baseline(baseline)
                    for (i, at), r in self._load_results.items()
                    if at == load
                }
                if earlier:
                    self._load_results.update({(i, load): r for i, r in earlier.items()})
                    self._emit(BaselineFound(baseline, tuple(sorted(earlier.items()))))
        self._load_results[index, load] = result.with_baseline(baseline)
        kind = PointSkipped if skipped else PointFinished
        self._emit(kind(index, point, self._load_results[index, load], baseline))

    def _record_prediction(self, sweep_id: int) -> None:
        """Store the advisor's prediction for a sweep over step counts before it measures
        anything: the one given, else one made now from the running server if the store has
        enough probe cycles. ``specmon ledger show`` sets it against what the sweep measures."""
        if steps_axis(axis.name for axis in self.plan.axes) is None:
            return
        store = self.controller.bus.store
        advice, source = self.prediction, "advisor view"
        if advice is None:
            if not enough_data(store):
                return
            try:
                advice, _model = advise_from_store(
                    store, self.ledger, self.plan.host, self.plan.loads
                )
            except AdvisorError:
                return
            source = "sweep start"
        elif self.plan.loads and not advice.by_load:
            advice = predict_loads(advice, self.plan.loads)
        self.ledger.record_prediction(
            host=self.plan.host,
            model=model_of(store),
            advice=advice.to_dict(),
            source=source,
            sweep_id=sweep_id,
        )

    def _baseline_for(self, results: Sequence[SweepPointResult]) -> Baseline | None:
        model = next((r.model for r in results if r.status == "ok" and r.model), None)
        if model is None:
            return None
        return self.ledger.find_baseline(
            host=self.plan.host,
            model=model,
            prompt_set=self.plan.bench.prompt_set,
            concurrency=self.plan.bench.concurrency,
        )

    async def _run_point_surviving_drops(
        self,
        sweep_id: int,
        index: int,
        point: SweepPoint,
        loads: Sequence[int | None] = (None,),
    ) -> list[SweepPointResult]:
        """A lost connection is no verdict on the combination: wait for the host session to
        reconnect and run the point again (a few times), without recording a failure; a load
        sweep's point measures again only the loads it has not recorded yet."""
        done: list[SweepPointResult] = []
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                measured = {r.concurrency for r in done}
                remaining = [load for load in loads if load is None or load not in measured]
                await self._run_point(sweep_id, index, point, remaining, done)
                return done
            except _ConnectionTrouble as trouble:
                if attempt == MAX_ATTEMPTS:
                    raise SpecmonError(
                        f"{point.label()}: the connection to {self.plan.host} kept failing "
                        f"({trouble}); run the same command again to resume the sweep"
                    ) from None
                self._emit(PointRetrying(index, point, attempt, str(trouble)))
                await self._wait_connected()
        raise AssertionError("unreachable")

    async def _launch(self, point: SweepPoint) -> str:
        """Launch the point. A refused launch (lock held by another console, a run this
        console does not own, the helper failing) says nothing about the combination: it
        stops the sweep, resumable, instead of being recorded as a failed point."""
        from specmon.model.errors import LaunchSpecError

        try:
            return str(await self.controller.launch_spec(point.spec, profile=point.profile))
        except LaunchSpecError:
            raise  # this combination cannot run: a failed point
        except SpecmonError as exc:
            if _is_transport_error(exc):
                raise
            raise SweepAborted(
                f"{point.label()}: cannot launch on {self.plan.host}: {exc}; "
                "run the same command again to resume the sweep"
            ) from exc

    async def _dropped_since(self, connection_at_start: Any) -> bool:
        """Whether the connection dropped since the point began (failed requests through a
        dead port forward can beat the session's own notice of the drop by a moment)."""
        store = self.controller.bus.store
        for _ in range(DROP_NOTICE_POLLS):
            if store.connection is not connection_at_start:
                return True
            if not self.controller.connected:
                return True
            await asyncio.sleep(READY_POLL_S)
        return False

    def _fingerprint(self, run_id: str | None) -> Mapping[str, Any] | None:
        """The point's run's draft and target fingerprint, as the session read it."""
        run = self.controller.current_run
        if run is None or run.run_id != run_id:
            return None
        return getattr(self.controller, "run_fingerprint", None) or run.fingerprint

    async def _replaced_by_someone_else(self, run_id: str | None) -> str | None:
        """How the point's server ended, when another client ended it: replaced by a newer
        live run on the host, stopped by specmon elsewhere (its stop record, run_end.py), or
        a SIGTERM this sweep did not send; None when the server is alive or ended on its own
        (a verdict on the combination)."""
        if run_id is None:
            return None
        end: RunEnd | None = None
        for _ in range(REPLACEMENT_POLLS):  # another console launches right after its stop
            try:
                runs = await self.controller.status()
            except SpecmonError:
                return None
            ours = next((r for r in runs if r.run_id == run_id), None)
            if ours is None or ours.alive:
                return None
            end = ours.end
            if end is not None and end.kind == "replaced":
                return end.text()
            newer = [
                r
                for r in runs
                if r.alive and r.run_id != run_id and (r.started_at or 0) >= (ours.started_at or 0)
            ]
            if newer:
                other = newer[-1]
                return RunEnd(
                    "replaced",
                    replaced_by=other.run_id,
                    replaced_by_profile=other.profile,
                    replaced_by_owner=other.owner or "another console",
                    at=other.started_at,
                ).text()
            requested = end is not None and end.kind in REQUESTED_ENDS
            if not requested and ours.exit_signal != SIGTERM:
                return None
            await asyncio.sleep(READY_POLL_S)
        if end is not None and end.kind in REQUESTED_ENDS:
            return f"{end.text()}, with no run launched after it"
        return "stopped from outside this sweep (SIGTERM), with no run launched after it"

    async def _wait_connected(self) -> None:
        store = self.controller.bus.store
        deadline = time.monotonic() + RECONNECT_WAIT_S
        while time.monotonic() < deadline:
            await asyncio.sleep(READY_POLL_S)
            if store.connection is not None and store.connection.state == "connected":
                return
        raise SpecmonError(
            f"no connection to {self.plan.host} for {RECONNECT_WAIT_S:.0f} s; run the same "
            "command again to resume the sweep"
        )

    async def _run_point(
        self,
        sweep_id: int,
        index: int,
        point: SweepPoint,
        loads: Sequence[int | None],
        done: list[SweepPointResult],
    ) -> None:
        """Launch the point, wait until it is ready and measure it at each of ``loads`` (None:
        the plan's single load), appending each result to ``done`` once recorded. A failure
        is recorded against the load it happened at and every load after it."""
        self._emit(PointStarted(index, point, point.spec.shown().shell_command()))
        store = self.controller.bus.store
        connection_at_start = store.connection
        run_id: str | None = None
        launched_at = time.monotonic()
        load_seconds: float | None = None
        run_ref: int | None = None
        pending = list(loads)
        params = {} if point.is_baseline else point.params
        try:
            self._launched = True
            run_id = await self._launch(point)
            launched_at = time.monotonic()
            await self._wait_ready(index, run_id)
            load_seconds = time.monotonic() - launched_at
            base_url = await session_base_url(self.controller)
            while pending:
                load = pending[0]
                result = await self._measure(index, point, base_url, load)
                _check_served_flags(point, result.server_info)
                if point.is_baseline and result.speculative is not False:
                    raise PointFailed(
                        "the baseline server does not report speculation off in "
                        "/get_server_info; an unconfirmed baseline is not recorded as one"
                    )
                fingerprint = self._fingerprint(run_id)
                run = RunRecord(
                    host=self.plan.host,
                    profile=point.profile,
                    argv=point.spec.argv,
                    env=point.spec.env_dict(),
                    status="ready",
                    run_id=run_id,
                    load_seconds=load_seconds,
                    fingerprint=fingerprint,
                )
                context = BenchContext(
                    host=self.plan.host,
                    profile=point.profile,
                    argv=point.spec.argv,
                    env=point.spec.env_dict(),
                    fingerprint=fingerprint,
                    run_id=run_id,
                )
                point_id = self.ledger.record_sweep_point(
                    sweep_id,
                    params,
                    is_baseline=point.is_baseline,
                    status="ok",
                    run=run if run_ref is None else None,
                    benchmark=(result, context),
                    load_seconds=load_seconds,
                    concurrency=load,
                    run_ref=run_ref,
                )
                if load is not None and run_ref is None:
                    run_ref = self.ledger.point_run_ref(point_id)
                pending.pop(0)
                done.append(_ok_result(point, result, load_seconds, load))
                if load is not None:
                    self._finished_load(index, point, done[-1], skipped=False)
        except (SpecmonError, OSError) as exc:
            if isinstance(exc, SweepAborted):
                raise
            if _is_transport_error(exc) or (
                isinstance(exc, BenchError) and await self._dropped_since(connection_at_start)
            ):
                raise _ConnectionTrouble(str(exc) or type(exc).__name__) from exc
            replaced = await self._replaced_by_someone_else(run_id)
            if replaced is not None:
                raise PointInterrupted(
                    f"{point.label()}: interrupted, not failed: the server was {replaced}; "
                    "run the same command again to resume the sweep"
                ) from exc
            if load_seconds is None:
                load_seconds = time.monotonic() - launched_at
            root_cause = exc.root_cause if isinstance(exc, PointFailed) else ()
            failure = store.failure
            if (
                not root_cause
                and failure is not None
                and (run_id is None or failure.run_id in (None, run_id))
            ):
                root_cause = failure.root_cause
            message = str(exc) or type(exc).__name__
            run = RunRecord(
                host=self.plan.host,
                profile=point.profile,
                argv=point.spec.argv,
                env=point.spec.env_dict(),
                status=_failed_status(store),
                run_id=run_id,
                load_seconds=load_seconds,
                error=message,
                root_cause=root_cause,
                fingerprint=self._fingerprint(run_id),
            )
            for load in pending:
                point_id = self.ledger.record_sweep_point(
                    sweep_id,
                    params,
                    is_baseline=point.is_baseline,
                    status="failed",
                    run=run if run_ref is None else None,
                    load_seconds=load_seconds,
                    error=message,
                    root_cause=root_cause,
                    concurrency=load,
                    run_ref=run_ref,
                )
                if load is not None and run_ref is None:
                    run_ref = self.ledger.point_run_ref(point_id)
            if isinstance(exc, BenchError | PointFailed) or store.run_state in ("ready", "loading"):
                await _quietly_stop(self.controller)
            for load in pending:
                done.append(
                    SweepPointResult(
                        params=dict(point.params),
                        is_baseline=point.is_baseline,
                        status="failed",
                        tok_s=None,
                        accept_len=None,
                        verify_ms=None,
                        load_seconds=load_seconds,
                        error=message,
                        root_cause=root_cause,
                        concurrency=load,
                    )
                )
                if load is not None:
                    self._finished_load(index, point, done[-1], skipped=False)

    async def _measure(
        self, index: int, point: SweepPoint, base_url: str, load: int | None
    ) -> BenchResult:
        """The benchmark of one load (None: the plan's single load), repeated as the plan
        says for a sweep at several loads (warm-up before the first repeat only)."""
        from specmon.experiments.bench.timing import ProbeCollector

        settings = self.plan.bench if load is None else self.plan.bench_at(load)
        repeats = 1 if load is None else self.plan.repeats
        results: list[BenchResult] = []
        for repeat in range(repeats):
            async with ProbeCollector(self.controller.bus) as probes:
                results.append(
                    await run_benchmark(
                        base_url,
                        settings if repeat == 0 else replace(settings, warmup=0),
                        on_progress=lambda p: self._emit(PointBenchmarking(index, p)),
                        phase_timing=probes.phase_times,
                        backend=point.spec.backend.name,
                    )
                )
        return merge_repeats(results)

    async def _wait_ready(self, index: int, run_id: str) -> None:
        """Until the run is ready; PointFailed with the root cause if it fails, hangs or is slow."""
        store = self.controller.bus.store
        started = time.monotonic()
        last_report = 0.0
        while True:
            now = time.monotonic()
            current = store.run.run_id if store.run is not None else None
            if current == run_id:
                if store.run_state == "ready":
                    return
                if store.run_state in ("failed", "hung") and store.failure is not None:
                    failure = store.failure
                    # The first error is the root cause (later ones are its consequences,
                    # e.g. "Received sigquit from a child"); a hang's reason comes last.
                    lines = failure.root_cause
                    cause = (lines[-1] if failure.hung else lines[0]) if lines else None
                    what = "hung" if failure.hung else f"failed ({failure.category})"
                    detail = f": {cause}" if cause else ""
                    if failure.hung and failure.last_phase:
                        detail = f" in phase {failure.last_phase}{detail}"
                    raise PointFailed(f"server {what}{detail}", failure.root_cause)
                if store.run_state == "stopped":
                    raise PointFailed("server stopped before it was ready")
            elif store.run_end_id == run_id and store.run_end is not None:
                # Another client replaced it, and the session follows that client's run now.
                raise PointFailed(f"server {store.run_end.text()} before it was ready")
            elapsed = now - started
            if elapsed > self.ready_timeout_s:
                phase = store.loading.phase or "start-up"
                raise PointFailed(
                    f"not ready after {self.ready_timeout_s:.0f} s (last phase: {phase})"
                )
            if now - last_report >= LOADING_REPORT_S:
                last_report = now
                loading = store.loading
                self._emit(
                    PointLoading(
                        index,
                        loading.phase,
                        elapsed,
                        loading.eta_seconds(time.time()),
                        loading.shards_done,
                        loading.shards_total,
                    )
                )
            await asyncio.sleep(READY_POLL_S)


def _ok_result(
    point: SweepPoint, result: BenchResult, load_seconds: float | None, load: int | None
) -> SweepPointResult:
    phases = result.phase_times
    return SweepPointResult(
        params=dict(point.params),
        is_baseline=point.is_baseline,
        status="ok",
        tok_s=result.tok_s_overall,
        # per-request lengths where the replies carry them, else the server's /metrics
        # over the measured requests (vLLM's replies carry none)
        accept_len=(
            result.accept_len if result.accept_len is not None else result.metrics_accept_len
        ),
        verify_ms=phases.verify_ms if phases else None,
        load_seconds=load_seconds,
        speculative=result.speculative,
        model=result.model,
        concurrency=load,
        load=None if load is None else load_figures(result),
    )


def _failed_status(store: Any) -> str:
    state = store.run_state
    return state if state in ("failed", "hung") else "failed"


def _check_served_flags(point: SweepPoint, server_info: Mapping[str, Any] | None) -> None:
    """The server must run what the point asked for (a stale server would corrupt the table)."""
    if not server_info or point.is_baseline:
        return
    for name, wanted in point.params.items():
        if name[:1].isupper():
            continue
        key = name.replace("-", "_")
        if key not in server_info:
            continue
        served = server_info[key]
        if not _same_value(wanted, served):
            raise PointFailed(f"server reports {key}={served!r}, but the sweep launched {wanted}")


def _same_value(wanted: str, served: Any) -> bool:
    if str(served) == wanted:
        return True
    try:
        return float(served) == float(wanted)
    except (TypeError, ValueError):
        return False


async def session_base_url(controller: HostController) -> str:
    """The running server's HTTP base URL as reachable from here (SSH forward or localhost),
    once the host confirms the run itself listens there (ForeignListenerError else: another
    server's numbers must never be stored under this run's settings)."""
    await controller.check_listener()
    url = await controller.http_base_url()
    if not url:
        raise PointFailed("the host session knows no HTTP port for the running server")
    return url


async def _quietly_stop(controller: HostController) -> None:
    with contextlib.suppress(SpecmonError):
        await controller.stop()

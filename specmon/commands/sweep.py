"""`specmon sweep HOST --profile P --grid NAME=V1,V2 ...`: an unattended, recorded experiment."""

from __future__ import annotations

import argparse
from typing import Any

from specmon.commands.bench import (
    BENCH_REQUESTS,
    SWEEP_REQUESTS,
    add_bench_options,
    bench_settings,
    load_options,
)
from specmon.commands.sweep_session import SweepPrinter

DEFAULT_READY_TIMEOUT_S = 3600.0


EPILOG = """\
examples:
  specmon sweep local --profile demo --grid speculative-num-steps=1,3,5
  specmon sweep gpu-box --profile kimi --grid speculative-num-steps=2,4 --grid NCCL_PROTO=LL,Simple
  specmon sweep gpu-box --profile kimi --grid speculative-num-steps=1,3,5 --baseline --concurrency 1,8,32 --slo 'itl_p90<=30ms'
"""
"""The examples that end `specmon sweep --help`."""


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.commands.arguments import HOST_HELP, add_connection_arguments

    parser.add_argument(
        "host",
        metavar="HOST",
        help=HOST_HELP,
    )
    add_connection_arguments(parser)  # the SSH knobs and --state-dir, as launch has them
    parser.add_argument("--profile", required=True, metavar="P", help="launch profile to vary")
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="a flag (without --) or an UPPERCASE env var and its values; repeat for more axes",
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="also measure the baseline (speculation off) once, first",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per finished point")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="start a new sweep even if an interrupted one with the same grid can be resumed",
    )
    parser.add_argument(
        "--ready-timeout",
        type=float,
        default=DEFAULT_READY_TIMEOUT_S,
        metavar="S",
        help=f"give up on a launch not ready after S seconds (default {DEFAULT_READY_TIMEOUT_S:.0f})",
    )
    parser.add_argument(
        "--leave-running",
        action="store_true",
        help="leave the last launched server running (default: stop it at the end)",
    )
    add_bench_options(
        parser,
        requests=SWEEP_REQUESTS,
        requests_why=f" per point, fewer than bench's {BENCH_REQUESTS}: a sweep measures every "
        f"point of its grid; --requests {BENCH_REQUESTS} to compare with a bench",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio

    from specmon.commands.sweep_session import sweep_target
    from specmon.experiments.sweep import SweepPlan, parse_grid, plan_points
    from specmon.model.errors import UsageError

    settings = bench_settings(args)
    loads, repeats, _objective, _slos = load_options(args)
    axes = parse_grid(args.grid)
    if not args.ready_timeout > 0:
        raise UsageError("--ready-timeout must be positive")
    config, host_label, python = sweep_target(args)
    plan = SweepPlan(
        host=host_label,
        profile=args.profile,
        axes=axes,
        baseline=args.baseline,
        bench=settings,
        loads=loads,
        repeats=repeats if loads else 1,
    )
    points = plan_points(config, plan, python=python)
    return asyncio.run(_sweep(args, config, plan, points))


async def _sweep(args: argparse.Namespace, config: Any, plan: Any, points: list[Any]) -> int:
    from specmon.commands.sweep_session import run_sweep
    from specmon.experiments.sweep import SweepRunner

    _loads, _repeats, objective, slos = load_options(args)
    reporter = SweepReporter(plan, json_lines=args.json, objective=objective, slos=slos)

    def new_runner(session: Any, ledger: Any, plan: Any) -> SweepRunner:
        return SweepRunner(
            controller=session,
            ledger=ledger,
            plan=plan,
            points=points,
            on_event=reporter,
            ready_timeout_s=args.ready_timeout,
            fresh=args.fresh,
            stop_at_end=not args.leave_running,
        )

    return await run_sweep(args, config, plan, reporter, new_runner, command="sweep", passed=any)


class SweepReporter(SweepPrinter):
    """Prints sweep progress to stderr and finished points (JSON) or the final table (stdout);
    a sweep at several loads ranks its points by ``objective`` under ``slos``."""

    def __init__(
        self,
        plan: Any,
        *,
        json_lines: bool,
        objective: Any = None,
        slos: tuple[Any, ...] = (),
        out: Any = None,
        err: Any = None,
    ) -> None:
        super().__init__(plan, json_lines=json_lines, out=out, err=err)
        from specmon.experiments.load import DEFAULT_OBJECTIVE, OBJECTIVES

        self.objective = objective or OBJECTIVES[DEFAULT_OBJECTIVE]
        self.slos = slos

    def __call__(self, event: Any) -> None:
        from specmon.experiments.report import progress_printer
        from specmon.experiments.sweep import (
            PointBenchmarking,
            PointFinished,
            PointLoading,
            PointRetrying,
            PointSkipped,
            PointStarted,
            SweepStarted,
        )

        if isinstance(event, SweepStarted):
            self.total = len(event.points)
            verb = "resuming" if event.resumed else "starting"
            done = f", {len(event.done_keys)} already done" if event.resumed else ""
            loads = self.plan.loads
            at = f" at {len(loads)} loads ({','.join(map(str, loads))})" if loads else ""
            self._say(f"{verb} sweep s{event.sweep_id}: {self.total} points{at}{done}")
        elif isinstance(event, PointSkipped):
            self._say(f"[{event.index + 1}/{self.total}] {event.point.label()}: done earlier")
            self._point_json(event.result)
        elif isinstance(event, PointStarted):
            notes = f" ({'; '.join(event.point.notes)})" if event.point.notes else ""
            self._say(f"[{event.index + 1}/{self.total}] {event.point.label()}{notes}")
            self._say(f"  launch: {event.command}")
        elif isinstance(event, PointLoading):
            eta = "" if event.eta_s is None else f", ETA {event.eta_s:.0f} s"
            shards = f" {event.shards_done}/{event.shards_total}" if event.shards_total else ""
            self._say(
                f"  loading: {event.phase or 'starting'}{shards}, {event.elapsed_s:.0f} s{eta}"
            )
        elif isinstance(event, PointBenchmarking):
            progress_printer(self.err)(event.progress)
        elif isinstance(event, PointRetrying):
            self._say(f"  connection lost ({event.reason}); retrying once reconnected")
        elif isinstance(event, PointFinished):
            result = event.result
            figures = result.load
            if result.status == "ok" and figures is not None:
                self._say(
                    f"  ok at concurrency {figures.concurrency}: {figures.tok_s:.1f} tok/s "
                    f"({figures.tok_s_per_request:.1f} per request), TTFT p90 "
                    f"{_num(figures.ttft_p90_ms, 1)} ms, ITL p90 {_num(figures.itl_p90_ms, 2)} ms"
                )
            elif result.status == "ok":
                self._say(
                    f"  ok: {result.tok_s:.1f} tok/s, accept len "
                    f"{_num(result.accept_len, 2)}, verify {_num(result.verify_ms, 2)} ms, "
                    f"load {result.load_seconds:.1f} s"
                )
            else:
                self._say(f"  FAILED: {result.error}")
                for line in result.root_cause[-3:]:
                    self._say(f"    {line}")
            self._point_json(result)

    def final(self, finished: Any) -> None:
        from specmon.experiments.report import sweep_table

        names = [axis.name for axis in self.plan.axes]
        if self.plan.loads:
            self._table(self.load_tables(finished, names))
            return
        self._table(sweep_table(finished.results, names, finished.baseline))

    def load_tables(self, finished: Any, names: list[str]) -> str:
        """Every point per load, then the best setting per load against the baseline there."""
        from specmon.experiments.report import best_per_load_table, load_sweep_table

        results, baselines = finished.results, finished.baselines
        return (
            load_sweep_table(results, names, self.objective, self.slos, baselines)
            + "\n\n"
            + best_per_load_table(results, self.objective, self.slos, baselines)
        )


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"

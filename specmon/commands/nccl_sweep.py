"""`specmon nccl-sweep HOST --profile P --grid NCCL_PROTO=LL,Simple ...`: a collective
benchmark (its profile's command, e.g. ``python -m specmon.nccl_bench``) launched once per
setting through the host session; per-size latency and the evidence that each setting reached
every rank, read from the run's log, recorded in the ledger."""

from __future__ import annotations

import argparse
from typing import Any

from specmon.commands.sweep_session import SweepPrinter

DEFAULT_RUN_TIMEOUT_S = 600.0


EPILOG = """\
examples:
  specmon nccl-sweep gpu-box --profile allreduce --grid NCCL_PROTO=LL,LL128,Simple
  specmon nccl-sweep gpu-box --profile allreduce --grid NCCL_ALGO=Ring,Tree --json
"""
"""The examples that end `specmon nccl-sweep --help`."""


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.commands.arguments import HOST_HELP, add_connection_arguments

    parser.add_argument("host", metavar="HOST", help=HOST_HELP)
    add_connection_arguments(parser)  # the SSH knobs and --state-dir, as launch has them
    parser.add_argument(
        "--profile", required=True, metavar="P", help="profile whose command is the benchmark"
    )
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="an UPPERCASE env var and its values ('unset' removes it); repeat for more axes",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per finished point")
    parser.add_argument(
        "--fresh", action="store_true", help="start over instead of resuming the same sweep"
    )
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=DEFAULT_RUN_TIMEOUT_S,
        metavar="S",
        help=f"stop a point still running after S seconds (default {DEFAULT_RUN_TIMEOUT_S:.0f})",
    )
    parser.add_argument(
        "--ledger",
        metavar="PATH",
        help="ledger file (default: the user data dir, or $SPECMON_DATA_DIR)",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio

    from specmon.commands.sweep_session import sweep_target
    from specmon.experiments.collective_sweep import CollectivePlan, plan_collective_points
    from specmon.experiments.sweep import parse_grid
    from specmon.model.errors import UsageError

    axes = parse_grid(args.grid)
    if not args.run_timeout > 0:
        raise UsageError("--run-timeout must be positive")
    config, host_label, python = sweep_target(args)
    plan = CollectivePlan(host=host_label, profile=args.profile, axes=axes)
    points = plan_collective_points(config, plan, python=python)
    return asyncio.run(_sweep(args, config, plan, points))


async def _sweep(args: argparse.Namespace, config: Any, plan: Any, points: list[Any]) -> int:
    from specmon.commands.sweep_session import run_sweep
    from specmon.experiments.collective_sweep import CollectiveSweepRunner

    reporter = CollectiveReporter(plan, json_lines=args.json)

    def new_runner(session: Any, ledger: Any, plan: Any) -> CollectiveSweepRunner:
        return CollectiveSweepRunner(
            session,
            ledger,
            plan,
            points,
            on_event=reporter,
            run_timeout_s=args.run_timeout,
            fresh=args.fresh,
        )

    return await run_sweep(
        args, config, plan, reporter, new_runner, command="nccl-sweep", passed=all
    )


class CollectiveReporter(SweepPrinter):
    """Progress on stderr; JSON lines or the final table on stdout."""

    def __call__(self, event: Any) -> None:
        from specmon.experiments.collective_sweep import CollectivePointFinished
        from specmon.experiments.sweep import PointStarted, SweepStarted

        if isinstance(event, SweepStarted):
            self.total = len(event.points)
            verb = "resuming" if event.resumed else "starting"
            self._say(f"{verb} nccl-sweep s{event.sweep_id}: {self.total} points")
        elif isinstance(event, PointStarted):
            self._say(f"[{event.index + 1}/{self.total}] {event.point.label()}")
            self._say(f"  launch: {event.command}")
        elif isinstance(event, CollectivePointFinished):
            result = event.result
            if event.skipped:
                self._say(f"[{event.index + 1}/{self.total}] {event.point.label()}: done earlier")
            elif result.status == "ok":
                smallest = result.results[0]
                self._say(
                    f"  ok: {len(result.results)} sizes, p50 {smallest.p50_us:.1f} us at "
                    f"{smallest.bytes} B; {'; '.join(result.evidence)}"
                )
            else:
                self._say(f"  FAILED: {result.error}")
            self._point_json(result)

    def final(self, finished: Any) -> None:
        from specmon.experiments.report import collective_table

        names = [axis.name for axis in self.plan.axes]
        self._table(collective_table(finished.results, names))

"""`specmon nccl-sweep HOST --profile P --grid NCCL_PROTO=LL,Simple ...`: a collective
benchmark (its profile's command, e.g. ``python -m specmon.nccl_bench``) launched once per
setting through the host session; per-size latency and the evidence that each setting reached
every rank, read from the run's log, recorded in the ledger."""

from __future__ import annotations

import argparse
import sys
from typing import Any

DEFAULT_RUN_TIMEOUT_S = 600.0


EPILOG = """\
examples:
  specmon nccl-sweep gpu-box --profile allreduce --grid NCCL_PROTO=LL,LL128,Simple
  specmon nccl-sweep gpu-box --profile allreduce --grid NCCL_ALGO=Ring,Tree --json
"""
"""The examples that end `specmon nccl-sweep --help`."""


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.commands.arguments import HOST_HELP

    parser.add_argument("host", metavar="HOST", help=HOST_HELP)
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

    from specmon.commands.sweep_session import sweep_host
    from specmon.experiments.collective_sweep import CollectivePlan, plan_collective_points
    from specmon.experiments.sweep import parse_grid
    from specmon.launch.config import load_config
    from specmon.model.errors import UsageError

    axes = parse_grid(args.grid)
    if not args.run_timeout > 0:
        raise UsageError("--run-timeout must be positive")
    config = load_config(getattr(args, "config", None))
    config.profile(args.profile)
    host_label, python = sweep_host(config, args.host)
    plan = CollectivePlan(host=host_label, profile=args.profile, axes=axes)
    points = plan_collective_points(config, plan, python=python)
    return asyncio.run(_sweep(args, config, plan, points))


async def _sweep(args: argparse.Namespace, config: Any, plan: Any, points: list[Any]) -> int:
    import asyncio
    from dataclasses import replace

    from specmon.commands.sweep_session import interrupted, sweep_session
    from specmon.experiments.collective_sweep import CollectiveSweepRunner

    reporter = CollectiveReporter(plan, json_lines=args.json)
    runner: CollectiveSweepRunner | None = None
    async with sweep_session(args.host, config, args.ledger) as (session, ledger):
        try:
            await session.start()
            if session.host_label != plan.host:
                plan = replace(plan, host=session.host_label)
            runner = CollectiveSweepRunner(
                session,
                ledger,
                plan,
                points,
                on_event=reporter,
                run_timeout_s=args.run_timeout,
                fresh=args.fresh,
            )
            finished = await runner.run()
            reporter.final(finished)
            return 0 if all(r.status == "ok" for r in finished.results) else 1
        except asyncio.CancelledError:
            return interrupted("nccl-sweep", runner.sweep_id if runner is not None else None)


class CollectiveReporter:
    """Progress on stderr; JSON lines or the final table on stdout."""

    def __init__(self, plan: Any, *, json_lines: bool, out: Any = None, err: Any = None) -> None:
        self.plan = plan
        self.json_lines = json_lines
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self.total = 0

    def __call__(self, event: Any) -> None:
        from specmon.experiments.collective_sweep import (
            CollectivePointFinished,
            CollectivePointStarted,
            CollectiveStarted,
        )

        if isinstance(event, CollectiveStarted):
            self.total = len(event.points)
            verb = "resuming" if event.resumed else "starting"
            self._say(f"{verb} nccl-sweep s{event.sweep_id}: {self.total} points")
        elif isinstance(event, CollectivePointStarted):
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
            if self.json_lines:
                import json

                self.out.write(json.dumps(result.to_json_dict()) + "\n")
                self.out.flush()

    def final(self, finished: Any) -> None:
        from specmon.experiments.report import collective_table

        names = [axis.name for axis in self.plan.axes]
        table = collective_table(finished.results, names)
        (self.err if self.json_lines else self.out).write(table + "\n")
        self.out.flush()

    def _say(self, text: str) -> None:
        from specmon.model.terminal_text import safe_text

        self.err.write(safe_text(text) + "\n")
        self.err.flush()

"""`specmon stop HOST`: stop the server run on a host, verified gone, headless.

``--run-id ID`` stops one run of the state dir by its id and ``--all`` every live run,
whoever launched them (e.g. a late launch that finished after its console died)."""

from __future__ import annotations

import argparse
import json

EPILOG = """\
examples:
  specmon stop gpu-box                  stop the live run on gpu-box
  specmon stop gpu-box --run-id 20261203-104750-4e05
  specmon stop --profile kimi-2x8       every node of a multi-node run
"""
"""The examples that end `specmon stop --help`."""


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.commands.arguments import add_host_arguments

    add_host_arguments(parser)
    for action in parser._actions:
        if action.dest == "host":
            action.nargs = "?"  # none with --profile: its nodes
            action.help = f"{action.help}; optional with --profile of a profile with nodes"
    parser.add_argument("--json", action="store_true", help="print the steps as JSON")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--run-id", metavar="ID", help="stop this run (see specmon status)")
    which.add_argument("--all", action="store_true", help="stop every live run on the host")
    which.add_argument(
        "--profile", metavar="P", help="a profile with nodes: stop its server on every node"
    )


def run(args: argparse.Namespace) -> int:
    from specmon.commands.nodes import controller_from_args, nodes_profile
    from specmon.commands.printers import load_config_from, run_async, session_from_args

    config = load_config_from(args)
    spanning = nodes_profile(args, config)
    if spanning is not None:
        session = controller_from_args(args, config, spanning)
    elif args.profile:
        from specmon.model.errors import UsageError

        raise UsageError(f"profile {args.profile!r} has no nodes; stop HOST stops its run")
    elif not args.host:
        from specmon.model.errors import UsageError

        raise UsageError("stop: give the HOST to stop a run on (or --profile P with nodes)")
    else:
        session = session_from_args(args, config)

    async def main() -> int:
        await session.start()  # with the GPU agent: a stop waits for GPU memory to return
        try:
            if spanning is not None:
                report = await session.stop()
                reports = [report] if report is not None else []
            elif args.all:
                reports = await session.stop_all_runs()
            elif args.run_id:
                report = await session.stop_run(args.run_id)
                reports = [report] if report is not None else []
            else:
                report = await session.stop()
                reports = [report] if report is not None else []
        finally:
            await session.close()
        if not reports:
            what = f"run {args.run_id} is not running" if args.run_id else "no live run to stop"
            print(json.dumps({"stopped": None}) if args.json else what)
            return 0
        for report in reports:
            if args.json:
                steps = [{"step": s, "seconds": t, "detail": d} for s, t, d in report.steps]
                print(json.dumps({"stopped": report.run_id, "steps": steps}))
            else:
                print(f"stopped {report.run_id} on {session.host_label}")
                for step, seconds, detail in report.steps:
                    print(f"  {step:<13} {seconds:7.2f}s" + (f"  {detail}" if detail else ""))
        return 0

    return run_async(main)

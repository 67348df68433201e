"""`specmon stop HOST`: stop the server run on a host, verified gone, headless."""

from __future__ import annotations

import argparse
import json


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.session.arguments import add_host_arguments

    add_host_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the steps as JSON")


def run(args: argparse.Namespace) -> int:
    from specmon.session.cli import load_config_from, run_async, session_from_args

    session = session_from_args(args, load_config_from(args))

    async def main() -> int:
        await session.start()
        try:
            report = await session.stop()
        finally:
            await session.close()
        if report is None:
            print(json.dumps({"stopped": None}) if args.json else "no live run to stop")
            return 0
        if args.json:
            steps = [{"step": s, "seconds": t, "detail": d} for s, t, d in report.steps]
            print(json.dumps({"stopped": report.run_id, "steps": steps}))
        else:
            print(f"stopped {report.run_id} on {session.host_label}")
            for step, seconds, detail in report.steps:
                print(f"  {step:<13} {seconds:7.2f}s" + (f"  {detail}" if detail else ""))
        return 0

    return run_async(main)

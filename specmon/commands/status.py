"""`specmon status HOST`: the runs on a host, their state, argv and load time."""

from __future__ import annotations

import argparse
import json
import time


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.session.arguments import add_host_arguments

    add_host_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the runs as JSON")
    parser.add_argument("--all", action="store_true", help="list ended runs too (default: last 5)")


def run(args: argparse.Namespace) -> int:
    from specmon.session.cli import load_config_from, run_async, session_from_args

    session = session_from_args(args, load_config_from(args))

    async def main() -> int:
        await session.start(streams=False)
        try:
            runs = await session.status()
        finally:
            await session.close()
        if not args.all:
            runs = [r for r in runs if r.alive] + [r for r in runs if not r.alive][-5:]
            runs.sort(key=lambda r: r.started_at or 0)
        if args.json:
            print(json.dumps({"host": session.host_label, "runs": [r.to_dict() for r in runs]}))
            return 0
        if not runs:
            print(f"no runs on {session.host_label}")
            return 0
        from specmon.terminal_text import safe_text

        for r in runs:
            started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.started_at or 0))
            load = f"{r.load_seconds:.1f}s" if r.load_seconds is not None else "-"
            head = f"{r.run_id}  {r.state:<18} profile={r.profile} started={started} load={load}"
            print(safe_text(head))
            print(safe_text(f"    {' '.join(r.argv)}"))
            if r.env:
                env = " ".join(f"{k}={v}" for k, v in sorted(r.env.items()))
                print(safe_text(f"    env: {env}"))
        return 0

    return run_async(main)

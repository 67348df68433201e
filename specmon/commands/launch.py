"""`specmon launch HOST --profile P`: start a server run on a host, headless. A profile with
``nodes`` starts one server over all of them (HOST then optional, one of its nodes)."""

from __future__ import annotations

import argparse
import json
import sys

EPILOG = """\
examples:
  specmon launch local -p demo --wait ready       the simulator here, until it is ready
  specmon launch gpu-box -p kimi --set speculative-num-steps=3
  specmon launch gpu-box -p kimi --env NCCL_PROTO=LL --json
"""
"""The examples that end `specmon launch --help`."""


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.commands.arguments import HOST_HELP, UNTIL_CHOICES, add_connection_arguments

    parser.add_argument(
        "host",
        metavar="HOST",
        nargs="?",
        help=f"{HOST_HELP}; optional for a profile with nodes (then one of them)",
    )
    add_connection_arguments(parser)
    parser.add_argument("--profile", "-p", required=True, help="launch profile from the config")
    parser.add_argument(
        "--set",
        dest="flags",
        action="append",
        metavar="FLAG=VALUE",
        help="override a server flag, e.g. --set speculative-num-steps=2 (repeatable)",
    )
    parser.add_argument(
        "--env",
        action="append",
        metavar="NAME=VALUE",
        help="set an environment variable, e.g. --env NCCL_PROTO=LL (repeatable)",
    )
    parser.add_argument(
        "--wait",
        choices=UNTIL_CHOICES[:1],
        help="wait until the server is ready (exit 1 if it fails first)",
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to --wait")
    parser.add_argument("--json", action="store_true", help="print the run as JSON")


def run(args: argparse.Namespace) -> int:
    from specmon.commands.nodes import controller_from_args, nodes_profile
    from specmon.commands.printers import (
        load_config_from,
        parse_assignments,
        run_async,
        session_from_args,
        stream_events,
    )
    from specmon.model.errors import UsageError

    flags = parse_assignments(args.flags, "--set")
    env = parse_assignments(args.env, "--env")
    config = load_config_from(args)
    config.profile(args.profile)  # one "unknown profile, did you mean" before any host
    spanning = nodes_profile(args, config)
    if spanning is not None:
        session = controller_from_args(args, config, spanning)
    elif not args.host:
        raise UsageError(f"name the HOST to launch on (profile {args.profile!r} has no nodes)")
    else:
        session = session_from_args(args, config)

    async def main() -> int:
        await session.start()
        try:
            queue = session.bus.subscribe(bounded=False)  # drained only after the launch
            run_id = await session.launch(args.profile, flags=flags, env=env)
            run = session.current_run
            if args.json:
                print(json.dumps({"run_id": run_id, "host": session.host_label, **run.to_dict()}))
            else:
                print(f"launched {run_id} on {session.host_label} (pid {run.pid})")
            sys.stdout.flush()
            if not args.wait:
                session.bus.unsubscribe(queue)
                return 0
            return await stream_events(
                session,
                as_json=args.json,
                with_log=False,
                until="ready",
                duration=args.timeout,
                queue=queue,
                run_id=run_id,
            )
        finally:
            await session.close()

    return run_async(main)

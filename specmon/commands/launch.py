"""`specmon launch HOST --profile P`: start a server run on a host, headless. A profile with
``nodes`` starts one server over all of them (HOST then optional, one of its nodes)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

EPILOG = """\
examples:
  specmon launch local -p demo --wait ready       the simulator here, until it is ready
  specmon launch gpu-box -p kimi --set speculative-num-steps=3
  specmon launch gpu-box -p kimi --take-over 15438 --yes   replace a server specmon did not launch
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
    parser.add_argument(
        "--take-over",
        nargs="?",
        const="",
        metavar="PID|auto",
        help="first stop this server specmon did not launch (a pid, auto: the only one, "
        "unit:NAME, container:NAME; alone: the profile's attach key), after a confirmation; "
        "then launch",
    )
    parser.add_argument(
        "--yes",
        action="store_true",
        help="with --take-over: no confirmation (needed without a TTY)",
    )


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

    take_over = parse_take_over(args, spanning is not None, config)

    async def main() -> int:
        await session.start()
        try:
            queue = session.bus.subscribe(bounded=False)  # drained only after the launch
            stop_queue = None
            if take_over is not None:
                server, ticks = await take_over_target(session, args, config, take_over)
                stop_queue = session.bus.subscribe(bounded=False)  # the take-over's stop steps
                run_id = await session.take_over(args.profile, server, ticks, flags=flags, env=env)
            else:
                run_id = await session.launch(args.profile, flags=flags, env=env)
            run = session.current_run
            if args.json:
                print(json.dumps({"run_id": run_id, "host": session.host_label, **run.to_dict()}))
            else:
                print(f"launched {run_id} on {session.host_label} (pid {run.pid})")
            if stop_queue is not None:
                print_take_over(session, stop_queue, f"pid-{server.pid}", as_json=args.json)
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


def parse_take_over(args: argparse.Namespace, spanning: bool, config: Any) -> Any:
    """``--take-over``'s target (None without it; alone, the one `connect HOST -p P` would
    attach to: the profile's ``attach`` key, else the host's); refused in one line for a
    profile with nodes, or with no TTY to confirm on and no ``--yes``."""
    from specmon.launch.config import attach_for
    from specmon.model.attach_target import parse_attach_target
    from specmon.model.errors import UsageError

    if args.take_over is None:
        return None
    if spanning:
        raise UsageError("--take-over replaces a server on one host, not a profile with nodes")
    text = args.take_over or attach_for(
        None, config.profile(args.profile), config.hosts.get(args.host)
    )
    if not text:
        raise UsageError(
            f"--take-over alone takes profile {args.profile!r}'s attach key, and it has none "
            "(nor has the host): give a target, e.g. --take-over PID"
        )
    try:
        target = parse_attach_target(text)
    except ValueError as exc:
        raise UsageError(f"--take-over: {exc}") from None
    if not args.yes and not sys.stdin.isatty():
        raise UsageError("--take-over stops a process: confirm it on a terminal, or add --yes")
    return target


async def take_over_target(session: Any, args: argparse.Namespace, config: Any, target: Any) -> Any:
    """(the server ``target`` names on the host, its start ticks), once the host said this
    user may stop it (the helper's checks, nothing signalled) and the user confirmed: refused
    in one line when it is no server, a container or unit the profile does not let specmon
    stop, or another user's process."""
    from specmon.model.errors import UsageError
    from specmon.model.terminal_text import safe_text
    from specmon.session.foreign import check_take_over, survey_host
    from specmon.state.foreign import choose_server, start_ticks_of

    host = args.host or session.host_label
    survey = await survey_host(session.helper, pid=target.pid, host=host)
    try:
        server = choose_server(survey, target)
    except UsageError as exc:
        raise UsageError(safe_text(str(exc).replace("--attach", "--take-over"))) from None
    plan = await check_take_over(
        session.helper,
        server,
        start_ticks_of(survey, server.pid) if server.pid is not None else None,
        host=host,
        profile_name=args.profile,
        profile=config.profile(args.profile),
    )
    print("\n".join(safe_text(line) for line in plan.lines()), file=sys.stderr)
    if not args.yes:
        answer = input("Stop it and launch? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            raise UsageError(f"take-over of pid {server.pid} cancelled; nothing stopped")
    return server, plan.ticks


def print_take_over(session: Any, queue: Any, old: str, *, as_json: bool) -> None:
    """The take-over's stop as it went (each step and its time, then ``stopped``: taken
    over), printed after the launch line, which stays the first line of the output."""
    from specmon.commands.printers import print_event

    session.bus.unsubscribe(queue)
    while not queue.empty():
        at, event = queue.get_nowait()
        if getattr(event, "run_id", None) == old:
            print_event(at, event, as_json=as_json, with_log=False, out=sys.stdout)

"""`specmon watch HOST [HOST ...]`: hosts' event streams as text or JSON lines, for scripts.

With several hosts each is connected in parallel with its own session, and every line says
which host it is from (JSON: a ``host`` field; text: the host after the clock).
"""

from __future__ import annotations

import argparse

EPILOG = """\
examples:
  specmon watch gpu-box --json --log    JSON lines, with the server's log lines
  specmon watch gpu-box --until ready   wait for the server to be ready, then end
  specmon watch http://10.0.0.5:30000   a server by its URL alone: HTTP only, no SSH
"""
"""The examples that end `specmon watch --help`."""


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.commands.arguments import UNTIL_CHOICES, add_attach_argument, add_hosts_arguments
    from specmon.commands.url_targets import add_backend_argument

    add_hosts_arguments(parser)
    parser.add_argument("--json", action="store_true", help="JSON lines (with arrival time 'at')")
    parser.add_argument("--log", action="store_true", help="include the server's log lines")
    parser.add_argument("--until", choices=UNTIL_CHOICES, help="stop at ready, failure or exit")
    parser.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    parser.add_argument(
        "-p",
        "--profile",
        metavar="P",
        help="a profile with nodes: watch its server over all of them; "
        "with attach: the server it names",
    )
    add_backend_argument(parser)
    add_attach_argument(parser)


def run(args: argparse.Namespace) -> int:
    from specmon.commands.nodes import attach_profile, controller_from_args, nodes_profile
    from specmon.commands.printers import (
        load_config_from,
        sessions_from_args,
        watch_fleet_headless,
        watch_headless,
    )
    from specmon.commands.url_targets import url_sessions
    from specmon.state.fleet import fleet_names

    by_url = url_sessions(args)  # http://HOST:PORT: before any config or SSH lookup
    if by_url is not None:
        if len(by_url) == 1:
            return watch_headless(by_url[0][1], args)
        return watch_fleet_headless(by_url, args)
    config = load_config_from(args)
    spanning = nodes_profile(args, config)
    if spanning is not None:  # one server over several nodes, watched as one run
        return watch_headless(controller_from_args(args, config, spanning), args)
    names = fleet_names(args.hosts, config, every=False, offers_all=False)
    sessions = sessions_from_args(args, config, names, attach_profile=attach_profile(args, config))
    if len(sessions) == 1:
        return watch_headless(sessions[0][1], args)
    return watch_fleet_headless(sessions, args)

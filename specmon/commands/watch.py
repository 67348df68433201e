"""`specmon watch HOST`: a host's event stream as text or JSON lines, for scripts."""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.session.arguments import UNTIL_CHOICES, add_host_arguments

    add_host_arguments(parser)
    parser.add_argument("--json", action="store_true", help="JSON lines (with arrival time 'at')")
    parser.add_argument("--log", action="store_true", help="include the server's log lines")
    parser.add_argument("--until", choices=UNTIL_CHOICES, help="stop at ready, failure or exit")
    parser.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    parser.add_argument(
        "--profile", metavar="P", help="a profile with nodes: watch its server over all of them"
    )


def run(args: argparse.Namespace) -> int:
    from specmon.session.cli import load_config_from, session_from_args, watch_headless
    from specmon.session.nodes_cli import controller_from_args, nodes_profile

    config = load_config_from(args)
    spanning = nodes_profile(args, config)
    if spanning is not None:
        return watch_headless(controller_from_args(args, config, spanning), args)
    session = session_from_args(args, config)

    return watch_headless(session, args)

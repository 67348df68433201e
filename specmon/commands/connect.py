"""`specmon connect HOST`: the console on a GPU host over SSH (or the event stream headless).

The server outlives the console: quitting closes the streams and the GPU agent, not the run.
"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.session.arguments import UNTIL_CHOICES, add_host_arguments

    add_host_arguments(parser)
    parser.add_argument("--headless", action="store_true", help="print events instead of the UI")
    parser.add_argument("--json", action="store_true", help="headless: JSON lines")
    parser.add_argument("--log", action="store_true", help="headless: include server log lines")
    parser.add_argument("--until", choices=UNTIL_CHOICES, help="headless: stop at this point")
    parser.add_argument("--duration", type=float, metavar="S", help="headless: stop after S s")


def run(args: argparse.Namespace) -> int:
    import sys

    from specmon.session.cli import load_config_from, session_from_args, watch_headless

    config = load_config_from(args)
    session = session_from_args(args, config)
    headless = args.headless or not (sys.stdin.isatty() and sys.stdout.isatty())
    if not headless:
        try:
            from specmon.tui.app import run_console
        except ImportError:
            print(
                "specmon: the console UI is not available; showing the event stream",
                file=sys.stderr,
            )
        else:
            return run_console(session, config)

    return watch_headless(session, args)

"""`specmon connect HOST [HOST ...]`: the console on GPU hosts over SSH (or the event stream
headless). One host opens its main screen; several (or `--all`, every host in specmon.toml)
open the fleet overview, each host with its own session, reconnects and failures.

The server outlives the console: quitting closes the streams and the GPU agent, not the run.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specmon.exporter.server import MetricsServer
    from specmon.state.controller import HostController


EPILOG = """\
examples:
  specmon connect gpu-box               the console on one host of specmon.toml
  specmon connect a b c                 the fleet console over three hosts
  specmon connect gpu-box --attach      the console on a server specmon did not launch
"""
"""The examples that end `specmon connect --help`."""


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.commands.arguments import UNTIL_CHOICES, add_attach_argument, add_hosts_arguments
    from specmon.commands.url_targets import add_backend_argument

    add_hosts_arguments(parser, every=True)
    parser.add_argument("--headless", action="store_true", help="print events instead of the UI")
    parser.add_argument("--json", action="store_true", help="headless: JSON lines")
    parser.add_argument("--log", action="store_true", help="headless: include server log lines")
    parser.add_argument("--until", choices=UNTIL_CHOICES, help="headless: stop at this point")
    parser.add_argument("--duration", type=float, metavar="S", help="headless: stop after S s")
    parser.add_argument(
        "--console",
        action="store_true",
        help="open the console even without a terminal (what `specmon serve` runs)",
    )
    parser.add_argument(
        "--read-only", action="store_true", help="console: hide and refuse relaunch, stop, sweeps"
    )
    parser.add_argument(
        "-p",
        "--profile",
        metavar="P",
        help="a profile with nodes: its server over all of them; with attach: the server it "
        "names (the take-over form starts on it)",
    )
    add_attach_argument(parser)
    parser.add_argument(
        "--export",
        metavar="ADDR",
        help="also serve this host's metrics to Prometheus at HOST:PORT (see `specmon export`)",
    )
    add_backend_argument(parser)


def run(args: argparse.Namespace) -> int:
    import sys

    from specmon.commands.nodes import attach_profile, controller_from_args, nodes_profile
    from specmon.commands.printers import (
        load_config_from,
        sessions_from_args,
        watch_fleet_headless,
        watch_headless,
    )
    from specmon.commands.url_targets import url_sessions
    from specmon.model.errors import UsageError
    from specmon.state.fleet import fleet_names

    by_url = url_sessions(args)  # http://HOST:PORT: before any config or SSH lookup
    config = None if by_url is not None else load_config_from(args)
    spanning = nodes_profile(args, config) if by_url is None else None
    attaching = attach_profile(args, config) if by_url is None else None
    sessions: list[tuple[str, Any]]
    if by_url is not None:  # read-only: nothing of a server is changed over HTTP
        sessions, args.read_only = by_url, True
    elif spanning is not None:  # one server over several nodes: one controller for all of them
        sessions = [(spanning.name, controller_from_args(args, config, spanning))]
    else:
        names = fleet_names(args.hosts, config, every=args.all_hosts)
        sessions = sessions_from_args(args, config, names, attach_profile=attaching)
    beside = [metrics_server(args.export, sessions, config)] if args.export else []
    headless = args.headless or not (args.console or (sys.stdin.isatty() and sys.stdout.isatty()))
    if not headless:
        try:
            from specmon.tui.app import run_console
            from specmon.tui.fleet_app import run_fleet_console
        except ImportError:
            print(
                "specmon: the console UI is not available; showing the event stream",
                file=sys.stderr,
            )
        else:
            if len(sessions) > 1:
                return run_fleet_console(sessions, config, read_only=args.read_only, beside=beside)
            return run_console(
                sessions[0][1],
                config,
                read_only=args.read_only,
                beside=beside,
                attach_profile=attaching.name if attaching is not None else None,
            )

    if len(sessions) > 1:
        if beside:
            raise UsageError(
                "--export with several hosts runs beside the console only; "
                "headless, use `specmon export HOST ...`"
            )
        return watch_fleet_headless(sessions, args)
    return watch_headless(sessions[0][1], args, beside)


def metrics_server(
    listen: str, sessions: list[tuple[str, HostController]], config: Any
) -> MetricsServer:
    """The exporter for these hosts, served beside the console on its event loop."""
    from specmon.exporter.collector import WatchedHost
    from specmon.exporter.hosts import backend_of_profile
    from specmon.exporter.server import MetricsServer, build_registry
    from specmon.model.errors import UsageError
    from specmon.model.listen import is_loopback, parse_listen

    host, port = parse_listen(listen, option="--export")
    if not is_loopback(host):
        raise UsageError(
            f"--export {listen}: not a loopback address; to serve metrics to other machines "
            "use `specmon export --public` with --bearer-token-file or --basic-auth-file"
        )
    watched = [WatchedHost(name, session.bus) for name, session in sessions]
    backends = backend_of_profile(config) if config is not None else {}  # None: URL targets
    return MetricsServer(build_registry(lambda: watched, backends), host, port)

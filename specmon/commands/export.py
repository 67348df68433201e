"""`specmon export HOST [HOST ...]`: a Prometheus exporter for a fleet, headless.

One session per host (never launching or stopping anything), their state stores served as
`/metrics` in the Prometheus text format; see specmon/exporter/.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specmon.controller import HostController

DEFAULT_LISTEN = "127.0.0.1:9464"


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.session.arguments import HOST_HELP, add_connection_arguments

    parser.add_argument("hosts", nargs="+", metavar="HOST", help=HOST_HELP)
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="ADDR",
        help=f"HOST:PORT to serve /metrics on (default {DEFAULT_LISTEN})",
    )
    parser.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    add_connection_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from specmon.errors import UsageError
    from specmon.listen import parse_listen
    from specmon.session.cli import load_config_from, run_async

    host, port = parse_listen(args.listen)
    if len(set(args.hosts)) != len(args.hosts):
        raise UsageError("a host is named twice; each host is exported once")
    if args.duration is not None and args.duration <= 0:
        raise UsageError("--duration must be positive")
    config = load_config_from(args)
    sessions = [(name, exporter_session(args, config, name)) for name in args.hosts]
    return run_async(lambda: export_until_stopped(sessions, config, host, port, args.duration))


def exporter_session(args: argparse.Namespace, config: Any, host: str) -> HostController:
    """A watching session for ``host`` with the exporter's reconnect policy (near-forever)."""
    from dataclasses import replace

    from specmon.exporter.hosts import RECONNECT_ATTEMPTS
    from specmon.session.cli import session_from_args

    session: Any = session_from_args(argparse.Namespace(**{**vars(args), "host": host}), config)
    session.options = replace(session.options, reconnect_max_attempts=RECONNECT_ATTEMPTS)
    return session


async def export_until_stopped(
    sessions: list[tuple[str, HostController]],
    config: Any,
    host: str,
    port: int,
    duration: float | None,
) -> int:
    import asyncio
    import sys

    from specmon.exporter.hosts import Fleet, backend_of_profile
    from specmon.exporter.server import MetricsServer, build_registry

    fleet = Fleet(sessions)
    server = MetricsServer(build_registry(fleet.watched, backend_of_profile(config)), host, port)
    await server.start()
    try:
        print(f"specmon export: serving {len(sessions)} host(s) at {server.url}", flush=True)
        fleet.start()
        if duration is None:
            await asyncio.Event().wait()
        else:
            await asyncio.sleep(duration)
    finally:
        try:
            await fleet.close()
        finally:
            await server.close()
            print("specmon export: stopped", file=sys.stderr, flush=True)
    return 0

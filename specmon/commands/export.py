"""`specmon export HOST [HOST ...]`: a Prometheus exporter for a fleet, headless.

One session per host (never launching or stopping anything), their state stores served as
`/metrics` in the Prometheus text format; see specmon/exporter/. Loopback by default; another
address needs `--public` and credentials (a bearer token file and/or a basic-auth file, as
Prometheus's scrape config sends them).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specmon.exporter.auth import ScrapeAuth
    from specmon.state.controller import HostController

DEFAULT_LISTEN = "127.0.0.1:9464"


EPILOG = """\
examples:
  specmon export local                  http://127.0.0.1:9464/metrics for Prometheus
  specmon export a b c --listen 127.0.0.1:9500
  specmon export gpu-box --listen 0.0.0.0:9464 --public --bearer-token-file token.txt
"""
"""The examples that end `specmon export --help`."""


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.commands.arguments import HOST_HELP, add_connection_arguments

    parser.add_argument("hosts", nargs="+", metavar="HOST", help=HOST_HELP)
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="ADDR",
        help=f"HOST:PORT to serve /metrics on (default {DEFAULT_LISTEN}; loopback unless --public)",
    )
    parser.add_argument(
        "--public",
        action="store_true",
        help="allow a non-loopback address; --bearer-token-file or --basic-auth-file is then "
        "required",
    )
    parser.add_argument(
        "--bearer-token-file",
        metavar="PATH",
        help="require 'Authorization: Bearer TOKEN', TOKEN being this file's content (mode "
        "0600; Prometheus: authorization: {credentials_file: ...})",
    )
    parser.add_argument(
        "--basic-auth-file",
        metavar="PATH",
        help="require HTTP basic auth, one USER:PASSWORD a line (mode 0600; Prometheus: "
        "basic_auth: {username: ..., password_file: ...})",
    )
    parser.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    add_connection_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from specmon.commands.printers import load_config_from, run_async
    from specmon.exporter.auth import ScrapeAuth
    from specmon.model.errors import UsageError
    from specmon.model.listen import is_loopback, parse_listen

    host, port = parse_listen(args.listen)
    with_auth = args.bearer_token_file is not None or args.basic_auth_file is not None
    if not is_loopback(host) and not args.public:
        raise UsageError(
            f"--listen {args.listen}: not a loopback address; add --public and "
            "--bearer-token-file or --basic-auth-file to serve metrics to other machines"
        )
    if args.public and not with_auth:
        raise UsageError("--public needs --bearer-token-file or --basic-auth-file")
    auth = (
        ScrapeAuth.from_files(args.bearer_token_file, args.basic_auth_file) if with_auth else None
    )
    if len(set(args.hosts)) != len(args.hosts):
        raise UsageError("a host is named twice; each host is exported once")
    if args.duration is not None and args.duration <= 0:
        raise UsageError("--duration must be positive")
    config = load_config_from(args)
    sessions = [(name, exporter_session(args, config, name)) for name in args.hosts]
    return run_async(
        lambda: export_until_stopped(sessions, config, host, port, args.duration, auth)
    )


def exporter_session(args: argparse.Namespace, config: Any, host: str) -> HostController:
    """A watching session for ``host`` with the exporter's reconnect policy (near-forever)."""
    from dataclasses import replace

    from specmon.commands.printers import session_from_args
    from specmon.exporter.hosts import RECONNECT_ATTEMPTS

    session: Any = session_from_args(argparse.Namespace(**{**vars(args), "host": host}), config)
    session.options = replace(session.options, reconnect_max_attempts=RECONNECT_ATTEMPTS)
    return session


async def export_until_stopped(
    sessions: list[tuple[str, HostController]],
    config: Any,
    host: str,
    port: int,
    duration: float | None,
    auth: ScrapeAuth | None = None,
) -> int:
    import asyncio
    import sys

    from specmon.exporter.hosts import Fleet, backend_of_profile
    from specmon.exporter.server import MetricsServer, build_registry

    fleet = Fleet(sessions)
    registry = build_registry(fleet.watched, backend_of_profile(config))
    server = MetricsServer(registry, host, port, auth)
    await server.start()
    try:
        needs = f" (scrapes must carry {auth.schemes})" if auth is not None else ""
        print(f"specmon export: serving {len(sessions)} host(s) at {server.url}{needs}", flush=True)
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

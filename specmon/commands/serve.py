"""`specmon serve [HOST]`: the console as a web page (textual-serve), for a teammate without an
SSH client or a wall screen. Each browser tab runs its own console process.

Loopback by default; a non-loopback address needs `--public`, and then every request must
carry an access token (printed once; compared in constant time). `--read-only` hides and
refuses relaunch, stop and sweeps.
"""

from __future__ import annotations

import argparse

DEFAULT_LISTEN = "127.0.0.1:8765"


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.session.arguments import HOST_HELP, add_connection_arguments

    parser.add_argument(
        "hosts", nargs="*", metavar="HOST", help=f"{HOST_HELP} (none: the built-in demo)"
    )
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="ADDR",
        help=f"HOST:PORT to serve on (default {DEFAULT_LISTEN}; loopback unless --public)",
    )
    parser.add_argument(
        "--public",
        action="store_true",
        help="allow a non-loopback address; an access token is then required",
    )
    parser.add_argument(
        "--read-only", action="store_true", help="hide and refuse relaunch, stop and sweeps"
    )
    add_connection_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import secrets

    from specmon.errors import UsageError
    from specmon.listen import is_loopback, parse_listen, url_host
    from specmon.tui.web import TokenServer

    host, port = parse_listen(args.listen)
    if not is_loopback(host) and not args.public:
        raise UsageError(
            f"--listen {args.listen}: not a loopback address; add --public to serve the "
            "console to other machines (an access token is then required)"
        )
    token = secrets.token_urlsafe(24) if args.public else None
    server = TokenServer(console_command(args), host=host, port=port, title="specmon", token=token)
    where = f"http://{url_host(host)}:{port}/"
    if token is not None:
        print(f"specmon serve: open {where}?token={token}  (the token is shown only now)")
    else:
        print(f"specmon serve: open {where}")
    server.serve()
    return 0


def console_command(args: argparse.Namespace) -> str:
    """The command each browser tab runs: the console (forced, without a terminal); several
    hosts open the fleet console, as `specmon connect` does."""
    import shlex
    import sys

    argv = [sys.executable, "-m", "specmon"]
    if args.config:
        argv += ["--config", args.config]
    if args.hosts:
        argv += ["connect", *args.hosts]
        for option, value in (
            ("--known-hosts", args.known_hosts),
            ("--state-dir", args.state_dir),
            ("--gpu-agent", args.gpu_agent),
        ):
            if value:
                argv += [option, value]
        for option, values in (("--ssh-config", args.ssh_config), ("--identity", args.identity)):
            for value in values or ():
                argv += [option, value]
    else:
        argv += ["demo"]
    argv += ["--console"]
    if args.read_only:
        argv += ["--read-only"]
    return shlex.join(argv)

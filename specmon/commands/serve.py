"""`specmon serve [HOST]`: the console as a web page (textual-serve), for a teammate without an
SSH client or a wall screen. Each browser tab runs its own console process.

Loopback by default; a non-loopback address needs `--public`. Every start prints a fresh access
token once, as a URL; the page swaps it for a cookie (`--no-token`, loopback only, drops it).
Requests from another origin are refused, at most `--max-sessions` consoles run at once and
one idle for `--idle-timeout` ends. `--read-only` hides and refuses relaunch, stop and sweeps.
"""

from __future__ import annotations

import argparse

DEFAULT_LISTEN = "127.0.0.1:8765"
DEFAULT_MAX_SESSIONS = 4
DEFAULT_IDLE_TIMEOUT = "30m"
NO_TOKEN_NOTE = (
    "--no-token: any local user or program that can reach this port can drive the console; "
    "pages from other origins are still refused"
)


EPILOG = """\
examples:
  specmon serve                         the demo console as a web page (token in the URL)
  specmon serve gpu-box --read-only     one host's console, nothing can be changed
  specmon serve a b --listen 127.0.0.1:8080
"""
"""The examples that end `specmon serve --help`."""


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.commands.arguments import HOST_HELP, add_connection_arguments

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
        help="allow a non-loopback address (the access token stays required)",
    )
    parser.add_argument(
        "--no-token",
        action="store_true",
        help="loopback only: no access token, so any local user or program that can reach the "
        "port can drive the console (pages from other origins are still refused)",
    )
    parser.add_argument(
        "--max-sessions",
        type=int,
        default=DEFAULT_MAX_SESSIONS,
        metavar="N",
        help=f"at most N consoles (browser tabs) at once (default {DEFAULT_MAX_SESSIONS})",
    )
    parser.add_argument(
        "--idle-timeout",
        default=DEFAULT_IDLE_TIMEOUT,
        metavar="TIME",
        help="end a console with no keystroke for TIME: seconds, or 90s, 30m, 2h "
        f"(default {DEFAULT_IDLE_TIMEOUT})",
    )
    parser.add_argument(
        "--read-only", action="store_true", help="hide and refuse relaunch, stop and sweeps"
    )
    add_connection_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import secrets
    import shlex

    from specmon.model.errors import UsageError
    from specmon.model.listen import is_loopback, parse_listen, url_host
    from specmon.tui.web import ConsoleServer

    host, port = parse_listen(args.listen)
    if not is_loopback(host) and not args.public:
        raise UsageError(
            f"--listen {args.listen}: not a loopback address; add --public to serve the "
            "console to other machines (an access token is then required)"
        )
    if args.no_token and (args.public or not is_loopback(host)):
        raise UsageError("--no-token is for a loopback address only, never with --public")
    if args.max_sessions < 1:
        raise UsageError(f"--max-sessions {args.max_sessions}: must be at least 1")
    idle_timeout = parse_duration(args.idle_timeout, option="--idle-timeout")
    if args.hosts:
        # Each tab's console reads the config: one that is untrusted or wrong is told here,
        # once, instead of inside every browser tab.
        from specmon.launch.config import load_config

        load_config(args.config)
    token = None if args.no_token else secrets.token_urlsafe(24)
    server = ConsoleServer(
        shlex.split(console_command(args)),
        host=host,
        port=port,
        token=token,
        public=args.public,
        max_sessions=args.max_sessions,
        idle_timeout=idle_timeout,
    )
    where = f"http://{url_host(host)}:{port}/"
    if token is not None:
        print(f"specmon serve: open {where}?token={token}  (the token is shown only now)")
    else:
        print(f"specmon serve: open {where}  ({NO_TOKEN_NOTE})")
    print(
        f"specmon serve: at most {args.max_sessions} consoles at once; one with no keystroke "
        f"for {args.idle_timeout} ends",
        flush=True,
    )
    server.serve()
    return 0


def parse_duration(text: str, *, option: str) -> float:
    """``90``, ``90s``, ``30m`` or ``2h`` -> seconds (positive); a one-line UsageError else."""
    import re

    from specmon.model.errors import UsageError

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if match is None:
        raise UsageError(f"{option} {text!r}: expected seconds, or a time such as 90s, 30m, 2h")
    seconds = float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]
    if seconds <= 0:
        raise UsageError(f"{option} {text!r}: must be more than 0")
    return seconds


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

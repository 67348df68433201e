"""URL targets of `specmon watch` and `specmon connect` (``http://HOST:PORT``): told apart
from SSH hosts before any config or SSH lookup, and each watched by a read-only
``UrlController`` (specmon/session/url.py): no SSH at all."""

from __future__ import annotations

import argparse
from typing import Any

BACKEND_HELP = "a URL target's server, by backend name; default: told from its answers"


def add_backend_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", metavar="NAME", help=BACKEND_HELP)


def url_sessions(args: argparse.Namespace) -> list[tuple[str, Any]] | None:
    """A read-only controller per URL HOST, or None when no HOST is a URL (a UsageError in
    one line for a bad URL, URLs mixed with SSH hosts, or options that need a host)."""
    from specmon.model.errors import UsageError
    from specmon.session.url import UrlController, is_url_target, parse_url_target

    hosts: list[str] = list(args.hosts)
    urls = [host for host in hosts if is_url_target(host)]
    backend = getattr(args, "backend", None)
    if not urls:
        if backend is not None:
            raise UsageError("--backend is for a URL target (http://HOST:PORT)")
        return None
    if len(urls) != len(hosts) or getattr(args, "all_hosts", False):
        raise UsageError("URL targets cannot be mixed with SSH hosts or --all: watch them apart")
    if getattr(args, "profile", None):
        raise UsageError("--profile needs SSH hosts; a URL target is one server already")
    if getattr(args, "attach", None):
        raise UsageError("--attach needs an SSH host; a URL target is one server already")
    if getattr(args, "log", False):
        raise UsageError("--log: a server watched by its URL shows no log (it needs SSH)")
    return [(url, UrlController(parse_url_target(url), backend=backend)) for url in urls]

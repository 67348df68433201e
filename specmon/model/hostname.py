"""``[user@]host[:port]``: how a person names a host (a config host, an ssh alias, an address).

Its own module so the config reader checks a profile's ``nodes`` without importing the host
session."""

from __future__ import annotations

import re

from specmon.model.errors import UsageError

_HOST_RE = re.compile(
    r"^(?:(?P<user>[A-Za-z0-9._][A-Za-z0-9._-]*)@)?"
    r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9._-]*)"
    r"(?::(?P<port>\d{1,5}))?$"
)


def parse_host(text: str) -> tuple[str | None, str, int | None]:
    """``[user@]host[:port]`` -> (user, host, port); a clear UsageError for anything else."""
    match = _HOST_RE.match(text.strip())
    if not match:
        raise UsageError(
            f"bad host {text!r}: expected [user@]host[:port], an ssh config alias, "
            "a host from specmon.toml, or 'local'"
        )
    port = int(match["port"]) if match["port"] else None
    if port is not None and not 1 <= port <= 65535:
        raise UsageError(f"bad host {text!r}: port {port} is not in 1..65535")
    return match["user"], match["host"].strip("[]"), port

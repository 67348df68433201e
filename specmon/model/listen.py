"""``--listen HOST:PORT`` for the commands that serve HTTP (`export`, `serve`): parsing, with a
one-line message for bad input, and whether an address stays on this machine."""

from __future__ import annotations

import ipaddress

from specmon.model.errors import UsageError


def parse_listen(text: str, *, option: str = "--listen") -> tuple[str, int]:
    """``127.0.0.1:9464``, ``[::1]:9464``, ``localhost:9464`` or ``:9464`` (loopback) ->
    (host, port); a UsageError naming the option for anything else."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not port_text.isdigit():
        raise UsageError(f"{option} {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9464")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise UsageError(f"{option} {text!r}: port {port} is not in 0..65535")
    host = host.strip("[]") or "127.0.0.1"
    if any(c.isspace() for c in host) or "/" in host:
        raise UsageError(f"{option} {text!r}: not a host name or address")
    return host, port


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_host(host: str) -> str:
    """The host as it goes in a URL (IPv6 in brackets)."""
    return f"[{host}]" if ":" in host else host

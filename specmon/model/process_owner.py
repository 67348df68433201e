"""Who owns a record or a directory: a process named by host, pid and the pid's start time,
so that "its owner is gone" is decided safely (a reused pid is another process)."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any


def this_process() -> dict[str, Any]:
    """This process as an owner: host name, pid and the pid's start time."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": start_ticks(os.getpid())}


def start_ticks(pid: int) -> int | None:
    """The pid's start time in clock ticks since boot (/proc), None if no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2 :].split()[19])


def owner_gone(owner: Mapping[str, Any] | None) -> bool:
    """Whether ``owner`` is known to be gone: on this host, its pid is not running, or runs
    another process. Another host's process, or an unreadable record, cannot be checked, so
    it counts as alive: nothing is cleaned up on a guess."""
    if not owner or owner.get("host") != socket.gethostname():
        return False
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    ticks = start_ticks(pid)
    return ticks is None or (owner.get("start") is not None and ticks != owner["start"])

"""A process's /proc/PID/stat fields, as the tests read them (parent, state, CPU ticks)."""

from __future__ import annotations

from pathlib import Path


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields after the command name (field 3, the state, is [0]), or None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def parent_of(pid: int | str) -> int | None:
    fields = stat_fields(pid)
    return None if fields is None else int(fields[1])


def running(pid: int | str) -> bool:
    """Alive and not a zombie."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def cpu_ticks(pid: int | str) -> int:
    """utime + stime in clock ticks; 0 for a process that is gone."""
    fields = stat_fields(pid)
    return 0 if fields is None else int(fields[11]) + int(fields[12])

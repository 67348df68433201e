"""Durations and latencies as text, with the unit that reads best: shared by the console's
panels and the headless commands (``watch``), so both say the same figure the same way."""

from __future__ import annotations

ABSENT = "—"  # a figure the server does not give (never shown as 0)


def format_duration(seconds: float | None) -> str:
    """``73`` -> ``1m13s``; ``4000`` -> ``1h06m``; None -> ``-``."""
    if seconds is None:
        return "-"
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def format_latency(seconds: float | None) -> str:
    """A request latency with the unit that reads best: ``850 µs``, ``6.2 ms``, ``62 ms``,
    ``1.75 s``, ``12.3 s``, ``2m05s``; None -> ``—``."""
    if seconds is None:
        return ABSENT
    ms = seconds * 1000.0
    if ms < 1.0:
        return f"{seconds * 1e6:.0f} µs"
    if ms < 9.95:
        return f"{ms:.1f} ms"
    if ms < 999.5:
        return f"{ms:.0f} ms"
    if seconds < 9.995:
        return f"{seconds:.2f} s"
    if seconds < 99.95:
        return f"{seconds:.1f} s"
    return format_duration(seconds)

"""Pure text helpers for the panels: durations, bars, mini sparklines and the Amdahl bound.

Kept free of widgets so they are unit-tested directly and shared by every panel.
"""

from __future__ import annotations

from collections.abc import Sequence

from specmon.model.durations import ABSENT, format_duration, format_latency
from specmon.model.events import RunInfo

__all__ = ["ABSENT", "format_duration", "format_latency"]  # re-exported: the panels' one import

SPARK_CHARS = "▁▂▃▄▅▆▇█"
BAR_FULL = "█"
BAR_PARTS = " ▏▎▍▌▋▊▉"

# The backend's key-flag names shown in the header, in order, with their labels.
KEY_FLAG_LABELS: tuple[tuple[str, str], ...] = (
    ("spec", "spec"),  # a backend that names its method this way (vLLM's `spec=eagle3 k=3`)
    ("k", "k"),
    ("steps", "steps"),
    ("topk", "topk"),
    ("draft_tokens", "draft"),
    ("tp", "tp"),
    ("mem_fraction", "mem"),
    ("NCCL_PROTO", "PROTO"),
    ("NCCL_ALGO", "ALGO"),
    ("NCCL_P2P_LEVEL", "P2P"),
)


def format_number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_tokens(count: float | None) -> str:
    """A token count kept short: ``812``, ``12.3k``, ``560k``, ``1.20M``; None -> ``—``."""
    if count is None:
        return ABSENT
    if count < 999.5:
        return f"{count:.0f}"
    if count < 99_950:
        return f"{count / 1000:.1f}k"
    if count < 999_500:
        return f"{count / 1000:.0f}k"
    return f"{count / 1e6:.2f}M"


def bar(fraction: float | None, width: int) -> str:
    """A horizontal bar of ``width`` cells with eighth-cell resolution."""
    if width <= 0:
        return ""
    if fraction is None:
        return "·" * width
    fraction = min(1.0, max(0.0, fraction))
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    text = BAR_FULL * full
    if full < width:
        text += BAR_PARTS[part] if part else " "
    return text.ljust(width)


def mini_sparkline(values: Sequence[float], width: int, top: float | None = None) -> str:
    """The last ``width`` values as block characters, scaled to ``top`` (or their max)."""
    if width <= 0:
        return ""
    recent = list(values)[-width:]
    if not recent:
        return " " * width
    ceiling = top if top else max(recent) or 1.0
    chars = []
    for value in recent:
        level = int(min(1.0, max(0.0, value / ceiling)) * (len(SPARK_CHARS) - 1))
        chars.append(SPARK_CHARS[level])
    return "".join(chars).rjust(width)


def amdahl_gain_percent(draft_ms: float, verify_ms: float, extend_ms: float) -> float | None:
    """Most a cycle could speed up if the draft phase took no time at all, in percent.

    A cycle is draft + verify + extend; removing the draft leaves verify + extend, so the
    bound is cycle / (cycle - draft) - 1.
    """
    cycle = draft_ms + verify_ms + extend_ms
    rest = verify_ms + extend_ms
    if cycle <= 0 or rest <= 0:
        return None
    return (cycle / rest - 1.0) * 100.0


def key_flags(run: RunInfo | None) -> list[tuple[str, str]]:
    """The launch's key flags from its recorded argv and env, as (label, value) pairs; the
    run's backend says which flags those are."""
    if run is None:
        return []
    from specmon.backends import DEFAULT_BACKEND, get_backend

    backend = get_backend(run.backend or DEFAULT_BACKEND)
    values = backend.key_flags(run.argv, dict(run.env))
    return [(label, values[key]) for key, label in KEY_FLAG_LABELS if values.get(key)]

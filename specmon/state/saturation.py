"""The saturation badges' words, one place for the console's header, its help and the fleet
overview: what a ``latency`` event's flags say to an operator at a glance."""

from __future__ import annotations

from specmon.model.events import Latency

QUEUE_BADGE = "QUEUE ↑"
PREEMPT_BADGE = "PREEMPT"

# (badge as shown, what it means): the help screen's legend and docs/console.md.
SATURATION_LEGEND: tuple[tuple[str, str], ...] = (
    (
        QUEUE_BADGE,
        "requests waiting rose over the latency window and still rise: "
        "they arrive faster than the server takes them",
    ),
    (
        "KV 9x%",
        "KV cache 90% full or more (its percent shown): new requests wait, or preempt others",
    ),
    (
        PREEMPT_BADGE,
        "requests were preempted (retracted) in the window: their KV cache was freed "
        "and they compute it again",
    ),
)


def kv_badge(usage: float) -> str:
    """``KV 93%``: floored, so a cache at 89.6% never reads 90%."""
    return f"KV {int(round(usage * 100, 6))}%"


def saturation_badges(latency: Latency | None) -> tuple[str, ...]:
    """The badges of the flags that are up, in the legend's order; none without figures."""
    if latency is None:
        return ()
    badges: list[str] = []
    if latency.queue_growing:
        badges.append(QUEUE_BADGE)
    if latency.kv_near_full and latency.kv_usage is not None:
        badges.append(kv_badge(latency.kv_usage))
    if latency.preempting:
        badges.append(PREEMPT_BADGE)
    return tuple(badges)

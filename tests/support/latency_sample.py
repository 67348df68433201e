"""``latency`` events for console tests: figures of a busy two-engine server, one with every
saturation flag up, and the recorded session with them appended (snapshots, fleet rows)."""

from __future__ import annotations

from support.tui_replay import T0, recorded_session

from specmon.model.events import Event, Latency, LatencyGroup
from specmon.model.quantiles import WindowQuantiles

TTFT = WindowQuantiles(count=48.0, mean=0.081, p50=0.062, p90=0.094, p99=0.121)
ITL = WindowQuantiles(count=4800.0, mean=0.019, p50=0.016, p90=0.035, p99=0.048)
E2E = WindowQuantiles(count=48.0, mean=1.9, p50=1.75, p90=2.35, p99=2.9)
PROMPT = WindowQuantiles(count=48.0, mean=420.0, p50=380.0, p90=900.0, p99=1800.0)
GENERATION = WindowQuantiles(count=48.0, mean=110.0, p50=100.0, p90=180.0, p99=250.0)
LATENCY_AT = T0 + 330.0  # after the recorded session's last decode sample


def sample_latency(**overrides: object) -> Latency:
    """A calm server: every figure present except TPOT and queue time (not served), one
    engine split in two."""
    fields: dict[str, object] = {
        "window_s": 60.0,
        "span_s": 60.0,
        "ttft_s": TTFT,
        "itl_s": ITL,
        "e2e_s": E2E,
        "prompt_tokens": PROMPT,
        "generation_tokens": GENERATION,
        "requests_per_s": 0.8,
        "finished": (("length", 40.0), ("stop", 8.0)),
        "prefix_cache_hit_rate": 0.12,
        "preemptions": 0.0,
        "running": 5,
        "waiting": 0,
        "max_running": 48,
        "kv_used_tokens": 12_561,
        "kv_total_tokens": 560_138,
        "kv_usage": 12_561 / 560_138,
        "group_label": "engine",
        "groups": (
            LatencyGroup(name="0", running=3, waiting=0, kv_usage=0.03, itl_s=ITL, ttft_s=TTFT),
            LatencyGroup(name="1", running=2, waiting=0, kv_usage=0.02, itl_s=ITL, ttft_s=TTFT),
        ),
    }
    fields.update(overrides)
    return Latency(**fields)  # type: ignore[arg-type]


def saturated_latency() -> Latency:
    """Queue growing, KV cache 93% full, requests preempted in the window."""
    return sample_latency(
        running=48,
        waiting=17,
        waiting_change=12.0,
        queue_growing=True,
        kv_used_tokens=520_928,
        kv_usage=0.93,
        kv_near_full=True,
        preemptions=3.0,
        preempting=True,
    )


def session_with_latency(latency: Latency) -> list[tuple[float, Event]]:
    """The recorded ready session, then ``latency`` as the last /metrics scrape gave it."""
    return [*recorded_session(ready=True), (LATENCY_AT, latency)]

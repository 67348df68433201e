"""vLLM's periodic stats lines (vllm.md §3), from the shared engine's running totals.

Every ``VLLM_LOG_STATS_INTERVAL`` seconds the API server writes ``Engine 000: Avg prompt
throughput ...`` and, when the interval had drafts, ``SpecDecoding metrics: ...``. A line is
written while this or the previous interval had throughput (vLLM logs the others at DEBUG), so
an idle server writes one zero line and then goes quiet.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from specmon.sim.engine import Engine


@dataclass(frozen=True, slots=True)
class Totals:
    """The engine's counters at one moment, as vLLM counts them."""

    prompt_tokens: int
    generation_tokens: int
    drafts: int
    draft_tokens: int
    accepted: int
    accepted_per_position: tuple[int, ...]

    @classmethod
    def of(cls, engine: Engine) -> Totals:
        stats = engine.stats
        return cls(
            stats.prefill_tokens_total,
            stats.emitted_tokens_total,
            stats.drafts_total,
            stats.draft_tokens_total,
            stats.accepted_drafts_total,
            tuple(stats.accepted_per_position),
        )


def stats_line(
    prompt_tps: float,
    generation_tps: float,
    running: int,
    waiting: int,
    kv_usage: float,
    prefix_hit_rate: float | None,
) -> str:
    """loggers.py:335's line for engine 0 (``kv_usage`` 0..1; the hit rate once seen)."""
    line = (
        f"Engine 000: Avg prompt throughput: {prompt_tps:.1f} tokens/s, Avg generation "
        f"throughput: {generation_tps:.1f} tokens/s, Running: {running} reqs, Waiting: "
        f"{waiting} reqs, GPU KV cache usage: {100 * kv_usage:.1f}%"
    )
    if prefix_hit_rate is not None:
        line += f", Prefix cache hit rate: {100 * prefix_hit_rate:.1f}%"
    return line


def spec_decode_line(before: Totals, after: Totals, seconds: float) -> str | None:
    """spec_decode/metrics.py:120's line for the interval; None when it had no drafts."""
    drafts = after.drafts - before.drafts
    if drafts <= 0:
        return None
    drafted = after.draft_tokens - before.draft_tokens
    accepted = after.accepted - before.accepted
    width = len(after.accepted_per_position)
    prior = before.accepted_per_position + (0,) * (width - len(before.accepted_per_position))
    per_position = ", ".join(
        f"{(now - then) / drafts:.3f}"
        for then, now in zip(prior, after.accepted_per_position, strict=True)
    )
    rate = 100 * accepted / drafted if drafted else 0.0
    return (
        f"SpecDecoding metrics: Mean acceptance length: {1 + accepted / drafts:.2f}, "
        f"Accepted throughput: {accepted / seconds:.2f} tokens/s, Drafted throughput: "
        f"{drafted / seconds:.2f} tokens/s, Accepted: {accepted} tokens, Drafted: "
        f"{drafted} tokens, Per-position acceptance rate: {per_position}, Avg Draft "
        f"acceptance rate: {rate:.1f}%"
    )


async def log_stats(engine: Engine, interval: float, write: Callable[[str, str], None]) -> None:
    """The frontend's stats logger, until cancelled; ``write(site, message)`` logs a line.
    A hung engine reports nothing (its output thread is stuck)."""
    last = Totals.of(engine)
    last_busy = seen_request = False
    while True:
        started = time.monotonic()
        await asyncio.sleep(interval)
        if engine.hung:
            continue
        seconds = time.monotonic() - started
        now = Totals.of(engine)
        prompt = (now.prompt_tokens - last.prompt_tokens) / seconds
        generation = (now.generation_tokens - last.generation_tokens) / seconds
        busy = prompt > 0 or generation > 0
        seen_request = seen_request or busy
        if busy or last_busy:
            write(
                "stats",
                stats_line(
                    prompt,
                    generation,
                    len(engine.running),
                    len(engine.waiting),
                    engine.token_usage,
                    0.0 if seen_request else None,  # the simulated cache never hits
                ),
            )
            spec = spec_decode_line(last, now, seconds)
            if spec is not None:
                write("spec", spec)
        last_busy, last = busy, now

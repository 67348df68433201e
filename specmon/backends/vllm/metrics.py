"""vLLM's Prometheus `/metrics` text -> a typed snapshot, and rates between two snapshots.

An idle vLLM drops its stats lines to DEBUG, and `--disable-log-stats`-free servers may log
them rarely; the counters on `/metrics` are always there (from start-up, at 0). Acceptance is
computed from counter increases between two polls, as vLLM's own docs define it
(v1/spec_decode/metrics.py): mean acceptance length = 1 + accepted / drafts, acceptance at
position i = accepted at i / drafts, draft acceptance rate = accepted / draft tokens, and
generation tok/s = generation tokens / seconds. Counters are summed over the engines (label
``engine``) unless one engine is asked for. Text is read with prometheus_client's parser.

A ``position`` label is the server's word, and the per-position tuple is sized by the largest
one: positions past the backend's ``max_draft_positions`` are dropped (and counted), so one
``position="20000000"`` sample costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from prometheus_client.parser import text_string_to_metric_families

from specmon.backends import Backend, MetricsReader
from specmon.backends.latency import LatencyFamilies, LatencyReader, Page, flag_int
from specmon.model.events import Decode, Event, Notice, SpecDecode

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # new name first

MAX_POSITIONS = Backend.max_draft_positions

_COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED_TOKENS, GENERATION_TOKENS, PROMPT_TOKENS)
_GAUGES = (RUNNING, WAITING, *KV_CACHE_USAGE)


class MetricsTextError(ValueError):
    """The text is not Prometheus exposition format."""


@dataclass(frozen=True, slots=True)
class EngineMetrics:
    """One engine's samples: counters (cumulative) and gauges, None where not exported."""

    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    accepted_per_position: tuple[float, ...] = ()
    generation_tokens: float | None = None
    prompt_tokens: float | None = None
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None  # 0..1


@dataclass(frozen=True, slots=True)
class VLLMMetricsSnapshot:
    """Every engine's samples at one poll; ``at`` is the poll's monotonic time in seconds."""

    at: float
    engines: dict[str, EngineMetrics] = field(default_factory=dict)
    dropped_positions: int = 0  # per-position samples past MAX_POSITIONS, left out

    @property
    def spec_decode(self) -> bool:
        """Whether the server exports speculative-decoding counters (a spec config is set)."""
        return any(engine.drafts is not None for engine in self.engines.values())


@dataclass(frozen=True, slots=True)
class SpecDecodeRates:
    """What happened between two polls; None where it cannot be computed (no drafts in the
    interval, a counter not exported, or a counter that went back: the server restarted)."""

    seconds: float
    drafts: float | None
    mean_accept_len: float | None
    per_position: tuple[float, ...] | None
    draft_acceptance_rate: float | None
    generation_tokens_per_s: float | None


def _position_index(label: str) -> int | None:
    """A ``position`` label's value as a 0-based index, None when it is not ASCII digits; a
    label too long to be a position reads as MAX_POSITIONS (past the cap, like any larger
    one), so ``int`` is never asked to read a 5000-digit label."""
    if not (label.isascii() and label.isdigit()):
        return None
    return int(label) if len(label) <= 9 else MAX_POSITIONS


def parse_metrics(text: str, at: float) -> VLLMMetricsSnapshot:
    """Read `/metrics` text into a snapshot; raises MetricsTextError on malformed text.
    Per-position samples at or past MAX_POSITIONS are dropped and counted."""
    samples: dict[str, dict[str, float]] = {}
    positions: dict[str, dict[int, float]] = {}
    dropped = 0
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = sample.name
                engine = sample.labels.get("engine", "0")
                if name == ACCEPTED_PER_POSITION:
                    position = _position_index(sample.labels.get("position", ""))
                    if position is not None and position >= MAX_POSITIONS:
                        dropped += 1
                    elif position is not None:
                        by_position = positions.setdefault(engine, {})
                        by_position[position] = by_position.get(position, 0.0) + sample.value
                elif name in _COUNTERS or name in _GAUGES:
                    values = samples.setdefault(engine, {})
                    values[name] = values.get(name, 0.0) + sample.value
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsTextError(f"not Prometheus metrics text: {exc}") from None
    engines: dict[str, EngineMetrics] = {}
    for engine in sorted(set(samples) | set(positions)):
        values = samples.get(engine, {})
        by_position = positions.get(engine, {})
        usage = next((values[name] for name in KV_CACHE_USAGE if name in values), None)
        engines[engine] = EngineMetrics(
            drafts=values.get(DRAFTS),
            draft_tokens=values.get(DRAFT_TOKENS),
            accepted_tokens=values.get(ACCEPTED_TOKENS),
            accepted_per_position=tuple(
                by_position.get(position, 0.0) for position in range(max(by_position) + 1)
            )
            if by_position
            else (),
            generation_tokens=values.get(GENERATION_TOKENS),
            prompt_tokens=values.get(PROMPT_TOKENS),
            running=values.get(RUNNING),
            waiting=values.get(WAITING),
            kv_cache_usage=usage,
        )
    return VLLMMetricsSnapshot(at=at, engines=engines, dropped_positions=dropped)


def _total(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return sum(present) if present else None


def _increase(before: float | None, after: float | None) -> float | None:
    if before is None or after is None or after < before:
        return None
    return after - before


def spec_decode_rates(
    before: VLLMMetricsSnapshot, after: VLLMMetricsSnapshot, engine: str | None = None
) -> SpecDecodeRates | None:
    """Rates between two snapshots (all engines summed, or ``engine``); None when the
    snapshots are not in time order."""
    seconds = after.at - before.at
    if seconds <= 0:
        return None

    def pick(snapshot: VLLMMetricsSnapshot) -> list[EngineMetrics]:
        if engine is None:
            return list(snapshot.engines.values())
        return [snapshot.engines[engine]] if engine in snapshot.engines else []

    old, new = pick(before), pick(after)

    def increase(read: Callable[[EngineMetrics], float | None]) -> float | None:
        return _increase(_total(map(read, old)), _total(map(read, new)))

    drafts = increase(attrgetter("drafts"))
    accepted = increase(attrgetter("accepted_tokens"))
    draft_tokens = increase(attrgetter("draft_tokens"))
    generated = increase(attrgetter("generation_tokens"))
    width = max((len(e.accepted_per_position) for e in new), default=0)
    per_position: tuple[float, ...] | None = None
    if drafts and width:
        rises = [
            _increase(_position_total(old, position), _position_total(new, position))
            for position in range(width)
        ]
        if all(rise is not None for rise in rises):
            per_position = tuple(round(rise / drafts, 6) for rise in rises if rise is not None)
    return SpecDecodeRates(
        seconds=seconds,
        drafts=drafts,
        mean_accept_len=(
            round(1 + accepted / drafts, 6) if drafts and accepted is not None else None
        ),
        per_position=per_position,
        draft_acceptance_rate=(
            round(accepted / draft_tokens, 6) if draft_tokens and accepted is not None else None
        ),
        generation_tokens_per_s=round(generated / seconds, 6) if generated is not None else None,
    )


def _position_total(engines: list[EngineMetrics], position: int) -> float:
    """Accepted tokens at ``position`` over the engines (0 where an engine has no sample)."""
    return sum(
        e.accepted_per_position[position]
        for e in engines
        if position < len(e.accepted_per_position)
    )


class VLLMMetricsReader(MetricsReader):
    """Successive `/metrics` pages -> a ``spec_decode`` event (mean acceptance length,
    acceptance per position, draft acceptance rate) and a ``decode`` event (generation tok/s,
    running and waiting requests, KV cache usage), from the counters' rise since the previous
    page: what the log's stats lines would say, for when they are off or quiet."""

    def __init__(self) -> None:
        self.previous: VLLMMetricsSnapshot | None = None
        self._positions_noticed = False  # the notice of dropped positions, said once

    def read(self, text: str, at: float) -> list[Event]:
        try:
            snapshot = parse_metrics(text, at)
        except MetricsTextError:
            return []
        events: list[Event] = []
        if snapshot.dropped_positions and not self._positions_noticed:
            self._positions_noticed = True
            events.append(
                Notice(
                    source="/metrics positions",
                    message=f"/metrics: {snapshot.dropped_positions} per-position samples "
                    f"past position {MAX_POSITIONS} left out (the deepest draft read)",
                )
            )
        previous, self.previous = self.previous, snapshot
        if previous is None:
            return events
        rates = spec_decode_rates(previous, snapshot)
        if rates is None:
            return events
        engines = list(snapshot.engines.values())
        running = _total(e.running for e in engines)
        waiting = _total(e.waiting for e in engines)
        usage = [e.kv_cache_usage for e in engines if e.kv_cache_usage is not None]
        if rates.generation_tokens_per_s is not None and running is not None:
            events.append(
                Decode(
                    running_req=int(running),
                    tokens=None,
                    token_usage=sum(usage) / len(usage) if usage else 0.0,
                    gen_throughput=round(rates.generation_tokens_per_s, 2),
                    queue_req=int(waiting or 0),
                )
            )
        if rates.drafts:
            events.append(
                SpecDecode(
                    mean_accept_len=rates.mean_accept_len,
                    drafted=None,
                    per_position=rates.per_position,
                    draft_acceptance_rate=rates.draft_acceptance_rate,
                )
            )
        return events


# --- latency and capacity (vllm.md section 4; v1/metrics/loggers.py) ---------------------

CACHE_CONFIG_INFO = "vllm:cache_config_info"  # an info gauge: the cache's shape in its labels

LATENCY_FAMILIES = LatencyFamilies(
    ttft=("vllm:time_to_first_token_seconds",),
    # Renamed in 0.11 (the old name, gone in 0.33, meant the same inter-token gaps).
    itl=("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    tpot=("vllm:request_time_per_output_token_seconds",),
    e2e=("vllm:e2e_request_latency_seconds",),
    queue=("vllm:request_queue_time_seconds",),
    prompt_tokens=("vllm:request_prompt_tokens",),
    generation_tokens=("vllm:request_generation_tokens",),
    finished=("vllm:request_success_total",),
    finish_label="finished_reason",
    prefix_hits=("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    prefix_queries=("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    preemptions=("vllm:num_preemptions_total",),
    running=(RUNNING,),
    waiting=(WAITING,),
    kv_usage=KV_CACHE_USAGE,
    kv_total_tokens=(CACHE_CONFIG_INFO,),
    group_label="engine",  # one per data-parallel engine core
)


class VLLMLatencyReader(LatencyReader):
    """vLLM's latency families. Its KV capacity is in ``vllm:cache_config_info``'s labels:
    ``kv_cache_size_tokens`` where the version has it, else ``num_gpu_blocks`` x
    ``block_size``; the maximum of running requests only in the launch's ``--max-num-seqs``
    (no family or info endpoint says it)."""

    def kv_total(self, page: Page, group: str | None) -> float | None:
        totals: dict[str | None, float] = {}
        for sample in page.samples(CACHE_CONFIG_INFO):
            tokens = _positive(sample.label("kv_cache_size_tokens"))
            if tokens is None:
                blocks = _positive(sample.label("num_gpu_blocks"))
                size = _positive(sample.label("block_size"))
                tokens = blocks * size if blocks is not None and size is not None else None
            if tokens is not None:
                totals[sample.label("engine")] = tokens
        if group is not None:
            return totals.get(group)
        return sum(totals.values()) if totals else None


def _positive(label: str | None) -> float | None:
    """A label holding a positive whole number (``"None"`` before the cache is sized: None)."""
    if label is None or not (label.isdigit() and len(label) < 13) or int(label) == 0:
        return None
    return float(label)


def new_latency_reader(argv: Sequence[str], window_s: float) -> VLLMLatencyReader:
    return VLLMLatencyReader(
        LATENCY_FAMILIES,
        window_s=window_s,
        max_running=flag_int(argv, "--max-num-seqs", "--max_num_seqs"),
    )

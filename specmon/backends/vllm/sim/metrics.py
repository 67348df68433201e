"""``/metrics`` in vLLM 0.33's names (vllm.md §4), rendered by prometheus_client.

Counters follow the shared engine's running totals (counted the way vLLM counts: drafts per
request per verify, draft positions, accepted tokens per position); the speculative counters
are exported at 0 from start-up when a speculative config is set.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from specmon.sim.engine import Engine

_LABELS = ("model_name", "engine")
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
SLEEP_STATES = (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0))  # a serving engine
_ITL_BUCKETS = (0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5)


class VllmMetrics:
    """Engine 0's counters, gauges and latency histograms."""

    def __init__(self, model_name: str, num_speculative_tokens: int) -> None:
        self.registry = registry = CollectorRegistry()
        self.labels = {"model_name": model_name, "engine": "0"}
        self._counted: dict[str, int] = {}

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(f"vllm:{name}", doc, (*_LABELS, *extra), registry=registry)

        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> Gauge:
            return Gauge(f"vllm:{name}", doc, (*_LABELS, *extra), registry=registry)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(f"vllm:{name}", doc, _LABELS, buckets=buckets, registry=registry)

        self.running = gauge(
            "num_requests_running", "Number of requests in model execution batches."
        )
        self.waiting = gauge("num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_usage = gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.sleep_state = gauge(
            "engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
            "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep "
            "level 2.",
            ("sleep_state",),
        )
        self.prompt_tokens = counter("prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter(
            "generation_tokens", "Number of generation tokens processed."
        )
        self.prefix_queries = counter("prefix_cache_queries", "Prefix cache queries, in tokens.")
        self.prefix_hits = counter("prefix_cache_hits", "Prefix cache hits, in tokens.")
        self.preemptions = counter("num_preemptions", "Cumulative number of preemptions.")
        self.success = counter(
            "request_success", "Count of successfully processed requests.", ("finished_reason",)
        )
        self.ttft = histogram(
            "time_to_first_token_seconds", "Time to first token.", _LATENCY_BUCKETS
        )
        self.itl = histogram("inter_token_latency_seconds", "Inter-token latency.", _ITL_BUCKETS)
        self.e2e = histogram("e2e_request_latency_seconds", "End-to-end latency.", _LATENCY_BUCKETS)
        self.k = num_speculative_tokens
        if self.k:
            self.drafts = counter("spec_decode_num_drafts", "Number of spec decoding drafts.")
            self.draft_tokens = counter("spec_decode_num_draft_tokens", "Number of draft tokens.")
            self.accepted = counter("spec_decode_num_accepted_tokens", "Number of accepted tokens.")
            self.per_position = counter(
                "spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                ("position",),
            )
            for position in range(self.k):
                self.per_position.labels(position=str(position), **self.labels)
            for family in (self.drafts, self.draft_tokens, self.accepted):
                family.labels(**self.labels)
        for histogram_family in (self.ttft, self.itl, self.e2e):  # vLLM exports them at 0
            histogram_family.labels(**self.labels)
        for family in (
            self.prompt_tokens,
            self.generation_tokens,
            self.prefix_queries,
            self.prefix_hits,
            self.preemptions,
        ):
            family.labels(**self.labels)

    def observe_latency(self, what: str, seconds: float) -> None:
        histogram = {"ttft": self.ttft, "itl": self.itl, "e2e": self.e2e}.get(what)
        if histogram is not None:
            histogram.labels(**self.labels).observe(seconds)

    def render(self, engine: Engine) -> bytes:
        stats = engine.stats
        labels = self.labels
        self.running.labels(**labels).set(len(engine.running))
        self.waiting.labels(**labels).set(len(engine.waiting))
        self.kv_usage.labels(**labels).set(min(1.0, engine.token_usage))
        for state, value in SLEEP_STATES:
            self.sleep_state.labels(sleep_state=state, **labels).set(value)
        self._advance("prompt", stats.prefill_tokens_total, self.prompt_tokens.labels(**labels))
        self._advance("prefix", stats.prefill_tokens_total, self.prefix_queries.labels(**labels))
        self._advance(
            "generation", stats.emitted_tokens_total, self.generation_tokens.labels(**labels)
        )
        self._advance(
            "success",
            stats.requests_total,
            self.success.labels(finished_reason="length", **labels),
        )
        if self.k:
            self._advance("drafts", stats.drafts_total, self.drafts.labels(**labels))
            self._advance(
                "draft_tokens", stats.draft_tokens_total, self.draft_tokens.labels(**labels)
            )
            self._advance("accepted", stats.accepted_drafts_total, self.accepted.labels(**labels))
            for position, total in enumerate(stats.accepted_per_position[: self.k]):
                self._advance(
                    f"pos{position}",
                    total,
                    self.per_position.labels(position=str(position), **labels),
                )
        return generate_latest(self.registry)

    def _advance(self, key: str, total: int, counter: Counter) -> None:
        delta = total - self._counted.get(key, 0)
        if delta > 0:
            counter.inc(delta)
            self._counted[key] = total

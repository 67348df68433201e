"""``/metrics`` as SGLang serves it with ``--enable-metrics``, per imitated version, rendered by
prometheus_client.

Names, types, labels, help texts and buckets are those of SGLang's own collectors, read in the
0.5.9 wheel (``srt/metrics/collector.py``, scheduler_metrics_mixin.py, tokenizer_manager.py,
``utils/common.py``'s HTTP middleware) and the 0.5.18 wheel (``srt/observability/
metrics_collector.py``): docs/simulator.md lists them. The values come from the engine (per
request timings and counts, engine steps, the running batch and the KV pool) and from the
simulated start-up; what a simulated server does not have (grammar, LoRA, PD disaggregation,
SWA or Mamba pools, a prefix cache that hits) reads as a real server without it reads.
SGLang serves a multiprocess registry, which emits no ``_created`` series: neither does this.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from specmon.sim.engine import Engine, EngineEvent, SimRequest

if TYPE_CHECKING:  # the HTTP stack loads on a thread during start-up (server.py)
    from specmon.sim.asgi import HttpExchange

VERSION_ENV = "SPECMON_SIM_SGLANG_VERSION"
DEFAULT_VERSION = "0.5.9"
VERSIONS = ("0.5.9", "0.5.18")  # the two whose metrics collectors were read

_SCHED_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")
_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
_E2E_BUCKETS = (*_TTFT_BUCKETS, 600, 1200, 1800, 2400)
_ITL_BUCKETS = (
    *(0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060),
    *(0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000),
)
_QUEUE_TAIL = (1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400, 500)
_QUEUE_TAIL += (600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000)
_QUEUE_BUCKETS = {
    "0.5.9": (0.0, 0.1, 0.2, 0.5, *_QUEUE_TAIL),
    "0.5.18": (0.0, 0.001, 0.005, 0.010, 0.050, 0.100, 0.200, 0.500, *_QUEUE_TAIL),
}
_RETRACTION_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 75, 100)
_PROMPT_LEN_BUCKETS = (
    *(100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000),
    *(12000, 15000, 20000, 22000, 25000, 30000, 35000, 40000, 66000, 99000, 132000, 300000),
    *(600000, 900000, 1100000),
)
_GRAPH_PHASES = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode")
_GRAPH_PHASES += ("draft_extend",)
_ROUTING_KEY_BOUNDS = (1, 2, 3, 5, 7, 10, 20, 50, 100, 200)
_STARTUP_PHASES = ("load_weight", "kv_cache_allocation", "scheduler_e2e", "tokenizer_e2e")
# SGLang's scheduler: the new-token ratio starts at 0.7 and decays over 600 decode steps to
# 0.7 x 0.14; it is reset when the batch runs empty (SGLANG_*_NEW_TOKEN_RATIO defaults).
NEW_TOKEN_RATIO_INIT = 0.7
NEW_TOKEN_RATIO_MIN = NEW_TOKEN_RATIO_INIT * 0.14
NEW_TOKEN_RATIO_DECAY = (NEW_TOKEN_RATIO_INIT - NEW_TOKEN_RATIO_MIN) / 600


def parse_version(value: str | None) -> str:
    """The imitated version (``SPECMON_SIM_SGLANG_VERSION``); ValueError for another one."""
    version = (value or DEFAULT_VERSION).strip().removeprefix("v")
    if version not in VERSIONS:
        raise ValueError(f"{VERSION_ENV} must be one of {', '.join(VERSIONS)}, not {value!r}")
    return version


@dataclass(frozen=True, slots=True)
class StartupFacts:
    """What the simulated start-up measured, for the gauges SGLang sets once.

    ``graph_seconds`` / ``graph_gib`` by SGLang's capture phase (target_verify,
    draft_decode, draft_extend, ...)."""

    startup_seconds: float
    load_seconds: float  # target weights (0.5.9's engine_load_weights_time)
    draft_load_seconds: float
    kv_seconds: float
    max_total_num_tokens: int
    context_len: int
    page_size: int
    weight_gib: float
    kv_gib: float
    available_gib: float  # rank 0's free memory after start-up
    graph_seconds: Mapping[str, float] = field(default_factory=dict)
    graph_gib: Mapping[str, float] = field(default_factory=dict)
    num_steps: int = 0
    num_draft_tokens: int = 0


class SimMetrics:
    """TP0's scheduler metrics, the tokenizer's and the HTTP middleware's, for one version."""

    def __init__(self, model_name: str, facts: StartupFacts, version: str = DEFAULT_VERSION):
        self.version = parse_version(version)
        self.newer = self.version != "0.5.9"
        self.registry = registry = CollectorRegistry()
        self.model_name = model_name
        self.facts = facts
        self._sched = {
            "model_name": model_name,
            "engine_type": "unified",
            "tp_rank": "0",
            "pp_rank": "0",
            "moe_ep_rank": "0",
        }
        self._tok = {"model_name": model_name}  # the tokenizer's labels
        if self.newer:
            self._tok["engine_type"] = "unified"
        self._new_token_ratio = NEW_TOKEN_RATIO_INIT

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(
                f"sglang:{name}",
                doc,
                _SCHED_LABELS,
                registry=registry,
                multiprocess_mode="mostrecent",
            )

        self.gauges: dict[str, Gauge] = {
            name: gauge(name, doc) for name, doc in self._gauge_docs().items()
        }
        self.cuda_graph_passes = Counter(
            "sglang:cuda_graph_passes_total",
            "Total number of forward passes categorized by CUDA graph.",
            (*_SCHED_LABELS, "mode"),
            registry=registry,
        )
        self.realtime_tokens = Counter(
            "sglang:realtime_tokens_total",
            "Total number of tokens processed (updated on each log interval). "
            "mode: prefill_compute, prefill_cache, decode.",
            (*_SCHED_LABELS, "mode"),
            registry=registry,
        )
        self.queue_time = Histogram(
            "sglang:queue_time_seconds",
            "Histogram of queueing time in seconds.",
            _SCHED_LABELS,
            buckets=_QUEUE_BUCKETS[self.version],
            registry=registry,
        )
        streaming = ("is_streaming",) if self.newer else ()
        tok = tuple(self._tok)
        self.prompt_tokens = Counter(
            "sglang:prompt_tokens_total",
            "Number of prefill tokens processed.",
            (*tok, *streaming),
            registry=registry,
        )
        self.generation_tokens = Counter(
            "sglang:generation_tokens_total",
            "Number of generation tokens processed.",
            (*tok, *streaming),
            registry=registry,
        )
        self.cached_tokens = Counter(
            "sglang:cached_tokens_total",
            "Number of cached prompt tokens by source (device/host/storage).",
            (*tok, "cache_source"),
            registry=registry,
        )
        self.num_requests = Counter(
            "sglang:num_requests_total",
            "Number of requests processed.",
            (*tok, *streaming),
            registry=registry,
        )
        self.num_aborted_requests = Counter(
            "sglang:num_aborted_requests_total",
            "Number of requests aborted.",
            tok,
            registry=registry,
        )
        self.time_to_first_token = Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            (*tok, *streaming),
            buckets=_TTFT_BUCKETS,
            registry=registry,
        )
        self.inter_token_latency = Histogram(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            tok,
            buckets=_ITL_BUCKETS,
            registry=registry,
        )
        self.e2e_request_latency = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            (*tok, *streaming),
            buckets=_E2E_BUCKETS,
            registry=registry,
        )
        self.http_requests = Counter(
            "sglang:http_requests_total",
            "Total number of HTTP requests by endpoint and method",
            ("endpoint", "method"),
            registry=registry,
        )
        self.http_responses = Counter(
            "sglang:http_responses_total",
            "Total number of HTTP responses by endpoint and status code",
            ("endpoint", "status_code", "method"),
            registry=registry,
        )
        self.http_requests_active = Gauge(
            "sglang:http_requests_active",
            "Number of currently active HTTP requests",
            ("endpoint", "method"),
            registry=registry,
            multiprocess_mode="livesum",
        )
        for name, what in (("running", "running"), ("all", "running+waiting")):
            routing = Gauge(
                f"sglang:routing_key_{name}_req_count",
                f"Distribution of routing keys by {what} request count (gt < count <= le).",
                (*_SCHED_LABELS, "gt", "le"),
                registry=registry,
                multiprocess_mode="mostrecent",
            )
            bounds = ("0", *map(str, _ROUTING_KEY_BOUNDS), "+Inf")
            for gt, le in itertools.pairwise(bounds):  # no routing keys: all 0
                routing.labels(**self._sched, gt=gt, le=le).set(0)
        if self.newer:
            self._init_0_5_18(registry)
        else:
            self._init_0_5_9(registry)

    # --- families of one version --------------------------------------------------------

    def _gauge_docs(self) -> dict[str, str]:
        """The scheduler gauges ``log_stats`` sets on every stats pass, by version."""
        docs = {
            "num_running_reqs": "The number of running requests.",
            "num_used_tokens": "The number of used tokens.",
            "token_usage": "The token usage.",
            "pending_prealloc_token_usage": (
                "The token usage for pending preallocated tokens (not preallocated yet)."
            ),
            "swa_token_usage": "The token usage for SWA layers.",
            "mamba_usage": "The token usage for Mamba layers.",
            "decode_sum_seq_lens": "The sum of all sequence lengths in decode.",
            "gen_throughput": "The generation throughput (token/s).",
            "num_queue_reqs": "The number of requests in the waiting queue.",
            "num_grammar_queue_reqs": "The number of requests in the grammar waiting queue.",
            "cache_hit_rate": "The prefix cache hit rate.",
            "max_total_num_tokens": "Maximum total number of tokens in the KV cache pool.",
            "spec_accept_length": "The average acceptance length of speculative decoding.",
            "spec_accept_rate": (
                "The average acceptance rate of speculative decoding (`accepted tokens / "
                "total draft tokens` in batch)."
            ),
            "num_retracted_reqs": "The number of retracted requests.",
            "num_paused_reqs": "The number of paused requests by async weight sync.",
            "num_prefill_inflight_queue_reqs": (
                "The number of requests in the prefill inflight queue."
            ),
            "num_decode_prealloc_queue_reqs": (
                "The number of requests in the decode prealloc queue."
            ),
            "num_decode_transfer_queue_reqs": (
                "The number of requests in the decode transfer queue."
            ),
            "utilization": "The utilization.",
            "new_token_ratio": "The new token ratio.",
            "is_cuda_graph": "Whether the batch is using CUDA graph.",
            "num_unique_running_routing_keys": "Number of unique routing keys in running batch.",
        }
        if not self.newer:
            docs.update(
                num_running_reqs_offline_batch=(
                    "The number of running low-priority offline batch requests(label is 'batch')."
                ),
                num_prefill_prealloc_queue_reqs=(
                    "The number of requests in the prefill prealloc queue."
                ),
                kv_transfer_speed_gb_s="The transfer speed of the KV cache in GB/s.",
                kv_transfer_latency_ms="The transfer latency of the KV cache in ms.",
                kv_transfer_bootstrap_ms="The bootstrap time of the KV transfer in ms.",
                kv_transfer_alloc_ms="The allocation waiting time of the KV transfer in ms.",
                kv_transfer_total_mb="The total number of tokens transferred in the KV cache.",
                engine_startup_time="The time taken for the engine to start up.",
                engine_load_weights_time="The time taken for the engine to load weights.",
            )
            return docs
        docs.update(
            spec_accept_length=(
                "Mean acceptance length of speculative decoding (accepted drafts + bonus "
                "token per forward)."
            ),
            spec_accept_rate=(
                "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch)."
            ),
            full_token_usage="The token usage for full attention layers.",
            kv_available_tokens="Number of free token slots in the KV cache pool.",
            kv_evictable_tokens=(
                "Number of evictable (radix-cached) token slots in the KV cache pool."
            ),
            kv_used_tokens="Number of actively used token slots in the KV cache pool.",
            swa_available_tokens="Number of free token slots in the SWA pool (hybrid-SWA only).",
            swa_evictable_tokens="Number of evictable (radix-cached) token slots in the SWA pool.",
            swa_used_tokens="Number of actively used token slots in the SWA pool.",
            mamba_available_tokens=(
                "Number of free state slots in the mamba SSM pool (hybrid-SSM only)."
            ),
            mamba_evictable_tokens=(
                "Number of evictable (radix-cached) state slots in the mamba SSM pool."
            ),
            mamba_used_tokens="Number of actively used state slots in the mamba SSM pool.",
            spec_cap_length=(
                "Mean DSpark confidence-scheduled verify window per verify step, incl the "
                "bonus slot (0 when no cap is scheduled)."
            ),
            spec_block_accept_length=(
                "Mean uncapped full-block accept length per verify step (accept + "
                "cap-trimmed drafts; exact only in DSpark cap-accept mode)."
            ),
            spec_num_steps="Currently active speculative_num_steps.",
            spec_num_draft_tokens=(
                "Currently active speculative_num_draft_tokens (decouples from steps under topk>1)."
            ),
            num_prefill_bootstrap_queue_reqs=(
                "The number of requests in the prefill bootstrap queue."
            ),
            fwd_occupancy="Forward pass GPU occupancy percentage.",
            weight_memory_usage_gb="Memory used by model weights in GB.",
            kv_cache_memory_usage_gb="Memory used by the KV cache pools in GB.",
            page_size="KV cache page size in tokens.",
            num_pages="Number of KV cache pages.",
            context_len="Maximum context length.",
            startup_available_gpu_memory_gb="Available GPU memory in GB at startup.",
        )
        return docs

    def _init_0_5_9(self, registry: CollectorRegistry) -> None:
        facts = self.facts
        self.num_retractions = Histogram(
            "sglang:num_retractions",
            "Histogram of retraction counts per request.",
            tuple(self._tok),
            buckets=_RETRACTION_BUCKETS,
            registry=registry,
        )
        cache_config = Gauge(
            "sglang:cache_config_info",
            "Cache configuration information.",
            ("page_size", "num_pages"),
            registry=registry,
            multiprocess_mode="mostrecent",
        )
        cache_config.labels(
            page_size=str(facts.page_size),
            num_pages=str(facts.max_total_num_tokens // max(1, facts.page_size)),
        ).set(1)
        self._set("engine_startup_time", facts.startup_seconds)
        self._set("engine_load_weights_time", facts.load_seconds)

    def _init_0_5_18(self, registry: CollectorRegistry) -> None:
        facts = self.facts
        tok = tuple(self._tok)
        self.spec_verify_calls = Counter(
            "sglang:spec_verify_calls_total",
            "Number of speculative decoding verification calls.",
            tok,
            registry=registry,
        )
        self.prompt_tokens_histogram, self.uncached_prompt_tokens_histogram = (
            Histogram(
                f"sglang:{name}",
                doc,
                tok,
                buckets=_PROMPT_LEN_BUCKETS,
                registry=registry,
            )
            for name, doc in (
                ("prompt_tokens_histogram", "Histogram of prompt token length."),
                (
                    "uncached_prompt_tokens_histogram",
                    "Histogram of uncached (compute) prompt token length.",
                ),
            )
        )
        self.generation_tokens_histogram = Histogram(
            "sglang:generation_tokens_histogram",
            "Histogram of generation token length.",
            tok,
            buckets=_PROMPT_LEN_BUCKETS,
            registry=registry,
        )
        graph_memory = Gauge(
            "sglang:graph_memory_usage_gb",
            "Memory used by captured device graphs in GB.",
            (*_SCHED_LABELS, "phase"),
            registry=registry,
            multiprocess_mode="mostrecent",
        )
        for phase in _GRAPH_PHASES:
            graph_memory.labels(**self._sched, phase=phase).set(facts.graph_gib.get(phase, 0.0))
        startup = Gauge(
            "sglang:startup_time_seconds",
            "Engine startup duration by phase in seconds.",
            (*tok, "phase"),
            registry=registry,
            multiprocess_mode="mostrecent",
        )
        scheduler_e2e = facts.startup_seconds
        phases = {
            "load_weight": facts.load_seconds + facts.draft_load_seconds,
            "kv_cache_allocation": facts.kv_seconds,
            "scheduler_e2e": scheduler_e2e,
            "tokenizer_e2e": scheduler_e2e,
        }
        for phase in _STARTUP_PHASES:
            startup.labels(**self._tok, phase=phase).set(round(phases[phase], 3))
        graph_time = Gauge(
            "sglang:startup_cuda_graph_time_seconds",
            "CUDA graph capture duration by phase in seconds.",
            (*tok, "phase"),
            registry=registry,
            multiprocess_mode="mostrecent",
        )
        for phase in _GRAPH_PHASES:
            graph_time.labels(**self._tok, phase=phase).set(
                round(facts.graph_seconds.get(phase, 0.0), 3)
            )
        self._set("weight_memory_usage_gb", facts.weight_gib)
        self._set("kv_cache_memory_usage_gb", facts.kv_gib)
        self._set("page_size", facts.page_size)
        self._set("num_pages", facts.max_total_num_tokens // max(1, facts.page_size))
        self._set("context_len", facts.context_len)
        self._set("startup_available_gpu_memory_gb", facts.available_gib)

    # --- what the engine reports -------------------------------------------------------

    def observe(self, event: EngineEvent) -> None:
        """One engine event, observed as SGLang's scheduler and tokenizer observe it."""
        request = event.request
        if event.kind == "iteration":
            self._iteration(event)
        elif event.kind == "scheduled":
            self.queue_time.labels(**self._sched).observe(event.seconds)
        elif event.kind == "ttft" and request is not None:
            self.time_to_first_token.labels(**self._streaming(request)).observe(event.seconds)
        elif event.kind == "itl" and event.tokens > 0:
            # SGLang adds the interval to the sum once and counts each of its tokens in the
            # bucket of interval / tokens (TokenizerMetricsCollector.observe_inter_token_latency)
            histogram = self.inter_token_latency.labels(**self._tok)
            for _ in range(event.tokens):
                histogram.observe(event.seconds / event.tokens)
        elif event.kind == "finished" and request is not None:
            self._finished(request, event.seconds)

    def _streaming(self, request: SimRequest) -> dict[str, str]:
        if not self.newer:
            return self._tok
        return {**self._tok, "is_streaming": "true" if request.streaming else "false"}

    def _iteration(self, event: EngineEvent) -> None:
        sched = self._sched
        if event.prompt_tokens:
            self.realtime_tokens.labels(**sched, mode="prefill_compute").inc(event.prompt_tokens)
            self.realtime_tokens.labels(**sched, mode="prefill_cache").inc(0)
            if self.newer:
                self.cuda_graph_passes.labels(**sched, mode="prefill_none").inc()
        else:
            self.realtime_tokens.labels(**sched, mode="decode").inc(event.tokens)
            self.cuda_graph_passes.labels(**sched, mode="decode_cuda_graph").inc()
            self._new_token_ratio = max(
                NEW_TOKEN_RATIO_MIN, self._new_token_ratio - NEW_TOKEN_RATIO_DECAY
            )

    def _finished(self, request: SimRequest, e2e: float) -> None:
        labels = self._streaming(request)
        self.prompt_tokens.labels(**labels).inc(request.prompt_tokens)
        self.generation_tokens.labels(**labels).inc(request.completion_tokens)
        if request.cached_tokens > 0:
            self.cached_tokens.labels(**self._tok, cache_source="device").inc(request.cached_tokens)
        self.num_requests.labels(**labels).inc()
        self.e2e_request_latency.labels(**labels).observe(e2e)
        if self.newer:
            if request.verify_ct > 0:
                self.spec_verify_calls.labels(**self._tok).inc(request.verify_ct)
            self.prompt_tokens_histogram.labels(**self._tok).observe(request.prompt_tokens)
            self.uncached_prompt_tokens_histogram.labels(**self._tok).observe(
                request.prompt_tokens - request.cached_tokens
            )
            self.generation_tokens_histogram.labels(**self._tok).observe(request.completion_tokens)
        else:
            self.num_retractions.labels(**self._tok).observe(request.preemptions)

    # --- the HTTP middleware -----------------------------------------------------------

    def http_request_started(self, method: str, path: str) -> None:
        self.http_requests.labels(endpoint=path, method=method).inc()
        self.http_requests_active.labels(endpoint=path, method=method).inc()

    def http_request_done(self, exchange: HttpExchange) -> None:
        endpoint = exchange.route or exchange.path
        self.http_responses.labels(
            endpoint=endpoint, status_code=str(exchange.status), method=exchange.method
        ).inc()
        self.http_requests_active.labels(endpoint=exchange.path, method=exchange.method).dec()

    # --- rendering ---------------------------------------------------------------------

    def _set(self, name: str, value: float) -> None:
        self.gauges[name].labels(**self._sched).set(value)

    def render(self, engine: Engine) -> bytes:
        """Refresh the scheduler gauges from the engine and render the text exposition."""
        stats = engine.stats
        facts = self.facts
        if not engine.running and not engine.waiting:
            self._new_token_ratio = NEW_TOKEN_RATIO_INIT  # an empty batch resets it
        used = engine.used_tokens
        accept_length = stats.last_accept_length
        if self.newer and facts.num_draft_tokens > 1:  # 0.5.11: drafts accepted / drafted
            accept_rate = max(0.0, accept_length - 1) / (facts.num_draft_tokens - 1)
        else:
            accept_rate = stats.last_accept_rate
        values: dict[str, float] = {
            "num_running_reqs": len(engine.running),
            "num_used_tokens": used,
            "token_usage": round(engine.token_usage, 4),
            "decode_sum_seq_lens": used,
            "gen_throughput": round(stats.last_gen_throughput, 2),
            "num_queue_reqs": len(engine.waiting),
            "max_total_num_tokens": engine.max_total_tokens,
            "spec_accept_length": round(accept_length, 4),
            "spec_accept_rate": round(accept_rate, 4),
            "new_token_ratio": round(self._new_token_ratio, 6),
            "is_cuda_graph": 1.0 if engine.running else 0.0,
        }
        if self.newer:
            values.update(
                full_token_usage=round(engine.token_usage, 4),
                kv_used_tokens=used,
                kv_available_tokens=max(0, engine.max_total_tokens - used),
                spec_num_steps=facts.num_steps,
                spec_num_draft_tokens=facts.num_draft_tokens,
                fwd_occupancy=math.nan,  # set only by the DP-attention path
            )
        for name, gauge in self.gauges.items():
            if name in values:
                gauge.labels(**self._sched).set(values[name])
            else:
                gauge.labels(**self._sched)  # a real server without the feature: its default
        self._touch()
        return _as_multiprocess(generate_latest(self.registry))

    def _touch(self) -> None:
        """Families a scrape must show even before the first request (SGLang's exist from
        the first stats pass): their label sets are created at 0."""
        sched = self._sched
        self.cuda_graph_passes.labels(**sched, mode="decode_cuda_graph")
        for mode in ("prefill_compute", "prefill_cache", "decode"):
            self.realtime_tokens.labels(**sched, mode=mode)
        self.queue_time.labels(**sched)


def _as_multiprocess(text: bytes) -> bytes:
    """The exposition as SGLang's multiprocess registry gives it: no ``_created`` series, and
    no family that has no sample yet (a labelled metric nothing has touched)."""
    lines = text.decode().splitlines(keepends=True)
    named = {line.split()[2] for line in lines if line.startswith("# TYPE ")}
    with_samples: set[str] = set()
    for line in lines:
        if line.startswith("#"):
            continue
        sample = line.split("{", 1)[0].split(" ", 1)[0]
        for suffix in ("", "_bucket", "_sum", "_count"):
            if suffix == "" or sample.endswith(suffix):
                family = sample.removesuffix(suffix)
                if family in named:
                    with_samples.add(family)
                    break
    keep = {name for name in with_samples if not name.endswith("_created")}
    kept: list[str] = []
    for line in lines:
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) > 2 and parts[2] not in keep:
                continue
        elif line.split("{", 1)[0].split(" ", 1)[0].endswith("_created"):
            continue
        kept.append(line)
    return "".join(kept).encode()

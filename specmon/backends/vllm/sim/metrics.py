"""``/metrics`` as vLLM serves it (vllm.md §4), rendered by prometheus_client.

The families, help texts, labels and buckets are those the real vLLM CPU build 0.32 serves
(tests/backends/vllm/data/real-vllm-0.32-cpu-metrics.txt, recorded from it; vLLM's
``v1/metrics/loggers.py`` and ``buckets.py``): the engine's (``vllm:``, engine 0), the HTTP
instrumentator's (``http_*``, prometheus-fastapi-instrumentator's defaults with vLLM's
excluded handlers) and prometheus_client's process/platform/GC collectors, which report the
simulator's own process as vLLM's report its API server's. ``--disable-log-stats`` leaves
out the ``vllm:`` families only, as in vLLM.

The values come from the engine: per-request timestamps (arrival, scheduled, first and last
token, finish) make the queue / prefill / decode / inference / e2e / TTFT / per-token
histograms as vLLM's ``IterationStats`` does (inter-token latency once per engine step per
request, not per token); engine steps make ``iteration_tokens_total`` and the token
counters; the speculative counters follow the engine's running totals (one draft per
request per verify, k draft positions, accepted tokens per position). What the simulated
server has no part for (a KV connector, multi-modal inputs, admission limits, MFU counting,
which needs ``--enable-mfu-metrics``, preemption: its KV cache never runs short; prefix-cache
hits) reads 0, as on a real server without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Summary,
    generate_latest,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from specmon.sim.engine import Engine, EngineEvent, SimRequest

if TYPE_CHECKING:  # the HTTP stack is imported when the server starts serving
    from specmon.sim.asgi import HttpExchange

_LABELS = ("model_name", "engine")
SLEEP_STATES = (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0))  # a serving engine
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")  # vLLM's FinishReason
WAITING_REASONS = ("capacity", "deferred")
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHE_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")
_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0)
_TTFT_BUCKETS += (2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
_ITL_BUCKETS += (5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0)
_REQUEST_LATENCY_BUCKETS += (40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
_ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
_PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
_PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
# prometheus-fastapi-instrumentator's defaults (latency_highr_buckets, latency_lowr_buckets)
_HTTP_HIGHR_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5)
_HTTP_HIGHR_BUCKETS += (3.0, 3.5, 4.0, 4.5, 5.0, 7.5, 10.0, 30.0, 60.0)
_HTTP_LOWR_BUCKETS = (0.1, 0.5, 1.0)
HTTP_EXCLUDED = ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")


def request_tokens_buckets(max_model_len: int) -> list[float]:
    """vLLM's ``build_1_2_5_buckets``: 1, 2, 5, 10, 20, 50, ... up to ``max_model_len``."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_model_len:
                return buckets
            buckets.append(value)
        exponent += 1


class VllmMetrics:
    """Engine 0's metrics, the HTTP instrumentator's and the process collectors'."""

    def __init__(
        self,
        model_name: str,
        num_speculative_tokens: int,
        *,
        max_model_len: int = 131072,
        engine_metrics: bool = True,
    ) -> None:
        self.registry = registry = CollectorRegistry()
        self.labels = {"model_name": model_name, "engine": "0"}
        self.engine_metrics = engine_metrics
        self.max_model_len = max_model_len
        self.k = num_speculative_tokens if engine_metrics else 0
        self._counted: dict[str, int] = {}
        ProcessCollector(registry=registry)  # vLLM's default registry has these three
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        self._http(registry)
        if engine_metrics:
            self._engine(registry)

    # --- the families ----------------------------------------------------------------------

    def _engine(self, registry: CollectorRegistry) -> None:
        labels = self.labels

        def counter(name: str, doc: str, extra: Sequence[str] = ()) -> Counter:
            return Counter(f"vllm:{name}", doc, (*_LABELS, *extra), registry=registry)

        def gauge(name: str, doc: str, extra: Sequence[str] = ()) -> Gauge:
            return Gauge(f"vllm:{name}", doc, (*_LABELS, *extra), registry=registry)

        def histogram(name: str, doc: str, buckets: Sequence[float]) -> Histogram:
            family = Histogram(f"vllm:{name}", doc, _LABELS, buckets=buckets, registry=registry)
            return family.labels(**labels)  # exported at 0 from start-up, as vLLM's are

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
                self.per_position.labels(position=str(position), **labels)
            for family in (self.drafts, self.draft_tokens, self.accepted):
                family.labels(**labels)
        mfu = "(for Model Flops Utilization calculations)."
        for name, doc in (
            ("flops", f"Estimated number of floating point operations per GPU {mfu}"),
            ("read_bytes", f"Estimated number of bytes read from memory per GPU {mfu}"),
            ("write_bytes", f"Estimated number of bytes written to memory per GPU {mfu}"),
        ):  # counted only with --enable-mfu-metrics, which the simulator does not take
            counter(f"estimated_{name}_per_gpu", doc).labels(**labels)
        self.running = gauge(
            "num_requests_running", "Number of requests in model execution batches."
        )
        self.waiting = gauge("num_requests_waiting", "Number of requests waiting to be processed.")
        self.waiting_by_reason = gauge(
            "num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
            "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, "
            "KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
            ("reason",),
        )
        self.sleep_state = gauge(
            "engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
            "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep "
            "level 2.",
            ("sleep_state",),
        )
        self.kv_usage = gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        token_counters = {
            "prefix_cache_queries": (
                "Prefix cache queries, in terms of number of queried tokens.",
                (),
            ),
            "prefix_cache_hits": ("Prefix cache hits, in terms of number of cached tokens.", ()),
            "external_prefix_cache_queries": (
                "External prefix cache queries from KV connector cross-instance cache sharing, "
                "in terms of number of queried tokens.",
                (),
            ),
            "external_prefix_cache_hits": (
                "External prefix cache hits from KV connector cross-instance cache sharing, in "
                "terms of number of cached tokens.",
                (),
            ),
            "mm_cache_queries": (
                "Multi-modal cache queries, in terms of number of queried items.",
                (),
            ),
            "mm_cache_hits": ("Multi-modal cache hits, in terms of number of cached items.", ()),
            "num_preemptions": ("Cumulative number of preemption from the engine.", ()),
            "prompt_tokens": ("Number of prefill tokens processed.", ()),
            "prompt_tokens_by_source": ("Number of prompt tokens by source.", ("source",)),
            "prompt_tokens_cached": ("Number of cached prompt tokens (local + external).", ()),
            "prompt_tokens_cached_by_source": (
                "Prefix-cache hit tokens by the cache tier that supplied them: device (local "
                "HBM), host (offloaded to DRAM), disk, p2p (transferred from another vLLM "
                "instance) or external_unspecified. Counted at admission; sums to "
                "vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
                ("source",),
            ),
            "generation_tokens": ("Number of generation tokens processed.", ()),
        }
        self.counters = {
            name: counter(name, doc, extra) for name, (doc, extra) in token_counters.items()
        }
        for name, counter_family in self.counters.items():
            values = {
                "prompt_tokens_by_source": PROMPT_SOURCES,
                "prompt_tokens_cached_by_source": CACHE_SOURCES,
            }.get(name)
            if values is None:
                counter_family.labels(**labels)
            else:
                for source in values:
                    counter_family.labels(source=source, **labels)
        self.success = counter(
            "request_success", "Count of successfully processed requests.", ("finished_reason",)
        )
        for reason in FINISH_REASONS:
            self.success.labels(finished_reason=reason, **labels)
        admission = Counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ("model_name", "reason"),
            registry=registry,
        )
        for reason in ADMISSION_REASONS:  # the simulator has no queue limits: never rejects
            admission.labels(model_name=labels["model_name"], reason=reason)
        tokens = request_tokens_buckets(self.max_model_len)
        self.prompt_len = histogram(
            "request_prompt_tokens", "Number of prefill tokens processed.", tokens
        )
        self.generation_len = histogram(
            "request_generation_tokens", "Number of generation tokens processed.", tokens
        )
        self.iteration_tokens = histogram(
            "iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            _ITERATION_BUCKETS,
        )
        self.max_generation = histogram(
            "request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            tokens,
        )
        self.params_n = histogram(
            "request_params_n", "Histogram of the n request parameter.", _PARAMS_N_BUCKETS
        )
        self.params_max_tokens = histogram(
            "request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokens
        )
        self.ttft = histogram(
            "time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            _TTFT_BUCKETS,
        )
        self.itl = histogram(
            "inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            _ITL_BUCKETS,
        )
        self.tpot = histogram(
            "request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            _ITL_BUCKETS,
        )
        phases = {
            "e2e": ("e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."),
            "queue": ("request_queue_time_seconds", "WAITING"),
            "inference": ("request_inference_time_seconds", "RUNNING"),
            "prefill": ("request_prefill_time_seconds", "PREFILL"),
            "decode": ("request_decode_time_seconds", "DECODE"),
        }
        self.phase = {
            key: histogram(
                name,
                doc if key == "e2e" else f"Histogram of time spent in {doc} phase for request.",
                _REQUEST_LATENCY_BUCKETS,
            )
            for key, (name, doc) in phases.items()
        }
        self.preemptions = histogram(
            "request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            _PREEMPTION_BUCKETS,
        )
        self.kv_computed = histogram(
            "request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            tokens,
        )
        self.cache_config = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            list(CACHE_CONFIG_DEFAULTS),
            registry=registry,
        )

    def _http(self, registry: CollectorRegistry) -> None:
        """prometheus-fastapi-instrumentator's default metrics, as vLLM attaches them."""
        self.http_requests = Counter(
            "http_requests",
            "Total number of requests by method, status and handler.",
            ("method", "status", "handler"),
            registry=registry,
        )
        header_note = (
            "Only value of header is respected. Otherwise ignored. No percentile calculated. "
        )
        self.http_request_size = Summary(
            "http_request_size_bytes",
            f"Content length of incoming requests by handler. {header_note}",
            ("handler",),
            registry=registry,
        )
        self.http_response_size = Summary(
            "http_response_size_bytes",
            f"Content length of outgoing responses by handler. {header_note}",
            ("handler",),
            registry=registry,
        )
        self.http_latency_highr = Histogram(
            "http_request_duration_highr_seconds",
            "Latency with many buckets but no API specific labels. Made for more accurate "
            "percentile calculations. ",
            buckets=_HTTP_HIGHR_BUCKETS,
            registry=registry,
        )
        self.http_latency = Histogram(
            "http_request_duration_seconds",
            "Latency with only few buckets by handler. Made to be only used if aggregation by "
            "handler is important. ",
            ("method", "handler"),
            buckets=_HTTP_LOWR_BUCKETS,
            registry=registry,
        )

    def set_cache_config(self, values: dict[str, str]) -> None:
        """The KV cache's configuration once it is allocated (``CACHE_CONFIG_DEFAULTS``'s
        keys; what is not given keeps vLLM's default)."""
        if self.engine_metrics:
            labels = {**CACHE_CONFIG_DEFAULTS, **values, "engine": "0"}
            self.cache_config.labels(**labels).set(1)

    # --- what the engine and the HTTP server report --------------------------------------

    def observe(self, event: EngineEvent) -> None:
        """One engine event, observed as vLLM's IterationStats / PrometheusStatLogger do."""
        if not self.engine_metrics:
            return
        request = event.request
        if event.kind == "iteration":
            counters, labels = self.counters, self.labels
            counters["prompt_tokens"].labels(**labels).inc(event.prompt_tokens)
            counters["prompt_tokens_by_source"].labels(source="local_compute", **labels).inc(
                event.prompt_tokens
            )
            counters["prefix_cache_queries"].labels(**labels).inc(event.prompt_tokens)
            counters["generation_tokens"].labels(**labels).inc(event.tokens)
            self.iteration_tokens.observe(event.prompt_tokens + event.tokens)
        elif event.kind == "ttft":
            self.ttft.observe(event.seconds)
        elif event.kind == "itl":
            self.itl.observe(event.seconds)  # one per engine step, whatever its token count
        elif event.kind == "finished" and request is not None:
            self._finished(request, event.seconds)

    def _finished(self, request: SimRequest, e2e: float) -> None:
        reason = request.finish_reason if request.finish_reason in FINISH_REASONS else "stop"
        self.success.labels(finished_reason=reason, **self.labels).inc()
        scheduled = request.scheduled_at or request.created
        first = request.first_token_at or scheduled
        last = request.last_token_at or first
        decode = last - first
        generated = request.completion_tokens
        self.phase["e2e"].observe(e2e)
        self.phase["queue"].observe(scheduled - request.created)
        self.phase["prefill"].observe(first - scheduled)
        self.phase["decode"].observe(decode)
        self.phase["inference"].observe(last - scheduled)
        self.tpot.observe(decode / (generated - 1) if generated > 1 else 0.0)
        self.preemptions.observe(request.preemptions)
        self.kv_computed.observe(request.prompt_tokens - max(request.cached_tokens, 0))
        self.prompt_len.observe(request.prompt_tokens)
        self.generation_len.observe(generated)
        room = self.max_model_len - request.prompt_tokens
        self.max_generation.observe(request.max_tokens_param or room)
        self.params_n.observe(1)
        if request.max_tokens_param:
            self.params_max_tokens.observe(request.max_tokens_param)

    def http_request_done(self, exchange: HttpExchange) -> None:
        """One response, counted as the instrumentator counts it: by route template (``none``
        when no route matched), status grouped as ``2xx``; vLLM's excluded paths left out."""
        handler = exchange.route or "none"
        if handler in HTTP_EXCLUDED:
            return
        status = f"{exchange.status // 100}xx"
        self.http_requests.labels(method=exchange.method, status=status, handler=handler).inc()
        self.http_request_size.labels(handler=handler).observe(exchange.request_bytes)
        self.http_response_size.labels(handler=handler).observe(exchange.response_bytes)
        self.http_latency_highr.observe(exchange.seconds)
        self.http_latency.labels(method=exchange.method, handler=handler).observe(exchange.seconds)

    # --- rendering -----------------------------------------------------------------------

    def render(self, engine: Engine) -> bytes:
        if self.engine_metrics:
            self._refresh(engine)
        return generate_latest(self.registry)

    def _refresh(self, engine: Engine) -> None:
        stats = engine.stats
        labels = self.labels
        self.running.labels(**labels).set(len(engine.running))
        self.waiting.labels(**labels).set(len(engine.waiting))
        self.waiting_by_reason.labels(reason="capacity", **labels).set(len(engine.waiting))
        self.waiting_by_reason.labels(reason="deferred", **labels).set(0)
        self.kv_usage.labels(**labels).set(min(1.0, engine.token_usage))
        for state, value in SLEEP_STATES:
            self.sleep_state.labels(sleep_state=state, **labels).set(value)
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

    def _advance(self, key: str, total: int, counter: Counter) -> None:
        delta = total - self._counted.get(key, 0)
        if delta > 0:
            counter.inc(delta)
            self._counted[key] = total


# vLLM's CacheConfig fields as the info gauge shows them (str() of each), at their defaults
# for a CUDA server; the server fills in what it decides (block size, KV size, utilisation).
CACHE_CONFIG_DEFAULTS: dict[str, str] = {
    "_block_size_resolved": "True",
    "block_size": "16",
    "cache_dtype": "auto",
    "cache_hit_alignment_tokens": "None",
    "effective_attention_block_size": "16",
    "enable_mamba_shared_prefix_checkpoint": "False",
    "enable_prefix_caching": "True",
    "engine": "0",
    "gpu_memory_utilization": "0.9",
    "hash_block_size": "None",
    "is_attention_free": "False",
    "kv_cache_dtype_skip_layers": "[]",
    "kv_cache_layout": "None",
    "kv_cache_max_concurrency": "None",
    "kv_cache_memory_bytes": "None",
    "kv_cache_size_tokens": "None",
    "kv_offloading_backend": "native",
    "kv_offloading_size": "None",
    "kv_sharing_fast_prefill": "False",
    "mamba_block_size": "None",
    "mamba_cache_dtype": "auto",
    "mamba_cache_mode": "none",
    "mamba_page_size_padded": "None",
    "mamba_ssm_cache_dtype": "auto",
    "num_cpu_blocks": "None",
    "num_gpu_blocks": "None",
    "num_gpu_blocks_override": "None",
    "prefix_cache_retention_interval": "0",
    "prefix_caching_hash_algo": "sha256",
    "prefix_match_unit": "None",
    "replayssm_buffer_len": "16",
    "skip_page_size_padded": "None",
    "sliding_window": "None",
    "swa_bounded_replay": "True",
    "use_kda_recoverssm": "False",
    "use_replayssm": "False",
    "user_specified_block_size": "False",
}

"""``/metrics`` in SGLang's names (sglang.md section 4), rendered by prometheus_client."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from specmon.sim.engine import Engine

_SCHED_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_ITL_BUCKETS = (0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5)


class SimMetrics:
    """The scheduler gauges (TP0, the default), tokenizer counters and latency histograms."""

    def __init__(self, model_name: str, startup_seconds: float, load_seconds: float) -> None:
        self.registry = CollectorRegistry()
        self.model_name = model_name
        self._sched_values = {
            "model_name": model_name,
            "engine_type": "unified",
            "tp_rank": "0",
            "pp_rank": "0",
            "moe_ep_rank": "0",
        }

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(
                f"sglang:{name}",
                doc,
                _SCHED_LABELS,
                registry=self.registry,
                multiprocess_mode="mostrecent",
            )

        self.num_running_reqs = gauge("num_running_reqs", "The number of running requests.")
        self.num_used_tokens = gauge("num_used_tokens", "The number of used tokens.")
        self.token_usage = gauge("token_usage", "The token usage.")
        self.gen_throughput = gauge("gen_throughput", "The generation throughput (token/s).")
        self.num_queue_reqs = gauge(
            "num_queue_reqs", "The number of requests in the waiting queue."
        )
        self.spec_accept_length = gauge("spec_accept_length", "The average acceptance length.")
        self.spec_accept_rate = gauge("spec_accept_rate", "The average acceptance rate.")
        self.cache_hit_rate = gauge("cache_hit_rate", "The prefix cache hit rate.")
        self.max_total_num_tokens = gauge("max_total_num_tokens", "Maximum total tokens.")
        self.is_cuda_graph = gauge("is_cuda_graph", "Whether the batch is using CUDA graph.")
        self.num_retracted_reqs = gauge("num_retracted_reqs", "The number of retracted requests.")
        self.engine_startup_time = gauge("engine_startup_time", "The time taken to start up.")
        self.engine_load_weights_time = gauge("engine_load_weights_time", "Weight load time.")
        self.cuda_graph_passes = Counter(
            "sglang:cuda_graph_passes",
            "Forward passes by CUDA graph mode.",
            ("mode", *_SCHED_LABELS),
            registry=self.registry,
        )
        labels = ("model_name",)
        self.prompt_tokens = Counter(
            "sglang:prompt_tokens",
            "Number of prefill tokens processed.",
            labels,
            registry=self.registry,
        )
        self.generation_tokens = Counter(
            "sglang:generation_tokens",
            "Number of generation tokens processed.",
            labels,
            registry=self.registry,
        )
        self.num_requests = Counter(
            "sglang:num_requests",
            "The number of processed requests.",
            labels,
            registry=self.registry,
        )
        self.num_aborted_requests = Counter(
            "sglang:num_aborted_requests",
            "The number of aborted requests.",
            labels,
            registry=self.registry,
        )
        self.time_to_first_token = Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.inter_token_latency = Histogram(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            labels,
            buckets=_ITL_BUCKETS,
            registry=self.registry,
        )
        self.e2e_request_latency = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.http_requests = Counter(
            "sglang:http_requests",
            "Total number of HTTP requests.",
            ("method", "path"),
            registry=self.registry,
        )
        self.engine_startup_time.labels(**self._sched_values).set(startup_seconds)
        self.engine_load_weights_time.labels(**self._sched_values).set(load_seconds)
        self._counted = {"prompt": 0, "generation": 0, "requests": 0, "graph": 0}

    def observe_latency(self, what: str, seconds: float) -> None:
        histogram = {
            "ttft": self.time_to_first_token,
            "itl": self.inter_token_latency,
            "e2e": self.e2e_request_latency,
        }[what]
        histogram.labels(model_name=self.model_name).observe(seconds)

    def render(self, engine: Engine) -> bytes:
        """Refresh the gauges from the engine and render the text exposition format."""
        values = self._sched_values
        stats = engine.stats
        self.num_running_reqs.labels(**values).set(len(engine.running))
        self.num_used_tokens.labels(**values).set(engine.used_tokens)
        self.token_usage.labels(**values).set(round(engine.token_usage, 4))
        self.gen_throughput.labels(**values).set(round(stats.last_gen_throughput, 2))
        self.num_queue_reqs.labels(**values).set(len(engine.waiting))
        self.spec_accept_length.labels(**values).set(round(stats.last_accept_length, 4))
        self.spec_accept_rate.labels(**values).set(round(stats.last_accept_rate, 4))
        self.cache_hit_rate.labels(**values).set(0.0)
        self.max_total_num_tokens.labels(**values).set(engine.max_total_tokens)
        self.is_cuda_graph.labels(**values).set(1.0 if engine.running else 0.0)
        self.num_retracted_reqs.labels(**values).set(0)
        self._advance(
            "graph",
            stats.cuda_graph_passes,
            self.cuda_graph_passes.labels(mode="decode", **values),
        )
        model = {"model_name": self.model_name}
        self._advance("prompt", stats.prompt_tokens_total, self.prompt_tokens.labels(**model))
        self._advance(
            "generation", stats.generation_tokens_total, self.generation_tokens.labels(**model)
        )
        self._advance("requests", stats.requests_total, self.num_requests.labels(**model))
        return generate_latest(self.registry)

    def _advance(self, key: str, total: int, counter: Counter) -> None:
        delta = total - self._counted[key]
        if delta > 0:
            counter.inc(delta)
            self._counted[key] = total

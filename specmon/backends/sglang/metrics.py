"""SGLang's Prometheus ``/metrics`` gauges -> a ``decode`` event, for a server watched by its
URL alone (`specmon watch http://HOST:PORT`), where no log says anything.

SGLang's scheduler refreshes its gauges (``sglang:gen_throughput``, ``num_running_reqs``,
``num_queue_reqs``, ``token_usage``, ``spec_accept_length``, ``spec_accept_rate``) each time it
logs a decode batch, so one page is one decode line's figures: no rates between polls are
needed. Several schedulers (data-parallel ranks) each export theirs: throughput and request
counts are summed, usage and acceptance averaged. SGLang exports no per-position acceptance.
The page is untrusted: a value that is not a finite number is ignored, and nothing raises.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from specmon.backends import MetricsReader
from specmon.backends.latency import LatencyFamilies, LatencyReader, flag_int
from specmon.model.events import Decode, Event

GEN_THROUGHPUT = "sglang:gen_throughput"
RUNNING = "sglang:num_running_reqs"
QUEUED = "sglang:num_queue_reqs"
TOKEN_USAGE = "sglang:token_usage"
ACCEPT_LENGTH = "sglang:spec_accept_length"
ACCEPT_RATE = "sglang:spec_accept_rate"
_GAUGES = (GEN_THROUGHPUT, RUNNING, QUEUED, TOKEN_USAGE, ACCEPT_LENGTH, ACCEPT_RATE)
# Beyond any real count: a hostile page's 1e300 running requests is not shown as such.
_MAX_COUNT = 10**9


def gauge_values(text: str) -> dict[str, list[float]]:
    """Each gauge's finite values on the page (one per scheduler), {} when it does not
    parse."""
    values: dict[str, list[float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in _GAUGES and math.isfinite(sample.value):
                    values.setdefault(sample.name, []).append(float(sample.value))
    except (ValueError, TypeError, IndexError, KeyError):
        return {}
    return values


class SGLangMetricsReader(MetricsReader):
    """One ``decode`` event per page that has SGLang's throughput gauge."""

    def read(self, text: str, at: float) -> list[Event]:
        values = gauge_values(text)
        if GEN_THROUGHPUT not in values:
            return []

        def total(name: str) -> float:
            return sum(values.get(name, ()))

        def mean(name: str) -> float | None:
            found = values.get(name)
            return sum(found) / len(found) if found else None

        def count(name: str) -> int:
            return int(min(max(total(name), 0.0), _MAX_COUNT))

        speculating = any(v > 0 for v in values.get(ACCEPT_LENGTH, ()))
        return [
            Decode(
                running_req=count(RUNNING),
                tokens=None,
                token_usage=mean(TOKEN_USAGE) or 0.0,
                accept_len=mean(ACCEPT_LENGTH) if speculating else None,
                accept_rate=mean(ACCEPT_RATE) if speculating else None,
                gen_throughput=max(total(GEN_THROUGHPUT), 0.0),
                queue_req=count(QUEUED),
            )
        ]


# --- latency and capacity (sglang.md section 4; observability/metrics_collector.py) -------

LATENCY_FAMILIES = LatencyFamilies(
    ttft=("sglang:time_to_first_token_seconds",),
    itl=("sglang:inter_token_latency_seconds",),
    e2e=("sglang:e2e_request_latency_seconds",),
    queue=("sglang:queue_time_seconds",),
    # Only with --collect-tokens-histogram (older versions) or in newer ones.
    prompt_tokens=("sglang:prompt_tokens_histogram",),
    generation_tokens=("sglang:generation_tokens_histogram",),
    requests=("sglang:num_requests_total",),
    aborted=("sglang:num_aborted_requests_total",),
    # Hit rate over the window from the tokenizer's counters once a cached token was counted
    # (the family appears with the first hit), else the scheduler's own gauge.
    prefix_hits=("sglang:cached_tokens_total",),
    prefix_queries=("sglang:prompt_tokens_total",),
    prefix_hit_rate=("sglang:cache_hit_rate",),
    preemptions=("sglang:num_retracted_requests_total",),  # newer versions
    preemptions_last=("sglang:num_retracted_reqs",),  # the last interval's retractions
    running=(RUNNING,),
    waiting=(QUEUED,),
    kv_usage=(TOKEN_USAGE,),
    kv_used_tokens=("sglang:kv_used_tokens", "sglang:num_used_tokens"),
    kv_total_tokens=("sglang:max_total_num_tokens",),
    group_label="dp_rank",  # with data parallelism (DP attention) each rank's scheduler
    # Every TP rank's scheduler exports the same figures with --enable-metrics-for-all-
    # schedulers: its group's lowest rank is read.
    replica_labels=("tp_rank", "pp_rank", "moe_ep_rank"),
)


class SGLangLatencyReader(LatencyReader):
    """SGLang's latency families; the maximum of running requests comes from its server
    info (``internal_states[].effective_max_running_requests_per_dp`` summed over the DP
    ranks, else the ``max_running_requests`` argument), or the launch's flag."""

    def server_info(self, data: Any) -> None:
        if not isinstance(data, dict):
            return
        states = data.get("internal_states")
        per_rank = [
            state.get("effective_max_running_requests_per_dp")
            for state in (states if isinstance(states, list) else [])
            if isinstance(state, dict)
        ]
        counts = [n for n in per_rank if isinstance(n, int) and not isinstance(n, bool)]
        if counts and all(0 < n < _MAX_COUNT for n in counts):
            self.max_running = sum(counts)
            return
        argument = data.get("max_running_requests")
        if isinstance(argument, int) and not isinstance(argument, bool) and argument > 0:
            self.max_running = min(argument, _MAX_COUNT)


def new_latency_reader(argv: Sequence[str], window_s: float) -> SGLangLatencyReader:
    return SGLangLatencyReader(
        LATENCY_FAMILIES,
        window_s=window_s,
        max_running=flag_int(argv, "--max-running-requests", "--max_running_requests"),
    )

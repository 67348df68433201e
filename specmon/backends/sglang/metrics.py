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

from prometheus_client.parser import text_string_to_metric_families

from specmon.backends import MetricsReader
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

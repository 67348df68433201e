"""Successive ``/metrics`` pages -> ``latency`` events: request latency quantiles, rates,
lengths, cache hits, preemptions and the capacity gauges over a rolling window.

What is shared by every server lives here; each backend names its own families in a
``LatencyFamilies`` (``specmon/backends/<name>/metrics.py``), exactly as the server serves
them, and overrides a hook where a figure is not a plain family (vLLM's KV capacity is in
the labels of an info gauge; SGLang's maximum of running requests is in its server info).

A family the page lacks is absent (None in the event), never 0: a server or a version that
does not export queue time says nothing about it. Series are read the way a PromQL query
over the server would read them: each labelled series is its own counter (its resets its
own), then summed (``sum by (le)``). A server that exports the same scheduler's figures once
per tensor-parallel rank (SGLang with metrics on every scheduler) is read once per group:
``replica_labels`` name the labels whose lowest values are kept.

The page is untrusted: a value that is not finite is skipped, at most MAX_TRACKED_SERIES
samples of the families named are kept per page (the window's rows are bounded too:
specmon/model/quantiles.py), and nothing raises.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from specmon.model.events import Latency, LatencyGroup
from specmon.model.quantiles import (
    DEFAULT_WINDOW_S,
    MAX_WINDOW_SAMPLES,
    CounterWindow,
    WindowQuantiles,
    slope,
    window_quantiles,
)

MAX_TRACKED_SERIES = 2048  # samples of the named families kept per page
KV_NEAR_FULL = 0.9  # KV usage at which the cache counts as near full (unless the server says)

Labels = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, Labels]  # sample name, its labels sorted


@dataclass(frozen=True, slots=True)
class LatencyFamilies:
    """Which of the server's families give each figure. Histograms by their base name (the
    page's ``<base>_bucket``, ``_sum``, ``_count``), counters and gauges by their sample name
    (``..._total`` for a counter); several names: the first one the page has wins (a
    family renamed between versions, the new name first)."""

    ttft: tuple[str, ...] = ()
    itl: tuple[str, ...] = ()
    tpot: tuple[str, ...] = ()
    e2e: tuple[str, ...] = ()
    queue: tuple[str, ...] = ()
    prompt_tokens: tuple[str, ...] = ()  # histograms of tokens per request
    generation_tokens: tuple[str, ...] = ()
    requests: tuple[str, ...] = ()  # finished requests, every label set summed
    finished: tuple[str, ...] = ()  # finished requests by reason (``finish_label``)
    finish_label: str = "finished_reason"
    aborted: tuple[str, ...] = ()  # a counter of aborted requests alone (reason "abort")
    prefix_hits: tuple[str, ...] = ()  # counters: hit rate = rise of hits / rise of queries
    prefix_queries: tuple[str, ...] = ()
    prefix_hit_rate: tuple[str, ...] = ()  # a gauge (0..1) where no counters are served
    preemptions: tuple[str, ...] = ()  # counters
    preemptions_last: tuple[str, ...] = ()  # a gauge: how many in the server's last interval
    running: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    kv_usage: tuple[str, ...] = ()  # gauges, 0..1
    kv_used_tokens: tuple[str, ...] = ()
    kv_total_tokens: tuple[str, ...] = ()
    group_label: str | None = None  # splits the server into DP ranks or engines
    replica_labels: tuple[str, ...] = ()  # copies of one group's figures: the lowest is read
    kv_threshold: float = KV_NEAR_FULL

    def histograms(self) -> tuple[tuple[str, ...], ...]:
        return (
            self.ttft,
            self.itl,
            self.tpot,
            self.e2e,
            self.queue,
            self.prompt_tokens,
            self.generation_tokens,
        )

    def sample_names(self) -> frozenset[str]:
        """Every sample name the figures come from (histograms' three suffixes each)."""
        names: set[str] = set()
        for bases in self.histograms():
            for base in bases:
                names.update((f"{base}_bucket", f"{base}_sum", f"{base}_count"))
        for group in (
            self.requests,
            self.finished,
            self.aborted,
            self.prefix_hits,
            self.prefix_queries,
            self.prefix_hit_rate,
            self.preemptions,
            self.preemptions_last,
            self.running,
            self.waiting,
            self.kv_usage,
            self.kv_used_tokens,
            self.kv_total_tokens,
        ):
            names.update(group)
        return frozenset(names)


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample of the page: its name, its labels (sorted) and its value."""

    name: str
    labels: Labels
    value: float

    def label(self, name: str) -> str | None:
        return next((value for key, value in self.labels if key == name), None)


class Page:
    """One page's samples of the families named, by name."""

    def __init__(self, samples: Iterable[Sample]) -> None:
        self.by_name: dict[str, list[Sample]] = {}
        for sample in samples:
            self.by_name.setdefault(sample.name, []).append(sample)

    def first(self, names: Sequence[str]) -> str | None:
        """The first of ``names`` the page has."""
        return next((name for name in names if name in self.by_name), None)

    def first_histogram(self, bases: Sequence[str]) -> str | None:
        return next((base for base in bases if f"{base}_bucket" in self.by_name), None)

    def samples(self, name: str | None) -> list[Sample]:
        return self.by_name.get(name, []) if name is not None else []


def read_page(
    text: str, names: frozenset[str], replica_labels: Sequence[str], group: str | None
) -> Page | None:
    """The samples of ``names`` on a page (finite values), each group's copies left to the
    lowest replica, at most MAX_TRACKED_SERIES of them; None when the text does not parse."""
    found: list[Sample] = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in names and math.isfinite(sample.value):
                    labels = tuple(sorted((str(k), str(v)) for k, v in sample.labels.items()))
                    found.append(Sample(sample.name, labels, float(sample.value)))
    except (ValueError, TypeError, IndexError, KeyError):
        return None
    if replica_labels:
        found = _lowest_replicas(found, replica_labels, group)
    return Page(found[:MAX_TRACKED_SERIES])


def _lowest_replicas(
    samples: list[Sample], replica_labels: Sequence[str], group: str | None
) -> list[Sample]:
    """Of each family's series in each group, those of the lowest replica (``tp_rank`` ...):
    the copies other replicas export of the same figures are left out."""

    def replica(sample: Sample) -> tuple[tuple[int, str], ...]:
        return tuple(_label_order(sample.label(name) or "") for name in replica_labels)

    def where(sample: Sample) -> tuple[str, str | None]:
        return (sample.name, sample.label(group) if group else None)

    lowest: dict[tuple[str, str | None], tuple[tuple[int, str], ...]] = {}
    for sample in samples:
        rank, key = replica(sample), where(sample)
        if key not in lowest or rank < lowest[key]:
            lowest[key] = rank
    return [sample for sample in samples if replica(sample) == lowest[where(sample)]]


def _label_order(value: str) -> tuple[int, str]:
    """A label value's order: numbers by value (rank "10" after "9"), then text."""
    return (int(value), "") if value.isdigit() and len(value) < 10 else (10**10, value)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


class LatencyReader:
    """Successive ``/metrics`` pages of one run -> a ``latency`` event per page, from the
    second page on (a window needs two samples). ``window_s`` is the rolling window."""

    def __init__(
        self,
        families: LatencyFamilies,
        *,
        window_s: float = DEFAULT_WINDOW_S,
        max_running: int | None = None,
    ) -> None:
        self.families = families
        self.window_s = float(window_s)
        self._names = families.sample_names()
        self._window: CounterWindow[SeriesKey] = CounterWindow(window_s)
        # Totals per poll over the window: waiting requests (is the queue growing?) and a
        # gauge of the server's last interval's preemptions.
        self._waiting: deque[tuple[float, float]] = deque(maxlen=MAX_WINDOW_SAMPLES)
        self._preempted_last: deque[tuple[float, float]] = deque(maxlen=MAX_WINDOW_SAMPLES)
        self.max_running = max_running  # from the launch's flags, when it says

    # --- what a backend may override -------------------------------------------------------

    def server_info(self, data: Any) -> None:
        """The server's info answer (untrusted JSON), polled now and then: a backend reads
        what its ``/metrics`` lacks from it (SGLang's maximum of running requests)."""

    def kv_total(self, page: Page, group: str | None) -> float | None:
        """KV capacity in tokens of ``group`` (None: every group), from ``kv_total_tokens``."""
        values = self._gauge_by_group(page, page.first(self.families.kv_total_tokens))
        return _pick_sum(values, group)

    # --- reading ---------------------------------------------------------------------------

    def read(self, text: str, at: float) -> Latency | None:
        """The event for the page polled at ``at`` (monotonic seconds); None for the first
        page, and for text that is not Prometheus's."""
        families = self.families
        page = read_page(text, self._names, families.replica_labels, families.group_label)
        if page is None:
            return None
        self._window.add(
            at, {(s.name, s.labels): s.value for samples in page.by_name.values() for s in samples}
        )
        start = at - self.window_s
        waiting_now = _pick_sum(self._gauge_by_group(page, page.first(families.waiting)), None)
        if waiting_now is not None:
            self._waiting.append((at, waiting_now))
        while self._waiting and self._waiting[0][0] < start:
            self._waiting.popleft()
        last_preempted = _pick_sum(
            self._gauge_by_group(page, page.first(families.preemptions_last)), None
        )
        if last_preempted is not None:
            self._preempted_last.append((at, last_preempted))
        while self._preempted_last and self._preempted_last[0][0] < start:
            self._preempted_last.popleft()
        span = self._window.span_s
        if span is None or span <= 0:
            return None
        rises = self._window.increase()
        return self._event(page, rises, span, waiting_now)

    def _event(
        self,
        page: Page,
        rises: Mapping[SeriesKey, float],
        span: float,
        waiting_now: float | None,
    ) -> Latency:
        families = self.families
        group_label = families.group_label
        groups = self._groups(page)

        def quantiles(bases: Sequence[str], group: str | None, digits: int):
            return self._quantiles(page, rises, page.first_histogram(bases), group, digits)

        running = _pick_sum(self._gauge_by_group(page, page.first(families.running)), None)
        usage = self._kv_usage(page, None)
        kv_total = self.kv_total(page, None)
        kv_used = self._kv_used(page, None, kv_total)
        if usage is None and kv_used is not None and kv_total:
            usage = kv_used / kv_total
        preemptions = self._preemptions(page, rises, None)
        waiting_change = (
            waiting_now - self._waiting[0][1] if waiting_now is not None and self._waiting else None
        )
        return Latency(
            window_s=self.window_s,
            span_s=round(span, 3),
            ttft_s=quantiles(families.ttft, None, 6),
            itl_s=quantiles(families.itl, None, 6),
            tpot_s=quantiles(families.tpot, None, 6),
            e2e_s=quantiles(families.e2e, None, 6),
            queue_s=quantiles(families.queue, None, 6),
            prompt_tokens=quantiles(families.prompt_tokens, None, 2),
            generation_tokens=quantiles(families.generation_tokens, None, 2),
            requests_per_s=_round(self._requests(page, rises, None, span), 4),
            finished=self._finished(page, rises),
            prefix_cache_hit_rate=_round(self._prefix_hit_rate(page, rises), 4),
            preemptions=preemptions,
            running=_count(running),
            waiting=_count(waiting_now),
            max_running=self.max_running,
            kv_used_tokens=_count(kv_used),
            kv_total_tokens=_count(kv_total),
            kv_usage=_round(usage, 4),
            waiting_change=waiting_change,
            kv_threshold=families.kv_threshold,
            queue_growing=self._queue_growing(waiting_change),
            kv_near_full=usage is not None and usage >= families.kv_threshold,
            preempting=bool(preemptions),
            group_label=group_label if groups else None,
            groups=tuple(
                LatencyGroup(
                    name=name,
                    running=_count(
                        _pick_sum(self._gauge_by_group(page, page.first(families.running)), name)
                    ),
                    waiting=_count(
                        _pick_sum(self._gauge_by_group(page, page.first(families.waiting)), name)
                    ),
                    kv_usage=_round(self._group_usage(page, name), 4),
                    ttft_s=quantiles(families.ttft, name, 6),
                    itl_s=quantiles(families.itl, name, 6),
                    e2e_s=quantiles(families.e2e, name, 6),
                    queue_s=quantiles(families.queue, name, 6),
                    requests_per_s=_round(self._requests(page, rises, name, span), 4),
                    preemptions=self._preemptions(page, rises, name),
                )
                for name in groups
            ),
        )

    # --- the figures -----------------------------------------------------------------------

    def _queue_growing(self, change: float | None) -> bool:
        """Waiting requests rose over the window (more now than at its start, a rising
        least-squares trend) and are not draining now (no fewer than at the poll before)."""
        points = list(self._waiting)
        trend = slope(points)
        return bool(
            change is not None
            and change > 0
            and trend is not None
            and trend > 0
            and points[-1][1] >= points[-2][1]
        )

    def _group_of(self, sample: Sample) -> str | None:
        label = self.families.group_label
        return sample.label(label) if label else None

    def _groups(self, page: Page) -> list[str]:
        """The groups the page's series name; none without a group label, or with one group
        alone (its figures are the totals)."""
        if self.families.group_label is None:
            return []
        found = {
            group
            for samples in page.by_name.values()
            for sample in samples
            if (group := self._group_of(sample)) is not None
        }
        return sorted(found, key=_label_order) if len(found) > 1 else []

    def _gauge_by_group(self, page: Page, name: str | None) -> dict[str | None, float]:
        """A gauge's value per group: the mean of the group's series (its label variants)."""
        values: dict[str | None, list[float]] = {}
        for sample in page.samples(name):
            values.setdefault(self._group_of(sample), []).append(sample.value)
        return {group: sum(found) / len(found) for group, found in values.items()}

    def _rise(
        self, page: Page, rises: Mapping[SeriesKey, float], name: str | None, group: str | None
    ) -> float | None:
        """A counter's rise over the window, its series summed (``group``'s alone when
        given); None when the page does not have it, or no series of it has a rise yet."""
        found = [
            rises[(sample.name, sample.labels)]
            for sample in page.samples(name)
            if (sample.name, sample.labels) in rises
            and (group is None or self._group_of(sample) == group)
        ]
        return sum(found) if found else None

    def _quantiles(
        self,
        page: Page,
        rises: Mapping[SeriesKey, float],
        base: str | None,
        group: str | None,
        digits: int,
    ) -> WindowQuantiles | None:
        if base is None:
            return None
        buckets: dict[float, float] = {}
        for sample in page.samples(f"{base}_bucket"):
            rise = rises.get((sample.name, sample.labels))
            if rise is None or (group is not None and self._group_of(sample) != group):
                continue
            bound = _bound(sample.label("le"))
            if bound is not None:
                buckets[bound] = buckets.get(bound, 0.0) + rise
        if not buckets:
            return None
        total = self._rise(page, rises, f"{base}_sum", group)
        count = self._rise(page, rises, f"{base}_count", group)
        return window_quantiles(buckets, total, count).rounded(digits)

    def _requests(
        self, page: Page, rises: Mapping[SeriesKey, float], group: str | None, span: float
    ) -> float | None:
        families = self.families
        done = self._rise(page, rises, page.first(families.requests), group)
        if done is None:
            done = self._rise(page, rises, page.first(families.finished), group)
        return done / span if done is not None else None

    def _finished(
        self, page: Page, rises: Mapping[SeriesKey, float]
    ) -> tuple[tuple[str, float], ...] | None:
        families = self.families
        reasons: dict[str, float] = {}
        for sample in page.samples(page.first(families.finished)):
            rise = rises.get((sample.name, sample.labels))
            reason = sample.label(families.finish_label)
            if rise is not None and reason is not None:
                reasons[reason] = reasons.get(reason, 0.0) + rise
        aborted = self._rise(page, rises, page.first(families.aborted), None)
        if aborted is not None:
            reasons["abort"] = reasons.get("abort", 0.0) + aborted
        if not reasons and page.first(families.finished) is None and aborted is None:
            return None
        return tuple(sorted((reason, round(n, 3)) for reason, n in reasons.items()))

    def _prefix_hit_rate(self, page: Page, rises: Mapping[SeriesKey, float]) -> float | None:
        families = self.families
        hits = self._rise(page, rises, page.first(families.prefix_hits), None)
        queries = self._rise(page, rises, page.first(families.prefix_queries), None)
        if hits is not None and queries is not None:
            return min(1.0, max(0.0, hits / queries)) if queries > 0 else None
        rates = self._gauge_by_group(page, page.first(families.prefix_hit_rate))
        if not rates:
            return None
        return min(1.0, max(0.0, sum(rates.values()) / len(rates)))

    def _preemptions(
        self, page: Page, rises: Mapping[SeriesKey, float], group: str | None
    ) -> float | None:
        """Preemptions in the window: a counter's rise; where the server has only a gauge
        of its last interval's count, the window's largest reading (a lower bound)."""
        families = self.families
        name = page.first(families.preemptions)
        if name is not None:
            return self._rise(page, rises, name, group)
        if page.first(families.preemptions_last) is None:
            return None
        if group is not None:
            return _pick_sum(
                self._gauge_by_group(page, page.first(families.preemptions_last)), group
            )
        return max((value for _, value in self._preempted_last), default=None)

    def _kv_usage(self, page: Page, group: str | None) -> float | None:
        usages = self._gauge_by_group(page, page.first(self.families.kv_usage))
        if group is not None:
            return usages.get(group)
        return sum(usages.values()) / len(usages) if usages else None

    def _kv_used(self, page: Page, group: str | None, total: float | None) -> float | None:
        used = _pick_sum(
            self._gauge_by_group(page, page.first(self.families.kv_used_tokens)), group
        )
        if used is not None:
            return used
        usage = self._kv_usage(page, group)
        return usage * total if usage is not None and total is not None else None

    def _group_usage(self, page: Page, group: str) -> float | None:
        usage = self._kv_usage(page, group)
        if usage is not None:
            return usage
        total = self.kv_total(page, group)
        used = self._kv_used(page, group, total)
        return used / total if used is not None and total else None


def _pick_sum(values: Mapping[str | None, float], group: str | None) -> float | None:
    """``group``'s value, or (``group`` None) the sum over every group; None when none."""
    if group is not None:
        return values.get(group)
    return sum(values.values()) if values else None


def _count(value: float | None) -> int | None:
    """A gauge read as a count (a hostile 1e300 bounded)."""
    return None if value is None else int(min(max(value, 0.0), 1e12))


def _bound(le: str | None) -> float | None:
    """A bucket's upper bound (``+Inf`` included); None when the label is not a number."""
    if le is None:
        return None
    try:
        bound = float(le)
    except ValueError:
        return None
    return None if math.isnan(bound) else bound


def flag_int(argv: Sequence[str], *flags: str) -> int | None:
    """The positive integer value of the first of ``flags`` in a command line (``--f N`` or
    ``--f=N``, the last one given winning), None when absent or not a number."""
    found: int | None = None
    for index, word in enumerate(argv):
        for flag in flags:
            value: str | None = None
            if word == flag and index + 1 < len(argv):
                value = argv[index + 1]
            elif word.startswith(flag + "="):
                value = word[len(flag) + 1 :]
            if value is not None and value.isdigit() and 0 < len(value) < 10:
                found = int(value)
    return found

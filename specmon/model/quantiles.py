"""Quantiles from a server's cumulative Prometheus histograms, over a rolling window, as
Prometheus itself computes ``histogram_quantile(q, sum by (le) (increase(x_bucket[W])))``.

Each ``le`` bucket (and each ``_sum``, ``_count`` and counter) of each labelled series is a
counter on its own: its rise over the window is the last value minus the first, plus the value
before each drop (a counter reset: the server restarted), as ``increase()`` takes it, without
the extrapolation to the window's edges (which scales every bucket alike and leaves the
quantile as it is). The quantile is then interpolated linearly inside the bucket it falls in,
with Prometheus's rules: the highest bucket must be ``+Inf`` (else no answer); a quantile in
the ``+Inf`` bucket is the upper bound of the bucket below it; the lowest bucket starts at 0
when its upper bound is positive, and is its upper bound when that is 0 or less; buckets are
made monotonic (a lower count after a higher one is raised to it); no observations give no
answer. "No answer" is None here where Prometheus says NaN.

Memory is bounded: a window keeps the samples of the last ``window_s`` seconds and at most
``max_samples`` of them, each a row of at most ``max_keys`` floats.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

DEFAULT_WINDOW_S = 60.0
MAX_WINDOW_SAMPLES = 512  # polls kept: 34 min at the default 4 s scrape
MAX_WINDOW_KEYS = 4096  # series tracked at once (8 bytes each per sample: 16 MiB at most)


BELOW, ABOVE = "below", "above"


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """The ``q``-quantile of cumulative ``(upper bound, count)`` buckets in any order, as
    Prometheus's ``histogram_quantile`` computes it; None where it answers NaN (no ``+Inf``
    bucket, fewer than two buckets, no observations, q NaN). q below 0 gives -inf, above 1
    +inf, as there."""
    return quantile_and_edge(q, buckets)[0]


def quantile_and_edge(
    q: float, buckets: Iterable[tuple[float, float]]
) -> tuple[float | None, str | None, float | None]:
    """``histogram_quantile``'s value, and where the histogram cannot place it: ``"below"``
    when it falls in the lowest bucket (Prometheus interpolates from 0: the value is made
    up, only "under the bucket's bound" is known), ``"above"`` when in the ``+Inf`` bucket
    (the value is the highest finite bound: "over it" is all that is known), else None; the
    third item is that bound."""
    if math.isnan(q):
        return None, None, None
    if q < 0:
        return -math.inf, None, None
    if q > 1:
        return math.inf, None, None
    ordered = sorted(buckets, key=lambda bucket: bucket[0])
    if not ordered or ordered[-1][0] != math.inf:
        return None, None, None
    merged: list[list[float]] = []  # buckets with the same bound are one (their counts added)
    for bound, count in ordered:
        if merged and merged[-1][0] == bound:
            merged[-1][1] += count
        else:
            merged.append([bound, count])
    highest = merged[0][1]
    for bucket in merged[1:]:  # the envelope: counts never fall with a higher bound
        highest = bucket[1] = max(bucket[1], highest)
    if len(merged) < 2:
        return None, None, None
    observations = merged[-1][1]
    if observations == 0:
        return None, None, None
    rank = q * observations
    index = next((i for i in range(len(merged) - 1) if merged[i][1] >= rank), len(merged) - 1)
    if index == len(merged) - 1:
        return merged[-2][0], ABOVE, merged[-2][0]
    if index == 0 and merged[0][0] <= 0:
        return merged[0][0], None, None
    start, below = (merged[index - 1][0], merged[index - 1][1]) if index > 0 else (0.0, 0.0)
    end, count = merged[index]
    if count == below:  # rank 0 in an empty lowest bucket: 0/0, NaN there
        return None, None, None
    value = start + (end - start) * ((rank - below) / (count - below))
    # From 0 (the lowest bucket, or one above empty buckets bounded at 0): made up below end
    return (value, BELOW, end) if start <= 0 else (value, None, None)


def counter_increase(values: Sequence[float]) -> float | None:
    """A counter's rise over successive samples, a drop read as a reset (the value before it
    is added back, as Prometheus's ``increase`` does); None with fewer than two samples."""
    if len(values) < 2:
        return None
    rise = values[-1] - values[0]
    for before, after in pairwise(values):
        if after < before:
            rise += before
    return rise


class CounterWindow(Generic[K]):
    """Cumulative counters sampled over time (one mapping of key -> value per poll), and each
    key's rise over the last ``window_s`` seconds. A key missing from a sample is a series
    the server did not serve then: its rise comes from the samples that have it.

    A sample is one row of floats (8 bytes a key, NaN where the key is missing) against one
    column index shared by every sample; past ``max_keys`` columns (a server inventing new
    label values at every poll) the index keeps only the newest sample's keys."""

    def __init__(
        self,
        window_s: float = DEFAULT_WINDOW_S,
        max_samples: int = MAX_WINDOW_SAMPLES,
        max_keys: int = MAX_WINDOW_KEYS,
    ) -> None:
        self.window_s = window_s
        self.max_keys = max_keys
        self._columns: dict[K, int] = {}
        self._samples: deque[tuple[float, array[float]]] = deque(maxlen=max_samples)

    def __len__(self) -> int:
        return len(self._samples)

    def add(self, at: float, values: Mapping[K, float]) -> None:
        """One poll's values at ``at`` (monotonic seconds); a sample older than the newest is
        a clock gone back: the window starts again from it."""
        if self._samples and at < self._samples[-1][0]:
            self._samples.clear()
        columns = self._columns
        for key in values:
            if key not in columns:
                columns[key] = len(columns)
        row = array("d", [math.nan]) * len(columns)
        for key, value in values.items():
            row[columns[key]] = value
        self._samples.append((at, row))
        if len(columns) > self.max_keys:
            self._keep_only(values)
        start = at - self.window_s
        while self._samples and self._samples[0][0] < start:
            self._samples.popleft()

    def _keep_only(self, keys: Iterable[K]) -> None:
        """Re-index the window on ``keys`` alone (the other columns' values are dropped)."""
        old = self._columns
        kept = [key for key in keys if key in old]
        self._columns = {key: index for index, key in enumerate(kept)}
        for position, (at, row) in enumerate(self._samples):
            fresh = array("d", [math.nan]) * len(kept)
            for index, key in enumerate(kept):
                column = old[key]
                if column < len(row):
                    fresh[index] = row[column]
            self._samples[position] = (at, fresh)

    @property
    def span_s(self) -> float | None:
        """Seconds between the window's first and last samples; None with fewer than two."""
        if len(self._samples) < 2:
            return None
        return self._samples[-1][0] - self._samples[0][0]

    def _series(self, column: int) -> list[float]:
        return [
            row[column]
            for _, row in self._samples
            if column < len(row) and not math.isnan(row[column])
        ]

    def increase(self) -> dict[K, float]:
        """Each key's rise over the window (keys seen in fewer than two samples left out)."""
        rises: dict[K, float] = {}
        for key, column in self._columns.items():
            rise = counter_increase(self._series(column))
            if rise is not None:
                rises[key] = rise
        return rises

    def values(self, key: K) -> list[tuple[float, float]]:
        """``(at, value)`` of ``key`` in the window, oldest first."""
        column = self._columns.get(key)
        if column is None:
            return []
        return [
            (at, row[column])
            for at, row in self._samples
            if column < len(row) and not math.isnan(row[column])
        ]


@dataclass(frozen=True, slots=True)
class WindowQuantiles:
    """What one histogram did over a window: its observations, their mean (rise of the sum /
    rise of the count) and p50/p90/p99; a quantile or the mean is None when nothing was
    observed in the window (or, for the mean, the page has no ``_sum``/``_count``)."""

    count: float
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    # Per quantile, "below" (in the lowest bucket: under ``*_edge``, the figure interpolated
    # from 0) or "above" (in +Inf: over ``*_edge``, the highest finite bound); None: placed.
    p50_bound: str | None = None
    p90_bound: str | None = None
    p99_bound: str | None = None
    p50_edge: float | None = None
    p90_edge: float | None = None
    p99_edge: float | None = None

    def edge(self, name: str) -> tuple[str | None, float | None]:
        """("below"|"above", the bucket bound) where quantile ``name`` ("p90") is only known
        to lie under or over a bound, else (None, its value)."""
        bound = getattr(self, f"{name}_bound")
        if bound is None:
            return None, getattr(self, name)
        return bound, getattr(self, f"{name}_edge")

    def shown(self, name: str, render: Callable[[float | None], str]) -> str:
        """Quantile ``name`` as ``render`` writes a value, with "<" or ">" and the bucket
        bound where the histogram only bounds it: ``<100 ms``, ``>30.0 s``, ``62 ms``."""
        bound, value = self.edge(name)
        sign = {BELOW: "<", ABOVE: ">"}.get(bound or "", "")
        return sign + render(value)

    def to_dict(self) -> dict[str, float | str | None]:
        out: dict[str, float | str | None] = {
            "count": self.count,
            "mean": self.mean,
            "p50": self.p50,
            "p90": self.p90,
            "p99": self.p99,
        }
        for name in ("p50", "p90", "p99"):  # only where the figure is a bound, not a value
            bound = getattr(self, f"{name}_bound")
            if bound is not None:
                out[f"{name}_bound"] = bound
                out[f"{name}_edge"] = getattr(self, f"{name}_edge")
        return out

    def rounded(self, digits: int) -> WindowQuantiles:
        """The same figures rounded to ``digits`` decimals (a JSON line stays short)."""

        def cut(value: float | None) -> float | None:
            return None if value is None or math.isinf(value) else round(value, digits)

        return WindowQuantiles(
            count=round(self.count, 3),
            mean=cut(self.mean),
            p50=cut(self.p50),
            p90=cut(self.p90),
            p99=cut(self.p99),
            p50_bound=self.p50_bound,
            p90_bound=self.p90_bound,
            p99_bound=self.p99_bound,
            p50_edge=cut(self.p50_edge),
            p90_edge=cut(self.p90_edge),
            p99_edge=cut(self.p99_edge),
        )


def window_quantiles(
    buckets: Mapping[float, float], total: float | None = None, count: float | None = None
) -> WindowQuantiles:
    """The quantiles of per-bucket rises (upper bound -> rise, ``+Inf`` included), with the
    rises of ``_sum`` and ``_count`` for the mean. The count is ``_count``'s rise, else the
    ``+Inf`` bucket's."""
    pairs = list(buckets.items())
    observed = count if count is not None else buckets.get(math.inf, 0.0)
    mean = total / count if total is not None and count else None
    p50, p90, p99 = (quantile_and_edge(q, pairs) for q in (0.5, 0.9, 0.99))
    return WindowQuantiles(
        count=observed,
        mean=mean,
        p50=p50[0],
        p90=p90[0],
        p99=p99[0],
        p50_bound=p50[1],
        p90_bound=p90[1],
        p99_bound=p99[1],
        p50_edge=p50[2],
        p90_edge=p90[2],
        p99_edge=p99[2],
    )


def slope(points: Sequence[tuple[float, float]]) -> float | None:
    """The least-squares slope of ``(t, y)`` points (units of y per second); None with fewer
    than two distinct times."""
    if len(points) < 2:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return None
    return sum((t - mean_t) * (y - mean_y) for t, y in points) / spread

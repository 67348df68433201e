"""Measuring and ranking settings at several loads, for a throughput or a latency objective.

The step count that is best with one request in flight is not the best at 32: speculation buys
latency at low load and can cost throughput once the verify is compute-bound. A load sweep
(``specmon sweep ... --concurrency 1,8,32``) measures every setting at every load; this module
holds what is computed from those measurements, pure and UI-free:

- :class:`LoadFigures`: the figures of one setting at one load (aggregate and per-request
  tok/s, TTFT and ITL p50/p90) with their spreads, from the benchmark client's own timings of
  the streamed responses (not the server's /metrics);
- the objectives (``throughput``, ``itl-p90``, ``ttft-p90``) and the SLO grammar
  (``itl_p90<=30ms``), parsed strictly;
- the ranking with ties: two points whose spreads overlap are a tie and are shown as one.

docs/experiments.md ("Sweeps at several loads") defines every field and the tie rule.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specmon.experiments.bench.runner import (
    MAX_CONCURRENCY,
    BenchResult,
    RequestResult,
    percentile,
)
from specmon.model.errors import UsageError

MAX_LOADS = 16
SPREAD_Z = 2.0  # the aggregate's request-level half-width, in standard errors (about 95%)
QUANTILE_ALPHA = 0.10  # the p90 intervals cover the true p90 with at least 90% confidence


def parse_loads(text: str) -> tuple[int, ...]:
    """``"1,8,32"`` -> (1, 8, 32): distinct concurrencies, kept in the order given; a
    UsageError naming the option for anything else."""
    parts = [part.strip() for part in str(text).split(",")]
    if not parts or any(not part for part in parts):
        raise UsageError(f"--concurrency {text!r}: expected N or N1,N2,... (e.g. 1,8,32)")
    loads: list[int] = []
    for part in parts:
        if not part.isdigit() or not 1 <= int(part) <= MAX_CONCURRENCY:
            raise UsageError(
                f"--concurrency {text!r}: {part!r} is not a whole number from 1 to "
                f"{MAX_CONCURRENCY}"
            )
        if int(part) in loads:
            raise UsageError(f"--concurrency {text!r}: {part} is listed twice")
        loads.append(int(part))
    if len(loads) > MAX_LOADS:
        raise UsageError(f"--concurrency {text!r}: at most {MAX_LOADS} loads")
    return tuple(loads)


def requests_at(requests: int, concurrency: int) -> int:
    """Measured requests at one load of a load sweep: ``--requests``, but at least two per
    request slot, so that the load is really held (one round of N starts all at once)."""
    return max(requests, 2 * concurrency)


# --- the figures of one point at one load ---------------------------------------------------


Spread = tuple[float, float]


@dataclass(frozen=True, slots=True)
class LoadFigures:
    """One setting at one load. ``*_spread`` are (low, high); docs/experiments.md defines
    each: the aggregate's covers every repeat and the request-level uncertainty of the
    mean, a p90's is a distribution-free 90% confidence interval of that percentile, the
    per-request tok/s's is its p10..p90 across requests."""

    concurrency: int
    repeats: int
    requests: int  # measured requests, all repeats together
    tok_s: float  # aggregate: output tokens / measured wall time (mean of the repeats)
    tok_s_spread: Spread
    tok_s_per_request: float  # median across requests
    tok_s_per_request_spread: Spread
    ttft_p50_ms: float | None
    ttft_p90_ms: float | None
    ttft_p90_spread: Spread | None
    itl_p50_ms: float | None
    itl_p90_ms: float | None
    itl_p90_spread: Spread | None
    repeat_tok_s: tuple[float, ...] = ()

    def to_json_dict(self) -> dict[str, Any]:
        def pair(spread: Spread | None) -> list[float] | None:
            return None if spread is None else [spread[0], spread[1]]

        return {
            "concurrency": self.concurrency,
            "repeats": self.repeats,
            "requests": self.requests,
            "tok_s": self.tok_s,
            "tok_s_spread": pair(self.tok_s_spread),
            "tok_s_repeats": list(self.repeat_tok_s) or [self.tok_s],
            "tok_s_per_request": self.tok_s_per_request,
            "tok_s_per_request_spread": pair(self.tok_s_per_request_spread),
            "ttft_p50_ms": self.ttft_p50_ms,
            "ttft_p90_ms": self.ttft_p90_ms,
            "ttft_p90_spread": pair(self.ttft_p90_spread),
            "itl_p50_ms": self.itl_p50_ms,
            "itl_p90_ms": self.itl_p90_ms,
            "itl_p90_spread": pair(self.itl_p90_spread),
        }


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(B <= k) for B ~ Binomial(n, p)."""
    if k < 0:
        return 0.0
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(min(k, n) + 1))


def quantile_interval(values: Sequence[float], q: float = 0.9) -> Spread:
    """A distribution-free interval (X_(l), X_(u)) of order statistics that covers the q-th
    quantile with confidence at least 1 - QUANTILE_ALPHA: l is the largest rank with
    P(B < l) <= alpha/2 and u the smallest with P(B >= u) <= alpha/2, B ~ Binomial(n, q).
    With few values no rank qualifies at an end and that end is the extreme value measured."""
    if not values:
        raise ValueError("interval of no values")
    ordered = sorted(values)
    n = len(ordered)
    half = QUANTILE_ALPHA / 2
    low = 1
    for rank in range(1, n + 1):
        if _binomial_cdf(rank - 1, n, q) <= half:
            low = rank
    high = n
    for rank in range(n, 0, -1):
        if 1 - _binomial_cdf(rank - 1, n, q) <= half:
            high = rank
    return float(ordered[low - 1]), float(ordered[max(low, high) - 1])


def load_figures(result: BenchResult) -> LoadFigures:
    """The figures of one (possibly merged, see ``merge_repeats``) benchmark at one load."""
    return figures_of(
        result.settings.concurrency, result.requests, result.tok_s_overall, result.repeat_tok_s
    )


def figures_from_benchmark_row(row: Mapping[str, Any]) -> LoadFigures:
    """The figures of a benchmark stored in the ledger (a resumed or shown load sweep)."""
    names = set(RequestResult.__dataclass_fields__)
    requests = [
        RequestResult(**{k: v for k, v in item.items() if k in names})
        for item in row.get("request_results") or []
    ]
    repeats = tuple(float(x) for x in row.get("repeats") or ())
    return figures_of(int(row["concurrency"]), requests, float(row["tok_s"]), repeats)


def figures_of(
    concurrency: int,
    requests: Sequence[RequestResult],
    tok_s: float,
    repeat_tok_s: Sequence[float] = (),
) -> LoadFigures:
    """The figures from the client's per-request timings and the aggregate tok/s (of each
    repeat when there were several)."""
    ok = [r for r in requests if r.ok]
    per_request = [r.tok_s for r in ok]
    ttfts = [r.ttft_s * 1000 for r in ok if r.ttft_s is not None]
    itls = [r.itl_s * 1000 for r in ok if r.itl_s is not None]
    repeats = tuple(repeat_tok_s) or (tok_s,)
    mean = sum(per_request) / len(per_request) if per_request else 0.0
    if len(per_request) >= 2 and mean > 0:
        sd = math.sqrt(sum((x - mean) ** 2 for x in per_request) / (len(per_request) - 1))
        half = SPREAD_Z * sd / mean / math.sqrt(len(per_request))
    else:
        half = 0.0
    return LoadFigures(
        concurrency=concurrency,
        repeats=len(repeats),
        requests=len(ok),
        tok_s=tok_s,
        tok_s_spread=(min(repeats) * max(0.0, 1 - half), max(repeats) * (1 + half)),
        tok_s_per_request=percentile(per_request, 50) if per_request else 0.0,
        tok_s_per_request_spread=(
            (percentile(per_request, 10), percentile(per_request, 90)) if per_request else (0, 0)
        ),
        ttft_p50_ms=percentile(ttfts, 50) if ttfts else None,
        ttft_p90_ms=percentile(ttfts, 90) if ttfts else None,
        ttft_p90_spread=quantile_interval(ttfts) if ttfts else None,
        itl_p50_ms=percentile(itls, 50) if itls else None,
        itl_p90_ms=percentile(itls, 90) if itls else None,
        itl_p90_spread=quantile_interval(itls) if itls else None,
        repeat_tok_s=tuple(repeat_tok_s),
    )


# --- objectives and SLOs --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Objective:
    """What a load sweep ranks by: a figure of LoadFigures and whether higher is better."""

    name: str
    field: str
    spread: str
    higher_is_better: bool
    label: str

    def value(self, figures: LoadFigures | None) -> float | None:
        return None if figures is None else getattr(figures, self.field)

    def interval(self, figures: LoadFigures) -> Spread | None:
        return getattr(figures, self.spread)


OBJECTIVES: dict[str, Objective] = {
    "throughput": Objective("throughput", "tok_s", "tok_s_spread", True, "tok/s"),
    "itl-p90": Objective("itl-p90", "itl_p90_ms", "itl_p90_spread", False, "ITL p90 ms"),
    "ttft-p90": Objective("ttft-p90", "ttft_p90_ms", "ttft_p90_spread", False, "TTFT p90 ms"),
}
DEFAULT_OBJECTIVE = "throughput"


def parse_objective(text: str) -> Objective:
    objective = OBJECTIVES.get(str(text).strip())
    if objective is None:
        raise UsageError(f"--objective {text!r}: expected one of {', '.join(OBJECTIVES)}")
    return objective


# metric -> (LoadFigures field, kind): a latency takes ms or s, a rate tok/s or nothing.
SLO_METRICS: dict[str, tuple[str, str]] = {
    "itl_p50": ("itl_p50_ms", "latency"),
    "itl_p90": ("itl_p90_ms", "latency"),
    "ttft_p50": ("ttft_p50_ms", "latency"),
    "ttft_p90": ("ttft_p90_ms", "latency"),
    "tok_s": ("tok_s", "rate"),
    "tok_s_per_request": ("tok_s_per_request", "rate"),
}
_SLO_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
}
_SLO = re.compile(
    r"^\s*(?P<metric>[a-z_0-9]+)\s*(?P<op><=|>=|<|>)\s*"
    r"(?P<number>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>ms|s|tok/s)?\s*$"
)


@dataclass(frozen=True, slots=True)
class Slo:
    """One service-level objective, e.g. ``itl_p90<=30ms``; ``limit`` in the figure's unit
    (ms for a latency, tok/s for a rate)."""

    metric: str
    op: str
    limit: float

    @property
    def field(self) -> str:
        return SLO_METRICS[self.metric][0]

    def text(self) -> str:
        unit = "ms" if SLO_METRICS[self.metric][1] == "latency" else " tok/s"
        return f"{self.metric}{self.op}{self.limit:g}{unit}"

    def met_by(self, figures: LoadFigures) -> bool | None:
        """Whether the measured figure (its point value) meets it; None if not measured."""
        value = getattr(figures, self.field)
        return None if value is None else _SLO_OPS[self.op](value, self.limit)


def parse_slo(text: str) -> Slo:
    """``itl_p90<=30ms`` -> Slo; a UsageError in one line saying what is expected."""
    shown = f"--slo {text!r}"
    match = _SLO.match(str(text))
    if match is None:
        raise UsageError(
            f"{shown}: expected METRIC OP VALUE[UNIT], e.g. 'itl_p90<=30ms' or 'tok_s>=500' "
            f"(METRIC one of {', '.join(SLO_METRICS)}; OP <=, <, >= or >)"
        )
    metric, op, unit = match["metric"], match["op"], match["unit"]
    if metric not in SLO_METRICS:
        raise UsageError(f"{shown}: unknown metric {metric!r}; one of {', '.join(SLO_METRICS)}")
    number = float(match["number"])
    kind = SLO_METRICS[metric][1]
    if kind == "latency":
        if unit not in ("ms", "s"):
            raise UsageError(f"{shown}: a latency needs its unit, ms or s (e.g. {metric}<=30ms)")
        limit = number * 1000 if unit == "s" else number
    else:
        if unit not in (None, "tok/s"):
            raise UsageError(f"{shown}: {metric} is in tok/s, not {unit}")
        limit = number
    if not math.isfinite(limit) or limit <= 0:
        raise UsageError(f"{shown}: the limit must be more than 0")
    return Slo(metric, op, limit)


def parse_slos(texts: Iterable[str]) -> tuple[Slo, ...]:
    slos = tuple(parse_slo(text) for text in texts)
    seen = [slo.metric for slo in slos]
    twice = {metric for metric in seen if seen.count(metric) > 1}
    if twice:
        raise UsageError(f"--slo: {', '.join(sorted(twice))} is given twice")
    return slos


def meets_slos(figures: LoadFigures, slos: Sequence[Slo]) -> bool:
    """All SLOs met by the measured figures (a figure not measured misses its SLO)."""
    return all(slo.met_by(figures) is True for slo in slos)


# --- ranking with ties ----------------------------------------------------------------------


def overlap(a: Spread | None, b: Spread | None) -> bool:
    return a is not None and b is not None and a[0] <= b[1] and b[0] <= a[1]


def rank_at_load(
    points: Sequence[Any], objective: Objective, slos: Sequence[Slo] = ()
) -> list[list[Any]]:
    """The measured points of one load (``.load`` a LoadFigures), best first, in tie groups.

    Points that meet every SLO come before those that miss one; within each, by the
    objective's value. A group opens with its best point and takes the points that follow it
    in that order while their spreads overlap the opening point's: those are a tie, shown as
    one; the first that does not overlap opens the next group (so a wide spread further down
    never ties with the best past a better point that does not). Points without a value for
    the objective come last, one group each."""
    meeting: list[tuple[float, Any]] = []
    missing: list[tuple[float, Any]] = []
    unmeasured: list[Any] = []
    for point in points:
        value = objective.value(point.load)
        if value is None:
            unmeasured.append(point)
            continue
        key = -value if objective.higher_is_better else value
        (meeting if meets_slos(point.load, slos) else missing).append((key, point))
    groups: list[list[Any]] = []
    for bucket in (meeting, missing):
        current: list[Any] = []
        for _key, point in sorted(bucket, key=lambda pair: pair[0]):
            if current and overlap(
                objective.interval(current[0].load), objective.interval(point.load)
            ):
                current.append(point)
                continue
            if current:
                groups.append(current)
            current = [point]
        if current:
            groups.append(current)
    return groups + [[point] for point in unmeasured]


@dataclass(frozen=True)
class LoadBest:
    """The best setting (a tie group) at one load, and the baseline measured at that load."""

    concurrency: int
    best: tuple[Any, ...]  # the tie group; empty when nothing was measured
    meets_slo: bool
    baseline: Any | None  # the baseline point at this load, if measured


def best_per_load(
    points: Sequence[Any], objective: Objective, slos: Sequence[Slo] = ()
) -> list[LoadBest]:
    """Per load (ascending): the first tie group among the measured non-baseline points."""
    loads = sorted({p.concurrency for p in points if p.concurrency is not None})
    out: list[LoadBest] = []
    for load in loads:
        here = [p for p in points if p.concurrency == load]
        measured = [p for p in here if p.status == "ok" and p.load is not None]
        settings = [p for p in measured if not p.is_baseline]
        baseline = next((p for p in measured if p.is_baseline), None)
        groups = rank_at_load(settings, objective, slos)
        best = tuple(groups[0]) if groups else ()
        met = bool(best) and all(meets_slos(p.load, slos) for p in best)
        out.append(LoadBest(load, best, met, baseline))
    return out


def ranks_at_load(
    points: Sequence[Any], objective: Objective, slos: Sequence[Slo] = ()
) -> dict[int, int]:
    """id(point) -> its rank at its load (1 = best; tied points share a rank)."""
    out: dict[int, int] = {}
    for load in {p.concurrency for p in points}:
        measured = [
            p
            for p in points
            if p.concurrency == load and p.status == "ok" and p.load and not p.is_baseline
        ]
        for number, group in enumerate(rank_at_load(measured, objective, slos), start=1):
            for point in group:
                out[id(point)] = number
    return out

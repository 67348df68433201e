"""The quantile engine (specmon/model/quantiles.py) against hand-computed values: Prometheus's
``histogram_quantile`` rules, ``increase`` with counter resets, the rolling window and its
bounds. The same engine against a real Prometheus on the same data:
tests/e2e/test_latency_prometheus.py."""

from __future__ import annotations

import math

import pytest

from specmon.model.quantiles import (
    CounterWindow,
    counter_increase,
    histogram_quantile,
    slope,
    window_quantiles,
)

INF = math.inf
# 10 observations at or under 0.1, 30 more under 0.5, 10 under 1, 0 above.
BUCKETS = [(0.1, 10.0), (0.5, 40.0), (1.0, 50.0), (INF, 50.0)]


def test_a_quantile_is_interpolated_linearly_inside_its_bucket() -> None:
    # rank 25 of 50: 15 into the (0.1, 0.5] bucket of 30 -> 0.1 + 0.4 * 15/30
    assert histogram_quantile(0.5, BUCKETS) == pytest.approx(0.3)
    # rank 45: 5 into the (0.5, 1] bucket of 10
    assert histogram_quantile(0.9, BUCKETS) == pytest.approx(0.75)
    # rank 49.5: 9.5 of 10
    assert histogram_quantile(0.99, BUCKETS) == pytest.approx(0.975)


def test_the_lowest_bucket_starts_at_zero_when_its_bound_is_positive() -> None:
    # rank 5 of the 10 in [0, 0.1]
    assert histogram_quantile(0.1, BUCKETS) == pytest.approx(0.05)
    assert histogram_quantile(0.0, BUCKETS) == 0.0


def test_a_lowest_bucket_bounded_at_zero_or_below_is_its_bound() -> None:
    # SGLang's queue time starts with le="0.0": a request that never queued
    assert histogram_quantile(0.5, [(0.0, 6.0), (0.001, 8.0), (INF, 10.0)]) == 0.0
    assert histogram_quantile(0.5, [(-1.0, 6.0), (1.0, 8.0), (INF, 10.0)]) == -1.0


def test_a_quantile_in_the_inf_bucket_is_the_bound_below_it() -> None:
    assert histogram_quantile(0.99, [(0.1, 1.0), (0.5, 2.0), (INF, 10.0)]) == 0.5
    assert histogram_quantile(1.0, BUCKETS) == pytest.approx(1.0)  # rank 50 reached at le=1


def test_no_answer_without_inf_bucket_observations_or_two_buckets() -> None:
    assert histogram_quantile(0.5, [(0.1, 1.0), (0.5, 2.0)]) is None  # no +Inf
    assert histogram_quantile(0.5, [(INF, 3.0)]) is None  # one bucket
    assert histogram_quantile(0.5, [(0.1, 0.0), (INF, 0.0)]) is None  # nothing observed
    assert histogram_quantile(0.5, []) is None
    assert histogram_quantile(math.nan, BUCKETS) is None


def test_a_quantile_outside_zero_to_one_is_infinite() -> None:
    assert histogram_quantile(-0.1, BUCKETS) == -INF
    assert histogram_quantile(1.5, BUCKETS) == INF


def test_zero_in_an_empty_lowest_bucket_is_no_answer() -> None:
    """rank 0 in a lowest bucket holding nothing: 0/0, NaN in Prometheus."""
    assert histogram_quantile(0.0, [(0.1, 0.0), (1.0, 4.0), (INF, 4.0)]) is None


def test_buckets_come_in_any_order_and_equal_bounds_are_added() -> None:
    shuffled = [BUCKETS[2], BUCKETS[0], BUCKETS[3], BUCKETS[1]]
    assert histogram_quantile(0.5, shuffled) == pytest.approx(0.3)
    # two series of the same histogram, summed per bound (``sum by (le)``)
    doubled = [(bound, count / 2) for bound, count in BUCKETS] * 2
    assert histogram_quantile(0.9, doubled) == pytest.approx(0.75)


def test_a_count_below_an_earlier_bucket_is_raised_to_it() -> None:
    """Non-monotonic buckets (a scrape torn between buckets): the envelope, as Prometheus."""
    torn = [(0.1, 10.0), (0.5, 8.0), (1.0, 20.0), (INF, 20.0)]
    # envelope 10, 10, 20, 20: rank 10 of 20 is reached at le=0.1
    assert histogram_quantile(0.5, torn) == pytest.approx(0.1)
    assert histogram_quantile(0.75, torn) == pytest.approx(0.75)


def test_a_counter_rise_reads_a_drop_as_a_reset() -> None:
    assert counter_increase([5.0, 7.0, 12.0]) == 7.0
    # 10 -> 12 (+2), reset, 0 -> 3 (+3: the value after the reset counts), 3 -> 4 (+1)
    assert counter_increase([10.0, 12.0, 3.0, 4.0]) == 2.0 + 3.0 + 1.0
    assert counter_increase([4.0]) is None
    assert counter_increase([]) is None


def test_the_window_keeps_the_last_seconds_and_each_keys_rise() -> None:
    window: CounterWindow[str] = CounterWindow(window_s=10.0)
    window.add(0.0, {"a": 0.0})
    window.add(5.0, {"a": 5.0, "b": 1.0})
    assert window.increase() == {"a": 5.0}  # b seen once: no rise yet
    window.add(10.0, {"a": 9.0, "b": 4.0})
    assert window.increase() == {"a": 9.0, "b": 3.0}
    assert window.span_s == 10.0  # the sample at exactly now - 10 s is still in
    window.add(12.0, {"a": 10.0, "b": 4.0})
    assert window.increase() == {"a": 5.0, "b": 3.0}  # the 0 s sample has left
    assert window.span_s == 7.0
    assert window.values("b") == [(5.0, 1.0), (10.0, 4.0), (12.0, 4.0)]


def test_the_window_is_bounded_in_samples_and_restarts_on_a_clock_gone_back() -> None:
    window: CounterWindow[str] = CounterWindow(window_s=1e9, max_samples=8)
    for second in range(100):
        window.add(float(second), {"a": float(second)})
    assert len(window) == 8
    assert window.increase() == {"a": 7.0}
    window.add(50.0, {"a": 1.0})
    assert len(window) == 1 and window.increase() == {}


def test_window_quantiles_carry_the_mean_and_the_count() -> None:
    rises = {0.1: 10.0, 0.5: 40.0, 1.0: 50.0, INF: 50.0}
    figures = window_quantiles(rises, total=20.0, count=50.0)
    assert (figures.count, figures.mean) == (50.0, 0.4)
    assert (figures.p50, figures.p90) == (pytest.approx(0.3), pytest.approx(0.75))
    quiet = window_quantiles({0.1: 0.0, INF: 0.0}, total=0.0, count=0.0)
    assert quiet.count == 0.0 and quiet.mean is None and quiet.p50 is None
    assert window_quantiles(rises).count == 50.0  # no _count: the +Inf bucket's
    assert figures.rounded(2).p99 == 0.97


def test_slope_is_least_squares() -> None:
    assert slope([(0.0, 0.0), (1.0, 2.0), (2.0, 4.0)]) == pytest.approx(2.0)
    assert slope([(0.0, 3.0), (4.0, 3.0)]) == 0.0
    assert slope([(1.0, 3.0)]) is None
    assert slope([(1.0, 3.0), (1.0, 5.0)]) is None


def test_keys_invented_at_every_poll_do_not_grow_the_window() -> None:
    """A server with a new label value at each scrape: past ``max_keys`` columns the window
    keeps the newest sample's keys, with their history."""
    window: CounterWindow[str] = CounterWindow(window_s=1e9, max_keys=4)
    for second in range(50):
        window.add(float(second), {"steady": float(second), f"new{second}": 1.0})
        assert len(window._columns) <= 5
    assert window.increase() == {"steady": 49.0 - window.values("steady")[0][1]}
    assert window.values("steady")[-1] == (49.0, 49.0) and len(window.values("steady")) >= 2


def test_a_quantile_the_histogram_only_bounds_says_so() -> None:
    """Every request under the lowest bound (0.1 s): Prometheus interpolates p50/p90/p99 from
    0 (50/90/99 ms), which the histogram does not know; the figures carry "below 0.1 s".
    Past the highest finite bound (30 s): the bound itself, carried as "above 30 s"."""
    from specmon.model.quantiles import quantile_and_edge, window_quantiles

    fast = {0.1: 100.0, 0.5: 100.0, 30.0: 100.0, math.inf: 100.0}
    figures = window_quantiles(fast)
    assert (figures.p50, figures.p90, figures.p99) == pytest.approx((0.05, 0.09, 0.099))
    for name in ("p50", "p90", "p99"):
        assert figures.edge(name) == ("below", 0.1)
    assert figures.shown("p90", lambda s: f"{s * 1000:.0f} ms") == "<100 ms"
    assert figures.to_dict()["p90_bound"] == "below" and figures.to_dict()["p90_edge"] == 0.1
    slow = window_quantiles({0.1: 0.0, 0.5: 0.0, 30.0: 0.0, math.inf: 10.0})
    assert slow.p99 == 30.0 and slow.edge("p99") == ("above", 30.0)
    assert slow.shown("p50", lambda s: f"{s:.1f} s") == ">30.0 s"
    mixed = window_quantiles({0.1: 40.0, 0.5: 95.0, 30.0: 100.0, math.inf: 100.0})
    assert mixed.edge("p50")[0] is None and mixed.edge("p90")[0] is None  # placed: values
    assert mixed.edge("p99")[0] is None and "p99_bound" not in mixed.to_dict()
    assert mixed.rounded(3).edge("p50") == (None, round(mixed.p50, 3))
    assert figures.rounded(3).edge("p90") == ("below", 0.1)
    # a bucket bounded at 0 below the first populated one: the same figure interpolated from 0
    zero_first = window_quantiles({0.0: 0.0, 0.1: 20.0, 0.5: 20.0, math.inf: 20.0})
    assert zero_first.p90 == pytest.approx(0.09) and zero_first.edge("p90") == ("below", 0.1)
    # a non-positive lowest bound is Prometheus's answer itself, not a made-up one
    assert quantile_and_edge(0.5, [(0.0, 10.0), (1.0, 10.0), (math.inf, 10.0)]) == (0.0, None, None)

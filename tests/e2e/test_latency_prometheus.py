"""The latency reader against the real Prometheus on the same data: pages in vLLM's names
(two engines, one of them restarting mid-way: a counter reset) are read by the backend's
``latency`` reader, and the same samples, backfilled with `promtool tsdb create-blocks-from
openmetrics`, are asked of a real Prometheus as ``histogram_quantile(q, sum by (le)
(increase(x_bucket[60s])))`` at the same instants. They agree to the microsecond; so do the
edge cases of ``histogram_quantile`` itself (lowest bucket at 0, quantile in ``+Inf``,
buckets out of order), queried on gauge buckets. About 5 s (Prometheus 2.42 in Debian)."""

from __future__ import annotations

import math
import random
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from support.prom import require_binary, run_prometheus

from specmon.backends import get_backend
from specmon.model.quantiles import histogram_quantile

STEP_S = 5
SAMPLES = 40
WINDOW_S = 60
BOUNDS = ("0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "+Inf")
TTFT = "vllm:time_to_first_token_seconds"
SUCCESS = "vllm:request_success_total"
RESTART_AT = 22  # engine 1's samples from here on start again from 0
EDGES: dict[str, list[tuple[str, float]]] = {
    "zero_lowest": [("0.0", 6), ("0.001", 8), ("0.01", 9), ("+Inf", 10)],
    "in_inf": [("0.1", 1), ("0.5", 2), ("+Inf", 10)],
    "positive": [("0.1", 10), ("0.5", 40), ("1.0", 50), ("+Inf", 50)],
    "torn": [("0.1", 10), ("0.5", 8), ("1.0", 20), ("+Inf", 20)],
}


def _series() -> list[dict[tuple[str, str], float]]:
    """Per sample: (engine, le) -> cumulative bucket count, with _count, _sum (le "count",
    "sum") and the success counter (le "ok")."""
    rng = random.Random(29)
    totals = {engine: [0.0] * len(BOUNDS) for engine in ("0", "1")}
    sums = {"0": 0.0, "1": 0.0}
    done = {"0": 0.0, "1": 0.0}
    out = []
    for index in range(SAMPLES):
        if index == RESTART_AT:  # engine 1's process restarts: every counter from 0
            totals["1"] = [0.0] * len(BOUNDS)
            sums["1"] = done["1"] = 0.0
        sample: dict[tuple[str, str], float] = {}
        for engine in ("0", "1"):
            for _ in range(rng.randint(0, 12)):
                ttft = rng.lognormvariate(-1.6 if engine == "0" else -0.9, 0.8)
                sums[engine] += ttft
                done[engine] += 1
                for position, bound in enumerate(BOUNDS):
                    if ttft <= float(bound):
                        totals[engine][position] += 1
            for bound, value in zip(BOUNDS, totals[engine], strict=True):
                sample[(engine, bound)] = value
            sample[(engine, "count")] = totals[engine][-1]
            sample[(engine, "sum")] = round(sums[engine], 6)
            sample[(engine, "ok")] = done[engine]
        out.append(sample)
    return out


def _page(sample: dict[tuple[str, str], float]) -> str:
    """One sample as vLLM's /metrics page (labels in vLLM's order, le last)."""
    lines = [
        f"# HELP {TTFT} Histogram of time to first token in seconds.",
        f"# TYPE {TTFT} histogram",
    ]
    for engine in ("0", "1"):
        labels = f'engine="{engine}",model_name="m"'
        for bound in BOUNDS:
            lines.append(f'{TTFT}_bucket{{{labels},le="{bound}"}} {sample[(engine, bound)]}')
        lines.append(f"{TTFT}_count{{{labels}}} {sample[(engine, 'count')]}")
        lines.append(f"{TTFT}_sum{{{labels}}} {sample[(engine, 'sum')]}")
    lines += [f"# HELP {SUCCESS} Count of finished requests.", f"# TYPE {SUCCESS} counter"]
    for engine in ("0", "1"):
        lines.append(
            f'{SUCCESS}{{engine="{engine}",finished_reason="length",model_name="m"}} '
            f"{sample[(engine, 'ok')]}"
        )
    return "\n".join(lines) + "\n"


def _openmetrics(samples: list[dict[tuple[str, str], float]], start: int) -> str:
    """Every sample with its timestamp, one gauge-typed family per sample name (the series
    are what matters to PromQL), plus the edge-case buckets at every instant."""
    series: dict[str, list[str]] = {}
    for index, sample in enumerate(samples):
        at = start + index * STEP_S
        for (engine, key), value in sample.items():
            if key == "ok":
                name, labels = SUCCESS, f'engine="{engine}",finished_reason="length"'
            elif key in ("count", "sum"):
                name, labels = f"{TTFT}_{key}", f'engine="{engine}"'
            else:
                name, labels = f"{TTFT}_bucket", f'engine="{engine}",le="{key}"'
            series.setdefault(name, []).append(f"{name}{{{labels}}} {value} {at}")
        for case, buckets in EDGES.items():
            for bound, value in buckets:
                series.setdefault("edge_bucket", []).append(
                    f'edge_bucket{{case="{case}",le="{bound}"}} {value} {at}'
                )
    lines = []
    for name, rows in series.items():
        lines.append(f"# TYPE {name} gauge")
        # OpenMetrics wants each series' points together, oldest first
        rows.sort(key=lambda row: (row.rsplit(" ", 2)[0], int(row.rsplit(" ", 1)[1])))
        lines.extend(rows)
    return "\n".join(lines) + "\n# EOF\n"


def _query(port: int, promql: str, at: int) -> list[dict]:
    response = httpx.get(
        f"http://127.0.0.1:{port}/api/v1/query", params={"query": promql, "time": at}, timeout=5
    )
    response.raise_for_status()
    data = response.json()
    assert data["status"] == "success", data
    return list(data["data"]["result"])


def _scalar(result: list[dict]) -> float | None:
    assert len(result) == 1, result
    value = float(result[0]["value"][1])
    return None if math.isnan(value) else value


def test_the_reader_agrees_with_prometheus_on_the_same_samples(tmp_path: Path) -> None:
    promtool = require_binary("promtool", "prometheus")
    samples = _series()
    start = (int(time.time()) - 3600) // STEP_S * STEP_S  # an hour back: inside retention
    source = tmp_path / "samples.om"
    source.write_text(_openmetrics(samples, start))
    subprocess.run(
        [
            promtool,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            str(source),
            str(tmp_path / "data"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    reader = get_backend("vllm").new_latency_reader((), WINDOW_S)
    assert reader is not None
    events = {}
    for index, sample in enumerate(samples):
        events[index] = reader.read(_page(sample), float(start + index * STEP_S))
    checked = [12, 20, RESTART_AT, RESTART_AT + 3, SAMPLES - 1]  # full windows, the reset in them
    with run_prometheus(tmp_path, []) as prometheus:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{prometheus.port}/-/ready", timeout=2).is_success:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        port = prometheus.port
        for index in checked:
            at = start + index * STEP_S
            event = events[index]
            assert event is not None and event.span_s == WINDOW_S
            rises = f"increase({TTFT}_bucket[{WINDOW_S}s])"
            for q, ours in (
                (0.5, event.ttft_s.p50),
                (0.9, event.ttft_s.p90),
                (0.99, event.ttft_s.p99),
            ):
                theirs = _scalar(
                    _query(port, f"histogram_quantile({q}, sum by (le) ({rises}))", at)
                )
                assert ours == pytest.approx(theirs, abs=1e-6), (index, q)
            by_engine = _query(port, f"histogram_quantile(0.9, sum by (le, engine) ({rises}))", at)
            theirs_by_engine = {
                row["metric"]["engine"]: float(row["value"][1]) for row in by_engine
            }
            ours_by_engine = {group.name: group.ttft_s.p90 for group in event.groups}
            assert ours_by_engine == pytest.approx(theirs_by_engine, abs=1e-6), index
            count = _scalar(_query(port, f"sum(increase({TTFT}_count[{WINDOW_S}s]))", at))
            assert event.ttft_s.count == pytest.approx(count, abs=1e-3)
            total = _scalar(_query(port, f"sum(increase({TTFT}_sum[{WINDOW_S}s]))", at))
            assert event.ttft_s.mean == pytest.approx(total / count, abs=1e-6)
            finished = _scalar(_query(port, f"sum(increase({SUCCESS}[{WINDOW_S}s]))", at))
            assert dict(event.finished)["length"] == pytest.approx(finished, abs=1e-3)
            assert event.requests_per_s == pytest.approx(finished / WINDOW_S, abs=1e-4)
        edge_at = start + (SAMPLES - 1) * STEP_S
        for q in (0.0, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0):
            rows = _query(port, f"histogram_quantile({q}, edge_bucket)", edge_at)
            theirs = {row["metric"]["case"]: float(row["value"][1]) for row in rows}
            for case, buckets in EDGES.items():
                ours = histogram_quantile(q, [(float(bound), value) for bound, value in buckets])
                expected = theirs[case]
                if math.isnan(expected):
                    assert ours is None, (case, q)
                else:
                    assert ours == pytest.approx(expected, abs=1e-12), (case, q)

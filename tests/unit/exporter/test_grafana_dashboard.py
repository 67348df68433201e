"""docs/grafana/specmon.json: import-ready (datasource as a variable, host and GPU variables) and
every metric its PromQL names is one the exporter exposes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from support.paths import REPO

from specmon.exporter.collector import SpecmonCollector

DASHBOARD = REPO / "docs" / "grafana" / "specmon.json"
SAMPLE_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "info": ("_info",),
    "gauge": ("",),
}


def exposed_sample_names() -> set[str]:
    names = set()
    for family in SpecmonCollector(list).describe():
        names.update(family.name + suffix for suffix in SAMPLE_SUFFIXES[family.type])
    return names


def expressions(dashboard: dict[str, Any]) -> Iterator[str]:
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            yield target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield variable["query"]["query"]


def test_every_metric_in_the_dashboard_is_exported() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exposed = exposed_sample_names()
    exprs = list(expressions(dashboard))
    assert len(exprs) > 20
    for expr in exprs:
        used = set(re.findall(r"\bspecmon_[a-z0-9_]+\b", expr))
        assert used, f"{expr!r} names no specmon metric"
        assert used <= exposed, f"{expr!r}: not exported: {sorted(used - exposed)}"


def test_dashboard_is_import_ready() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert {"host", "gpu"} <= set(variables)
    titles = {p["title"] for p in dashboard["panels"]}
    for needed in (
        "Loading progress per host",
        "Generation tok/s",
        "Accept length and rate",
        "Acceptance by position",
        "Per-cycle time, p50 and p99",
        "Share of the cycle",
        "GPU utilisation",
        "GPU memory used",
        "Server errors by category",
    ):
        assert needed in titles
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}", panel["title"]

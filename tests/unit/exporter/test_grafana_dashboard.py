"""docs/grafana/specmon.json: what scripts/grafana_dashboard.py writes; valid against Grafana's
own dashboard schema (support/grafana_schema.py: the types grafana-foundation-sdk generates
for Grafana 11.6); import-ready (datasource as a variable, every variable it names defined);
a description and a unit on every panel; every metric its PromQL names is one the exporter
exposes or one specmon's backends read from the servers themselves. Whether each query
answers with data: tests/e2e/test_grafana_prometheus.py."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from support.paths import REPO

from specmon.backends.sglang import metrics as sglang_metrics
from specmon.backends.vllm import metrics as vllm_metrics
from specmon.exporter.collector import SpecmonCollector

DASHBOARD = REPO / "docs" / "grafana" / "specmon.json"
GENERATOR = REPO / "scripts" / "grafana_dashboard.py"
SAMPLE_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "info": ("_info",),
    "gauge": ("",),
}
# Grafana's own variables the queries may use.
GRAFANA_BUILTINS = {"__rate_interval", "__range", "__interval"}
SERVER_METRIC = re.compile(r"\b(?:sglang|vllm):[a-z0-9_]+")


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels() -> list[dict[str, Any]]:
    return [p for p in load()["panels"] if p["type"] != "row"]


def exposed_sample_names() -> set[str]:
    names = set()
    for family in SpecmonCollector(list).describe():
        names.update(family.name + suffix for suffix in SAMPLE_SUFFIXES[family.type])
    return names


def server_families_specmon_reads() -> set[str]:
    """The servers' family names specmon's backends read (their latency families and the
    names their metrics readers hold), as samples: histograms by base name."""
    names: set[str] = set()
    for module in (sglang_metrics, vllm_metrics):
        values: list[Any] = [getattr(module.LATENCY_FAMILIES, f.name) for f in dataclasses.fields(module.LATENCY_FAMILIES)]  # fmt: skip
        values += [value for key, value in vars(module).items() if key.isupper()]
        for value in values:
            for name in value if isinstance(value, tuple) else (value,):
                if isinstance(name, str) and SERVER_METRIC.fullmatch(name):
                    names.add(name)
    return names


def expressions(dashboard: dict[str, Any]) -> Iterator[str]:
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            yield target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield variable["query"]["query"]
    for annotation in dashboard["annotations"]["list"]:
        if "expr" in annotation:
            yield annotation["expr"]


def dashboard_errors(dashboard: dict[str, Any]) -> list[str]:
    """The schema check's findings (grafana-foundation-sdk needs Python 3.11: the test extra
    installs it there, and below 3.11 the schema tests skip)."""
    pytest.importorskip("grafana_foundation_sdk")
    from support.grafana_schema import dashboard_errors as check

    return check(dashboard)


def test_the_file_is_what_the_generator_writes() -> None:
    result = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dashboard_validates_against_grafanas_schema() -> None:
    assert dashboard_errors(load()) == []


@pytest.mark.parametrize(
    "spoil, error",
    [
        (lambda d: d["panels"][1].update(descripton="typo"), "$.panels[1].descripton: not a field"),
        (lambda d: d["panels"][1]["gridPos"].update(w="8"), "$.panels[1].gridPos.w: '8' is not int"),
        (lambda d: d.update(graphTooltip=7), "$.graphTooltip: 7 not one of DashboardCursorSync"),
        (lambda d: d["panels"][1]["options"].pop("textMode"), "$.panels[1].options: no 'textMode'"),
        (lambda d: d["panels"][1]["targets"][0].pop("refId"), "$.panels[1].targets[0]: no 'refId'"),
        (lambda d: d["panels"][0].update(collapsed=None), "$.panels[0].collapsed: null"),
        (lambda d: d["templating"]["list"][1].update(refresh=5), "not one of VariableRefresh"),
        (lambda d: d.pop("schemaVersion"), "$: no 'schemaVersion'"),
    ],
)  # fmt: skip
def test_the_schema_check_catches_what_grafana_would_drop_or_refuse(spoil: Any, error: str) -> None:
    """The validator is no rubber stamp: a typo'd key, a string where a number goes, a value
    outside an enum, a missing required field (a stat's text mode, a query's refId), each is
    named with its path."""
    dashboard = copy.deepcopy(load())
    assert dashboard["panels"][1]["type"] == "stat"
    spoil(dashboard)
    errors = dashboard_errors(dashboard)
    assert any(error in line for line in errors), errors


def test_every_panel_has_a_description_and_a_unit() -> None:
    """A unit Grafana shows (not `none`, not empty): a heatmap's on its axis and its cells, as
    Grafana's heatmap takes no standard unit."""
    for panel in panels():
        assert len(panel.get("description", "")) > 20, panel["title"]
        if panel["type"] == "heatmap":
            units = [panel["options"]["yAxis"]["unit"], panel["options"]["cellValues"]["unit"]]
        else:
            units = [panel["fieldConfig"]["defaults"].get("unit")]
        overrides = panel["fieldConfig"]["overrides"]
        units += [p["value"] for o in overrides for p in o["properties"] if p["id"] == "unit"]
        for unit in units:
            assert unit and unit != "none", (panel["title"], unit)


def test_every_variable_named_is_defined() -> None:
    dashboard = load()
    defined = {v["name"] for v in dashboard["templating"]["list"]} | GRAFANA_BUILTINS
    text = json.dumps(dashboard)
    named = set(re.findall(r"\$\{?(\w+)", text))
    assert named <= defined, sorted(named - defined)
    assert {"job", "instance", "model", "host", "gpu", "itl_slo_ms"} <= named


def test_every_metric_in_the_dashboard_is_exported_or_read_from_the_servers() -> None:
    """specmon's series as the exporter names them; the servers' as specmon's backends read
    them (the console and the dashboard show the same families)."""
    exposed = exposed_sample_names()
    known = server_families_specmon_reads()
    exprs = list(expressions(load()))
    assert len(exprs) > 40
    for expr in exprs:
        ours = set(re.findall(r"\bspecmon_[a-z0-9_]+\b", expr))
        theirs = {re.sub(r"_bucket$", "", name) for name in SERVER_METRIC.findall(expr)}
        assert ours or theirs, f"{expr!r} names no metric"
        assert ours <= exposed, f"{expr!r}: not exported: {sorted(ours - exposed)}"
        assert theirs <= known, f"{expr!r}: read by no backend: {sorted(theirs - known)}"


def test_each_server_figure_is_asked_in_both_servers_names() -> None:
    """A server-side query names SGLang's family and vLLM's for the same figure, except
    vLLM's own spec-decode counters (SGLang has none)."""
    for panel in panels():
        for target in panel["targets"]:
            expr = target["expr"]
            if "sglang:" in expr or "vllm:" in expr:
                assert "sglang:" in expr or "spec_decode" in expr, (panel["title"], expr)
                assert "vllm:" in expr, (panel["title"], expr)
                assert 'job=~"$job", instance=~"$instance", model_name=~"$model"' in expr


def test_latency_heatmaps_and_quantiles() -> None:
    """Heatmaps from the buckets' rates by ``le`` (Grafana's own bucket format, no
    recalculation); quantiles per server from its buckets at p50, p90, p99."""
    heatmaps = {p["title"]: p for p in panels() if p["type"] == "heatmap"}
    assert set(heatmaps) == {"TTFT heatmap", "ITL heatmap"}
    for panel in heatmaps.values():
        (target,) = panel["targets"]
        assert target["format"] == "heatmap" and target["legendFormat"] == "{{le}}"
        assert target["expr"].startswith("sum by (le) (rate(")
        assert "_bucket" in target["expr"] and "[$__rate_interval]" in target["expr"]
        assert panel["options"]["calculate"] is False
    titles = {p["title"]: p for p in panels()}
    for figure in ("TTFT", "ITL", "End-to-end"):
        exprs = [t["expr"] for t in titles[f"{figure} p50 / p90 / p99"]["targets"]]
        for q, expr in zip(("0.5", "0.9", "0.99"), exprs, strict=True):
            assert expr.startswith(f"histogram_quantile({q}, sum by (le, instance) (rate(")


def test_dashboard_is_import_ready() -> None:
    dashboard = load()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert {"host", "gpu", "job", "instance", "model"} <= set(variables)
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
        "Token flow: proposed, accepted, rejected",
        "Drafts per second",
        "Queue: requests waiting",
        "KV cache in use",
        "Preemptions",
    ):
        assert needed in titles
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    (launches,) = [a for a in dashboard["annotations"]["list"] if a["name"] == "Launches"]
    assert launches["datasource"]["uid"] == "${datasource}" and launches["useValueForTime"]
    assert "specmon_run_start_time_seconds" in launches["expr"]


def test_panels_do_not_overlap() -> None:
    """Grafana would push an overlapping panel down: the layout is the one written."""
    taken: set[tuple[int, int]] = set()
    for panel in load()["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, panel["title"]
        taken |= cells

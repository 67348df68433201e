"""docs/grafana/specmon.json against a real Prometheus (Debian's) fed as docs/exporter.md's
recipe says: job `specmon` scrapes the exporter following the demo (the SGLang simulator with
the demo's clients), job `server` scrapes the servers' own /metrics: the demo's simulator and
the vLLM simulator under a bounded load (2 clients, at most 40 requests, 40 s). Every panel's
every query answers with data, each value in its unit's sensible range, and each query in a
server's names answers for that server; every query variable lists values; the launch
annotation marks the demo run's launch time to the millisecond. About 25 s."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import hosts
from support.hosts import free_port, kill_everything_under, sim_profiles
from support.paths import REPO
from support.prom import Prometheus, require_binary, run_prometheus, start_exporter, stop_exporter
from support.sim import VLLM_EAGLE3_ARGS, VLLM_READY_LINE, SimProcess, start_sim

from specmon.session.demo import DemoSession
from specmon.session.local import LocalTransport

DASHBOARD = REPO / "docs" / "grafana" / "specmon.json"
VLLM_MODEL = VLLM_EAGLE3_ARGS[1]
# Grafana's own variables as a 1 s scrape makes them (its rate interval is at least 4 scrapes:
# 10 s holds several TTFTs at the demo's pace), and the dashboard's time range for the tiles.
BUILTINS = {"$__rate_interval": "10s", "$__range": "60s"}
# The values a unit makes sensible on the simulated hosts (8 GPUs at 500-700 W, around 40 C,
# 1.98 GHz; times of a few ms to a few s); any other unit: a finite value >= 0.
SENSIBLE_BY_UNIT = {
    "percentunit": (0.0, 1.0),
    "bool_yes_no": (0.0, 1.0),
    "s": (0.0, 600.0),
    "reqps": (0.0, 1e4),
    "watt": (50.0, 2000.0),
    "celsius": (10.0, 120.0),
    "hertz": (1e8, 5e9),
}
ANY_COUNT = (0.0, 1e9)
# A share of the SLO: past 1 when it is missed, as it may be on a simulator.
SLO_SHARE = (0.0, 1e3)
# Told only while a run loads: a ready run has no ETA, so this query is empty then.
EMPTY_WHILE_READY = ("specmon_loading_eta_seconds",)


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def defaults(dashboard: dict[str, Any]) -> dict[str, str]:
    """Every variable as "All" (the query variables) or its default (the text boxes)."""
    out = dict(BUILTINS)
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            out["$" + variable["name"]] = ".*"
        elif variable["type"] == "textbox":
            out["$" + variable["name"]] = variable["query"]
    return out


def fill(expr: str, values: dict[str, str]) -> str:
    for name in sorted(values, key=len, reverse=True):  # $__range before $__rate_interval...
        expr = expr.replace(name, values[name])
    assert "$" not in expr, expr
    return expr


def panel_unit(panel: dict[str, Any], ref: str) -> str:
    """The unit a target's series are shown in: its override, else the panel's (a
    heatmap's cells: ``options.cellValues.unit``)."""
    if panel["type"] == "heatmap":
        return str(panel["options"]["cellValues"]["unit"])
    for override in panel["fieldConfig"]["overrides"]:
        matcher = override["matcher"]
        if matcher == {"id": "byFrameRefID", "options": ref}:
            for prop in override["properties"]:
                if prop["id"] == "unit":
                    return str(prop["value"])
    return str(panel["fieldConfig"]["defaults"]["unit"])


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str, tuple[float, float]]]:
    """(panel title, PromQL as Grafana sends it with every variable at its default, the
    sensible range of its values) for every target of every panel."""
    values = defaults(dashboard)
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            unit = panel_unit(panel, target["refId"])
            sensible_range = SENSIBLE_BY_UNIT.get(unit, ANY_COUNT)
            if "/ SLO" in panel["title"]:
                sensible_range = SLO_SHARE
            yield panel["title"], fill(target["expr"], values), sensible_range


def sensible(result: list[dict[str, Any]], low: float, high: float) -> bool:
    """Whether ``result`` has data and every value is a number within [low, high]."""
    values = [float(series["value"][1]) for series in result]
    return bool(values) and all(math.isfinite(v) and low <= v <= high for v in values)


def wait_sensible(
    prom: Prometheus, expr: str, low: float, high: float, instances: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The answer to ``expr`` once it holds sensible values and a series of each of
    ``instances`` (a rate needs two scrapes in its window; a server's first requests take a
    few seconds to finish), or the last answer after 20 s."""

    def done(result: list[dict[str, Any]]) -> bool:
        have = {series["metric"].get("instance") for series in result}
        return sensible(result, low, high) and (have == {None} or set(instances) <= have)

    deadline = time.monotonic() + 20
    result = prom.query(expr)
    while not done(result) and time.monotonic() < deadline:
        time.sleep(0.5)
        result = prom.query(expr)
    return result


def label_values(prom: Prometheus, query: str, values: dict[str, str]) -> list[str]:
    """What Grafana lists for a ``label_values(selector, label)`` variable: the label's
    values over the series the selector matches."""
    found = re.fullmatch(r"label_values\((?:(.+),\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\)", query)
    assert found, query
    selector, label = found.groups()
    params = {"match[]": fill(selector, values)} if selector else {}
    response = httpx.get(
        f"http://127.0.0.1:{prom.port}/api/v1/label/{label}/values", params=params, timeout=5
    )
    response.raise_for_status()
    return list(response.json()["data"])


def wait_ready_recorded(state_dir: Path, timeout: float = 60.0) -> None:
    """Until the launching session has noted the run's ready time in its record: an exporter
    that reattaches earlier reads the ready line in its replay with no load time, and has no
    elapsed load time to export (the launching session's note comes a moment after ready)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for meta in state_dir.glob("**/meta.json"):
            with contextlib.suppress(OSError, ValueError):
                if json.loads(meta.read_text()).get("load_seconds"):
                    return
        time.sleep(0.1)
    raise AssertionError(f"no run under {state_dir} recorded its load time in {timeout} s")


class BoundedLoad:
    """``clients`` threads sending completions to the vLLM simulator: at most ``requests``
    in all and for at most ``seconds``, then done (or sooner, once stopped)."""

    def __init__(self, sim: SimProcess, clients: int, requests: int, seconds: float) -> None:
        self.sim, self.left, self.deadline = sim, requests, time.monotonic() + seconds
        self.sent = 0
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.client, daemon=True) for _ in range(clients)]
        for thread in self.threads:
            thread.start()

    def take(self) -> bool:
        with self.lock:
            if self.left <= 0 or self.stopped.is_set() or time.monotonic() > self.deadline:
                return False
            self.left -= 1
            return True

    def client(self) -> None:
        body = {"model": VLLM_MODEL, "prompt": "hello " * 40, "max_tokens": 96}
        with httpx.Client(timeout=60) as http:
            while self.take():
                http.post(self.sim.url("/v1/completions"), json=body).raise_for_status()
                self.sent += 1

    def stop(self) -> None:
        self.stopped.set()
        for thread in self.threads:
            thread.join(timeout=60)


async def test_every_dashboard_query_answers_on_the_demo(tmp_path: Path) -> None:
    require_binary("prometheus", "prometheus")
    dashboard = load()
    state_dir = tmp_path / "state"
    profiles = sim_profiles()
    session = DemoSession(  # the SGLang simulator; its clients send one request at a time
        LocalTransport(),
        profiles=profiles,
        options=hosts.test_options(state_dir),
        stop_server_on_close=True,
        autolaunch="fast",
    )
    port = free_port()
    exporter = None
    load_on_vllm = None
    try:
        with start_sim(
            tmp_path / "vllm",
            module="specmon.sim.vllm",
            base_args=VLLM_EAGLE3_ARGS,
            env={"SPECMON_SIM_SHARDS": "4"},
            probe=False,
        ) as vllm:
            await session.start()
            await asyncio.to_thread(wait_ready_recorded, state_dir)
            exporter = start_exporter(state_dir, port, tmp_path / "export.log")
            await asyncio.to_thread(vllm.wait_for_log, VLLM_READY_LINE, 60)
            load_on_vllm = BoundedLoad(vllm, clients=2, requests=40, seconds=40.0)
            try:
                sglang = f"127.0.0.1:{profiles['fast'].port}"
                instances = {"sglang": sglang, "vllm": f"127.0.0.1:{vllm.port}"}
                servers = ", ".join(f"'{address}'" for address in instances.values())
                jobs = f"  - job_name: server\n    static_configs:\n      - targets: [{servers}]\n"
                exporter_target = [f"127.0.0.1:{port}"]
                with run_prometheus(tmp_path / "prom", exporter_target, extra_jobs=jobs) as prom:
                    await check_dashboard(prom, dashboard, instances, session)
            finally:
                load_on_vllm.stop()  # before the simulator goes
    finally:
        stop_exporter(exporter)
        await session.close()
        kill_everything_under(state_dir)
    assert load_on_vllm is not None and 0 < load_on_vllm.sent <= 40


async def check_dashboard(
    prom: Prometheus, dashboard: dict[str, Any], instances: dict[str, str], session: Any
) -> None:
    await asyncio.to_thread(prom.wait_query, 'up{job="server"} == 1', count=2)
    await asyncio.to_thread(prom.wait_query, "specmon_generation_tokens_per_second > 0")
    # Every panel's every query answers with data in its unit's sensible range (an empty
    # answer is a panel that shows nothing).
    checked = 0
    for title, expr, (low, high) in queries(dashboard):
        if any(name in expr for name in EMPTY_WHILE_READY):
            assert await asyncio.to_thread(prom.query, expr) == [], expr
            continue
        # A query in a server's names answers for that server (its names are right), unless
        # it pools the servers (no instance label: the heatmaps, checked one by one below).
        named = [address for backend, address in instances.items() if f"{backend}:" in expr]
        result = await asyncio.to_thread(wait_sensible, prom, expr, low, high, named)
        assert sensible(result, low, high), (title, expr, result)
        answered = {series["metric"].get("instance") for series in result}
        assert answered == {None} or set(named) <= answered, (title, named, expr, result)
        checked += 1
    assert checked >= 45, checked
    # The pooled queries (heatmaps: all servers together) answer for each server alone.
    values = defaults(dashboard)
    for panel in dashboard["panels"]:
        if panel["type"] != "heatmap":
            continue
        for backend, address in instances.items():
            one = {**values, "$instance": address}
            expr = fill(panel["targets"][0]["expr"], one)
            result = await asyncio.to_thread(wait_sensible, prom, expr, *ANY_COUNT)
            assert sensible(result, *ANY_COUNT), (panel["title"], backend, expr)
    # Each query variable lists values: the two servers, their models, the host, 8 GPUs.
    listed = {
        v["name"]: await asyncio.to_thread(label_values, prom, v["query"]["query"], values)
        for v in dashboard["templating"]["list"]
        if v["type"] == "query"
    }
    assert listed["job"] == ["server"]
    assert sorted(listed["instance"]) == sorted(instances.values())
    assert sorted(listed["model"]) == sorted(["moonshotai/Kimi-K2.5", VLLM_MODEL])
    assert listed["host"] == ["local"] and len(listed["gpu"]) == 8
    # The launch annotation: one mark, at the demo run's launch, with its labels to show.
    (launches,) = [a for a in dashboard["annotations"]["list"] if a["name"] == "Launches"]
    marks = await asyncio.to_thread(prom.query, fill(launches["expr"], values))
    run = session.bus.store.run
    assert run is not None and run.started_at is not None
    assert [float(m["value"][1]) for m in marks] == [pytest.approx(run.started_at * 1000)]
    for label in re.findall(r"\{\{(\w+)\}\}", launches["titleFormat"] + launches["textFormat"]):
        assert marks[0]["metric"].get(label), label
    assert marks[0]["metric"]["profile"] == "fast"

"""`specmon watch URL --json` prints ``latency`` events against the simulator's SGLang and
vLLM personalities under a bounded load (4 clients x 3 requests): sane quantiles (p50 <= p90
<= p99, means inside them) for every latency histogram the simulator serves, rates and
capacity gauges, and a family it does not serve stays absent in every event (the simulator
gains queue time and more in item 2 of issue 29: what exists is checked, and absent stays
absent). About 35 s; the text line's words: tests/unit/state/test_store_latency.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import httpx
import pytest
from support.paths import REPO
from support.sim import VLLM_EAGLE3_ARGS, VLLM_READY_LINE, SimProcess, start_sim

VLLM_MODEL = "meta-llama/Llama-3.3-70B-Instruct"
WATCH_S = 14.0  # /metrics every 4 s: three windows
QUANTILES = ("ttft_s", "itl_s", "tpot_s", "e2e_s", "queue_s", "prompt_tokens", "generation_tokens")


@pytest.fixture(scope="module")
def sglang(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    with start_sim(tmp_path_factory.mktemp("sglang"), args=["--enable-metrics"]) as process:
        process.wait_ready()
        yield process


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    with start_sim(
        tmp_path_factory.mktemp("vllm"),
        module="specmon.sim.vllm",
        base_args=VLLM_EAGLE3_ARGS,
        env={"SPECMON_SIM_SHARDS": "4"},
        probe=False,
    ) as process:
        process.wait_for_log(VLLM_READY_LINE, 60)
        yield process


def send_requests(sim: SimProcess, backend: str) -> None:
    """4 clients, 3 requests of 100 tokens each, in parallel; then done."""

    def client() -> None:
        with httpx.Client(timeout=60) as http:
            for _ in range(3):
                if backend == "sglang":
                    body = {"text": "hi " * 40, "sampling_params": {"max_new_tokens": 100}}
                    http.post(sim.url("/generate"), json=body).raise_for_status()
                else:
                    body = {"model": VLLM_MODEL, "prompt": "hi " * 40, "max_tokens": 100}
                    http.post(sim.url("/v1/completions"), json=body).raise_for_status()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)


def watch_under_load(sim: SimProcess, backend: str, *extra: str) -> str:
    """The watch's output over WATCH_S seconds, the load sent once its first ``/metrics``
    page is read (its first ``metrics`` line), so that every request falls inside the
    windows."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    watch = subprocess.Popen(
        [sys.executable, "-m", "specmon", "watch", sim.url(""), "--duration", str(WATCH_S), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    lines: list[str] = []
    first_page = threading.Event()

    def read() -> None:
        assert watch.stdout is not None
        for line in watch.stdout:
            lines.append(line)
            if '"kind": "metrics"' in line:
                first_page.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert first_page.wait(timeout=15), "".join(lines)
        send_requests(sim, backend)
        watch.wait(timeout=WATCH_S + 30)
        reader.join(timeout=10)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert watch.returncode == 0, watch.stderr.read()[-2000:] if watch.stderr else ""
    return "".join(lines)


def check_sane(events: list[dict]) -> dict:
    """Each event's quantiles ordered and positive; a family absent from the first event is
    absent from every one; the last event, with the load's requests in its window."""
    assert len(events) >= 2, events
    absent = {name for name in QUANTILES if events[0][name] is None}
    for event in events:
        assert event["window_s"] == 60.0 and 0 < event["span_s"] <= 60.0
        for name in QUANTILES:
            figures = event[name]
            if name in absent:
                assert figures is None, (name, event)  # absent stays absent, never 0
                continue
            assert figures is not None, (name, event)
            if figures["count"] == 0:
                continue
            assert 0 < figures["p50"] <= figures["p90"] <= figures["p99"], (name, figures)
            assert figures["mean"] > 0, (name, figures)
        assert 0 <= event["kv_usage"] <= 1 and event["running"] >= 0 and event["waiting"] >= 0
        assert isinstance(event["queue_growing"], bool) and isinstance(event["kv_near_full"], bool)
    last = events[-1]
    for name in ("ttft_s", "itl_s", "e2e_s"):  # the simulators serve these three
        assert last[name] is not None and last[name]["count"] > 0, (name, last)
    assert last["requests_per_s"] > 0
    assert not last["kv_near_full"] and not last["preempting"]
    return last


def test_watch_an_sglang_url_prints_latency_events(sglang: SimProcess) -> None:
    out = watch_under_load(sglang, "sglang", "--json")
    events = [json.loads(line) for line in out.splitlines()]
    last = check_sane([e for e in events if e["kind"] == "latency"])
    assert last["ttft_s"]["count"] == 12 and last["e2e_s"]["count"] == 12  # the 12 requests
    assert last["max_running"] == 48  # /server_info: effective_max_running_requests_per_dp
    assert last["kv_total_tokens"] > 0 and last["groups"] == []
    assert last["tpot_s"] is None  # SGLang has no such family


def test_watch_a_vllm_url_prints_latency_events(vllm: SimProcess) -> None:
    out = watch_under_load(vllm, "vllm", "--json")
    events = [json.loads(line) for line in out.splitlines()]
    last = check_sane([e for e in events if e["kind"] == "latency"])
    assert last["ttft_s"]["count"] == 12 and last["finished"]["length"] == 12
    assert last["max_running"] is None  # a URL has no launch flags; no family says it
    assert last["prefix_cache_hit_rate"] is not None and last["preemptions"] == 0

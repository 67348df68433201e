"""`specmon watch http://HOST:PORT` end to end, no SSH at all: the simulator's SGLang and
vLLM personalities started as plain processes on free loopback ports, the backend told from
their answers, and the JSON stream's health, server info and decode events (tok/s and
acceptance, vLLM's by position) while requests are sent to them; `--until ready` through
`--backend` on a server that starts after the watch; a server no backend claims refused in
one line. The real vLLM's twin is in tests/e2e/test_real_vllm.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.paths import REPO
from support.sim import (
    VLLM_EAGLE3_ARGS,
    VLLM_READY_LINE,
    SimProcess,
    free_port,
    start_sim,
)

from specmon.session.url import detect_backend

SGLANG_MODEL = "moonshotai/Kimi-K2.5"
VLLM_MODEL = "meta-llama/Llama-3.3-70B-Instruct"


def start_vllm(workdir: Path, port: int | None = None) -> contextlib.AbstractContextManager:
    return start_sim(
        workdir,
        module="specmon.sim.vllm",
        base_args=VLLM_EAGLE3_ARGS,
        env={"SPECMON_SIM_SHARDS": "4"},
        probe=False,
        port=port,
    )


@pytest.fixture(scope="module")
def sglang(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    with start_sim(tmp_path_factory.mktemp("sglang"), args=["--enable-metrics"]) as process:
        process.wait_ready()
        yield process


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    with start_vllm(tmp_path_factory.mktemp("vllm")) as process:
        process.wait_for_log(VLLM_READY_LINE, 60)
        yield process


@contextlib.contextmanager
def load(sim: SimProcess, backend: str) -> Iterator[None]:
    """Four clients sending requests until the block ends (the simulator decodes only while
    it has requests)."""
    done = threading.Event()

    def client() -> None:
        with httpx.Client(timeout=60) as http:
            while not done.is_set():
                with contextlib.suppress(httpx.HTTPError):
                    if backend == "sglang":
                        body = {"text": "hi " * 40, "sampling_params": {"max_new_tokens": 200}}
                        http.post(sim.url("/generate"), json=body)
                    else:
                        body = {"model": VLLM_MODEL, "prompt": "hi " * 40, "max_tokens": 200}
                        http.post(sim.url("/v1/completions"), json=body)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        done.set()
        for thread in threads:
            thread.join(timeout=60)


def specmon(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "specmon", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )


def watch_json(url: str, *extra: str, seconds: float = 10.0) -> list[dict]:
    result = specmon("watch", url, "--json", "--duration", str(seconds), *extra)
    assert result.returncode == 0, result.stderr[-2000:]
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_both_simulators_are_told_apart_by_their_answers(sglang, vllm) -> None:
    async def detect(sim: SimProcess) -> str:
        return (await detect_backend(f"http://127.0.0.1:{sim.port}", timeout_s=5)).name

    assert asyncio.run(detect(sglang)) == "sglang"
    assert asyncio.run(detect(vllm)) == "vllm"


def test_watch_an_sglang_url_shows_health_info_and_decodes(sglang) -> None:
    url = f"http://127.0.0.1:{sglang.port}"
    with load(sglang, "sglang"):
        events = watch_json(url)
    kinds = [event["kind"] for event in events]
    run = next(event for event in events if event["kind"] == "run")
    assert run["backend"] == "sglang" and run["run_id"] == url and run["pid"] is None
    assert {"connection", "health", "run_state", "server_info", "metrics"} <= set(kinds)
    assert any(e["kind"] == "health" and e["status"] == 200 for e in events)
    assert any(e["kind"] == "run_state" and e["state"] == "ready" for e in events)
    info = dict(next(e for e in events if e["kind"] == "server_info")["values"])
    assert info["model_path"] == SGLANG_MODEL and info["speculative_algorithm"] == "EAGLE3"
    decodes = [e for e in events if e["kind"] == "decode"]
    assert any(e["gen_throughput"] > 0 for e in decodes), decodes
    assert any((e["accept_len"] or 0) > 1 for e in decodes), decodes
    agent = next(e for e in events if e["kind"] == "agent")
    assert agent["detail"] == "GPUs: not visible over HTTP"


def test_watch_a_vllm_url_shows_tok_s_and_acceptance_by_position(vllm) -> None:
    url = f"http://127.0.0.1:{vllm.port}"
    with load(vllm, "vllm"):
        events = watch_json(url)
    run = next(event for event in events if event["kind"] == "run")
    assert run["backend"] == "vllm"
    assert any(e["kind"] == "health" and e["status"] == 200 for e in events)
    info = dict(next(e for e in events if e["kind"] == "server_info")["values"])
    assert info["model"] == VLLM_MODEL
    decodes = [e for e in events if e["kind"] == "decode"]
    assert any(e["gen_throughput"] > 0 for e in decodes), decodes
    spec = [e for e in events if e["kind"] == "spec_decode"]
    assert spec and all(e["mean_accept_len"] > 1 for e in spec), spec
    assert all(len(e["per_position"]) == 3 for e in spec)
    metrics = next(e for e in events if e["kind"] == "metrics")
    names = {key.partition("{")[0] for key, _ in metrics["values"]}
    latency = ("time_to_first_token", "inter_token_latency", "e2e_request_latency")
    for name in latency:  # latency: the histograms' sums and counts, as /metrics gives them
        assert f"vllm:{name}_seconds_count" in names and f"vllm:{name}_seconds_sum" in names


def test_text_watch_says_http_only(vllm) -> None:
    result = specmon("watch", f"http://127.0.0.1:{vllm.port}", "--duration", "3")
    assert result.returncode == 0, result.stderr
    assert f"watching http://127.0.0.1:{vllm.port} (vllm, HTTP only)" in result.stdout
    assert "gpu agent   stopped: GPUs: not visible over HTTP" in result.stdout


def watch_a_late_server(tmp_path: Path, *options: str, early_s: float) -> list[dict]:
    """`watch http://... --json --until ready OPTIONS` on a port nobody listens on for
    ``early_s`` seconds, then the vLLM simulator there: the JSON events (exit code 0)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "specmon", "watch", f"http://127.0.0.1:{port}"]
    watch = subprocess.Popen(
        [*command, *options, "--json", "--until", "ready", "--duration", "90"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    try:
        time.sleep(early_s)  # the watch is asking a port nobody listens on yet
        assert watch.poll() is None, watch.communicate()
        with start_vllm(tmp_path / "late", port=port):
            out, err = watch.communicate(timeout=90)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert watch.returncode == 0, err[-2000:]
    return [json.loads(line) for line in out.splitlines()]


def test_until_ready_with_backend_waits_for_a_server_that_starts_later(tmp_path) -> None:
    events = watch_a_late_server(tmp_path, "--backend", "vllm", early_s=2.0)
    health = [e["status"] for e in events if e["kind"] == "health"]
    assert health[0] is None and health[-1] == 200
    assert any(e["kind"] == "run_state" and e["state"] == "ready" for e in events)


def test_a_server_no_backend_claims_is_refused_in_one_line(tmp_path) -> None:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            time.sleep(0.1)
        result = specmon("watch", f"http://127.0.0.1:{port}", "--json", "--duration", "2")
    finally:
        server.kill()
        server.wait()
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "not recognised as a known server" in lines[0]
    assert "sglang: /get_server_info" in lines[0] and "vllm: /version" in lines[0]
    assert "--backend sglang|vllm" in lines[0]


def test_a_watch_waits_for_a_server_whose_http_is_not_up_yet_and_then_tells_which(
    tmp_path,
) -> None:
    """Nothing listening is what a loading server looks like (its HTTP comes up last): the
    watch, with no --backend, says it waits, asks again, and detects the server once it
    answers. It used to refuse at once ("connection refused ... is the server up?")."""
    events = watch_a_late_server(tmp_path, early_s=3.0)  # refused, and asked again
    waiting = [e for e in events if e["kind"] == "connection" and e["state"] == "connecting"]
    assert any("no answer yet (connection refused" in (e["detail"] or "") for e in waiting)
    assert any(e["kind"] == "run" and e["backend"] == "vllm" for e in events), events[:5]
    assert any(e["kind"] == "run_state" and e["state"] == "ready" for e in events)


def test_nothing_listening_for_the_whole_duration_ends_as_a_duration_does() -> None:
    result = specmon("watch", f"http://127.0.0.1:{free_port()}", "--duration", "2")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "no answer yet (connection refused or host unreachable): waiting" in result.stdout

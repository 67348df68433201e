"""vllm-top (0.1.2, a third-party vLLM monitor from the package index) shows against the
simulated vLLM what it shows against the real vLLM CPU build.

vllm-top's headless mode (``--snapshot``) fetches /metrics once and prints its dashboard:
running and waiting requests, a "GPU Cache Usage" row from ``vllm:gpu_cache_usage_perc``,
and cumulative token and latency figures (vllm_top/monitor.py). The real build's side is
its recorded page (data/real-vllm-0.32-cpu-metrics.txt, three completions of 24 tokens)
served as-is from 127.0.0.1; the simulator's is the simulated vLLM after the same three
completions. vLLM 0.33 (and the 0.32 build) replaced ``gpu_cache_usage_perc`` with
``kv_cache_usage_perc``, so the cache row is empty against both, even while the simulated
KV cache is in use: the faithful answer.
"""

from __future__ import annotations

import http.server
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.sim import VLLM_EAGLE3_ARGS, VLLM_READY_LINE, SimProcess, start_sim

pytest.importorskip("vllm_top", reason="vllm-top is in the test extras (pyproject.toml)")

REAL = Path(__file__).parent / "data" / "real-vllm-0.32-cpu-metrics.txt"
MODEL = "meta-llama/Llama-3.3-70B-Instruct"
CACHE_ROW = re.compile(r"^GPU Cache Usage \(%\)\s+\|[░█]+\| (\S+)/100 \((\d+)%\)$", re.M)
RUNNING_ROW = re.compile(r"^Running Requests\s+\|[░█]+\| (\S+)/255 ", re.M)


def snapshot(port: int) -> str:
    """``vllm-top --snapshot`` against 127.0.0.1:port, its standard output."""
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from vllm_top.main import main; main()",
            "--snapshot",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONIOENCODING": "utf-8"},  # no TERM: `clear` is quiet
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def shape(text: str) -> list[str]:
    """The dashboard's lines with numbers, the model, the address and the clock replaced."""
    text = re.sub(r"Model: .*", "Model: M", text)
    text = re.sub(r"http://\S+", "URL", text)
    text = re.sub(r"\d{2}:\d{2}:\d{2}", "T", text)
    text = re.sub(r"[░█]+", "BAR", text)
    return [re.sub(r"\d[\d,]*(?:\.\d+)?", "N", line) for line in text.splitlines()]


@pytest.fixture(scope="module")
def real_port() -> Iterator[int]:
    """The real build's recorded /metrics page, served from 127.0.0.1."""
    body = REAL.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    workdir = tmp_path_factory.mktemp("vllm-top")
    with start_sim(workdir, module="specmon.sim.vllm", base_args=VLLM_EAGLE3_ARGS) as process:
        process.wait_for_log(VLLM_READY_LINE, timeout=60)
        for prompt in ("The capital of France is", "One, two, three,", "def fibonacci(n):"):
            response = httpx.post(
                process.url("/v1/completions"),
                json={"model": MODEL, "prompt": prompt, "max_tokens": 24},
                timeout=60,
            )
            assert response.status_code == 200, response.text
        yield process


def test_vllm_top_shows_the_same_dashboard_against_both(real_port: int, sim: SimProcess) -> None:
    real, simulated = snapshot(real_port), snapshot(sim.port)
    assert shape(simulated) == shape(real)
    for text in (real, simulated):
        assert CACHE_ROW.search(text) is not None and CACHE_ROW.search(text).groups() == (
            "0.0",
            "0",
        ), text
        assert "Total Requests:          3" in text
        assert "Avg Generation Length:   24.0 tokens" in text
    assert "Model: tiny-llama8" in real and f"Model: {MODEL}" in simulated


def test_the_cache_row_stays_empty_while_the_simulated_kv_cache_is_in_use(sim: SimProcess) -> None:
    """Busy: vllm-top's running row counts the requests while its cache row, reading the
    family vLLM no longer serves, stays at 0 (``kv_cache_usage_perc`` is above 0 then)."""
    done = threading.Event()

    def load() -> None:
        with httpx.Client(timeout=60) as client:
            threads = [
                threading.Thread(
                    target=client.post,
                    args=(sim.url("/v1/completions"),),
                    kwargs={"json": {"model": MODEL, "prompt": "x " * 200, "max_tokens": 300}},
                )
                for _ in range(4)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        done.set()

    worker = threading.Thread(target=load)
    worker.start()
    try:
        seen = None
        for _ in range(100):
            text = snapshot(sim.port)
            running = RUNNING_ROW.search(text)
            if running is not None and float(running.group(1)) > 0:
                seen = text
                break
        assert seen is not None, "vllm-top never saw a running request"
        metrics = httpx.get(sim.url("/metrics"), timeout=10).text
        usage = re.search(r"^vllm:kv_cache_usage_perc\{[^}]*\} (\S+)$", metrics, re.M)
        assert usage is not None and float(usage.group(1)) > 0
        cache = CACHE_ROW.search(seen)
        assert cache is not None and cache.groups() == ("0.0", "0"), seen
    finally:
        worker.join(timeout=120)
    assert done.is_set()

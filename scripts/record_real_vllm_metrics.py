"""Record the real vLLM CPU build's ``/metrics`` text for the simulator's fidelity test.

Starts the cached real vLLM of the test suite (tests/support/real_vllm.py: the CPU build,
a tiny Llama with an EAGLE-3 draft of 3 tokens), serves three completions as the real-server
test does, and writes what ``GET /metrics`` returned then. The result is checked in as
tests/backends/vllm/data/real-vllm-0.32-cpu-metrics.txt (tests/backends/vllm/test_sim_vllm_families.py
compares the simulator's families with it). Run: ``.venv/bin/python scripts/record_real_vllm_metrics.py OUT``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.real_vllm import SERVED_NAME, real_vllm_install, start_real_vllm

PROMPTS = ("The capital of France is", "One, two, three,", "def fibonacci(n):")


def main(out: Path) -> int:
    install = real_vllm_install()
    with (
        tempfile.TemporaryDirectory() as workdir,
        start_real_vllm(Path(workdir), install) as server,
    ):
        server.wait_ready()
        for prompt in PROMPTS:
            response = httpx.post(
                server.url("/v1/completions"),
                json={
                    "model": SERVED_NAME,
                    "prompt": prompt,
                    "max_tokens": 24,
                    "temperature": 0,
                    "ignore_eos": True,
                },
                timeout=120.0,
            )
            response.raise_for_status()
        text = httpx.get(server.url("/metrics"), timeout=10.0).text
        version = httpx.get(server.url("/version"), timeout=10.0).json()["version"]
    out.write_text(f"# recorded from real vLLM {version} (CPU build)\n{text}", encoding="utf-8")
    print(f"{out}: {sum(1 for line in text.splitlines() if line.startswith('# TYPE'))} families")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))

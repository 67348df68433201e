"""End to end over the local transport with the simulator's vLLM personality: `specmon demo
--profile demo-vllm --headless` launches it, sees vLLM's start-up phases, reaches ready
through /health (connection refused while loading is not a failure), and its simulated
clients make it decode (stats and SpecDecoding lines, probe cycles). Skipped where the
personality (specmon.sim.vllm) is not in this tree."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.hosts import processes_mentioning
from support.paths import REPO

REPO_ROOT = REPO

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("specmon.sim.vllm") is None,
    reason="the simulator's vLLM personality (specmon.sim.vllm) is not in this tree",
)


def test_demo_vllm_headless_reaches_ready_decodes_and_leaves_no_process(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TMPDIR": str(tmp_path)}
    command = [sys.executable, "-m", "specmon", "demo", "--profile", "demo-vllm", "--headless"]
    result = subprocess.run(
        [*command, "--json", "--duration", "30", "--time-scale", "0.003"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    events = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = [event["kind"] for event in events]
    run = next(event for event in events if event["kind"] == "run")
    assert run["backend"] == "vllm"
    assert "--speculative-config" in run["argv"]
    for kind in ("load_begin", "shard_progress", "weights_loaded", "kv_cache", "ready"):
        assert kind in kinds, (kind, sorted(set(kinds)))
    assert not any(event["kind"] == "failed" for event in events)
    after_ready = kinds[kinds.index("ready") :]
    assert "decode" in after_ready and "spec_decode" in after_ready and "probe" in after_ready
    decodes = [e for e in events if e["kind"] == "decode"]
    # the log's `Engine 000:` lines carry their engine; before the first one (every 10 s) the
    # poller speaks for the quiet log from /metrics (no engine)
    assert any(e.get("engine") == 0 for e in decodes)
    positions = [e["per_position"] for e in events if e["kind"] == "spec_decode"]
    assert any(p and len(p) == 3 for p in positions), positions
    assert processes_mentioning(str(tmp_path)) == []

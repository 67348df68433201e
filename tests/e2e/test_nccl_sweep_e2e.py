"""`specmon nccl-sweep` end to end on CPU: real ranks (torch, gloo) launched by the host session.

Needs torch (CPU build) in the test interpreter: `.venv/bin/pip install torch==2.13.0`; the
module is skipped without it. Marked ``torch`` (each point starts 3 interpreters, 2 of them
importing torch: about 5-15 s a point on 2 cores); `pytest -m torch` runs these alone.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specmon.experiments.ledger import Ledger

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None,
        reason="needs torch (CPU): .venv/bin/pip install torch==2.13.0",
    ),
]

CONFIG = """
[hosts.box]
transport = "local"
state_dir = "{state_dir}"

[profiles.allreduce]
command = ["{{python}}", "-m", "specmon.nccl_bench"]
model_path = "allreduce-h7168"
tp = 2
gpu_agent = "none"
stop_grace_s = 5

[profiles.allreduce.env]
NCCL_DEBUG = "INFO"
SPECMON_NCCL_BENCH_ITERS = "{iters}"
SPECMON_NCCL_BENCH_WARMUP = "5"
SPECMON_NCCL_BENCH_BATCHES = "1,4"
"""


def sweep(tmp_path: Path, *args: str, iters: int = 100, timeout: float = 240):
    config = tmp_path / "specmon.toml"
    config.write_text(CONFIG.format(state_dir=tmp_path / "state", iters=iters))
    env = {**os.environ, "SPECMON_DATA_DIR": str(tmp_path / "data")}
    command = [sys.executable, "-m", "specmon", "--config", str(config), "nccl-sweep", "box"]
    ledger = str(tmp_path / "l.sqlite3")
    return subprocess.run(
        [*command, "--profile", "allreduce", "--ledger", ledger, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=tmp_path,
    )


def test_each_setting_reaches_every_rank_and_is_recorded(tmp_path):
    grid = ("--grid", "NCCL_PROTO=LL,Simple", "--grid", "NCCL_P2P_LEVEL=unset,SYS")
    done = sweep(tmp_path, *grid, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    points = [json.loads(line) for line in done.stdout.splitlines()]
    assert [p["params"] for p in points] == [
        {"NCCL_PROTO": "LL", "NCCL_P2P_LEVEL": "unset"},
        {"NCCL_PROTO": "LL", "NCCL_P2P_LEVEL": "SYS"},
        {"NCCL_PROTO": "Simple", "NCCL_P2P_LEVEL": "unset"},
        {"NCCL_PROTO": "Simple", "NCCL_P2P_LEVEL": "SYS"},
    ]
    assert all(p["status"] == "ok" for p in points)
    assert points[1]["evidence"] == ["NCCL_PROTO=LL: 2 ranks", "NCCL_P2P_LEVEL=SYS: 2 ranks"]
    assert points[2]["evidence"] == [
        "NCCL_PROTO=Simple: 2 ranks",
        "NCCL_P2P_LEVEL=(unset): 2 ranks",
    ]
    assert [r["batch"] for r in points[0]["results"]] == [1, 4]
    assert all(0 < r["p50_us"] <= r["p99_us"] for p in points for r in p["results"])
    assert "p50 b1" in done.stderr  # the table (on stderr with --json)
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        sweep_row = ledger.latest_sweep()
        assert sweep_row is not None and sweep_row.status == "finished"
        assert sweep_row.spec["kind"] == "collective"
        rows = ledger.sweep_points(sweep_row.id)
        assert len(rows) == 4
        stored = ledger.collective_results(rows[1].id)
        assert [(r["batch"], r["calls"], r["world_size"], r["backend"]) for r in stored] == [
            (1, 100, 2, "gloo"),
            (4, 100, 2, "gloo"),
        ]
        assert ledger.get_run(rows[1].run_ref)["env"]["NCCL_P2P_LEVEL"] == "SYS"
        # As if killed after its last point: the same command resumes it and launches nothing.
        ledger.set_sweep_status(sweep_row.id, "interrupted")
    again = sweep(tmp_path, *grid)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stderr.count("done earlier") == 4 and "launch:" not in again.stderr
    assert "resuming nccl-sweep" in again.stderr and "p50 b1" in again.stdout


def test_a_run_past_its_timeout_is_stopped_with_every_rank(tmp_path):
    """The ranks live in the run's process group: the stop that ends the run ends them all."""
    done = sweep(
        tmp_path, "--grid", "NCCL_PROTO=LL", "--run-timeout", "20", "--json", iters=10_000_000
    )
    assert done.returncode == 1
    (point,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert point["status"] == "failed" and "still running after 20 s; stopped" in point["error"]
    log = next((tmp_path / "state").glob("runs/*/server.log"))
    pids = [
        json.loads(line.split(" ", 1)[1])["pid"]
        for line in log.read_text().splitlines()
        if line.startswith("specmon-collective-rank ")
    ]
    assert len(pids) == 2
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids):
        time.sleep(0.2)
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)


def test_sigterm_mid_point_stops_the_ranks_and_marks_the_sweep_interrupted(tmp_path):
    config = tmp_path / "specmon.toml"
    config.write_text(CONFIG.format(state_dir=tmp_path / "state", iters=10_000_000))
    command = [sys.executable, "-m", "specmon", "--config", str(config), "nccl-sweep", "box"]
    ledger = str(tmp_path / "l.sqlite3")
    sweep_process = subprocess.Popen(
        [*command, "--profile", "allreduce", "--ledger", ledger, "--grid", "NCCL_PROTO=LL,Simple"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SPECMON_DATA_DIR": str(tmp_path / "data")},
    )
    pids: list[int] = []
    deadline = time.monotonic() + 120
    while len(pids) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
        for log in (tmp_path / "state").glob("runs/*/server.log"):
            pids = [
                json.loads(line.split(" ", 1)[1])["pid"]
                for line in log.read_text().splitlines()
                if line.startswith("specmon-collective-rank ")
            ]
    assert len(pids) == 2, "the ranks did not start"
    sweep_process.terminate()
    _, err = sweep_process.communicate(timeout=60)
    assert sweep_process.returncode == 130, err[-2000:]
    assert "interrupted; run the same command again to resume it" in err
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids):
        time.sleep(0.2)
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        sweep_row = ledger.latest_sweep()
        assert sweep_row is not None and sweep_row.status == "interrupted"
        assert ledger.sweep_points(sweep_row.id) == []  # nothing half-measured was recorded

"""How late does the console learn that the server is ready? Over SSH, to the simulator.

For each of N launches through a real sshd on 127.0.0.1, a separate watcher process polls the
run's log file every millisecond and notes when the ready line lands on disk; the latency is
from then to the Ready event's arrival in the host session's store. It also notes when /health
first answers 200, to show what the operators' `curl /health` loop every 10 s would give
(detection at the first poll after that, the poll phase uniformly random).

    python3 benchmarks/ready_latency.py [--runs 20] [--json]

Needs OpenSSH's sshd (the test fixture's throw-away server) and runs as the current user.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from support.hosts import kill_everything_under, sim_profiles, ssh_session  # noqa: E402
from support.sshd import start_sshd, stop_sshd  # noqa: E402

READY_LINE = b"The server is fired up and ready to roll!"
CURL_PERIOD_S = 10.0

WATCHER = r"""
import json, os, sys, time, urllib.request
runs_dir, known, port = sys.argv[1], set(sys.argv[2].split(",")), int(sys.argv[3])
ready = health = None
log = None
offset = 0
deadline = time.time() + 120
next_health = 0.0
while time.time() < deadline and (ready is None or health is None):
    if log is None:
        fresh = [d for d in os.listdir(runs_dir) if d not in known] if os.path.isdir(runs_dir) else []
        if fresh:
            log = os.path.join(runs_dir, fresh[0], "server.log")
    if log is not None and ready is None:
        try:
            with open(log, "rb") as f:
                start = max(0, offset - 64)  # re-read a little: the line may have been torn
                f.seek(start)
                chunk = f.read()
            if b"The server is fired up and ready to roll!" in chunk:
                ready = time.time()
            offset = start + len(chunk)
        except OSError:
            pass
    if ready is not None and health is None and time.time() >= next_health:
        next_health = time.time() + 0.02
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    health = time.time()
        except Exception:
            pass
    time.sleep(0.001)
print(json.dumps({"ready_written": ready, "health_200": health}), flush=True)
"""


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * fraction
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


async def one_run(session, profiles, runs_dir: Path) -> dict[str, float]:
    known = ",".join(p.name for p in runs_dir.iterdir()) if runs_dir.exists() else ""
    watcher = subprocess.Popen(
        [sys.executable, "-c", WATCHER, str(runs_dir), known, str(profiles["fast"].port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    arrivals: list[float] = []
    queue = session.bus.subscribe()
    try:
        await session.launch("fast")
        while not arrivals:
            at, event = await asyncio.wait_for(queue.get(), 120)
            if event.kind == "ready":
                arrivals.append(at)
            elif event.kind == "server_failed":
                raise RuntimeError(f"the simulator failed: {event.root_cause}")
    finally:
        session.bus.unsubscribe(queue)
    out, _ = await asyncio.to_thread(watcher.communicate, timeout=120)
    seen = json.loads(out)
    return {
        "ready_written": seen["ready_written"],
        "ready_event": arrivals[0],
        "health_200": seen["health_200"],
    }


async def main(runs: int) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="specmon-bench-"))
    server = start_sshd(work / "sshd")
    state_dir = work / "state"
    profiles = sim_profiles()
    session = ssh_session(server, state_dir, profiles, gpu_agent="none", health_interval_s=1.0)
    results = []
    try:
        await session.start()
        for i in range(runs):
            results.append(await one_run(session, profiles, state_dir / "runs"))
            r = results[-1]
            print(
                f"run {i + 1:2d}: ready event {1000 * (r['ready_event'] - r['ready_written']):6.1f} ms"
                f" after the line was written",
                file=sys.stderr,
            )
        await session.stop()
    finally:
        await session.close()
        kill_everything_under(state_dir)
        stop_sshd(server.proc)
        shutil.rmtree(work, ignore_errors=True)
    latencies = [r["ready_event"] - r["ready_written"] for r in results]
    rng = random.Random(7)
    curl = [(r["health_200"] - r["ready_written"]) + rng.uniform(0, CURL_PERIOD_S) for r in results]
    return {
        "runs": runs,
        "specmon_ready_latency_s": {
            "median": statistics.median(latencies),
            "p95": percentile(latencies, 0.95),
            "max": max(latencies),
        },
        "curl_health_every_10s_latency_s": {
            "median": statistics.median(curl),
            "p95": percentile(curl, 0.95),
        },
        "health_200_after_ready_line_s": statistics.median(
            [r["health_200"] - r["ready_written"] for r in results]
        ),
        "target_median_s": 0.5,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    started = time.monotonic()
    summary = asyncio.run(main(args.runs))
    summary["wall_s"] = round(time.monotonic() - started, 1)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        s, c = summary["specmon_ready_latency_s"], summary["curl_health_every_10s_latency_s"]
        print(
            f"ready line -> Ready event over SSH ({args.runs} runs): "
            f"median {s['median'] * 1000:.0f} ms, p95 {s['p95'] * 1000:.0f} ms, "
            f"max {s['max'] * 1000:.0f} ms (target: median <= 500 ms)"
        )
        print(
            f"a curl /health loop every 10 s would see it: median {c['median']:.1f} s, "
            f"p95 {c['p95']:.1f} s"
        )

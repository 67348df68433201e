"""Real-GPU check of the agent: run it while a PyTorch matmul load starts and stops.

Shows, on a real NVIDIA host, that utilisation goes high then near zero, that memory used
matches ``torch.cuda.mem_get_info`` within a few percent, that the process list names the
load's pid and that power rises under load, on every GPU of the host: the load is one process
per GPU (a multi-process load, as a TP server is), each checked against its own GPU's readings
(``--gpus N`` checks the first N; default all that the agent reports). Also records real nvidia-smi CSV output (the
fallback parser's test data) and runs the agent's nvidia-smi fallback for a few seconds.

Run from the repository root on the GPU host (needs torch and nvidia-ml-py there):
    python3 scripts/gpu_check.py --out /tmp/gpu-check
Writes gpu_check.json (figures and verdicts), agent_lines.jsonl and nvidia_smi_recorded.txt.
Exit code 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
AGENT = REPO / "specmon" / "remote" / "agent.py"
sys.path.insert(0, str(REPO))
from specmon.model.events import GpuSample  # noqa: E402
from specmon.remote.agent import (  # noqa: E402
    DEFAULT_STATE_INTERVAL_S,
    SLOW_FIELDS_INTERVAL_S,
    SMI_COLUMNS,
    SMI_FORMAT,
    reading_from_dict,
)
from specmon.session.gpu_stream import AgentStream  # noqa: E402

MIB = 1024.0 * 1024.0
# How long a reading of memory (or the process list) can lag the GPU: the agent reads them
# every 2 s when it ticks itself, every --state-interval (4 s) when nvidia-smi's loop ticks.
SLOW_LAG_S = max(SLOW_FIELDS_INTERVAL_S, DEFAULT_STATE_INTERVAL_S)

LOAD_CODE = r"""
import json, os, sys, time
import torch
seconds, ballast_gib, index = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
torch.cuda.set_device(index)  # CUDA_DEVICE_ORDER=PCI_BUS_ID: torch's index is NVML's
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
ballast = torch.empty(int(ballast_gib * 2**30), dtype=torch.uint8, device="cuda")
ballast.fill_(1)
torch.cuda.synchronize()
print(json.dumps({"event": "ready", "pid": os.getpid(), "wall": time.time(), "gpu": index}),
      flush=True)
end = time.time() + seconds
next_report = time.time() + 1.0
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    if time.time() >= next_report:
        free, total = torch.cuda.mem_get_info(index)
        print(json.dumps({"event": "mem", "wall": time.time(), "free": free, "total": total,
                          "gpu": index}), flush=True)
        next_report += 1.5
print(json.dumps({"event": "done", "wall": time.time()}), flush=True)
"""


class LineCollector:
    """Reads a child's stdout on a thread, keeping (wall time received, parsed JSON or text).

    The agent's nvidia-smi tick rows are kept as text and, once the console's reader
    (specmon.session.gpu_stream.AgentStream) completes a tick of them, as that tick's JSON dict."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[tuple[float, Any]] = []
        self._stream = AgentStream()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                item: Any = json.loads(line)
            except ValueError:
                item = line.rstrip("\n")
            now = time.time()
            self.lines.append((now, item))
            for parsed in self._stream.feed(line):
                if isinstance(parsed, GpuSample) and not isinstance(item, dict):
                    tick = {"type": "tick", "wall": parsed.wall}
                    tick["gpus"] = [vars(reading) for reading in parsed.gpus]
                    self.lines.append((now, tick))

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


def run_text(args: list[str], timeout: float = 30.0) -> str:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
        return f"$ {' '.join(args)}\n# exit {done.returncode}\n{done.stdout}{done.stderr}"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"$ {' '.join(args)}\n# failed: {exc}\n"


def smi_query_args() -> list[str]:
    return ["nvidia-smi", "--query-gpu=driver_version," + ",".join(SMI_COLUMNS), SMI_FORMAT]


def stop_process(process: subprocess.Popen[str], timeout: float = 5.0) -> tuple[int, float]:
    """SIGTERM, then the exit code and the seconds the process took to go."""
    started = time.monotonic()
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)
    return process.returncode, time.monotonic() - started


def ticks_between(lines: list[tuple[float, Any]], start: float, end: float) -> list[dict]:
    return [
        item
        for _, item in lines
        if isinstance(item, dict)
        and item.get("type") == "tick"
        and start <= float(item.get("wall", 0)) <= end
    ]


def gpu0(tick: dict) -> dict:
    return tick["gpus"][0]


def gpu_of(tick: dict, index: int) -> dict | None:
    """The reading of GPU ``index`` (NVML's index) in a tick, if it has one."""
    return next((g for g in tick["gpus"] if g.get("index") == index), None)


def latest_tick(lines: list[tuple[float, Any]]) -> dict | None:
    return next(
        (i for _, i in reversed(lines) if isinstance(i, dict) and i.get("type") == "tick"), None
    )


def median_of(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def check_under_load(args: argparse.Namespace, out: Path, record: list[str]) -> dict[str, Any]:
    agent = subprocess.Popen(
        [sys.executable, str(AGENT), "--rate", "4"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    agent_lines = LineCollector(agent)
    time.sleep(args.idle_seconds)
    seen = latest_tick(agent_lines.lines)
    gpu_count = len(seen["gpus"]) if seen else 1
    indexes = list(range(min(args.gpus, gpu_count) if args.gpus else gpu_count))
    load_env = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    loads = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                LOAD_CODE,
                str(args.load_seconds),
                str(args.ballast_gib),
                str(i),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=load_env,
        )
        for i in indexes
    ]
    collectors = [LineCollector(load) for load in loads]
    # Record nvidia-smi's own view while the load runs: the fallback parser's test data.
    deadline = time.time() + 120

    def reporting(collector: LineCollector) -> bool:
        return any(isinstance(i, dict) and i.get("event") == "mem" for _, i in collector.lines)

    while (
        time.time() < deadline
        and any(load.poll() is None for load in loads)
        and not all(reporting(c) for c in collectors)
    ):
        time.sleep(0.2)
    record.append("## under load\n" + run_text(smi_query_args()))
    record.append(
        run_text(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory", SMI_FORMAT])
    )
    for load in loads:
        try:
            load.wait(timeout=args.load_seconds + 120)
        except subprocess.TimeoutExpired:
            load.kill()
            load.wait(10)
    load_exit = time.time()
    for collector in collectors:
        collector.join(5)
    load_lines = collectors[0]
    time.sleep(args.after_seconds)
    record.append("## after load\n" + run_text(smi_query_args()))
    agent_rc, agent_stop_s = stop_process(agent)
    agent_lines.join(5)
    end = time.time()

    with (out / "agent_lines.jsonl").open("w") as handle:
        for received, item in agent_lines.lines:
            handle.write(json.dumps({"received": round(received, 3), "line": item}) + "\n")

    per_load = [{i.get("event"): i for _, i in c.lines if isinstance(i, dict)} for c in collectors]
    for index, events in zip(indexes, per_load, strict=True):
        if "ready" not in events or "done" not in events:
            lines = collectors[indexes.index(index)].lines[-5:]
            return {"error": f"the load on GPU {index} did not run", "load_output": lines}
    # Every GPU is loaded between the last load's ready and the first load's end.
    ready = max(events["ready"]["wall"] for events in per_load)
    done = min(events["done"]["wall"] for events in per_load)
    pid = per_load[0]["ready"]["pid"]
    mem_reports = [
        i for _, i in load_lines.lines if isinstance(i, dict) and i.get("event") == "mem"
    ]
    first_tick = next(
        (
            float(i["wall"])
            for _, i in agent_lines.lines
            if isinstance(i, dict) and i.get("type") == "tick"
        ),
        ready,
    )
    idle = ticks_between(agent_lines.lines, first_tick, ready - 0.5)
    loaded = ticks_between(agent_lines.lines, ready + 1.0, done - 0.3)
    after = ticks_between(agent_lines.lines, load_exit + 2.0, end)
    all_ticks = ticks_between(agent_lines.lines, 0, end)
    for tick in all_ticks:  # every line must rebuild into the schema's readings
        for gpu in tick["gpus"]:
            reading_from_dict(gpu)

    # The agent reads memory on its slow cadence (SLOW_LAG_S), so a tick can lag an
    # allocation by that long: compare only reports made after the ballast had time to show.
    settled_after = ready + SLOW_LAG_S + 0.5
    memory_pairs = []
    for report in (r for r in mem_reports if r["wall"] >= settled_after):
        nearest = min(all_ticks, key=lambda t: abs(float(t["wall"]) - report["wall"]))
        torch_used_mb = (report["total"] - report["free"]) / MIB
        agent_used_mb = gpu0(nearest)["mem_used_mb"]
        memory_pairs.append(
            {
                "torch_used_mb": round(torch_used_mb, 1),
                "agent_used_mb": agent_used_mb,
                "seconds_apart": round(abs(float(nearest["wall"]) - report["wall"]), 3),
                "relative_diff": round(abs(agent_used_mb - torch_used_mb) / torch_used_mb, 5),
            }
        )
    pids_under_load = sorted({p[0] for t in loaded for p in gpu0(t)["processes"]})
    walls = [float(t["wall"]) for t in all_ticks]
    intervals = [b - a for a, b in itertools.pairwise(walls)]
    figures = {
        "load_pid": pid,
        "ticks": len(all_ticks),
        "tick_interval_s": {
            "median": round(statistics.median(intervals), 4) if intervals else None,
            "max": round(max(intervals), 4) if intervals else None,
        },
        # a tick's wall (nvidia-smi's UTC timestamp on the rows) against its arrival here
        "tick_arrival_minus_wall_s_median": median_of(
            [
                received - float(i["wall"])
                for received, i in agent_lines.lines
                if isinstance(i, dict) and i.get("type") == "tick"
            ]
        ),
        "util_idle_median": median_of([gpu0(t)["util_gpu"] for t in idle]),
        "util_load_median": median_of([gpu0(t)["util_gpu"] for t in loaded]),
        "util_load_min": min((gpu0(t)["util_gpu"] for t in loaded), default=None),
        "util_after_max": max((gpu0(t)["util_gpu"] for t in after), default=None),
        "power_idle_median_w": median_of([gpu0(t)["power_w"] for t in idle]),
        "power_load_median_w": median_of([gpu0(t)["power_w"] for t in loaded]),
        "power_limit_w": gpu0(all_ticks[0])["power_limit_w"] if all_ticks else None,
        "temp_idle_c": median_of([gpu0(t)["temp_c"] for t in idle]),
        "temp_load_max_c": max((gpu0(t)["temp_c"] for t in loaded), default=None),
        "sm_clock_load_median_mhz": median_of([gpu0(t)["sm_clock_mhz"] for t in loaded]),
        "mem_used_idle_mb": median_of([gpu0(t)["mem_used_mb"] for t in idle]),
        "mem_used_load_mb": median_of([gpu0(t)["mem_used_mb"] for t in loaded]),
        "memory_pairs": memory_pairs,
        "pids_seen_under_load": pids_under_load,
        "processes_under_load_sample": gpu0(loaded[len(loaded) // 2])["processes"]
        if loaded
        else None,
        "throttle_reasons_idle": gpu0(idle[-1])["throttle_reasons"] if idle else None,
        "throttle_reasons_load": gpu0(loaded[-1])["throttle_reasons"] if loaded else None,
        "pcie_tx_kbs_load_median": median_of(
            [gpu0(t)["pcie_tx_kbs"] for t in loaded if gpu0(t)["pcie_tx_kbs"] is not None]
        ),
        "nvlink_tx_kbs_sample": gpu0(loaded[-1])["nvlink_tx_kbs"] if loaded else None,
        "agent_exit_code": agent_rc,
        "agent_stop_seconds": round(agent_stop_s, 3),
        "header": next(
            (i for _, i in agent_lines.lines if isinstance(i, dict) and i.get("type") == "header"),
            None,
        ),
        "notices": [
            i["message"]
            for _, i in agent_lines.lines
            if isinstance(i, dict) and i.get("type") == "notice"
        ],
    }
    per_gpu = {
        index: gpu_figures(
            index,
            events["ready"]["pid"],
            collectors[n].lines,
            all_ticks,
            idle,
            loaded,
            after,
            ready,
        )
        for n, (index, events) in enumerate(zip(indexes, per_load, strict=True))
    }
    figures["gpus_checked"] = indexes
    figures["per_gpu"] = per_gpu
    rows = list(per_gpu.values())
    checks = {
        f"utilisation high under load on all {len(rows)} GPUs (median >= 90%)": all(
            (g["util_load_median"] or 0) >= 90 for g in rows
        ),
        f"utilisation near zero after on all {len(rows)} GPUs (max <= 5%)": all(
            g["util_after_max"] is not None and g["util_after_max"] <= 5 for g in rows
        ),
        f"memory used within 3% of torch.cuda.mem_get_info on all {len(rows)} GPUs": all(
            g["memory_pairs"] and all(p["relative_diff"] <= 0.03 for p in g["memory_pairs"])
            for g in rows
        ),
        f"each GPU's process list names its own load's pid ({len(rows)} processes)": all(
            g["load_pid_seen"] for g in rows
        ),
        f"power rises under load on all {len(rows)} GPUs (>= 1.5x idle)": all(
            g["power_load_median_w"] is not None
            and g["power_idle_median_w"] is not None
            and g["power_load_median_w"] >= 1.5 * g["power_idle_median_w"]
            for g in rows
        ),
        "agent exits 0 on SIGTERM within 2 s": agent_rc == 0 and agent_stop_s <= 2.0,
        "tick walls within 1 s of their arrival": abs(
            figures["tick_arrival_minus_wall_s_median"] or 99.0
        )
        <= 1.0,
        "ticks are nvidia-smi's loop rows (header tick_rows)": bool(
            (figures["header"] or {}).get("tick_rows")
        ),
    }
    return {"figures": figures, "checks": checks}


def gpu_figures(
    index: int,
    pid: int,
    load_lines: list[tuple[float, Any]],
    all_ticks: list[dict],
    idle: list[dict],
    loaded: list[dict],
    after: list[dict],
    ready: float,
) -> dict[str, Any]:
    """One GPU's readings against its own load process: utilisation, power, memory against
    that process's torch.cuda.mem_get_info, and its pid in that GPU's process list."""

    def values(ticks: list[dict], field: str) -> list[float]:
        readings = (gpu_of(t, index) for t in ticks)
        return [r[field] for r in readings if r is not None and r[field] is not None]

    settled_after = ready + SLOW_LAG_S + 0.5
    memory_pairs = []
    for report in (
        i
        for _, i in load_lines
        if isinstance(i, dict) and i.get("event") == "mem" and i["wall"] >= settled_after
    ):
        nearest = min(all_ticks, key=lambda t: abs(float(t["wall"]) - report["wall"]))
        reading = gpu_of(nearest, index)
        if reading is None or reading["mem_used_mb"] is None:
            continue
        torch_used_mb = (report["total"] - report["free"]) / MIB
        memory_pairs.append(
            {
                "torch_used_mb": round(torch_used_mb, 1),
                "agent_used_mb": reading["mem_used_mb"],
                "relative_diff": round(
                    abs(reading["mem_used_mb"] - torch_used_mb) / torch_used_mb, 5
                ),
            }
        )
    pids = sorted(
        {p[0] for t in loaded if (r := gpu_of(t, index)) is not None for p in r["processes"]}
    )
    return {
        "load_pid": pid,
        "load_pid_seen": pid in pids,
        "pids_seen_under_load": pids,
        "util_load_median": median_of(values(loaded, "util_gpu")),
        "util_after_max": max(values(after, "util_gpu"), default=None),
        "power_idle_median_w": median_of(values(idle, "power_w")),
        "power_load_median_w": median_of(values(loaded, "power_w")),
        "mem_used_load_mb": median_of(values(loaded, "mem_used_mb")),
        "memory_pairs": memory_pairs,
    }


def check_fallback() -> dict[str, Any]:
    """The agent's nvidia-smi path against the real nvidia-smi, for a few seconds."""
    done = subprocess.run(
        [sys.executable, str(AGENT), "--source", "nvidia-smi", "--rate", "4", "--duration", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )
    items = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    ticks = [i for i in items if i.get("type") == "tick"]
    for tick in ticks:
        for gpu in tick["gpus"]:
            reading_from_dict(gpu)
    return {
        "exit_code": done.returncode,
        "stderr": done.stderr[-2000:],
        "header": items[0] if items else None,
        "ticks": len(ticks),
        "first_tick": ticks[0] if ticks else None,
        "notices": [i["message"] for i in items if i.get("type") == "notice"],
        "errors": [i["message"] for i in items if i.get("type") == "error"],
        "ok": done.returncode == 0 and len(ticks) >= 6,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--idle-seconds", type=float, default=4.0)
    parser.add_argument("--load-seconds", type=float, default=12.0)
    parser.add_argument("--after-seconds", type=float, default=5.0)
    parser.add_argument("--ballast-gib", type=float, default=16.0)
    parser.add_argument(
        "--gpus", type=int, default=0, help="load and check the first N GPUs (default: all)"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    record = [
        "# real nvidia-smi output, recorded by scripts/gpu_check.py",
        run_text(["nvidia-smi"]),
        "## idle\n" + run_text(smi_query_args()),
        run_text(["nvidia-smi", "--query-gpu=clocks_event_reasons.active", SMI_FORMAT]),
        run_text(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory", SMI_FORMAT]),
    ]
    result: dict[str, Any] = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "host": platform.node(),
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
    }
    try:
        from importlib.metadata import version

        import pynvml  # noqa: F401

        result["nvidia_ml_py"] = version("nvidia-ml-py")
        import torch

        result["torch"] = torch.__version__
    except Exception as exc:  # the record says what was missing
        result["import_error"] = repr(exc)
    for name, step in (
        ("load", lambda: check_under_load(args, args.out, record)),
        ("fallback", check_fallback),
    ):
        try:
            result[name] = step()
        except Exception as exc:
            result[name] = {"error": repr(exc)}
        (args.out / "gpu_check.json").write_text(json.dumps(result, indent=2))
    (args.out / "nvidia_smi_recorded.txt").write_text("\n".join(record))
    checks = result.get("load", {}).get("checks", {})
    passed = bool(checks) and all(checks.values()) and result.get("fallback", {}).get("ok")
    print(json.dumps(result, indent=2))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())

"""What the GPU agent costs in CPU, against the common alternative of one nvidia-smi per tick.

Every figure is CPU time (user + system) from getrusage of waited child processes, so it
counts the agent's threads and its own nvidia-smi children too. A run's start-up cost
(interpreter, NVML init) is measured apart with --count 1 and taken off, leaving the cost of
ticking. Per-GPU costs come from timing the sampler in-process, to extrapolate to 8 GPUs.

    python3 benchmarks/agent_cost.py --out /tmp/cost [--seconds 15]
Writes agent_cost.json and prints it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
AGENT = REPO / "specmon" / "agent.py"
sys.path.insert(0, str(REPO))
from specmon import agent as agent_module  # noqa: E402

SMI_PER_TICK = ["nvidia-smi", "--query-gpu=" + ",".join(agent_module.SMI_COLUMNS)]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_agent(extra: list[str], timeout: float) -> dict[str, Any]:
    """One agent run to its own end; CPU seconds and the ticks it wrote."""
    before = children_cpu()
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(AGENT), *extra],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    wall = time.monotonic() - started
    cpu = children_cpu() - before
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    ticks = [line for line in lines if line.get("type") == "tick"]
    walls = [float(t["wall"]) for t in ticks]
    intervals = [b - a for a, b in itertools.pairwise(walls)]
    return {
        "exit_code": done.returncode,
        "cpu_s": cpu,
        "wall_s": wall,
        "ticks": len(ticks),
        "gpus": len(ticks[0]["gpus"]) if ticks else 0,
        "interval_median_s": statistics.median(intervals) if intervals else None,
        "interval_max_s": max(intervals) if intervals else None,
        "errors": [line["message"] for line in lines if line.get("type") == "error"],
    }


def agent_rate(rate: float, seconds: float, startup_cpu: float, source: str) -> dict[str, Any]:
    run = run_agent(
        ["--source", source, "--rate", str(rate), "--duration", str(seconds)], seconds + 60
    )
    ticking_cpu = max(0.0, run["cpu_s"] - startup_cpu)
    run.update(
        {
            "rate_hz": rate,
            "source": source,
            "ticking_cpu_s": ticking_cpu,
            "cpu_ms_per_tick": 1000 * ticking_cpu / max(1, run["ticks"] - 1),
            "core_percent": 100 * ticking_cpu / seconds,
        }
    )
    return run


def startup(source: str, repeats: int = 3) -> dict[str, Any]:
    runs = [run_agent(["--source", source, "--count", "1"], 120) for _ in range(repeats)]
    return {
        "runs_cpu_s": [r["cpu_s"] for r in runs],
        "cpu_s": statistics.median(r["cpu_s"] for r in runs),
    }


def smi_per_tick(rate: float, seconds: float) -> dict[str, Any]:
    """One `nvidia-smi --query-gpu` process per tick, the way many dashboards poll."""
    args = [*SMI_PER_TICK, agent_module.SMI_FORMAT]
    before = children_cpu()
    period = 1.0 / rate
    start = time.monotonic()
    calls = 0
    walls = []
    while time.monotonic() - start < seconds:
        call_start = time.monotonic()
        subprocess.run(args, capture_output=True, timeout=30, check=False)
        walls.append(time.monotonic() - call_start)
        calls += 1
        delay = start + calls * period - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    cpu = children_cpu() - before
    return {
        "rate_hz": rate,
        "calls": calls,
        "cpu_s": cpu,
        "cpu_ms_per_call": 1000 * cpu / max(1, calls),
        "wall_ms_per_call_median": 1000 * statistics.median(walls) if walls else None,
        "core_percent": 100 * cpu / seconds,
    }


def smi_loop(rate: float, seconds: float) -> dict[str, Any]:
    """nvidia-smi's own `-lms` loop: one long-lived process (the agent's fallback)."""
    before = children_cpu()
    process = subprocess.Popen(
        [*SMI_PER_TICK, agent_module.SMI_FORMAT, "-lms", str(int(1000 / rate))],
        stdout=subprocess.PIPE,
        text=True,
    )
    lines = 0
    start = time.monotonic()
    assert process.stdout is not None
    for _ in process.stdout:
        lines += 1
        if time.monotonic() - start >= seconds:
            break
    process.terminate()
    process.wait(10)
    cpu = children_cpu() - before
    return {"rate_hz": rate, "lines": lines, "cpu_s": cpu, "core_percent": 100 * cpu / seconds}


def cpu_ms_per_call(call: Any, repeats: int) -> float:
    start = time.process_time()
    for _ in range(repeats):
        call()
    return 1000 * (time.process_time() - start) / repeats


def in_process_costs(repeats: int) -> dict[str, Any]:
    """CPU per NVML call, per GPU tick read and per link-rates pass, timed in this process."""
    import pynvml

    notices = agent_module.NoticeLog()
    sampler = agent_module.NvmlSampler(pynvml, notices)
    sampler.open("bench")
    try:
        gpu = sampler.gpus[0]
        h = gpu.handle
        calls = {
            "utilization": lambda: pynvml.nvmlDeviceGetUtilizationRates(h),
            "memory_v1": lambda: pynvml.nvmlDeviceGetMemoryInfo(h),
            "memory_v2": lambda: pynvml.nvmlDeviceGetMemoryInfo(h, pynvml.nvmlMemory_v2),
            "power": lambda: pynvml.nvmlDeviceGetPowerUsage(h),
            "power_limit": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h),
            "temperature": lambda: pynvml.nvmlDeviceGetTemperature(h, 0),
            "sm_clock": lambda: pynvml.nvmlDeviceGetClockInfo(h, 1),
            "mem_clock": lambda: pynvml.nvmlDeviceGetClockInfo(h, 2),
            "event_reasons": lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
            "processes": lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(h),
            "field_values_pcie_counters": lambda: pynvml.nvmlDeviceGetFieldValues(
                h, [agent_module.FI_PCIE_TX_BYTES, agent_module.FI_PCIE_RX_BYTES]
            ),
        }
        per_call = {}
        for name, call in calls.items():
            try:
                per_call[name] = cpu_ms_per_call(call, repeats // 4)
            except pynvml.NVMLError as exc:
                per_call[name] = repr(exc)
        start_wall, start_cpu = time.monotonic(), time.process_time()
        for _ in range(10):
            pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES)
        per_call["pcie_throughput_query"] = 100 * (time.process_time() - start_cpu)
        pcie_query_wall_ms = 100 * (time.monotonic() - start_wall)
        reading = sampler._read(gpu)
        tick_read = cpu_ms_per_call(lambda: sampler._read(gpu), repeats)
        link_pass = cpu_ms_per_call(lambda: sampler._link_rates(gpu), repeats // 4)
        line_one = cpu_ms_per_call(lambda: agent_module.tick_line(time.time(), [reading]), repeats)
        line_eight = cpu_ms_per_call(
            lambda: agent_module.tick_line(time.time(), [reading] * 8), repeats
        )
        fields = pynvml.nvmlDeviceGetFieldValues(
            h,
            [
                (agent_module.FI_NVLINK_DATA_TX_KIB, agent_module.UINT_MAX),
                (agent_module.FI_NVLINK_DATA_RX_KIB, agent_module.UINT_MAX),
                agent_module.FI_PCIE_TX_BYTES,
                agent_module.FI_PCIE_RX_BYTES,
            ],
        )
        field_status = {
            str(f.fieldId): {"nvmlReturn": f.nvmlReturn, "value": f.value.ullVal} for f in fields
        }
    finally:
        sampler.close()
    return {
        "cpu_ms_per_call": per_call,
        "pcie_query_wall_ms": pcie_query_wall_ms,
        "cpu_ms_tick_read_per_gpu": tick_read,
        "cpu_ms_link_pass_per_gpu": link_pass,
        "cpu_ms_tick_line_1_gpu": line_one,
        "cpu_ms_tick_line_8_gpus": line_eight,
        "field_values": field_status,
        "unsupported_fields": sorted(gpu.unsupported),
        "notices": notices.drain(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--skip-smi", action="store_true", help="no nvidia-smi measurements")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    steps: list[tuple[str, Any]] = [
        ("in_process", lambda: in_process_costs(2000)),
        ("startup_nvml", lambda: startup("nvml")),
        (
            "agent_4hz",
            lambda: agent_rate(4, args.seconds, result["startup_nvml"]["cpu_s"], "nvml"),
        ),
        (
            "agent_10hz",
            lambda: agent_rate(10, args.seconds, result["startup_nvml"]["cpu_s"], "nvml"),
        ),
    ]
    if not args.skip_smi:
        steps += [
            ("smi_per_tick_4hz", lambda: smi_per_tick(4, args.seconds)),
            ("smi_loop_4hz", lambda: smi_loop(4, args.seconds)),
            ("startup_smi_fallback", lambda: startup("nvidia-smi", 1)),
            (
                "agent_fallback_4hz",
                lambda: agent_rate(
                    4, args.seconds, result["startup_smi_fallback"]["cpu_s"], "nvidia-smi"
                ),
            ),
        ]
    for name, step in steps:
        try:
            result[name] = step()
        except Exception as exc:  # keep what the other steps measured
            result[name] = {"error": repr(exc)}
        (args.out / "agent_cost.json").write_text(json.dumps(result, indent=2))
    try:
        result["extrapolated_8_gpus"] = extrapolate(result)
    except (KeyError, TypeError) as exc:
        result["extrapolated_8_gpus"] = {"error": repr(exc)}
    (args.out / "agent_cost.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


def extrapolate(result: dict[str, Any]) -> dict[str, Any]:
    """The measured per-tick cost plus, for each GPU beyond those measured, one tick read, its
    share of the link-rates passes (one per --pcie-interval) and the longer tick line."""
    inproc = result["in_process"]
    link_interval = agent_module.DEFAULT_PCIE_INTERVAL_S
    out = {}
    for key in ("agent_4hz", "agent_10hz"):
        run = result[key]
        extra_gpus = 8 - run["gpus"]
        per_extra_gpu = (
            inproc["cpu_ms_tick_read_per_gpu"]
            + inproc["cpu_ms_link_pass_per_gpu"] / (run["rate_hz"] * link_interval)
            + (inproc["cpu_ms_tick_line_8_gpus"] - inproc["cpu_ms_tick_line_1_gpu"]) / 7
        )
        per_tick = run["cpu_ms_per_tick"] + extra_gpus * per_extra_gpu
        out[key] = {
            "cpu_ms_per_tick": per_tick,
            "core_percent": per_tick * run["rate_hz"] / 10,
            "link_interval_s": link_interval,
        }
    return out


if __name__ == "__main__":
    sys.exit(main())

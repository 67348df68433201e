"""Where the GPU agent's CPU goes: one tick's parts measured as separate processes.

Each probe is a small process that ticks at 4 Hz like the agent and does one part of a tick:
only the wake-up (three ways of sleeping), NVML's utilisation and power reads through
pynvml or straight through ctypes, the tick line's encoding and write. All probes run at
once over one window, measured like benchmarks/agent_cost.py (schedstat of every thread),
so a part's cost is its probe's CPU less the wake-up probe's. Then each agent given runs
under cProfile with a CPU-time clock for --profile-seconds, and NVML's own sample
spacing for utilisation and power is read (nvmlDeviceGetSamples), which says how often
those values can change at all.

    python3 benchmarks/agent_profile.py --out /tmp/profile [--window 20]
        [--profile specmon/remote/agent.py ...]
Writes agent_profile.json and cprofile_<name>.txt; prints a table.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import io
import itertools
import json
import pstats
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent_cost import measure_together

PROBE = r"""
import ctypes, json, os, select, sys, threading, time
mode, repeat = sys.argv[1], int(sys.argv[2])
period = float(sys.argv[3]) if len(sys.argv) > 3 else 0.25
last_seen = {}
nvml = None
if "nvml" in mode or "ctypes" in mode:
    import pynvml as nvml
    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
if "ctypes" in mode:
    fn_util = nvml._nvmlGetFunctionPointer("nvmlDeviceGetUtilizationRates")
    fn_power = nvml._nvmlGetFunctionPointer("nvmlDeviceGetPowerUsage")
    class Utilization(ctypes.Structure):
        _fields_ = (("gpu", ctypes.c_uint), ("memory", ctypes.c_uint))
    util = Utilization(); util_ref = ctypes.byref(util)
    power = ctypes.c_uint(); power_ref = ctypes.byref(power)
stop = threading.Event()
r, w = os.pipe()
poller = select.poll(); poller.register(r, select.POLLIN)
entry = {"index": 0, "uuid": "GPU-52ddc683-869f-76e9-33fc-ac24fde678a4", "name": "NVIDIA H200",
    "util_gpu": 0.0, "util_mem": 0.0, "mem_used_mb": 0.0, "mem_total_mb": 143771.0,
    "power_w": 78.7, "power_limit_w": 700.0, "temp_c": 33.0, "sm_clock_mhz": 345.0,
    "mem_clock_mhz": 3201.0, "pcie_tx_kbs": 320.1, "pcie_rx_kbs": 20.2, "nvlink_tx_kbs": None,
    "nvlink_rx_kbs": None, "throttle_reasons": ["gpu_idle"], "processes": [], "error": None}
template = json.dumps(dict(entry, util_gpu="\x01a", util_mem="\x01b", power_w="\x01c"))
template = template.replace("%", "%%")
for s in ("a", "b", "c"):
    template = template.replace(json.dumps("\x01" + s), "%r")
fast = (0.0, 0.0, 78.7)
next_t = time.monotonic()
while True:
    delay = next_t - time.monotonic()
    if delay > 0:
        if mode.startswith("sleep"):
            time.sleep(delay)
        elif mode.startswith("poll"):
            poller.poll(delay * 1000)
        else:
            stop.wait(delay)
    for _ in range(repeat):
        if "nvml_util" in mode:
            u = nvml.nvmlDeviceGetUtilizationRates(h); fast = (float(u.gpu), float(u.memory), fast[2])
        if "nvml_power" in mode:
            fast = (fast[0], fast[1], round(nvml.nvmlDeviceGetPowerUsage(h) / 1000.0, 1))
        if "ctypes_util" in mode:
            fn_util(h, util_ref); fast = (float(util.gpu), float(util.memory), fast[2])
        if "ctypes_power" in mode:
            fn_power(h, power_ref); fast = (fast[0], fast[1], round(power.value / 1000.0, 1))
        if "nvml_samples" in mode:  # every sample NVML kept since the last call
            for kind in (nvml.NVML_GPU_UTILIZATION_SAMPLES, nvml.NVML_TOTAL_POWER_SAMPLES):
                _, got = nvml.nvmlDeviceGetSamples(h, kind, last_seen.get(kind, 0))
                if got:
                    last_seen[kind] = max(x.timeStamp for x in got)
        if "nvml_slow" in mode:
            nvml.nvmlDeviceGetMemoryInfo(h, nvml.nvmlMemory_v2)
            nvml.nvmlDeviceGetEnforcedPowerLimit(h)
            nvml.nvmlDeviceGetTemperature(h, 0)
            nvml.nvmlDeviceGetClockInfo(h, 1)
            nvml.nvmlDeviceGetClockInfo(h, 2)
            nvml.nvmlDeviceGetCurrentClocksEventReasons(h)
            nvml.nvmlDeviceGetComputeRunningProcesses(h)
    if "write_json" in mode:
        line = json.dumps({"type": "tick", "wall": round(time.time(), 3), "gpus": [entry] * repeat})
        sys.stdout.write(line + "\n"); sys.stdout.flush()
    elif "write_template" in mode:
        line = '{"type": "tick", "wall": %r, "gpus": [%s]}' % (
            round(time.time(), 3), ", ".join([template % fast] * repeat))
        os.write(1, (line + "\n").encode())
    next_t += period
"""

PROBES = {
    # name: (mode, repeat[, period s])
    "wake_event": ("event", 1),
    "wake_sleep": ("sleep", 1),
    "wake_poll": ("poll", 1),
    "nvml_util_power": ("sleep+nvml_util+nvml_power", 1),
    "nvml_util": ("sleep+nvml_util", 1),
    "nvml_power": ("sleep+nvml_power", 1),
    "ctypes_util_power": ("sleep+ctypes_util+ctypes_power", 1),
    "nvml_util_power_x8": ("sleep+nvml_util+nvml_power", 8),
    "nvml_slow_fields": ("sleep+nvml_slow", 1),
    "write_json_1gpu": ("sleep+write_json", 1),
    "write_template_1gpu": ("sleep+write_template", 1),
    "write_json_8gpu": ("sleep+write_json", 8),
    "write_template_8gpu": ("sleep+write_template", 8),
    # Other designs: NVML's kept samples once a second (one wake for 5 utilisation and 50
    # power samples); the slow fields alone every 2 s (the Python side if nvidia-smi's loop
    # sampled the tick fields).
    "nvml_samples_1hz": ("sleep+nvml_samples", 1, 1.0),
    "wake_sleep_0.5hz": ("sleep", 1, 2.0),
    "nvml_slow_fields_0.5hz": ("sleep+nvml_slow", 1, 2.0),
}
# nvidia-smi's loop for the compute-process list (the fallback spawns one process per list).
SMI_APPS_LOOP = [
    "nvidia-smi",
    "--query-compute-apps=gpu_uuid,pid,used_memory",
    "--format=csv,noheader,nounits",
    "-lms",
    "5000",
]


def nvml_sample_spacing() -> dict[str, Any]:
    """nvmlDeviceGetSamples for utilisation and power: how far apart NVML's own samples are,
    and what one such call costs."""
    import pynvml

    pynvml.nvmlInit()
    out: dict[str, Any] = {}
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        kinds = {
            "gpu_utilization": pynvml.NVML_GPU_UTILIZATION_SAMPLES,
            "total_power": pynvml.NVML_TOTAL_POWER_SAMPLES,
        }
        for name, kind in kinds.items():
            try:
                pynvml.nvmlDeviceGetSamples(handle, kind, 0)
                time.sleep(2.0)
                start = time.thread_time()
                _, samples = pynvml.nvmlDeviceGetSamples(handle, kind, 0)
                cost_ms = 1000 * (time.thread_time() - start)
                stamps = sorted(s.timeStamp for s in samples)
                gaps = [b - a for a, b in itertools.pairwise(stamps)]
                recent = [b - a for a, b in itertools.pairwise(stamps[-12:])]
                out[name] = {
                    "samples": len(stamps),
                    "span_s": round((stamps[-1] - stamps[0]) / 1e6, 3) if stamps else None,
                    "median_gap_ms": round(sorted(gaps)[len(gaps) // 2] / 1000, 2)
                    if gaps
                    else None,
                    "last_gaps_ms": [round(g / 1000, 2) for g in recent],
                    "call_cpu_ms": round(cost_ms, 4),
                }
            except pynvml.NVMLError as exc:
                out[name] = {"error": str(exc)}
        # How often the plain reads change over 3 s at 50 Hz.
        changes = {"util": 0, "power": 0}
        last: dict[str, Any] = {}
        for _ in range(150):
            values = {
                "util": pynvml.nvmlDeviceGetUtilizationRates(handle).gpu,
                "power": pynvml.nvmlDeviceGetPowerUsage(handle),
            }
            for key, value in values.items():
                if key in last and value != last[key]:
                    changes[key] += 1
                last[key] = value
            time.sleep(0.02)
        out["changes_in_3s_at_50hz"] = changes
    finally:
        pynvml.nvmlShutdown()
    return out


def profile_agent(agent: Path, seconds: float, out: Path, name: str) -> dict[str, Any]:
    """The agent's tick loop under cProfile, clocked by the main thread's CPU time."""
    spec = importlib.util.spec_from_file_location(f"profiled_{name}", agent)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"profiled_{name}"] = module
    spec.loader.exec_module(module)
    sink = io.StringIO()
    real_stdout = sys.stdout
    profiler = cProfile.Profile(time.thread_time)
    options = module.build_arg_parser().parse_args(["--rate", "4", "--duration", str(seconds)])
    sys.stdout = sink
    try:
        profiler.enable()
        module.run_agent(options)
        profiler.disable()
    finally:
        sys.stdout = real_stdout
    ticks = sum(1 for line in sink.getvalue().splitlines() if line.startswith('{"type": "tick"'))
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(30)
    (out / f"cprofile_{name}.txt").write_text(f"ticks: {ticks}\n" + text.getvalue())
    total = sum(entry[2] for entry in stats.stats.values())  # type: ignore[attr-defined]
    top = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:15]  # type: ignore[attr-defined]
    return {
        "ticks": ticks,
        "profiled_main_thread_ms_per_tick": round(1000 * total / max(1, ticks), 4),
        "top_tottime_ms_per_tick": {
            f"{Path(k[0]).name}:{k[1]}({k[2]})": round(1000 * v[2] / max(1, ticks), 4)
            for k, v in top
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--profile", type=Path, nargs="*", default=[], help="agents to cProfile")
    parser.add_argument("--profile-seconds", type=float, default=20.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    try:
        result["nvml_samples"] = nvml_sample_spacing()
    except Exception as exc:  # a fake or old pynvml: the rest still runs
        result["nvml_samples"] = {"error": repr(exc)}
    probes: dict[str, tuple[list[str], bool]] = {
        name: ([sys.executable, "-c", PROBE, *(str(a) for a in spec)], False)
        for name, spec in PROBES.items()
    }
    probes["smi_compute_apps_loop_5s"] = (SMI_APPS_LOOP, False)
    window = measure_together(probes, args.warmup, args.window)
    result["probes"] = window
    base = window.get("wake_sleep", {}).get("cpu_ms_per_s")
    rows = [f"{'probe':<24} {'ms CPU/s':>9} {'us/wake':>8} {'us/wake over wake_sleep':>24}"]
    for name, entry in window.items():
        if "cpu_ms_per_s" not in entry:
            rows.append(f"{name:<24} {entry.get('error')}")
            continue
        per_s = entry["cpu_ms_per_s"]
        spec = PROBES.get(name, ("", 1, 5.0))
        period = float(spec[2]) if len(spec) > 2 else 0.25
        over = "" if base is None or period != 0.25 else f"{250 * (per_s - base):>24.1f}"
        rows.append(f"{name:<24} {per_s:>9.3f} {1000 * period * per_s:>8.1f} {over}")
    for index, agent in enumerate(args.profile):
        name = f"{index}_{agent.stem}"
        result[f"cprofile_{name}"] = profile_agent(agent, args.profile_seconds, args.out, name)
    (args.out / "agent_profile.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "probes"}, indent=2))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

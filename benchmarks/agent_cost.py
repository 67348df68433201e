"""What the GPU agent costs in CPU, measured on a running agent, extrapolated to 8 GPUs.

Each agent run is measured over a window in the middle of the run: the CPU time of all its
threads (the sum of /proc/PID/task/*/schedstat, in nanoseconds) at the start and at the end
of the window, and the ticks it wrote in between. Start-up (interpreter, pynvml, NVML init)
and shutdown never enter, so nothing is subtracted: a whole-run getrusage minus a `--count 1`
run carried +-0.02 s of start-up noise, +-0.4 ms per tick over a 12 s run. Runs of the current
agent also pass `--report-cpu`, whose line splits the same kind of window into the main
thread's NVML reads, JSON, writes and wake-ups, and the links thread's counter passes: the
per-GPU parts of that split extrapolate the measured cost to 8 GPUs.

For 8 GPUs on a host with fewer, the agent's own tick loop also runs in this process with
the real GPUs repeated to 8 entries (GPU 0, 1, 0, 1, ...): 8 GPUs' NVML queries, JSON and
writes per tick, measured rather than scaled.

    python3 benchmarks/agent_cost.py --out /tmp/cost [--window 36] [--baseline OLD_AGENT.py]
        [--load] [--skip-smi]
    python3 benchmarks/agent_cost.py --recompute docs/gpu-agent-h200/agent_cost_x2_run5.json
Writes agent_cost.json and prints it; --recompute re-derives the 8-GPU figures of a stored one.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
AGENT = REPO / "specmon" / "agent.py"
sys.path.insert(0, str(REPO))
from specmon import agent as agent_module  # noqa: E402

SMI_PER_TICK = ["nvidia-smi", "--query-gpu=" + ",".join(agent_module.SMI_COLUMNS)]
TARGET_CORE_PERCENT = 0.5  # at 4 Hz for 8 GPUs (docs/gpu-agent.md)
TARGET_GPUS = 8


# --- measuring a running agent ----------------------------------------------------------------


def process_cpu_ns(pid: int) -> tuple[int, str]:
    """CPU time of every thread of a live process, and which clock gave it."""
    total = 0
    found = False
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as stream:
                total += int(stream.read().split()[0])
                found = True
        except (OSError, ValueError, IndexError):
            continue
    if found:
        return total, "schedstat"
    with open(f"/proc/{pid}/stat") as stream:  # kernels without schedstat: 10 ms ticks
        fields = stream.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK"), "stat"


class AgentRun:
    """One agent process, its output read on threads so that it never blocks on a full pipe."""

    def __init__(self, agent: Path, args: list[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(agent), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        self.lines: list[tuple[float, dict[str, Any]]] = []
        self.stderr: list[str] = []
        self._lock = threading.Lock()
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip():
                with self._lock:
                    self.lines.append((time.monotonic(), json.loads(line)))

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)

    def ticks(self) -> list[tuple[float, dict[str, Any]]]:
        with self._lock:
            return [(t, line) for t, line in self.lines if line.get("type") == "tick"]

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            code = self.process.wait(10)
        for reader in self._readers:
            reader.join(5)
        return code


def measure_agent(agent: Path, args: list[str], warmup: float, window: float) -> dict[str, Any]:
    """The agent's CPU over `window` seconds, starting `warmup` seconds after its start."""
    run = AgentRun(agent, args)
    try:
        time.sleep(warmup)
        if run.process.poll() is not None:
            raise RuntimeError(f"agent exited early: {''.join(run.stderr)[-500:]}")
        cpu_start, clock = process_cpu_ns(run.process.pid)
        wall_start = time.monotonic()
        time.sleep(window)
        cpu_end, _ = process_cpu_ns(run.process.pid)
        wall_end = time.monotonic()
    finally:
        code = run.stop()
    ticks = run.ticks()
    inside = [line for t, line in ticks if wall_start <= t <= wall_end]
    walls = [float(line["wall"]) for line in inside]
    intervals = [b - a for a, b in itertools.pairwise(walls)]
    cpu_s = (cpu_end - cpu_start) / 1e9
    wall_s = wall_end - wall_start
    reports = [json.loads(line) for line in run.stderr if line.startswith('{"type": "cpu_report"')]
    return {
        "agent": str(agent.relative_to(REPO)) if agent.is_relative_to(REPO) else str(agent),
        "args": args,
        "exit_code": code,
        "clock": clock,
        "window_s": round(wall_s, 3),
        "cpu_s": round(cpu_s, 6),
        "ticks": len(inside),
        "gpus": len(inside[0]["gpus"]) if inside else 0,
        "cpu_ms_per_tick": round(1000 * cpu_s / max(1, len(inside)), 4),
        "core_percent": round(100 * cpu_s / wall_s, 4),
        "interval_median_s": round(statistics.median(intervals), 4) if intervals else None,
        "interval_max_s": round(max(intervals), 4) if intervals else None,
        "notices": [line["message"] for _, line in run.lines if line.get("type") == "notice"],
        "errors": [line["message"] for _, line in run.lines if line.get("type") == "error"],
        "cpu_report": reports[-1] if reports else None,
    }


# --- a GPU load, so that NVML answers while the GPUs work ------------------------------------

LOAD_SCRIPT = """
import sys, torch
torch.cuda.set_device(int(sys.argv[1]))
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
(a @ b).sum().item()
print("ready", flush=True)
while True:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
"""


def start_load(gpus: int) -> list[subprocess.Popen[str]]:
    """One bf16 matmul loop per GPU, each in its own process, like a tensor-parallel server."""
    loads = []
    for index in range(gpus):
        loads.append(
            subprocess.Popen(
                [sys.executable, "-c", LOAD_SCRIPT, str(index)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
    for load in loads:
        assert load.stdout is not None
        line = load.stdout.readline()
        if line.strip() != "ready":
            stop_load(loads)
            raise RuntimeError(f"GPU load did not start: {line.strip()}")
    return loads


def stop_load(loads: list[subprocess.Popen[str]]) -> None:
    for load in loads:
        if load.poll() is None:
            os.killpg(load.pid, signal.SIGKILL)
        load.wait(30)


# --- in-process costs, for the per-GPU parts of the extrapolation ----------------------------


def load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def in_process_costs(baseline: ModuleType | None, rounds: int, spacing: float) -> dict[str, Any]:
    """CPU per NVML call and per agent step, each timed on its own with thread_time.

    "warm": back to back, as a tight loop sees them. "spaced": one call of each per round,
    rounds `spacing` seconds apart, as a ticking agent sees them (caches cold, counters
    refreshed): the figures the extrapolation uses.
    """
    import pynvml

    notices = agent_module.NoticeLog()
    sampler = agent_module.NvmlSampler(pynvml, notices, pcie_interval_s=3600)
    sampler.open("bench")
    try:
        gpu = sampler.gpus[0]
        h = gpu.handle
        reading = sampler._read(gpu)
        pcie = [agent_module.FI_PCIE_TX_BYTES, agent_module.FI_PCIE_RX_BYTES]
        nvlink = [
            (agent_module.FI_NVLINK_DATA_TX_KIB, agent_module.UINT_MAX),
            (agent_module.FI_NVLINK_DATA_RX_KIB, agent_module.UINT_MAX),
        ]
        calls: dict[str, Any] = {
            "utilization": lambda: pynvml.nvmlDeviceGetUtilizationRates(h),
            "memory_v2": lambda: pynvml.nvmlDeviceGetMemoryInfo(h, pynvml.nvmlMemory_v2),
            "power": lambda: pynvml.nvmlDeviceGetPowerUsage(h),
            "power_limit": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h),
            "temperature": lambda: pynvml.nvmlDeviceGetTemperature(h, 0),
            "sm_clock": lambda: pynvml.nvmlDeviceGetClockInfo(h, 1),
            "mem_clock": lambda: pynvml.nvmlDeviceGetClockInfo(h, 2),
            "event_reasons": lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
            "processes": lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(h),
            "read_all_fields_one_gpu": lambda: (
                sampler._direct_fast(h),
                sampler._direct_slow(h, gpu.direct_memory_args or (h,)),
            ),
            "read_tick_fields_one_gpu": lambda: sampler._direct_fast(h),
            "tick_line_1_gpu": lambda: agent_module.tick_line(time.time(), [reading]),
            "tick_line_8_gpus": lambda: agent_module.tick_line(time.time(), [reading] * 8),
            "field_values_pcie_2": lambda: pynvml.nvmlDeviceGetFieldValues(h, pcie),
            "field_values_nvlink_2": lambda: pynvml.nvmlDeviceGetFieldValues(h, nvlink),
            "field_values_all_4": lambda: pynvml.nvmlDeviceGetFieldValues(h, nvlink + pcie),
            "nvlink_state_probe": lambda: sampler._nvlink_active(gpu),
        }
        if baseline is not None:
            calls["before_tick_line_1_gpu"] = lambda: baseline.tick_line(time.time(), [reading])
            calls["before_tick_line_8_gpus"] = lambda: baseline.tick_line(
                time.time(), [reading] * 8
            )
        warm: dict[str, Any] = {}
        for name, call in calls.items():
            try:
                call()
                start = time.thread_time()
                for _ in range(50):
                    call()
                warm[name] = round(1000 * (time.thread_time() - start) / 50, 5)
            except Exception as exc:  # a call this driver refuses: say which
                warm[name] = repr(exc)
        samples: dict[str, list[float]] = {
            name: [] for name in calls if isinstance(warm[name], float)
        }
        for _ in range(rounds):
            time.sleep(spacing)
            for name in samples:
                start = time.thread_time()
                calls[name]()
                samples[name].append(1000 * (time.thread_time() - start))
        spaced = {
            name: {
                "median": round(statistics.median(values), 5),
                "mean": round(statistics.fmean(values), 5),
            }
            for name, values in samples.items()
        }
        fields = pynvml.nvmlDeviceGetFieldValues(h, nvlink + pcie)
        field_status = {
            f"{f.fieldId}/{f.scopeId}": {"nvmlReturn": f.nvmlReturn, "value": f.value.ullVal}
            for f in fields
        }
        link_states: dict[str, Any] = {}
        get_state = getattr(pynvml, "nvmlDeviceGetNvLinkState", None)
        for index, each in enumerate(sampler.gpus):
            states: list[Any] = []
            for link in range(int(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18))):
                if get_state is None:
                    break
                try:
                    states.append(int(get_state(each.handle, link)))
                except pynvml.NVMLError as exc:
                    states.append(str(exc))
                    break
            link_states[str(index)] = states
    finally:
        sampler.close()
    return {
        "ms_per_call_warm": warm,
        "ms_per_call_spaced": spaced,
        "spacing_s": spacing,
        "rounds": rounds,
        "field_values": field_status,
        "nvlink_states": link_states,
        "notices": notices.drain(),
    }


# --- nvidia-smi, the common alternative -------------------------------------------------------


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


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


# --- 8 GPUs: the agent's own tick loop over each real GPU read several times -----------------


def emulated_ticking(gpus: int, rate: float, warmup: float, window: float) -> dict[str, Any]:
    """The agent's tick loop in this process, with the host's GPUs repeated up to `gpus`
    entries (GPU 0, 1, 0, 1, ... on a 2-GPU host): every tick makes the NVML queries, the
    JSON line and the write of a `gpus`-GPU host. The links thread is held off (its cost per
    GPU read is measured on the real agent and added by arithmetic).
    """
    import pynvml

    notices = agent_module.NoticeLog()
    sampler = agent_module.NvmlSampler(pynvml, notices, pcie_interval_s=1e6)
    sampler.open("bench")
    real = sampler.gpus
    entries = []
    for index in range(gpus):
        source = real[index % len(real)]
        entry = agent_module._Gpu(index)
        entry.handle, entry.uuid, entry.name = source.handle, source.uuid, source.name
        entries.append(entry)
    sampler.gpus = entries
    ticker = agent_module.NvmlTicker(sampler, rate)
    stop = threading.Event()
    sink = os.open(os.devnull, os.O_WRONLY)
    encode_s = write_s = 0.0
    ticks = 0
    try:
        deadline = time.monotonic() + warmup
        while time.monotonic() < deadline:
            tick = ticker.next_tick(stop)
            assert tick is not None
            os.write(sink, (agent_module.tick_line(*tick) + "\n").encode())
        sample_start = ticker.sample_cpu_s
        cpu_start, main_start, wall_start = (
            time.process_time(),
            time.thread_time(),
            time.monotonic(),
        )
        while time.monotonic() - wall_start < window:
            tick = ticker.next_tick(stop)
            assert tick is not None
            encode_start = time.thread_time()
            line = agent_module.tick_line(*tick) + "\n"
            write_start = time.thread_time()
            os.write(sink, line.encode())
            write_s += time.thread_time() - write_start
            encode_s += write_start - encode_start
            ticks += 1
        cpu = time.process_time() - cpu_start
        main = time.thread_time() - main_start
        wall = time.monotonic() - wall_start
        sample = ticker.sample_cpu_s - sample_start
    finally:
        os.close(sink)
        sampler.close()
    per_tick = 1000 / max(1, ticks)
    return {
        "gpus": gpus,
        "real_gpus": len(real),
        "rate_hz": rate,
        "ticks": ticks,
        "window_s": round(wall, 3),
        "cpu_ms_per_tick": round(cpu * per_tick, 4),
        "core_percent": round(100 * cpu / wall, 4),
        "main_thread_ms_per_tick": {
            "total": round(main * per_tick, 4),
            "sample": round(sample * per_tick, 4),
            "encode": round(encode_s * per_tick, 4),
            "write": round(write_s * per_tick, 4),
            "wait_and_loop": round((main - sample - encode_s - write_s) * per_tick, 4),
        },
        "notices": notices.drain(),
    }


# --- extrapolation to 8 GPUs ------------------------------------------------------------------


def links_ms_per_s(read_ms_per_gpu: float, gpus: int, interval: float) -> float:
    """The links thread's CPU per second: one read per GPU every interval, spaced out
    further by the agent where that would exceed LINK_CPU_SHARE of a core."""
    return min(gpus * read_ms_per_gpu / interval, 1000 * agent_module.LINK_CPU_SHARE)


def extrapolate_after(
    run: dict[str, Any], emulated: dict[str, Any] | None, read_ms_per_gpu: float | None
) -> dict[str, Any]:
    """8 GPUs at the run's rate, up to three ways, each plus the links thread's share for 8
    GPUs (capped by the agent at LINK_CPU_SHARE of a core).

    emulated: the tick loop measured with 8 GPU entries (each real GPU read several times;
    a GPU read again within microseconds may cost less than a distinct GPU would).
    per_gpu: the run's measured cost less its links thread, plus per further GPU the run's
    NVML reads per GPU (the average over its distinct GPUs, the first one's cold start
    included) and the JSON and write per GPU that the emulated loop adds over the run.
    per_gpu_conservative: the same, but the run's whole JSON and write counted per GPU.
    """
    report = run["cpu_report"]
    gpus = run["gpus"]
    rate = report["rate_hz"]
    main = report["main_thread_ms_per_tick"]
    read_ms = read_ms_per_gpu or report["links"]["cpu_ms_per_gpu_read"] or 0.0
    links = links_ms_per_s(read_ms, TARGET_GPUS, report["link_interval_s"])
    without_links = run["cpu_ms_per_tick"] - report["links"]["cpu_ms_per_tick"]
    sample_per_gpu = main["sample"] / gpus
    line_per_gpu = {"per_gpu_conservative": (main["encode"] + main["write"]) / gpus}
    ticking: dict[str, float] = {}
    if emulated and "cpu_ms_per_tick" in emulated:
        ticking["emulated"] = emulated["cpu_ms_per_tick"]
        emulated_line = emulated["main_thread_ms_per_tick"]
        line_per_gpu["per_gpu"] = max(
            0.0,
            (emulated_line["encode"] + emulated_line["write"] - main["encode"] - main["write"])
            / (emulated["gpus"] - gpus),
        )
    for label in ("per_gpu", "per_gpu_conservative"):
        if label in line_per_gpu:
            extra = (TARGET_GPUS - gpus) * (sample_per_gpu + line_per_gpu[label])
            ticking[label] = without_links + extra
    out: dict[str, Any] = {
        "nvml_reads_ms_per_gpu_per_tick": round(sample_per_gpu, 4),
        "line_ms_per_gpu_per_tick": {k: round(v, 4) for k, v in line_per_gpu.items()},
        "link_read_ms_per_gpu": round(read_ms, 4),
        "links_ms_per_s_8_gpus": round(links, 4),
    }
    for label, ms_per_tick in ticking.items():
        core = (ms_per_tick * rate + links) / 10
        out[label] = {
            "ticking_ms_per_tick": round(ms_per_tick, 4),
            "core_percent": round(core, 4),
            "target_met": core <= TARGET_CORE_PERCENT,
        }
    return out


def extrapolate_before(run: dict[str, Any], spaced: dict[str, Any]) -> dict[str, Any]:
    """8 GPUs from a run of the agent before this change: per further GPU one tick read of
    every field, its tick-line share and one 4-field counter read every 3 s (that agent's
    default), all at their spaced costs."""
    gpus = run["gpus"]
    rate = float(run["args"][run["args"].index("--rate") + 1])
    line_per_gpu = max(
        0.0,
        (spaced["before_tick_line_8_gpus"]["mean"] - spaced["before_tick_line_1_gpu"]["mean"]) / 7,
    )
    per_gpu = (
        spaced["read_all_fields_one_gpu"]["mean"]
        + line_per_gpu
        + spaced["field_values_all_4"]["mean"] / (rate * 3.0)
    )
    per_tick = run["cpu_ms_per_tick"] + (TARGET_GPUS - gpus) * per_gpu
    return {
        "per_gpu_ms_per_tick": round(per_gpu, 4),
        "cpu_ms_per_tick": round(per_tick, 4),
        "core_percent": round(per_tick * rate / 10, 4),
    }


# --- the whole benchmark ----------------------------------------------------------------------


def environment() -> dict[str, Any]:
    def text(args: list[str]) -> str:
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            return repr(exc)
        return (done.stdout + done.stderr).strip()

    model = ""
    with open("/proc/cpuinfo") as stream:
        for line in stream:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "python": sys.version.split()[0],
        "cpu": model,
        "cores": os.cpu_count(),
        "kernel": os.uname().release,
        "gpus": text(["nvidia-smi", "--query-gpu=index,name,driver_version", "--format=csv"]),
        "topology": text(["nvidia-smi", "topo", "-m"]),
    }


def count_gpus() -> int:
    import pynvml

    pynvml.nvmlInit()
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for agent_cost.json (required)")
    parser.add_argument(
        "--recompute",
        type=Path,
        metavar="JSON",
        help="print the 8-GPU extrapolations of a stored agent_cost.json, measure nothing",
    )
    parser.add_argument("--window", type=float, default=36.0, help="seconds measured per run")
    parser.add_argument("--warmup", type=float, default=4.0, help="seconds before the window")
    parser.add_argument("--baseline", type=Path, help="an older agent.py to measure alike")
    parser.add_argument("--load", action="store_true", help="also measure under a matmul load")
    parser.add_argument("--skip-smi", action="store_true", help="no nvidia-smi measurements")
    parser.add_argument("--rounds", type=int, default=20, help="spaced in-process rounds")
    args = parser.parse_args()
    if args.recompute is not None:
        stored = json.loads(args.recompute.read_text())
        print(json.dumps(extrapolations(stored), indent=2))
        return 0
    if args.out is None:
        parser.error("--out is required unless --recompute is given")
    args.out.mkdir(parents=True, exist_ok=True)
    out_file = args.out / "agent_cost.json"
    result: dict[str, Any] = {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    baseline = load_module(args.baseline, "agent_before") if args.baseline else None

    def after() -> dict[str, Any]:
        return measure_agent(AGENT, ["--rate", "4", "--report-cpu"], args.warmup, args.window)

    def emulated() -> dict[str, Any]:
        return emulated_ticking(TARGET_GPUS, 4.0, args.warmup, args.window)

    steps: list[tuple[str, Any]] = [
        ("environment", environment),
        ("in_process", lambda: in_process_costs(baseline, args.rounds, 0.25)),
    ]
    if baseline is not None:
        steps.append(
            (
                "before_4hz",
                lambda: measure_agent(args.baseline, ["--rate", "4"], args.warmup, args.window),
            )
        )
    steps += [("after_4hz", after), ("after_4hz_emulated_8", emulated)]
    loads: list[subprocess.Popen[str]] = []

    def load_start() -> dict[str, Any]:
        loads.extend(start_load(count_gpus()))
        return {"processes": len(loads), "script": LOAD_SCRIPT}

    if args.load:
        steps += [
            ("load_start", load_start),
            ("after_4hz_under_load", after),
            ("after_4hz_emulated_8_under_load", emulated),
        ]
    if not args.skip_smi:
        steps += [
            ("smi_per_tick_4hz", lambda: smi_per_tick(4, args.window)),
            ("smi_loop_4hz", lambda: smi_loop(4, args.window)),
        ]
    try:
        for name, step in steps:
            started = time.monotonic()
            try:
                if name.endswith("_under_load") and not loads:
                    raise RuntimeError("no GPU load is running")
                result[name] = step()
            except Exception as exc:  # keep what the other steps measured
                result[name] = {"error": repr(exc)}
            print(f"{name}: {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
            out_file.write_text(json.dumps(result, indent=2))
    finally:
        stop_load(loads)
    result["extrapolated_8_gpus"] = extrapolations(result)
    out_file.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


def extrapolations(result: dict[str, Any]) -> dict[str, Any]:
    spaced = result.get("in_process", {}).get("ms_per_call_spaced", {})
    out: dict[str, Any] = {}
    if "before_4hz" in result and "cpu_ms_per_tick" in result["before_4hz"]:
        try:
            out["before_4hz"] = extrapolate_before(result["before_4hz"], spaced)
        except (KeyError, TypeError, ZeroDivisionError) as exc:
            out["before_4hz"] = {"error": repr(exc)}
    idle_read = None
    for suffix in ("", "_under_load"):
        run = result.get("after_4hz" + suffix, {})
        if not run.get("cpu_report"):
            continue
        read = run["cpu_report"]["links"]["cpu_ms_per_gpu_read"]
        if suffix == "":
            idle_read = read
        try:
            out["after_4hz" + suffix] = extrapolate_after(
                run, result.get("after_4hz_emulated_8" + suffix), read or idle_read
            )
        except (KeyError, TypeError, ZeroDivisionError) as exc:
            out["after_4hz" + suffix] = {"error": repr(exc)}
    return out


if __name__ == "__main__":
    sys.exit(main())

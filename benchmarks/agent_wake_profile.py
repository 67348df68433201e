"""Where the GPU agent's CPU goes between nvidia-smi's rows: its wake-ups, links and relay.

With nvidia-smi's loop writing the ticks, the agent's own CPU is its slow-field wake-ups
and its PCIe/NVLink reads. This runs, all at once over one window:
- the agent (`--rate 4`) instrumented from inside: the CPU of each part of a wake-up (the
  sleep's return, the slow NVML reads by function, the state lines, the write, the loop's
  checks) and of each link read, on the thread that spends it (time.thread_time);
- NVML's link counter reads one way each per second, cold: PCIe TX and RX together, each
  alone, nvmlDeviceGetPcieThroughput;
- the agent under the remote helper's `supervise` given by --helper (each --helper one
  process): the helper's own CPU, apart from the agent's, is the relay's cost;
- with --pyspy PATH, py-spy recording a plain agent (its raw stacks are written to --out).

    python3 benchmarks/agent_wake_profile.py --out /tmp/wake [--window 40]
        [--helper NAME=PATH ...] [--agent specmon/remote/agent.py] [--pyspy py-spy]
Writes agent_wake_profile.json and prints it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent_cost import process_cpu_ns, tree_cpu_ns

REPO = Path(__file__).resolve().parent.parent
AGENT = REPO / "specmon" / "remote" / "agent.py"

# --- the instrumented agent (run as a process of its own) ---------------------------------------


class Ledger:
    """CPU seconds (of the calling thread) and calls per named part; thread-safe enough for
    two threads adding to different keys (the links thread's keys are its own)."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.open = False  # only parts inside the window count

    def add(self, name: str, seconds: float) -> None:
        if self.open:
            self.cpu[name] = self.cpu.get(name, 0.0) + seconds
            self.calls[name] = self.calls.get(name, 0) + 1

    def timed(self, name: str, function: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.add(name, time.thread_time() - start)

        return wrapper


def instrumented_agent(agent_path: Path, result_path: Path, window: float, argv: list[str]) -> int:
    spec = importlib.util.spec_from_file_location("agent_profiled", agent_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["agent_profiled"] = module
    spec.loader.exec_module(module)
    import pynvml

    ledger = Ledger()
    for name in dir(pynvml):
        if name.startswith("nvmlDevice") and callable(getattr(pynvml, name)):
            setattr(pynvml, name, ledger.timed("nvml." + name, getattr(pynvml, name)))
    sampler_class = module.NvmlSampler
    for method in ("read_slow_fields", "state_entries", "_link_rates", "links_pass"):
        if hasattr(sampler_class, method):
            setattr(
                sampler_class,
                method,
                ledger.timed("part." + method, getattr(sampler_class, method)),
            )
    for function in ("state_lines", "packed_writes", "_parent_alive"):
        if hasattr(module, function):
            setattr(module, function, ledger.timed("part." + function, getattr(module, function)))
    ticker_class = module.NvmlTicker
    ticker_class._wait = ledger.timed("part.sleep_and_wake", ticker_class._wait)
    rows_class = module.SmiTickRows
    rows_class.exit_code = ledger.timed("part.exit_code", rows_class.exit_code)
    real_write = os.write

    def counted_write(fd: int, data: bytes) -> int:
        start = time.thread_time()
        try:
            return real_write(fd, data)
        finally:
            ledger.add("part.os_write", time.thread_time() - start)

    module.os.write = counted_write  # the agent's os is this os: restored at exit

    marks: dict[str, Any] = {}
    main_thread = threading.main_thread()

    def window_keeper() -> None:
        time.sleep(3.0)  # NVML's start, the probe, the first state out
        marks["start"] = (time.monotonic(), time.process_time(), main_cpu())
        ledger.open = True
        time.sleep(window)
        ledger.open = False
        marks["end"] = (time.monotonic(), time.process_time(), main_cpu())
        os.kill(os.getpid(), 15)

    def main_cpu() -> float:
        ident = main_thread.native_id
        with open(f"/proc/self/task/{ident}/schedstat") as stream:
            return int(stream.read().split()[0]) / 1e9

    threading.Thread(target=window_keeper, daemon=True).start()
    try:
        code = int(module.main(argv))
    finally:
        os.write = real_write
    (wall0, process0, main0), (wall1, process1, main1) = marks["start"], marks["end"]
    wall = wall1 - wall0
    wakes = ledger.calls.get("part.read_slow_fields", 0)
    out = {
        "window_s": round(wall, 3),
        "wakes": wakes,
        "process_ms_per_s": round(1000 * (process1 - process0) / wall, 4),
        "main_thread_ms_per_s": round(1000 * (main1 - main0) / wall, 4),
        "main_thread_ms_per_wake": round(1000 * (main1 - main0) / max(1, wakes), 4),
        "parts_ms_per_call": {
            k: round(1000 * v / ledger.calls[k], 4) for k, v in sorted(ledger.cpu.items())
        },
        "parts_calls": dict(sorted(ledger.calls.items())),
        "parts_ms_per_s": {k: round(1000 * v / wall, 4) for k, v in sorted(ledger.cpu.items())},
    }
    result_path.write_text(json.dumps(out, indent=2))
    return code


# --- link counter reads, one way each per second -----------------------------------------------

LINK_PROBE = r"""
import json, sys, time
import pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
ways = {
    "field_values_pcie_tx_rx": lambda: n.nvmlDeviceGetFieldValues(h, [197, 198]),
    "field_values_pcie_tx": lambda: n.nvmlDeviceGetFieldValues(h, [197]),
    "field_values_pcie_rx": lambda: n.nvmlDeviceGetFieldValues(h, [198]),
    "pcie_throughput_tx": lambda: n.nvmlDeviceGetPcieThroughput(h, 0),
    "memory_info_v2": lambda: n.nvmlDeviceGetMemoryInfo(h, n.nvmlMemory_v2),
    "memory_info_v1": lambda: n.nvmlDeviceGetMemoryInfo(h),
    "compute_processes": lambda: n.nvmlDeviceGetComputeRunningProcesses(h),
    "temperature": lambda: n.nvmlDeviceGetTemperature(h, 0),
    "clock_sm": lambda: n.nvmlDeviceGetClockInfo(h, 1),
}
cpu = {k: [] for k in ways}
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for name, call in ways.items():
        time.sleep(1.0 / len(ways))
        start = time.thread_time()
        try:
            call()
        except n.NVMLError as exc:
            cpu[name].append(str(exc))
            continue
        cpu[name].append(time.thread_time() - start)
out = {}
for name, values in cpu.items():
    numbers = sorted(v for v in values if isinstance(v, float))
    errors = sorted({v for v in values if isinstance(v, str)})
    out[name] = {
        "calls": len(numbers),
        "median_ms": round(1000 * numbers[len(numbers) // 2], 4) if numbers else None,
        "min_ms": round(1000 * numbers[0], 4) if numbers else None,
        "max_ms": round(1000 * numbers[-1], 4) if numbers else None,
        "errors": errors,
    }
print(json.dumps(out))
"""


# --- the runs ---------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    this = str(Path(__file__).resolve())
    agent = str(args.agent.resolve())
    rate = ["--rate", "4"]
    instrumented_result = args.out / "instrumented.json"
    processes: dict[str, subprocess.Popen[bytes]] = {}
    pipes: list[threading.Thread] = []

    def drained(name: str, argv: list[str], **extra: Any) -> None:
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stdin=subprocess.PIPE, start_new_session=True, **extra
        )

        def drain() -> None:
            assert process.stdout is not None
            while process.stdout.read1(65536):
                pass

        thread = threading.Thread(target=drain, daemon=True)
        thread.start()
        pipes.append(thread)
        processes[name] = process

    drained(
        "instrumented",
        [
            sys.executable,
            this,
            "--instrumented",
            agent,
            str(instrumented_result),
            str(args.warmup + args.window - 4.0),  # its own 3 s warm-up; done before ours
            "--",
            *rate,
        ],
    )
    link_probe = subprocess.Popen(
        [sys.executable, "-c", LINK_PROBE, str(args.window)], stdout=subprocess.PIPE, text=True
    )
    drained("agent", [sys.executable, agent, *rate])
    state = Path(tempfile.mkdtemp(prefix="wake-profile-"))
    for spec in args.helper:
        name, path = spec.split("=", 1)
        drained(
            f"helper_{name}",
            [
                sys.executable,
                path,
                "supervise",
                "--state-dir",
                str(state / name),
                "--",
                sys.executable,
                agent,
                *rate,
            ],
        )
    time.sleep(args.warmup)
    start = {n: (process_cpu_ns(p.pid), tree_cpu_ns(p.pid)) for n, p in processes.items()}
    wall0 = time.monotonic()
    spy = None
    if args.pyspy is not None:
        spy = subprocess.Popen(
            [
                args.pyspy,
                "record",
                "--pid",
                str(processes["agent"].pid),
                "--rate",
                "2000",
                "--duration",
                str(int(args.window) - 2),
                "--format",
                "raw",
                "--nonblocking",
                "--threads",
                "-o",
                str(args.out / "pyspy_agent_raw.txt"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    time.sleep(args.window)
    wall = time.monotonic() - wall0
    end = {n: (process_cpu_ns(p.pid), tree_cpu_ns(p.pid)) for n, p in processes.items()}
    for process in processes.values():
        if process.stdin is not None:
            process.stdin.close()  # the helpers' channel closing
        if process.poll() is None:
            process.terminate()
    for process in processes.values():
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
    out["window_s"] = round(wall, 3)
    out["processes_ms_per_s"] = {
        name: {
            "own": round((end[name][0] - start[name][0]) / 1e6 / wall, 4),
            "with_children": round((end[name][1] - start[name][1]) / 1e6 / wall, 4),
        }
        for name in processes
    }
    if spy is not None:
        spy_out, _ = spy.communicate(timeout=60)
        out["pyspy"] = spy_out[-2000:]
    shutil.rmtree(state, ignore_errors=True)
    probe_out, _ = link_probe.communicate(timeout=60)
    out["nvml_calls_cold"] = json.loads(probe_out) if probe_out.strip() else None
    if instrumented_result.exists():
        out["instrumented"] = json.loads(instrumented_result.read_text())
    return out


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--instrumented":
        agent_path, result, window = Path(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4])
        rest = sys.argv[5:]
        return instrumented_agent(
            agent_path, result, window, rest[1:] if rest[:1] == ["--"] else rest
        )
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--window", type=float, default=40.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--agent", type=Path, default=AGENT)
    parser.add_argument("--helper", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--pyspy", help="py-spy's executable: record the plain agent")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result = run(args)
    (args.out / "agent_wake_profile.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

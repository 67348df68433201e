"""What the GPU agent costs in CPU, side by side with nvidia-smi's own loop mode.

Every contender runs as its own long-lived process, all of them at once: specmon's agent at
4 Hz (its ticks written by the nvidia-smi loop it starts, whose CPU is counted with it), the
same with its slow fields every 2 s instead of 4 s, with half the links' CPU budget, and
under the remote helper's `supervise` as the console runs it (with --old-helper, also under
an older helper's relaying `supervise`), the agent ticking itself (`--tick-sampler agent`,
the design before), `nvidia-smi
--query-gpu=... -lms 250` (one process, nvidia-smi's loop mode) on the fields the console
shows each tick, on the agent's own tick-row fields, on the fields the agent used to read
every tick, and on the index alone (nvidia-smi's fixed part), plus each agent with every
real GPU repeated to 8 entries (8 GPUs' NVML reads, state lines and link reads: the agent's
per-GPU part; nvidia-smi's loop still reads the real GPUs, so its own per-GPU part is
the row fields' loop less the index loop, added to the agent's; the loops are also run told
their GPUs, `--id=0,...`, as the agent runs its own, and the agent's exact loop is run alone,
as a Python process's child and with stdin at /dev/null, to see where the agent's nvidia-smi
costs more than the same loop alone). A few seconds after
the start the benchmark reads each process's CPU time (the sum over its threads of
/proc/PID/task/*/schedstat, in ns, plus what its finished children used), again after the
window, and counts the lines each wrote in between: same rate, same window, same machine
state for every contender; each contender's own CPU (without its live children: the agent
without its nvidia-smi, `supervise` without the agent) is printed beside. Start-up and
shutdown never enter.

    python3 benchmarks/agent_cost.py --out /tmp/cost [--window 25] [--baseline OLD_AGENT.py]
        [--old-helper OLD_REMOTE_HELPER.py] [--load] [--fallback] [--only NAME,NAME...]
Writes agent_cost.json and prints a table: CPU per second, per tick, share of a core, and the
agent's ratio to each nvidia-smi loop.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
AGENT = REPO / "specmon" / "remote" / "agent.py"
RATE_HZ = 4.0
# The fields the console shows every tick (the reference command), and the fields
# the agent itself reads every tick (memory, temperature and clocks it reads every 2 s).
SMI_CONSOLE_FIELDS = "index,utilization.gpu,memory.used,power.draw,temperature.gpu,clocks.sm"
SMI_TICK_FIELDS = "index,utilization.gpu,utilization.memory,power.draw"
# The agent's own tick rows (specmon/remote/agent.py SMI_TICK_COLUMNS), in the agent's format.
SMI_ROW_FIELDS = "timestamp,index,utilization.gpu,utilization.memory,power.draw"
ROW_FORMAT = "csv,noheader,nounits"
# The same rows without the timestamp column (what that column costs nvidia-smi per row).
SMI_ROW_FIELDS_NO_TIMESTAMP = "index,utilization.gpu,utilization.memory,power.draw"
REPEAT_GPUS = 8
HELPER = REPO / "specmon" / "remote" / "helper.py"
LINK_SHARE_HALF = 0.00005  # half of specmon/remote/agent.py LINK_CPU_SHARE
TARGET_8_GPUS_CORE_PERCENT = 0.1


def smi_loop(fields: str, rate: float, form: str = "csv", ids: str | None = None) -> list[str]:
    return [
        "nvidia-smi",
        f"--query-gpu={fields}",
        f"--format={form}",
        *([f"--id={ids}"] if ids else []),
        "-lms",
        str(round(1000 / rate)),
    ]


def every_id(real_gpus: int) -> str:
    """nvidia-smi's `--id` list naming every real GPU once, as the agent's loop does. (A GPU
    named twice is listed once: the loop cannot be made to read one GPU as 8.)"""
    return ",".join(str(index) for index in range(real_gpus))


# --- the agent with its GPUs repeated, run as a process of its own -----------------------------


def run_repeated_agent(
    agent_path: Path, repeat: int, argv: list[str], settings: dict[str, float] | None = None
) -> int:
    """Run an agent.py whose NVML sampler sees every real GPU repeated up to `repeat` entries
    (GPU 0, 0, ... on a one-GPU host): each entry is read, encoded and written every tick or
    wake-up, and the link reads read each entry's counters, as for `repeat` distinct GPUs. A
    GPU read again right after itself may cost less than a distinct GPU would: a lower
    bound. `settings` overrides module constants (LINK_CPU_SHARE=0.0001, say)."""
    spec = importlib.util.spec_from_file_location("agent_repeated", agent_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["agent_repeated"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    for name, value in (settings or {}).items():
        setattr(module, name, value)
    original_open = module.NvmlSampler.open

    def open_repeated(self: Any, host: str, *args: Any, **kwargs: Any) -> None:
        original_open(self, host, *args, **kwargs)
        restart = self._links_thread is not None
        if restart:  # the links thread started over the real GPUs: restart it
            self._stop.set()
            self._links_thread.join(5.0)
        real = self.gpus
        entries = []
        for index in range(repeat):
            source = real[index % len(real)]
            entry = module._Gpu(index)
            entry.handle, entry.uuid, entry.name = source.handle, source.uuid, source.name
            entries.append(entry)
        self.gpus = entries
        if restart:
            self._stop = threading.Event()
            self._links_thread = threading.Thread(target=self._links_loop, daemon=True)
            self._links_thread.start()

    module.NvmlSampler.open = open_repeated
    rows = getattr(module, "SmiTickRows", None)
    if rows is not None:  # nvidia-smi lists the real GPUs once each: compare with those
        original_unusable = rows.unusable
        rows.unusable = lambda self, uuids: original_unusable(self, list(dict.fromkeys(uuids)))
    return int(module.main(argv))


# --- measuring running processes ---------------------------------------------------------------


def process_cpu_ns(pid: int) -> int:
    """CPU time of every thread of a live process (schedstat, ns) plus its reaped children's
    (/proc/PID/stat cutime + cstime, clock ticks): the fallback's short nvidia-smi calls."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as stream:
                total += int(stream.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    with open(f"/proc/{pid}/stat") as stream:
        fields = stream.read().rsplit(")", 1)[1].split()
    children_ticks = int(fields[13]) + int(fields[14])
    return total + children_ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def tree_cpu_ns(pid: int) -> int:
    """process_cpu_ns of a process and of its live descendants (the fallback's nvidia-smi)."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as stream:
                ppid = int(stream.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(name))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            total += process_cpu_ns(current)
        except OSError:
            continue
        todo.extend(parents.get(current, ()))
    return total


def is_agent_tick(line: str) -> bool:
    """A JSON tick, or the first GPU's row of the agent's nvidia-smi loop (a tick's start)."""
    if line.startswith('{"type": "tick"'):
        return True
    cells = line.split(",")
    return line[:1].isdigit() and len(cells) > 1 and cells[1].strip() == "0"


class Contender:
    """One process under measurement; its stdout lines are counted with their arrival time."""

    def __init__(self, name: str, argv: list[str], gpus_per_line: bool) -> None:
        self.name = name
        self.argv = argv
        self.gpus_per_line = gpus_per_line  # agent ticks: one line per tick
        self.process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.PIPE,  # kept open: `supervise` ends its child when stdin closes
            text=True,
            start_new_session=True,
        )
        self.arrivals: list[float] = []
        self.first_lines: list[str] = []
        self.stderr: list[str] = []
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if len(self.first_lines) < 3:
                self.first_lines.append(line.strip()[:400])
            if self.gpus_per_line and not is_agent_tick(line):
                continue
            if not self.gpus_per_line and not line[:1].isdigit():
                continue  # nvidia-smi's CSV header
            self.arrivals.append(time.monotonic())

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)

    def stop(self) -> int | None:
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
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


def measure_together(
    contenders: dict[str, tuple[list[str], bool]], warmup: float, window: float
) -> dict[str, Any]:
    """Run every contender at once; CPU and lines of each over one common window."""
    running: list[Contender] = []
    results: dict[str, Any] = {}
    for name, (argv, ticks) in contenders.items():
        try:
            running.append(Contender(name, argv, ticks))
        except OSError as exc:  # a program this machine lacks: say so, measure the rest
            results[name] = {"argv": argv, "error": repr(exc)}
    try:
        time.sleep(warmup)
        dead = [c.name for c in running if c.process.poll() is not None]
        start = {c.name: tree_cpu_ns(c.process.pid) for c in running if c.name not in dead}
        own_start = {c.name: process_cpu_ns(c.process.pid) for c in running if c.name in start}
        wall_start = time.monotonic()
        time.sleep(window)
        end = {c.name: tree_cpu_ns(c.process.pid) for c in running if c.name in start}
        own_end = {c.name: process_cpu_ns(c.process.pid) for c in running if c.name in start}
        wall_end = time.monotonic()
    finally:
        codes = {c.name: c.stop() for c in running}
    wall = wall_end - wall_start
    for c in running:
        entry: dict[str, Any] = {"argv": c.argv, "exit_code": codes[c.name]}
        if c.name not in start or c.name not in end:
            entry["error"] = "exited before the window: " + "".join(c.stderr)[-400:]
            entry["first_lines"] = c.first_lines
            results[c.name] = entry
            continue
        lines = sum(1 for t in c.arrivals if wall_start <= t <= wall_end)
        cpu_ms = (end[c.name] - start[c.name]) / 1e6
        entry.update(
            {
                "window_s": round(wall, 3),
                "cpu_ms": round(cpu_ms, 3),
                "lines": lines,
                "cpu_ms_per_s": round(cpu_ms / wall, 4),
                # the process alone, without its live children (the agent without its
                # nvidia-smi; `supervise` without the agent: the relay's cost)
                "own_cpu_ms_per_s": round((own_end[c.name] - own_start[c.name]) / 1e6 / wall, 4),
                "core_percent": round(cpu_ms / wall / 10, 4),
                "first_lines": c.first_lines,
            }
        )
        reports = [line for line in c.stderr if line.startswith('{"type": "cpu_report"')]
        if reports:
            entry["cpu_report"] = json.loads(reports[-1])
        results[c.name] = entry
    return results


# --- the GPU load ------------------------------------------------------------------------------

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


def start_load() -> list[subprocess.Popen[str]]:
    """One matmul load process per real GPU (CUDA_DEVICE_ORDER=PCI_BUS_ID: torch's index is
    nvidia-smi's), each in a session of its own."""
    env = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    loads = [
        subprocess.Popen(
            [sys.executable, "-c", LOAD_SCRIPT, str(index)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env=env,
        )
        for index in range(real_gpu_count())
    ]
    for load in loads:
        assert load.stdout is not None
        line = load.stdout.readline()
        if line.strip() != "ready":
            stop_loads(loads)
            raise RuntimeError(f"GPU load did not start: {line.strip()}")
    return loads


def stop_loads(loads: list[subprocess.Popen[str]]) -> None:
    for load in loads:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(load.pid, signal.SIGKILL)
        load.wait(30)


def real_gpu_count() -> int:
    """The GPUs nvidia-smi lists (1 when it cannot say: the one-GPU formulas)."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return 1
    count = sum(1 for line in done.stdout.splitlines() if line.strip().isdigit())
    return count or 1


# --- the comparison ----------------------------------------------------------------------------


def supervise_state_dir(name: str) -> Path:
    """The state directory `supervise` is given (it creates it); removed at the end."""
    return Path(tempfile.gettempdir()) / f"agent-cost-{os.getpid()}-{name}"


def contenders(args: argparse.Namespace, real_gpus: int = 1) -> dict[str, tuple[list[str], bool]]:
    """Every process measured. On a host with REPEAT_GPUS real GPUs or more, the agent is
    measured on them directly and the repeated-GPU contenders are left out."""
    python = sys.executable
    this = str(Path(__file__).resolve())
    rate = ["--rate", f"{RATE_HZ:g}"]
    ticking = [*rate, "--tick-sampler", "agent"]

    def repeated(agent: str, argv: list[str], repeat: int = REPEAT_GPUS, *sets: str) -> list[str]:
        return [python, this, "--repeat-agent", agent, str(repeat), *sets, "--", *argv]

    def supervised(helper: Path, name: str) -> list[str]:
        state = supervise_state_dir(name)
        command = [python, str(helper), "supervise", "--state-dir", str(state), "--"]
        return [*command, python, str(AGENT), *rate]

    state_2s = [*rate, "--state-interval", "2"]

    out: dict[str, tuple[list[str], bool]] = {
        "agent": ([python, str(AGENT), *rate], True),
        f"agent_x{REPEAT_GPUS}": (repeated(str(AGENT), rate), True),
        "agent_report_cpu": ([python, str(AGENT), *rate, "--report-cpu"], True),
        # the same with the PCIe/NVLink reads only in the warm-up (their share of the cost)
        "agent_no_links": ([python, str(AGENT), *rate, "--pcie-interval", "3600"], True),
        f"agent_no_links_x{REPEAT_GPUS}": (
            repeated(str(AGENT), [*rate, "--pcie-interval", "3600"]),
            True,
        ),
        # the slow fields every 2 s instead of every 4 s (the default)
        "agent_state_2s": ([python, str(AGENT), *state_2s], True),
        f"agent_state_2s_x{REPEAT_GPUS}": (repeated(str(AGENT), state_2s), True),
        # the link reads at half the CPU budget (0.005% of a core)
        "agent_links_half": (
            repeated(str(AGENT), rate, real_gpus, f"LINK_CPU_SHARE={LINK_SHARE_HALF}"),
            True,
        ),
        # as the console runs it: under the remote helper's `supervise`
        "agent_supervised": (supervised(HELPER, "new"), True),
        "agent_ticking": ([python, str(AGENT), *ticking], True),
        f"agent_ticking_x{REPEAT_GPUS}": (repeated(str(AGENT), ticking), True),
        "smi_console_fields": (smi_loop(SMI_CONSOLE_FIELDS, RATE_HZ), False),
        "smi_row_fields": (smi_loop(SMI_ROW_FIELDS, RATE_HZ, ROW_FORMAT), False),
        "smi_tick_fields": (smi_loop(SMI_TICK_FIELDS, RATE_HZ), False),
        "smi_index_only": (smi_loop("index", RATE_HZ), False),
        "smi_row_no_timestamp": (smi_loop(SMI_ROW_FIELDS_NO_TIMESTAMP, RATE_HZ, ROW_FORMAT), False),
    }
    ids = every_id(real_gpus)
    for name, fields, form in (  # each loop told its GPUs, as the agent tells its own
        ("smi_console_fields", SMI_CONSOLE_FIELDS, "csv"),
        ("smi_row_fields", SMI_ROW_FIELDS, ROW_FORMAT),
        ("smi_row_no_timestamp", SMI_ROW_FIELDS_NO_TIMESTAMP, ROW_FORMAT),
        ("smi_index_only", "index", "csv"),
    ):
        out[f"{name}_id"] = (smi_loop(fields, RATE_HZ, form, ids), False)
    # exactly the agent's loop, on its own (its environment too): what the agent's nvidia-smi
    # would cost outside the agent
    agent_loop = ["env", "TZ=UTC", *smi_loop(SMI_ROW_FIELDS, RATE_HZ, ROW_FORMAT, ids)]
    out["smi_agent_loop"] = (agent_loop, False)
    # the same loop started as the agent starts it (a Python parent's subprocess.Popen, stdin
    # /dev/null), the parent then only waiting; and the agent waking once an hour (its
    # nvidia-smi with no agent activity around it): where the agent's loop costs more
    popen = (
        "import os, subprocess, sys; subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL,"
        " env=dict(os.environ, TZ='UTC')).wait()"
    )
    out["smi_agent_loop_python_child"] = ([python, "-c", popen, *agent_loop[2:]], False)
    # which of the child's inheritances costs: stdin at /dev/null, or a Python parent
    devnull = ["sh", "-c", 'exec "$@" </dev/null', "sh", *agent_loop]
    out["smi_agent_loop_devnull_stdin"] = (devnull, False)
    piped = popen.replace("stdin=subprocess.DEVNULL", "stdin=subprocess.PIPE")
    out["smi_agent_loop_python_child_pipe"] = ([python, "-c", piped, *agent_loop[2:]], False)
    out["agent_quiet"] = (
        [python, str(AGENT), *rate, "--state-interval", "3600", "--pcie-interval", "3600"],
        True,
    )
    if args.baseline is not None:
        base = str(args.baseline.resolve())
        out["baseline"] = ([python, base, *rate], True)
        out[f"baseline_x{REPEAT_GPUS}"] = (repeated(base, rate), True)
    if args.old_helper is not None:  # `supervise` relaying the agent's output, as before
        out["agent_supervised_relay"] = (supervised(args.old_helper.resolve(), "old"), True)
    if shutil.which("stdbuf") is not None:  # nvidia-smi's cell-by-cell writes, line-buffered
        row_loop = smi_loop(SMI_ROW_FIELDS, RATE_HZ, ROW_FORMAT)
        out["smi_row_fields_stdbuf"] = (["stdbuf", "-oL", *row_loop], False)
    if args.fallback:
        out["agent_smi_fallback"] = ([python, str(AGENT), *rate, "--source", "nvidia-smi"], True)
    if real_gpus >= REPEAT_GPUS:
        out = {name: entry for name, entry in out.items() if f"_x{REPEAT_GPUS}" not in name}
    only = getattr(args, "only", None)
    if only:  # fewer processes at once: less noise in each one's figure
        out = {name: entry for name, entry in out.items() if name in only.split(",")}
    return out


def summarise(window: dict[str, Any], real_gpus: int = 1) -> dict[str, Any]:
    """Ratios to the nvidia-smi loops, and fixed and per-GPU parts of each (ms CPU per s).

    With R real GPUs (R < 8): nvidia-smi: per GPU = (its loop on the fields less its loop on
    the index) / R, fixed = the index loop. The agent ticking itself: per GPU = (8 entries -
    R GPUs) / (8 - R), fixed = R GPUs less R x per GPU. The agent with nvidia-smi's rows: the
    same from its repeated run (whose nvidia-smi still reads the R real GPUs) plus
    nvidia-smi's per-GPU part for the row fields. With 8 real GPUs or more nothing is
    extrapolated: each agent's figure on the host is its measured 8-GPU (or more) cost."""

    def per_s(name: str) -> float | None:
        entry = window.get(name, {})
        return entry.get("cpu_ms_per_s")

    out: dict[str, Any] = {}
    agents = (
        "agent",
        "agent_state_2s",
        "agent_links_half",
        "agent_supervised",
        "agent_supervised_relay",
        "agent_ticking",
        "baseline",
        "agent_smi_fallback",
    )
    for agent_name in agents:
        agent_ms = per_s(agent_name)
        if agent_ms is None:
            continue
        for smi in ("smi_console_fields", "smi_row_fields", "smi_tick_fields", "smi_index_only"):
            smi_ms = per_s(smi)
            if smi_ms:
                out[f"{agent_name}/{smi}"] = round(agent_ms / smi_ms, 3)
    index_ms = per_s("smi_index_only")
    parts: dict[str, dict[str, float]] = {}
    if index_ms is not None:
        for smi in ("smi_console_fields", "smi_row_fields", "smi_tick_fields"):
            smi_ms = per_s(smi)
            if smi_ms is not None:
                parts[smi] = {"fixed": index_ms, "per_gpu": (smi_ms - index_ms) / real_gpus}
    index_id_ms, row_id_ms = per_s("smi_index_only_id"), per_s("smi_row_fields_id")
    if index_id_ms is not None and row_id_ms is not None:  # the loop as the agent runs it
        parts["smi_row_fields_id"] = {
            "fixed": index_id_ms,
            "per_gpu": (row_id_ms - index_id_ms) / real_gpus,
        }
    row_part = parts.get("smi_row_fields_id", parts.get("smi_row_fields"))
    if real_gpus >= REPEAT_GPUS:
        for agent_name in ("agent", "agent_no_links", "agent_ticking", "baseline"):
            measured = per_s(agent_name)
            if measured is not None:
                out[f"{agent_name}_measured_on_{real_gpus}_gpus_ms_per_s"] = {
                    "ms_per_s": round(measured, 4),
                    "core_percent": round(measured / 10, 4),
                    "target_met": measured / 10 <= TARGET_8_GPUS_CORE_PERCENT,
                }
    for agent_name in ("agent", "agent_state_2s", "agent_no_links", "agent_ticking", "baseline"):
        one, many = per_s(agent_name), per_s(f"{agent_name}_x{REPEAT_GPUS}")
        if one is None or many is None or real_gpus >= REPEAT_GPUS:
            continue
        per_gpu = (many - one) / (REPEAT_GPUS - real_gpus)
        if agent_name in ("agent", "agent_state_2s", "agent_no_links"):
            if row_part is None:
                continue
            per_gpu += row_part["per_gpu"]
        parts[agent_name] = {"fixed": one - real_gpus * per_gpu, "per_gpu": per_gpu}
    for name, part in parts.items():
        eight = part["fixed"] + REPEAT_GPUS * part["per_gpu"]
        out[f"{name}_parts_ms_per_s"] = {
            "fixed": round(part["fixed"], 4),
            "per_gpu": round(part["per_gpu"], 4),
            f"{REPEAT_GPUS}_gpus": round(eight, 4),
            f"{REPEAT_GPUS}_gpus_core_percent": round(eight / 10, 4),
            f"{REPEAT_GPUS}_gpus_target_met": eight / 10 <= TARGET_8_GPUS_CORE_PERCENT,
        }
    # what naming the GPUs (`--id`) saves each loop, and the agent's nvidia-smi against the
    # same loop run on its own
    for smi in ("smi_console_fields", "smi_row_fields", "smi_row_no_timestamp", "smi_index_only"):
        plain, named = per_s(smi), per_s(f"{smi}_id")
        if plain and named is not None:
            out[f"{smi}_id/{smi}"] = round(named / plain, 3)
    alone = per_s("smi_agent_loop")
    for agent_name in ("agent", "agent_quiet"):
        agent_entry = window.get(agent_name, {})
        if "own_cpu_ms_per_s" in agent_entry and alone is not None:
            inside = agent_entry["cpu_ms_per_s"] - agent_entry["own_cpu_ms_per_s"]
            out[f"{agent_name}_nvidia_smi_ms_per_s"] = {
                "in_the_agent": round(inside, 4),
                "alone": alone,
                "python_child": per_s("smi_agent_loop_python_child"),
            }
    for agent_name in ("agent", "agent_supervised"):
        agent_ms, smi_ms = per_s(agent_name), per_s("smi_console_fields")
        if agent_ms is not None and smi_ms is not None:
            out[f"{agent_name}_at_or_below_smi_console_fields_here"] = agent_ms <= smi_ms
    if "agent" in parts and "smi_console_fields" in parts:
        agent_gpu, smi_gpu = parts["agent"]["per_gpu"], parts["smi_console_fields"]["per_gpu"]
        out["agent_per_gpu_at_or_below_smi_console_fields"] = agent_gpu <= smi_gpu
    return out


def table(label: str, window: dict[str, Any], summary: dict[str, Any]) -> str:
    rows = [f"{label}: CPU over one common window, {RATE_HZ:g} Hz", ""]
    rows.append(
        f"{'contender':<24} {'ms CPU/s':>9} {'% core':>8} {'lines':>6} {'ms/line':>8} "
        f"{'own ms/s':>9}"
    )
    for name, entry in window.items():
        if "cpu_ms_per_s" not in entry:
            rows.append(f"{name:<24} {entry.get('error', 'no result')}")
            continue
        per_line = entry["cpu_ms"] / entry["lines"] if entry["lines"] else float("nan")
        rows.append(
            f"{name:<24} {entry['cpu_ms_per_s']:>9.3f} {entry['core_percent']:>8.4f} "
            f"{entry['lines']:>6} {per_line:>8.4f} {entry['own_cpu_ms_per_s']:>9.3f}"
        )
    rows.append("")
    for name, entry in window.items():
        if "cpu_report" in entry:
            rows.append(f"{name} --report-cpu: {json.dumps(entry['cpu_report'])}")
    for key, value in summary.items():
        rows.append(f"{key}: {value}")
    return "\n".join(rows)


def environment() -> dict[str, Any]:
    def text(argv: list[str]) -> str:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
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
        "persistence": text(["nvidia-smi", "--query-gpu=persistence_mode", "--format=csv"]),
    }


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--repeat-agent":
        agent_path, repeat = Path(sys.argv[2]), int(sys.argv[3])
        rest = sys.argv[4:]
        settings = {}
        while rest[:1] and "=" in rest[0]:
            name, value = rest.pop(0).split("=", 1)
            settings[name] = float(value)
        return run_repeated_agent(
            agent_path, repeat, rest[1:] if rest[:1] == ["--"] else rest, settings
        )
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for agent_cost.json")
    parser.add_argument("--window", type=float, default=25.0, help="seconds measured")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before the window")
    parser.add_argument("--baseline", type=Path, help="an older agent.py, measured alike")
    parser.add_argument("--load", action="store_true", help="a second window under matmul load")
    parser.add_argument("--fallback", action="store_true", help="also the nvidia-smi fallback")
    parser.add_argument("--only", metavar="NAMES", help="only these contenders (comma-separated)")
    parser.add_argument(
        "--old-helper", type=Path, help="an older remote_helper.py: the agent under its supervise"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    out_file = args.out / "agent_cost.json"
    result: dict[str, Any] = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "rate_hz": RATE_HZ,
        "environment": environment(),
    }
    real_gpus = real_gpu_count()
    result["real_gpus"] = real_gpus
    windows = [("idle", None)]
    if args.load:
        windows.append(("under_load", start_load))
    printed = []
    for label, before in windows:
        loads = before() if before is not None else []
        try:
            window = measure_together(contenders(args, real_gpus), args.warmup, args.window)
        finally:
            stop_loads(loads)
            for name in ("new", "old"):
                shutil.rmtree(supervise_state_dir(name), ignore_errors=True)
        summary = summarise(window, real_gpus)
        result[label] = {"contenders": window, "summary": summary}
        out_file.write_text(json.dumps(result, indent=2))
        printed.append(table(label, window, summary))
    print("\n\n".join(printed))
    return 0


if __name__ == "__main__":
    sys.exit(main())

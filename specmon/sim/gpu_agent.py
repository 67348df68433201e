"""A stand-in for specmon's NVML GPU agent on the simulated host.

``python -m specmon.sim.gpu_agent --state FILE [--rate HZ] [--gpus N] [--once]`` writes the
same JSON lines as specmon/remote/agent.py (header, then one tick per sample), reading memory and
load from the simulator's GPU state file. Power, temperature and clocks follow utilisation;
once the server's pid is gone its memory is released, as the driver does for a dead process.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from specmon.remote.agent import GpuReading, header_line, message_line, tick_line
from specmon.sim.gpus import GPU_NAME, IDLE_MB, MEM_TOTAL_MB, pid_alive, read_state

POWER_IDLE_W = 75.0
POWER_LIMIT_W = 700.0
POWER_BUSY_W = 520.0  # decode at TP8 is latency-bound: well under the limit
TEMP_IDLE_C = 31.0
TEMP_PER_UTIL_C = 0.33
TEMP_TIME_CONSTANT_S = 25.0
SM_CLOCK_IDLE_MHZ = 345.0
SM_CLOCK_BUSY_MHZ = 1980.0
MEM_CLOCK_MHZ = 2619.0
NVLINK_BUSY_KBS = 3.2e6  # all-reduce traffic at full decode
PCIE_BUSY_KBS = 48_000.0


@dataclass
class _Thermal:
    temp_c: float
    offset_c: float


class SimulatedGpus:
    """Turns state-file snapshots into agent readings with plausible physical fields."""

    def __init__(self, state_path: Path, gpus: int | None, host: str) -> None:
        self.state_path = state_path
        self.host = host
        self.count = gpus
        self._thermal: dict[int, _Thermal] = {}
        self._last_wall: float | None = None

    def gpu_count(self) -> int:
        if self.count is not None:
            return self.count
        state = read_state(self.state_path)
        if state is None:
            return 8
        return int(state.get("host_gpus") or len(state["gpus"]))

    def readings(self, now: float) -> list[GpuReading]:
        state = read_state(self.state_path)
        by_index: dict[int, dict] = {}
        alive = False
        if state is not None:
            alive = pid_alive(int(state.get("server_pid") or 0))
            for entry in state["gpus"]:
                if isinstance(entry, dict) and isinstance(entry.get("index"), int):
                    by_index[entry["index"]] = entry
        dt = 0.25 if self._last_wall is None else max(0.0, now - self._last_wall)
        self._last_wall = now
        out = []
        for index in range(self.gpu_count()):
            entry = by_index.get(index) if alive else None
            out.append(self._reading(index, entry, now, dt))
        return out

    def _reading(self, index: int, entry: dict | None, now: float, dt: float) -> GpuReading:
        util = float(entry.get("util", 0.0)) if entry else 0.0
        # a little sample-to-sample wobble, as NVML's 1/6 s utilisation windows show
        if util > 1.0:
            util = max(0.0, min(100.0, util + 2.0 * math.sin(now * 3.1 + index)))
        mem_used = float(entry.get("mem_used_mb", IDLE_MB)) if entry else IDLE_MB
        pid = int(entry.get("pid", 0)) if entry else 0
        processes: tuple[tuple[int, float | None], ...] = ()
        if entry and pid > 0 and pid_alive(pid):
            processes = ((pid, round(mem_used - IDLE_MB, 1)),)
        thermal = self._thermal.setdefault(
            index, _Thermal(TEMP_IDLE_C + (index % 4) * 0.8, (index % 4) * 0.8 + (index // 4) * 1.5)
        )
        target = TEMP_IDLE_C + thermal.offset_c + TEMP_PER_UTIL_C * util
        thermal.temp_c += (target - thermal.temp_c) * (1.0 - math.exp(-dt / TEMP_TIME_CONSTANT_S))
        busy = util / 100.0
        power = POWER_IDLE_W + POWER_BUSY_W * busy + (thermal.temp_c - TEMP_IDLE_C) * 0.4
        return GpuReading(
            index=index,
            uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{self.host}/{index}')}",
            name=GPU_NAME,
            util_gpu=round(util, 1),
            util_mem=round(util * 0.42, 1),
            mem_used_mb=round(mem_used, 1),
            mem_total_mb=MEM_TOTAL_MB,
            power_w=round(power, 1),
            power_limit_w=POWER_LIMIT_W,
            temp_c=round(thermal.temp_c, 1),
            sm_clock_mhz=SM_CLOCK_BUSY_MHZ if util > 5 else SM_CLOCK_IDLE_MHZ,
            mem_clock_mhz=MEM_CLOCK_MHZ,
            pcie_tx_kbs=round(PCIE_BUSY_KBS * busy + 120.0, 1),
            pcie_rx_kbs=round(PCIE_BUSY_KBS * busy * 0.8 + 90.0, 1),
            nvlink_tx_kbs=round(NVLINK_BUSY_KBS * busy, 1),
            nvlink_rx_kbs=round(NVLINK_BUSY_KBS * busy, 1),
            throttle_reasons=() if util > 5 else ("gpu_idle",),
            processes=processes,
        )


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m specmon.sim.gpu_agent",
        description="Stand-in GPU agent for the simulated host: specmon's agent JSON lines.",
    )
    parser.add_argument("--state", required=True, type=Path, help="the simulator's GPU state file")
    parser.add_argument("--rate", type=float, default=4.0, help="samples per second (default 4)")
    parser.add_argument(
        "--gpus", type=int, default=None, help="GPUs to report (default: from state, else 8)"
    )
    parser.add_argument(
        "--once", action="store_true", help="print the header and one tick, then exit"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not 0.1 <= args.rate <= 50:
        print(message_line("error", "--rate must be between 0.1 and 50 Hz"), flush=True)
        return 2
    if args.gpus is not None and not 1 <= args.gpus <= 64:
        print(message_line("error", "--gpus must be between 1 and 64"), flush=True)
        return 2
    signal.signal(signal.SIGTERM, _raise_stop)
    # A request for a fresh reading (SIGUSR1, as the real agent takes it): every tick here
    # reads the simulated GPUs afresh already.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    host = socket.gethostname()
    gpus = SimulatedGpus(args.state, args.gpus, host)
    period = 1.0 / args.rate
    try:
        print(header_line(source="simulated", host=host, gpus=gpus.gpu_count()), flush=True)
        next_tick = time.monotonic()
        while True:
            now = time.time()
            print(tick_line(now, gpus.readings(now)), flush=True)
            if args.once:
                return 0
            next_tick += period
            time.sleep(max(0.0, next_tick - time.monotonic()))
    except (_Stop, KeyboardInterrupt):
        return 0
    except BrokenPipeError:  # the reader went away: exit quietly, without a flush error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())

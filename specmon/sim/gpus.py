"""Simulated GPU memory and load, shared with the stand-in GPU agent through a state file.

The server side (``GpuState``) knows what each TP rank holds (weights as shards arrive, KV
cache, CUDA graphs) and how busy decode keeps the GPUs; it rewrites the file atomically
(write to a temporary file, then rename). ``python -m specmon.sim.gpu_agent`` reads it.

File format (JSON, ``schema`` 1):
  {"schema": 1, "wall": float, "server_pid": int, "phase": str, "gpu_name": str,
   "mem_total_mb": float, "host_gpus": int (GPUs on the host; those past the TP ranks idle),
   "gpus": [{"index": int, "mem_used_mb": float, "util": float,
   "pid": int}, ...]}
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

STATE_ENV = "SPECMON_SIM_GPU_STATE"
STATE_FILE_NAME = "specmon-sim-gpus.json"
STATE_SCHEMA = 1

GPU_NAME = "NVIDIA H200"
MEM_TOTAL_MB = 143771.0  # what nvidia-smi shows for an H200
TOTAL_GIB = MEM_TOTAL_MB / 1024.0
CONTEXT_GIB = 1.07  # CUDA context and allocator before torch.distributed
IDLE_MB = 4.0  # an idle H200 with no processes


def default_state_path() -> Path:
    """Next to the file stdout is redirected to (the server log), else the working directory."""
    try:
        target = os.readlink("/proc/self/fd/1")
    except OSError:
        target = ""
    if target.startswith("/") and os.path.isfile(target):
        return Path(target).parent / STATE_FILE_NAME
    return Path.cwd() / STATE_FILE_NAME


def state_path_from_env(env: dict[str, str] | None = None) -> Path:
    environ = os.environ if env is None else env
    value = environ.get(STATE_ENV)
    return Path(value) if value else default_state_path()


@dataclass
class RankMemory:
    """GiB one TP rank holds, by what holds it."""

    extra_gib: float  # per-rank spread (rank 0 keeps a little more)
    parts: dict[str, float] = field(default_factory=dict)

    @property
    def used_gib(self) -> float:
        return CONTEXT_GIB + self.extra_gib + sum(self.parts.values())

    @property
    def avail_gib(self) -> float:
        return TOTAL_GIB - self.used_gib


class GpuState:
    """The memory and utilisation of every GPU the server's TP ranks run on."""

    def __init__(
        self,
        path: Path | None,
        tp_size: int,
        server_pid: int,
        rank_pids: list[int] | None = None,
        seed: int = 0,
        host_gpus: int = 8,
    ) -> None:
        rng = random.Random(seed * 7919 + 17)
        self.path = path
        self.tp_size = tp_size
        self.host_gpus = max(host_gpus, tp_size)
        self.server_pid = server_pid
        self.rank_pids = rank_pids or [server_pid] * tp_size
        self.ranks = [
            RankMemory(extra_gib=(0.25 if rank == 0 else 0.0) + rng.uniform(0.0, 0.04))
            for rank in range(tp_size)
        ]
        self.util = [0.0] * tp_size
        self.phase = "starting"
        self._last_write = 0.0

    def set_part(self, name: str, gib: float, ranks: range | None = None) -> None:
        for rank in ranks if ranks is not None else range(self.tp_size):
            self.ranks[rank].parts[name] = gib

    def set_util(self, percent: float) -> None:
        """Every rank at ``percent``; rank 0 (sampling, scheduling) a little busier."""
        self.util = [
            min(100.0, percent * (1.03 if rank == 0 and percent > 0 else 1.0))
            for rank in range(self.tp_size)
        ]

    def write(self, phase: str | None = None, *, min_interval: float = 0.0) -> None:
        """Rewrite the state file atomically (skipped when written under ``min_interval`` ago)."""
        if phase is not None:
            self.phase = phase
        now = time.time()
        if self.path is None or (min_interval and now - self._last_write < min_interval):
            return
        self._last_write = now
        data = {
            "schema": STATE_SCHEMA,
            "wall": round(now, 3),
            "server_pid": self.server_pid,
            "phase": self.phase,
            "gpu_name": GPU_NAME,
            "mem_total_mb": MEM_TOTAL_MB,
            "host_gpus": self.host_gpus,
            "gpus": [
                {
                    "index": rank,
                    "mem_used_mb": round(self.ranks[rank].used_gib * 1024.0, 1),
                    "util": round(self.util[rank], 1),
                    "pid": self.rank_pids[rank],
                }
                for rank in range(self.tp_size)
            ],
        }
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(json.dumps(data))
            os.replace(temporary, self.path)
        except OSError:
            self.path = None  # an unwritable state file must not stop the server


def read_state(path: Path) -> dict | None:
    """The last state written, or None when missing or unreadable (never raises)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
        return None
    return data


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]

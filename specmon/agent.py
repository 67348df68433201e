"""specmon's GPU agent: samples every GPU over NVML on the host and writes JSON lines.

This file is sent alone over SSH and run with the host's ``python3`` (3.8+): it needs only
the standard library and ``pynvml`` (nvidia-ml-py). It is also the one home of the sample
schema, shared by the agent, the console and the simulator.

Wire format, one JSON object per line:
  {"type": "header", "schema": 1, "source": "nvml"|"nvidia-smi"|"simulated", "driver": str|null,
   "nvml": str|null, "cuda": str|null, "host": str, "gpus": int}
  {"type": "tick", "wall": float, "gpus": [ {<GpuReading fields>}, ... ]}
  {"type": "error", "message": str}            (fatal: the agent then exits non-zero)
  {"type": "notice", "message": str}           (e.g. a field unsupported, logged once)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one tick. A field the device does not support is None."""

    index: int
    uuid: str | None = None
    name: str | None = None
    util_gpu: float | None = None  # percent
    util_mem: float | None = None  # percent
    mem_used_mb: float | None = None
    mem_total_mb: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temp_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    pcie_tx_kbs: float | None = None
    pcie_rx_kbs: float | None = None
    nvlink_tx_kbs: float | None = None
    nvlink_rx_kbs: float | None = None
    throttle_reasons: tuple[str, ...] | None = None
    processes: tuple[tuple[int, float | None], ...] = ()  # (pid, used MB)
    error: str | None = None  # e.g. "gpu_is_lost": the GPU fell off the bus

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_READING_FIELDS = tuple(f.name for f in fields(GpuReading))


def reading_from_dict(data: dict[str, Any]) -> GpuReading:
    """Build a reading from one wire dict; unknown keys (newer agents) are ignored."""
    values = {k: data[k] for k in _READING_FIELDS if k in data}
    if values.get("throttle_reasons") is not None:
        values["throttle_reasons"] = tuple(values["throttle_reasons"])
    values["processes"] = tuple(
        (int(p[0]), None if p[1] is None else float(p[1])) for p in values.get("processes") or ()
    )
    return GpuReading(**values)


def header_line(
    source: str,
    host: str,
    gpus: int,
    driver: str | None = None,
    nvml: str | None = None,
    cuda: str | None = None,
) -> str:
    return json.dumps(
        {
            "type": "header",
            "schema": SCHEMA_VERSION,
            "source": source,
            "driver": driver,
            "nvml": nvml,
            "cuda": cuda,
            "host": host,
            "gpus": gpus,
        }
    )


def tick_line(wall: float, readings: list[GpuReading]) -> str:
    return json.dumps(
        {"type": "tick", "wall": round(wall, 3), "gpus": [r.to_dict() for r in readings]}
    )


def message_line(kind: str, message: str) -> str:
    return json.dumps({"type": kind, "message": message})

"""The console's side of the GPU agent's stream: one line in, one typed result out.

The host session reads the agent's stdout over SSH and hands each line to
``parse_agent_line``, which never raises: a tick becomes a ``GpuSample`` event, the header,
errors and notices become small typed records, and anything else an ``AgentUnreadable``
that says why (so a stray shell message shows up instead of breaking the stream).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmon import agent
from specmon.events import AgentStatus, GpuReading, GpuSample

AGENT_PATH = Path(agent.__file__)
_NUMBER_FIELDS = (
    "util_gpu",
    "util_mem",
    "mem_used_mb",
    "mem_total_mb",
    "power_w",
    "power_limit_w",
    "temp_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "pcie_tx_kbs",
    "pcie_rx_kbs",
    "nvlink_tx_kbs",
    "nvlink_rx_kbs",
)
_TEXT_FIELDS = ("uuid", "name", "error")


@dataclass(frozen=True)
class AgentHeader:
    """The agent's first line: where its numbers come from."""

    schema: int
    source: str
    host: str
    gpus: int
    driver: str | None = None
    nvml: str | None = None
    cuda: str | None = None

    def describe(self) -> str:
        parts = [f"{self.gpus} GPU{'s' if self.gpus != 1 else ''} via {self.source}"]
        if self.driver:
            parts.append(f"driver {self.driver}")
        if self.cuda:
            parts.append(f"CUDA {self.cuda}")
        return ", ".join(parts)

    def to_status(self) -> AgentStatus:
        return AgentStatus(state="started", detail=self.describe())


@dataclass(frozen=True)
class AgentError:
    """A fatal agent message, to be shown verbatim (e.g. 'no NVIDIA driver on host X: ...')."""

    message: str

    def to_status(self) -> AgentStatus:
        return AgentStatus(state="error", detail=self.message)


@dataclass(frozen=True)
class AgentNotice:
    """Something the operator may want to know once: a field unsupported, a GPU lost."""

    message: str


@dataclass(frozen=True)
class AgentUnreadable:
    """A line that is not part of the agent's wire format; ``reason`` says what was wrong."""

    line: str
    reason: str


AgentLine = AgentHeader | GpuSample | AgentError | AgentNotice | AgentUnreadable


def agent_script() -> str:
    """The agent's source, to send over SSH and run with the host's python3."""
    return AGENT_PATH.read_text(encoding="utf-8")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def reading_problems(data: Any) -> list[str]:
    """What is wrong with one GPU entry of a tick against the schema; empty when it is valid."""
    if not isinstance(data, dict):
        return [f"a GPU entry is {type(data).__name__}, not an object"]
    problems = []
    index = data.get("index")
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        problems.append(f"index must be a non-negative integer, got {index!r}")
    for name in _NUMBER_FIELDS:
        value = data.get(name)
        if value is not None and not _is_number(value):
            problems.append(f"{name} must be a number or null, got {value!r}")
    for name in _TEXT_FIELDS:
        value = data.get(name)
        if value is not None and not isinstance(value, str):
            problems.append(f"{name} must be text or null, got {value!r}")
    reasons = data.get("throttle_reasons")
    if reasons is not None and (
        not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons)
    ):
        problems.append(f"throttle_reasons must be a list of names or null, got {reasons!r}")
    processes = data.get("processes", [])
    if not isinstance(processes, list):
        problems.append(f"processes must be a list, got {processes!r}")
    else:
        for proc in processes:
            ok = (
                isinstance(proc, list)
                and len(proc) == 2
                and isinstance(proc[0], int)
                and not isinstance(proc[0], bool)
                and (proc[1] is None or _is_number(proc[1]))
            )
            if not ok:
                problems.append(f"a process must be [pid, used MB or null], got {proc!r}")
                break
    return problems


def _header(data: dict[str, Any], line: str) -> AgentHeader | AgentUnreadable:
    schema, gpus = data.get("schema"), data.get("gpus")
    if not isinstance(schema, int) or isinstance(schema, bool):
        return AgentUnreadable(line, "header without an integer schema version")
    if schema > agent.SCHEMA_VERSION:
        return AgentUnreadable(
            line,
            f"agent schema {schema} is newer than this console's {agent.SCHEMA_VERSION}",
        )
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
        return AgentUnreadable(line, "header without a GPU count")
    texts = {}
    for name in ("source", "host", "driver", "nvml", "cuda"):
        value = data.get(name)
        if value is not None and not isinstance(value, str):
            return AgentUnreadable(line, f"header {name} is not text")
        texts[name] = value
    return AgentHeader(
        schema=schema,
        source=texts["source"] or "unknown",
        host=texts["host"] or "unknown",
        gpus=gpus,
        driver=texts["driver"],
        nvml=texts["nvml"],
        cuda=texts["cuda"],
    )


def _tick(data: dict[str, Any], line: str) -> GpuSample | AgentUnreadable:
    wall, gpus = data.get("wall"), data.get("gpus")
    if not _is_number(wall):
        return AgentUnreadable(line, "tick without a numeric wall time")
    if not isinstance(gpus, list):
        return AgentUnreadable(line, "tick without a list of GPUs")
    readings: list[GpuReading] = []
    for entry in gpus:
        problems = reading_problems(entry)
        if problems:
            return AgentUnreadable(line, "; ".join(problems))
        try:
            readings.append(agent.reading_from_dict(entry))
        except (TypeError, ValueError) as exc:
            return AgentUnreadable(line, f"GPU entry does not fit the schema: {exc}")
    return GpuSample(wall=float(wall), gpus=tuple(readings))


def parse_agent_line(line: str) -> AgentLine:
    """One line of agent output as a typed result. Never raises."""
    text = line.strip()
    if not text:
        return AgentUnreadable(line, "empty line")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return AgentUnreadable(line, "not JSON")
    if not isinstance(data, dict):
        return AgentUnreadable(line, "JSON but not an object")
    kind = data.get("type")
    if kind == "tick":
        return _tick(data, line)
    if kind == "header":
        return _header(data, line)
    if kind in ("error", "notice"):
        message = data.get("message")
        if not isinstance(message, str):
            return AgentUnreadable(line, f"{kind} without a message")
        return AgentError(message) if kind == "error" else AgentNotice(message)
    return AgentUnreadable(line, f"unknown line type {kind!r}")

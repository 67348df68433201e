"""The console's side of the GPU agent's stream: lines in, typed results out.

The host session reads the agent's stdout over SSH and hands each line to an
``AgentStream`` (one per agent run), which never raises: a tick becomes a ``GpuSample``
event, the header, errors and notices become small typed records, and anything else an
``AgentUnreadable`` that says why (so a stray shell message shows up instead of breaking
the stream). Where the header names ``tick_rows``, the ticks arrive as nvidia-smi's CSV
rows (one per GPU, written by its own loop into the agent's stdout) and the other fields
as "state" lines; the stream merges them into the same ``GpuSample`` events.
``parse_agent_line`` reads one JSON line on its own.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmon.model.events import AgentStatus, GpuReading, GpuSample
from specmon.remote import agent

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
    tick_rows: tuple[str, ...] | None = None  # the CSV columns of nvidia-smi's tick rows

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
    """A fatal agent message, to be shown verbatim (e.g. 'no NVIDIA driver on host X: ...');
    ``retry`` False: the host has nothing for an agent to read, so it is not restarted."""

    message: str
    retry: bool = True

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


@dataclass(frozen=True)
class AgentState:
    """GPUs' slowly moving fields (utilisation and power null), for a stream of tick rows."""

    wall: float
    gpus: tuple[GpuReading, ...]


AgentLine = AgentHeader | GpuSample | AgentState | AgentError | AgentNotice | AgentUnreadable


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
    tick_rows = data.get("tick_rows")
    if tick_rows is not None and (
        not isinstance(tick_rows, list)
        or "index" not in tick_rows
        or not all(name in _ROW_FIELDS for name in tick_rows)
    ):
        return AgentUnreadable(
            line, f"header tick_rows is not a list of known columns: {tick_rows!r}"
        )
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
        tick_rows=None if tick_rows is None else tuple(tick_rows),
    )


def _tick(data: dict[str, Any], line: str) -> GpuSample | AgentUnreadable:
    wall, gpus = data.get("wall"), data.get("gpus")
    kind = data.get("type")
    if not _is_number(wall):
        return AgentUnreadable(line, f"{kind} without a numeric wall time")
    if not isinstance(gpus, list):
        return AgentUnreadable(line, f"{kind} without a list of GPUs")
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
    if kind == "state":
        state = _tick(data, line)
        if isinstance(state, GpuSample):
            return AgentState(wall=state.wall, gpus=state.gpus)
        return state
    if kind == "header":
        return _header(data, line)
    if kind in ("error", "notice"):
        message = data.get("message")
        if not isinstance(message, str):
            return AgentUnreadable(line, f"{kind} without a message")
        if kind == "notice":
            return AgentNotice(message)
        return AgentError(message, retry=data.get("retry") is not False)
    return AgentUnreadable(line, f"unknown line type {kind!r}")


# The tick rows' columns (the header's "tick_rows"), as the agent names them.
_ROW_FIELDS = frozenset(("timestamp", "index", "util_gpu", "util_mem", "power_w"))
_FAST_FIELDS = ("util_gpu", "util_mem", "power_w")
_AGENT_LINE_START = '{"type": '  # how every JSON line of the agent begins


def _row_number(cell: str) -> float | None:
    """A numeric cell; nvidia-smi's '[N/A]', '[Not Supported]' and the like are None."""
    if not cell or cell.startswith("[") or cell in ("N/A", "Not Supported"):
        return None
    value = float(cell)
    if not math.isfinite(value):
        raise ValueError(f"{cell!r} is not a finite number")
    return value


class AgentStream:
    """Reads one agent run's lines in order; ``feed`` gives what each line completes.

    JSON lines are read as by ``parse_agent_line``. With a header naming ``tick_rows``, a
    line that is not JSON is one GPU's CSV row of nvidia-smi's loop: rows gather until the
    last GPU's row (or a row whose index does not follow, when a GPU's row went missing),
    then become one ``GpuSample`` whose readings are the GPUs' last state with the rows'
    utilisation and power, at the rows' timestamp (UTC). A state line updates what later
    ticks carry and is returned too. A row that one of the agent's writes cut in two is put
    back together. Never raises.
    """

    def __init__(self) -> None:
        self.header: AgentHeader | None = None
        self._state: dict[int, GpuReading] = {}
        self._rows: list[dict[str, Any]] = []
        self._fragment = ""  # the start of a row that one of the agent's writes cut off
        self.final_error: AgentError | None = None  # an error after which a restart won't help

    def feed(self, line: str) -> list[AgentLine]:
        parsed = self._feed(line)
        for item in parsed:
            if isinstance(item, AgentError) and not item.retry:
                self.final_error = item
        return parsed

    def _feed(self, line: str) -> list[AgentLine]:
        text = line.strip()
        rows = self.header.tick_rows if self.header is not None else None
        if rows is None:
            return self._json(line)
        # nvidia-smi writes a row cell by cell (one write(2) per cell, seen under strace on
        # an H200), and the agent writes whole lines: a write of the agent's can land inside
        # a row, so its first line then starts with the row's beginning, and the row's end
        # follows the agent's lines. Rows never hold "{", the agent's lines start with it.
        cut = text.find(_AGENT_LINE_START)
        if cut > 0:
            self._fragment += text[:cut]
            return self._json(text[cut:])
        if text.startswith("{"):
            return self._json(line)
        if self._fragment:
            text, self._fragment = self._fragment + text, ""
            line = text
        if not text:
            return [AgentUnreadable(line, "empty line")]
        return self._row(line, text, rows)

    def _json(self, line: str) -> list[AgentLine]:
        parsed = parse_agent_line(line)
        if isinstance(parsed, AgentHeader):
            self.header, self._state, self._rows, self._fragment = parsed, {}, [], ""
            return [parsed]
        if isinstance(parsed, AgentState):
            for reading in parsed.gpus:
                self._state[reading.index] = reading
            return [parsed]
        if isinstance(parsed, GpuSample):  # the agent ticks itself (again): rows are over
            return [*self._flush(), parsed]
        return [parsed]

    def _row(self, line: str, text: str, columns: tuple[str, ...]) -> list[AgentLine]:
        cells = [cell.strip() for cell in text.split(",")]
        if len(cells) != len(columns):
            return [AgentUnreadable(line, f"a tick row of {len(columns)} columns was expected")]
        row: dict[str, Any] = {}
        try:
            for name, cell in zip(columns, cells, strict=True):
                if name == "index":
                    row["index"] = int(cell)
                    if row["index"] < 0:
                        raise ValueError("a negative GPU index")
                elif name == "timestamp":
                    row["wall"] = agent.smi_timestamp(cell)
                else:
                    row[name] = _row_number(cell)
        except (ValueError, OverflowError) as exc:
            return [AgentUnreadable(line, f"not a tick row: {exc}")]
        out: list[AgentLine] = []
        if self._rows and row["index"] <= self._rows[-1]["index"]:
            out.extend(self._flush())
        self._rows.append(row)
        if row["index"] >= self._last_index():
            out.extend(self._flush())
        return out

    def _last_index(self) -> int:
        known = max(self._state) if self._state else -1
        gpus = self.header.gpus if self.header is not None else 0
        return max(known, gpus - 1)

    def _flush(self) -> list[GpuSample]:
        if not self._rows:
            return []
        rows, self._rows = {row["index"]: row for row in self._rows}, []
        wall = next((row["wall"] for row in rows.values() if "wall" in row), None)
        readings = []
        for index in sorted(set(self._state) | set(rows)):
            base = self._state.get(index) or GpuReading(index=index)
            row = rows.get(index) if base.error is None else None
            fast = {name: None if row is None else row.get(name) for name in _FAST_FIELDS}
            readings.append(dataclasses.replace(base, **fast))
        return [GpuSample(wall=time.time() if wall is None else wall, gpus=tuple(readings))]

"""specmon's GPU agent: samples every GPU over NVML on the host and writes JSON lines.

This file is sent alone over SSH and run with the host's ``python3`` (3.8+): it needs only
the standard library and ``pynvml`` (nvidia-ml-py). It is also the one home of the sample
schema, shared by the agent, the console and the simulator.

Wire format, one line each (schema 2; schema 1 had no "state" lines and no rows):
  {"type": "header", "schema": 2, "source": "nvml"|"nvidia-smi"|"simulated", "driver": str|null,
   "nvml": str|null, "cuda": str|null, "host": str, "gpus": int, "tick_rows": [names]|null}
  {"type": "tick", "wall": float, "gpus": [ {<GpuReading fields>}, ... ]}
  {"type": "state", "wall": float, "gpus": [ {<GpuReading fields>} ]}   (see below)
  {"type": "error", "message": str}            (fatal: the agent then exits non-zero)
  {"type": "notice", "message": str}           (e.g. a field unsupported, logged once)
With "tick_rows" in the header, the ticks are CSV rows written by nvidia-smi's own loop
(`nvidia-smi --query-gpu=timestamp,index,... -lms N` sharing the agent's stdout), one row per
GPU per tick, with the header's column names; "state" lines carry each GPU's other fields
(every field but utilisation and power), written when they change, at most every 2 s.
The console merges the two (specmon/session/gpu_stream.py).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import ctypes
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

SCHEMA_VERSION = 2


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
    tick_rows: tuple[str, ...] | None = None,
) -> str:
    data: dict[str, Any] = {
        "type": "header",
        "schema": SCHEMA_VERSION,
        "source": source,
        "driver": driver,
        "nvml": nvml,
        "cuda": cuda,
        "host": host,
        "gpus": gpus,
    }
    if tick_rows is not None:
        data["tick_rows"] = list(tick_rows)
    return json.dumps(data)


def tick_line(wall: float, readings: list[GpuReading]) -> str:
    """One tick on the wire. A reading's own attribute dict is its wire dict (json writes its
    tuples as lists): dataclasses.asdict's deep copy cost ~6x more per tick."""
    return json.dumps({"type": "tick", "wall": round(wall, 3), "gpus": [vars(r) for r in readings]})


def state_line(wall: float, readings: list[GpuReading]) -> str:
    """GPUs' slowly moving fields, for a stream whose ticks are nvidia-smi's rows: the
    readings' utilisation and power are null (the rows carry them)."""
    return json.dumps(
        {"type": "state", "wall": round(wall, 3), "gpus": [vars(r) for r in readings]}
    )


def message_line(kind: str, message: str, *, retry: bool = True) -> str:
    """A notice or error line; an error after which a restart cannot help says ``"retry":
    false`` (the console then stops restarting the agent)."""
    data: dict[str, object] = {"type": kind, "message": message}
    if not retry:
        data["retry"] = False
    return json.dumps(data)


# --- the sampler: NVML first, nvidia-smi's loop mode when pynvml is missing -----------------


DEFAULT_RATE_HZ = 4.0
MAX_RATE_HZ = 50.0
DEFAULT_PCIE_INTERVAL_S = 3.0  # PCIe/NVLink rates: their own cadence, off the tick
# Where one pass over the link counters costs more CPU than this share of a core allows at
# --pcie-interval, the passes space out further: one H200's PCIe counters cost 0.8-0.9 ms a
# read (every ~9 s; at the nvidia-smi-rows stream's 4 s wake-ups, every third: 12 s), 8
# H200s with NVLink ~28 ms a pass (every ~280 s). At 0.02% the links were a third of the
# agent's own CPU on one H200 (docs/gpu-agent.md).
LINK_CPU_SHARE = 0.0001
SLOW_FIELDS_INTERVAL_S = 2.0  # memory, temperature, clocks, power limit, reasons, processes
# The same fields where nvidia-smi's loop writes the ticks: the agent's only wake-ups, each
# ~0.45 ms of CPU on one H200, 0.28 of it the GPU's slow reads (docs/gpu-agent.md).
DEFAULT_STATE_INTERVAL_S = 4.0
DEFAULT_PROCESSES_INTERVAL_S = 5.0  # nvidia-smi fallback: one compute-apps call per interval
SMI_TIMEOUT_S = 15.0  # a single nvidia-smi call that takes longer is treated as failed
MIB = 1024.0 * 1024.0
UINT_MAX = 0xFFFFFFFF  # an NVLink field's scope id meaning "all links summed"

# NVML codes, copied so that a pynvml that lacks a constant still works.
NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
PERMANENT_NVML_ERRORS = (
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_FUNCTION_NOT_FOUND,
)
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
FI_NVLINK_DATA_TX_KIB = 138
FI_NVLINK_DATA_RX_KIB = 139
FI_PCIE_TX_BYTES = 197
FI_PCIE_RX_BYTES = 198

# Clock event ("throttle") reason bits, the same in every driver generation that has them.
THROTTLE_REASON_NAMES = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal"),
    (0x040, "hw_thermal"),
    (0x080, "hw_power_brake"),
    (0x100, "display_clock"),
)


def throttle_reason_names(mask: int) -> tuple[str, ...]:
    """Name the set bits of a clock-event mask; bits this agent does not know stay visible."""
    names = [name for bit, name in THROTTLE_REASON_NAMES if mask & bit]
    known = 0
    for bit, _ in THROTTLE_REASON_NAMES:
        known |= bit
    if mask & ~known:
        names.append("0x%x" % (mask & ~known))
    return tuple(names)


class AgentFatal(Exception):
    """A condition the agent cannot stream through: reported as one error line, then exit 1."""


class AgentAbsent(AgentFatal):
    """The host has nothing to read (no NVIDIA driver, no GPU, no way to ask): restarting the
    agent cannot change that, so its error line says ``"retry": false``."""


class _Utilization(ctypes.Structure):
    """nvmlUtilization_t, as the raw utilisation call fills it."""

    _fields_ = (("gpu", ctypes.c_uint), ("memory", ctypes.c_uint))


class GpuLost(Exception):
    """NVML said the GPU fell off the bus: the reading carries the error, the rest go on."""


def _text(value: Any) -> str:
    """Old pynvml versions return bytes where newer ones return str."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


class NoticeLog:
    """Notices the sampler wants shown, each at most once; thread-safe (the links thread uses it)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._pending: list[str] = []
        self._lock = threading.Lock()

    def once(self, key: str, message: str) -> None:
        with self._lock:
            if key not in self._seen:
                self._seen.add(key)
                self._pending.append(message)

    @property
    def pending(self) -> bool:
        """Whether drain() has anything; without the lock, as a cheap per-tick check."""
        return bool(self._pending)

    def drain(self) -> list[str]:
        with self._lock:
            pending, self._pending = self._pending, []
        return pending


DIRECT_FAILURES_MAX = 3  # a GPU whose direct reads keep failing stays on the careful path
# The fields of a tick's read; "memory_v2" is left out: without it the tick reads v1.
_TICK_FIELDS = frozenset(
    (
        "utilization",
        "memory",
        "power",
        "power_limit",
        "temperature",
        "sm_clock",
        "mem_clock",
        "throttle_reasons",
        "processes",
    )
)


class _Gpu:
    """What the NVML sampler keeps per GPU between ticks."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.handle: Any = None
        self.uuid: str | None = None
        self.name: str | None = None
        self.lost: str | None = None  # the NVML message once the GPU fell off the bus
        self.unsupported: set[str] = set()
        self.counters: dict[int, tuple[float, float]] = {}  # field id -> (value, seconds)
        self.rates: dict[int, float] = {}  # field id -> the last rate computed
        self.counter_fields: list[Any] | None = None  # None: not probed yet
        # PCIe TX, PCIe RX, NVLink TX, NVLink RX in KiB/s, written by the link-rates thread.
        self.link_rates: tuple[float | None, ...] = (None, None, None, None)
        # The memory query's arguments once a careful read found every field answering;
        # None: read carefully (see NvmlSampler._read).
        self.direct_memory_args: tuple[Any, ...] | None = None
        self.direct_failures = 0  # after DIRECT_FAILURES_MAX, always read carefully
        # The slowly moving fields as the tick writes them, and when they are next read.
        self.slow: tuple[Any, ...] | None = None
        self.slow_due = 0.0
        # The ctypes buffers the raw utilisation and power calls write into (NvmlSampler.open).
        self.raw: tuple[Any, ...] | None = None
        # Utilisation (GPU, memory) and power as the last tick read them.
        self.fast: tuple[float | None, ...] = (None, None, None)
        # This GPU's wire entry with "%r" slots for the fast fields (see _entry_template),
        # and the slow fields and link rates it was built from: rebuilt when either changes.
        self.template: str | None = None
        self.template_of: tuple[Any, Any] | None = None
        # The same for this GPU's state entry (the nvidia-smi-rows stream's state lines).
        self.state = ""
        self.state_of: tuple[Any, Any] | None = None


class NvmlSampler:
    """Reads every GPU through pynvml. Every query is total: unsupported gives None, never raises."""

    source = "nvml"

    def __init__(
        self, nvml: Any, notices: NoticeLog, pcie_interval_s: float = DEFAULT_PCIE_INTERVAL_S
    ) -> None:
        self.nvml = nvml
        self.notices = notices
        self.pcie_interval_s = pcie_interval_s
        self.gpus: list[_Gpu] = []
        self.driver: str | None = None
        self.nvml_version: str | None = None
        self.cuda: str | None = None
        self._nvml_error = getattr(nvml, "NVMLError", None) or Exception
        self._stop = threading.Event()
        self._links_thread: threading.Thread | None = None
        self._links_lock = threading.Lock()
        self.first_rates = threading.Event()  # set once every GPU's link rates had a pass
        # When read_links_if_due next reads the links (monotonic s); None: not its job (the
        # thread reads them, or nothing is left to read).
        self._links_due: float | None = 0.0
        self._memory_v2 = getattr(nvml, "nvmlMemory_v2", None)
        self._raw_fast_calls: tuple[Any, Any] | None = None  # set by open()
        # Drivers and bindings before the rename have only the "throttle reasons" name.
        self._reasons_function = (
            "nvmlDeviceGetCurrentClocksEventReasons"
            if hasattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons")
            else "nvmlDeviceGetCurrentClocksThrottleReasons"
        )
        # The NVML functions of _direct_fast and _direct_slow; None where pynvml lacks one.
        self._fast_calls = tuple(
            getattr(nvml, name, None)
            for name in ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPowerUsage")
        )
        self._slow_calls = tuple(
            getattr(nvml, name, None)
            for name in (
                "nvmlDeviceGetMemoryInfo",
                "nvmlDeviceGetEnforcedPowerLimit",
                "nvmlDeviceGetTemperature",
                "nvmlDeviceGetClockInfo",
                self._reasons_function,
                "nvmlDeviceGetComputeRunningProcesses",
            )
        )
        # The links thread's own CPU time, for --report-cpu: passes done and seconds spent.
        self.link_passes = 0
        self.link_cpu_s = 0.0
        self.link_gpu_reads = 0

    # -- start and stop --

    def open(self, host: str, links_thread: bool = True) -> None:
        """Start NVML and find the GPUs. With `links_thread`, the PCIe/NVLink reads start
        on their own thread (start_links_thread); without, the caller either starts it later
        or reads the links in its own wake-ups (read_links_if_due)."""
        try:
            self.nvml.nvmlInit()
        except Exception as exc:
            code = getattr(exc, "value", None)
            absent = code in (NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_DRIVER_NOT_LOADED)
            raise (AgentAbsent if absent else AgentFatal)(self._init_failure(host, exc)) from None
        self.driver = self._system("driver", "nvmlSystemGetDriverVersion")
        self.nvml_version = self._system("nvml", "nvmlSystemGetNVMLVersion")
        cuda = self._system_raw("nvmlSystemGetCudaDriverVersion_v2")
        if cuda is None:
            cuda = self._system_raw("nvmlSystemGetCudaDriverVersion")
        if isinstance(cuda, int) and cuda > 0:
            self.cuda = f"{cuda // 1000}.{(cuda % 1000) // 10}"
        try:
            count = int(self.nvml.nvmlDeviceGetCount())
        except Exception as exc:
            raise AgentFatal(f"NVML cannot count the GPUs on host {host}: {exc}") from None
        if count <= 0:
            driver = self.driver or "unknown"
            raise AgentAbsent(
                f"no NVIDIA GPU on host {host}: NVML found 0 devices (driver {driver})"
            )
        for index in range(count):
            gpu = _Gpu(index)
            try:
                gpu.handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
            except Exception as exc:
                self._mark_lost(gpu, exc)
                self.gpus.append(gpu)
                continue
            try:
                uuid = self._query(gpu, "uuid", "nvmlDeviceGetUUID", gpu.handle)
                name = self._query(gpu, "name", "nvmlDeviceGetName", gpu.handle)
            except GpuLost as exc:
                self._mark_lost(gpu, exc)
            else:
                gpu.uuid = None if uuid is None else _text(uuid)
                gpu.name = None if name is None else _text(name)
            self.gpus.append(gpu)
        self._raw_fast_calls = self._raw_functions()
        if self._raw_fast_calls is not None:
            for gpu in self.gpus:
                util, power = _Utilization(), ctypes.c_uint()
                gpu.raw = (util, ctypes.byref(util), power, ctypes.byref(power))
        if links_thread:
            self.start_links_thread()

    def start_links_thread(self) -> None:
        """PCIe/NVLink reads on a thread of their own, for an agent that ticks itself: a pass
        costs ~1 ms of CPU on one H200 and ~28 ms on 8 with NVLink, and the ticks must not
        wait for it. The nvidia-smi-rows stream has no ticks of its own to delay and reads the
        links in its wake-ups instead (read_links_if_due): one wake-up, not two."""
        if self._links_thread is None:
            self._links_due = None  # the thread reads them from now on
            self._links_thread = threading.Thread(
                target=self._links_loop, name="links", daemon=True
            )
            self._links_thread.start()

    def _raw_functions(self) -> tuple[Any, Any] | None:
        """The C functions behind the two every-tick reads, called straight through ctypes:
        pynvml's wrappers build a struct per call and read its fields through a Python
        __getattribute__, 29-42 us more CPU per tick on an H200 (docs/gpu-agent.md). None
        where this pynvml has no function lookup: the wrappers are used."""
        lookup = getattr(self.nvml, "_nvmlGetFunctionPointer", None)
        if lookup is None:
            return None
        try:
            return lookup("nvmlDeviceGetUtilizationRates"), lookup("nvmlDeviceGetPowerUsage")
        except Exception:
            return None

    def close(self) -> None:
        self._stop.set()
        if self._links_thread is not None:
            self._links_thread.join(timeout=2.0)
        with contextlib.suppress(Exception):  # shutting down: nothing useful to report
            self.nvml.nvmlShutdown()

    def _init_failure(self, host: str, exc: Exception) -> str:
        code = getattr(exc, "value", None)
        if code == NVML_ERROR_LIBRARY_NOT_FOUND:
            return f"no NVIDIA driver on host {host}: {exc} (libnvidia-ml.so.1 is not installed)"
        if code == NVML_ERROR_DRIVER_NOT_LOADED:
            return (
                f"no NVIDIA driver on host {host}: {exc} (the nvidia kernel module is not loaded)"
            )
        return f"NVIDIA driver unusable on host {host}: NVML failed to start: {exc}"

    # -- the one total wrapper --

    def _query(self, gpu: _Gpu, field: str, function: str, *args: Any, quiet: bool = False) -> Any:
        """Call one NVML function for one GPU: its value, or None when it cannot answer.

        A GPU that is lost raises GpuLost; everything else is caught here, and a field that
        is unsupported is noted once and never asked again for that GPU.
        """
        if field in gpu.unsupported:
            return None
        call = getattr(self.nvml, function, None)
        if call is None:
            gpu.unsupported.add(field)
            self.notices.once(
                "missing:" + function,
                f"{field}: not available in this pynvml ({function} is missing); reported as null",
            )
            return None
        try:
            return call(*args)
        except self._nvml_error as exc:
            code = getattr(exc, "value", None)
            if code == NVML_ERROR_GPU_IS_LOST:
                raise GpuLost(str(exc)) from None
            if code in PERMANENT_NVML_ERRORS:
                gpu.unsupported.add(field)
                if quiet:
                    return None
                self.notices.once(
                    "unsupported:" + field,
                    f"{field}: not supported on GPU {gpu.index} ({function}: {exc}); "
                    "reported as null",
                )
            else:
                self.notices.once(
                    f"failed:{field}:{code}",
                    f"{field}: {function} failed on GPU {gpu.index}: {exc}; reported as null",
                )
            return None
        except Exception as exc:
            self.notices.once(
                "broken:" + field,
                f"{field}: {function} raised {type(exc).__name__}: {exc}; reported as null",
            )
            return None

    def _system_raw(self, function: str) -> Any:
        call = getattr(self.nvml, function, None)
        if call is None:
            return None
        try:
            return call()
        except Exception:
            return None

    def _system(self, label: str, function: str) -> str | None:
        value = self._system_raw(function)
        return None if value is None else _text(value)

    def _mark_lost(self, gpu: _Gpu, exc: Exception) -> None:
        gpu.lost = str(exc) or "GPU is lost"
        self.notices.once(
            f"lost:{gpu.index}",
            f"GPU {gpu.index} ({gpu.uuid or gpu.name or 'uuid unknown'}) is lost: {gpu.lost}; "
            "it is reported with error=gpu_is_lost, the others stream on",
        )

    # -- counters: NVLink and PCIe bytes through one field-values call --

    def _read_counters(self, gpu: _Gpu) -> dict[int, float]:
        """Rates (KiB/s) from cumulative counters since the previous call."""
        if "pcie_counters" in gpu.unsupported and "nvlink" in gpu.unsupported:
            return {}
        if gpu.counter_fields is None:
            if self._nvlink_active(gpu) is False:
                gpu.unsupported.add("nvlink")
                self.notices.once(
                    "inactive:nvlink",
                    f"nvlink: no NVLink of GPU {gpu.index} is active; reported as null",
                )
                gpu.counter_fields = [FI_PCIE_TX_BYTES, FI_PCIE_RX_BYTES]
            else:  # active links, or NVML cannot say: the counters themselves will tell
                gpu.counter_fields = [
                    (FI_NVLINK_DATA_TX_KIB, UINT_MAX),
                    (FI_NVLINK_DATA_RX_KIB, UINT_MAX),
                    FI_PCIE_TX_BYTES,
                    FI_PCIE_RX_BYTES,
                ]
        if not gpu.counter_fields:
            return {}
        values = self._query(
            gpu, "field_values", "nvmlDeviceGetFieldValues", gpu.handle, gpu.counter_fields
        )
        if values is None:
            gpu.unsupported.update(("pcie_counters", "nvlink"))
            return {}
        now = time.monotonic()
        rates: dict[int, float] = {}
        keep: list[Any] = []
        for requested, value in zip(gpu.counter_fields, values):  # noqa: B905 (3.8)
            field_id = requested[0] if isinstance(requested, tuple) else requested
            if getattr(value, "nvmlReturn", NVML_SUCCESS) != NVML_SUCCESS:
                continue
            keep.append(requested)
            number = _field_number(value)
            if number is None:
                continue
            stamp_us = getattr(value, "timestamp", 0) or 0
            seconds = stamp_us / 1e6 if stamp_us > 0 else now
            previous = gpu.counters.get(field_id)
            gpu.counters[field_id] = (number, seconds)
            if previous is not None and seconds > previous[1] and number >= previous[0]:
                rate = (number - previous[0]) / (seconds - previous[1])
                if field_id in (FI_PCIE_TX_BYTES, FI_PCIE_RX_BYTES):
                    rate /= 1024.0  # bytes -> KiB
                gpu.rates[field_id] = rate
            elif previous is not None and seconds <= previous[1]:
                gpu.counters[field_id] = previous  # NVML has not refreshed it: keep the last rate
            else:
                gpu.rates.pop(field_id, None)  # first read, or the counter went back (reset)
            if field_id in gpu.rates:
                rates[field_id] = gpu.rates[field_id]
        if len(keep) != len(gpu.counter_fields):
            kept_ids = {r[0] if isinstance(r, tuple) else r for r in keep}
            if FI_PCIE_TX_BYTES not in kept_ids:
                gpu.unsupported.add("pcie_counters")
            if FI_NVLINK_DATA_TX_KIB not in kept_ids and "nvlink" not in gpu.unsupported:
                gpu.unsupported.add("nvlink")
                self.notices.once(
                    "unsupported:nvlink",
                    f"nvlink: no NVLink throughput counters on GPU {gpu.index}; reported as null",
                )
            gpu.counter_fields = keep
        return rates

    def _nvlink_active(self, gpu: _Gpu) -> bool | None:
        """Whether any NVLink of this GPU is up; None when NVML cannot say.

        The NVLink byte counters answer even with every link down (zeros), and on an H200
        the two cost ~2.6 ms of CPU a read: asking the link states once spares that.
        """
        get_state = getattr(self.nvml, "nvmlDeviceGetNvLinkState", None)
        if get_state is None:
            return None
        answered = False
        for link in range(int(getattr(self.nvml, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                if get_state(gpu.handle, link):
                    return True
                answered = True
            except self._nvml_error as exc:
                if getattr(exc, "value", None) == NVML_ERROR_GPU_IS_LOST:
                    raise GpuLost(str(exc)) from None
                # A link number this GPU does not have, or no NVLink at all: next one.
            except Exception:
                return None
        return False if answered else None

    # -- PCIe and NVLink rates, on their own thread and cadence --
    # Reading the byte counters costs 2.5-3.6 ms of CPU per GPU on an H200 with NVLink up
    # (0.8 ms for PCIe alone; measured, docs/gpu-agent.md), and the blocking PCIe query
    # ~20 ms of wall per call: neither belongs in a 4-10 Hz tick.

    def _link_rates(self, gpu: _Gpu) -> tuple[float | None, ...]:
        rates = self._read_counters(gpu)
        if "pcie_counters" in gpu.unsupported:
            tx = self._query(
                gpu, "pcie_tx", "nvmlDeviceGetPcieThroughput", gpu.handle, NVML_PCIE_UTIL_TX_BYTES
            )
            rx = self._query(
                gpu, "pcie_rx", "nvmlDeviceGetPcieThroughput", gpu.handle, NVML_PCIE_UTIL_RX_BYTES
            )
            pcie = (_number(tx), _number(rx))
        else:
            pcie = (rates.get(FI_PCIE_TX_BYTES), rates.get(FI_PCIE_RX_BYTES))
        return (*pcie, rates.get(FI_NVLINK_DATA_TX_KIB), rates.get(FI_NVLINK_DATA_RX_KIB))

    def _links_loop(self) -> None:
        while not self._stop.is_set():
            wait = self.links_pass()
            if wait is None:
                return
            self._stop.wait(wait)

    def read_links_if_due(self, now: float) -> None:
        """A links pass in the caller's thread when one is due (the nvidia-smi-rows stream's
        wake-ups): the first at once, the second at the next wake-up (two reads make a
        rate), then every --pcie-interval or the CPU budget's spacing, whichever is longer,
        at the first wake-up after."""
        if self._links_due is None or now < self._links_due:
            return
        wait = self.links_pass()
        self._links_due = None if wait is None else now + wait

    def links_pass(self) -> float | None:
        """Read every GPU's link counters once: the seconds until the next pass is due, or
        None once stopped or when no GPU has anything left to read."""
        started_cpu = time.thread_time()
        for gpu in self.gpus:
            if self._stop.is_set():
                return None
            if gpu.lost is not None:
                continue
            try:
                rates = self._link_rates(gpu)
            except GpuLost:
                continue  # the tick reports it
            with self._links_lock:
                gpu.link_rates = rates
                self.link_gpu_reads += 1
        pass_cpu = time.thread_time() - started_cpu
        with self._links_lock:
            self.link_cpu_s += pass_cpu
            self.link_passes += 1
            passes = self.link_passes
        if passes == 2:
            self.first_rates.set()  # counters need two reads for a rate
        nothing_left = all(
            g.lost is not None or {"pcie_counters", "nvlink", "pcie_tx", "pcie_rx"} <= g.unsupported
            for g in self.gpus
        )
        if nothing_left:
            self.first_rates.set()
            return None
        # The second pass comes soon, so that rates show up early.
        return min(self.pcie_interval_s, 0.5) if passes == 1 else self._link_wait(pass_cpu)

    def _link_wait(self, pass_cpu_s: float) -> float:
        """--pcie-interval, or longer where a pass costs more than LINK_CPU_SHARE of a core."""
        budgeted = pass_cpu_s / LINK_CPU_SHARE
        if budgeted <= self.pcie_interval_s:
            return self.pcie_interval_s
        self.notices.once(
            "links:spaced",
            f"pcie and nvlink rates: one read of every GPU's counters costs "
            f"{1000 * pass_cpu_s:.1f} ms of CPU here, so they are read every "
            f"{budgeted:.1f} s or so instead of every {self.pcie_interval_s:g} s "
            f"(at most {100 * LINK_CPU_SHARE:g}% of a core)",
        )
        return budgeted

    # -- one tick --

    def sample(self) -> list[GpuReading]:
        readings = []
        for gpu in self.gpus:
            if gpu.lost is None:
                try:
                    readings.append(self._read(gpu))
                    continue
                except GpuLost as exc:
                    self._mark_lost(gpu, exc)
            readings.append(self._lost_reading(gpu))
        return readings

    def sample_line(self, wall: float) -> str:
        """One tick's wire line, the same text as tick_line(wall, self.sample()) but without
        a GpuReading, a dict or a JSON encoding per GPU: each GPU's entry is a template of its
        slowly changing fields with the three fast ones formatted in (docs/gpu-agent.md)."""
        self.read_fields()
        return self.encode(wall)

    def read_fields(self) -> None:
        """Read every GPU's tick fields into its _Gpu (sample_line's first half)."""
        for gpu in self.gpus:
            if gpu.lost is None:
                try:
                    self._read_fields(gpu)
                except GpuLost as exc:
                    self._mark_lost(gpu, exc)

    def poke(self) -> None:
        """Make every GPU's slow fields due now (SIGUSR1: a relaunch waits for the old
        server's GPU memory to be released and asks for a fresh reading)."""
        for gpu in self.gpus:
            gpu.slow_due = 0.0

    def read_slow_fields(self) -> None:
        """Every GPU's slowly moving fields, now (the nvidia-smi-rows stream's state)."""
        for gpu in self.gpus:
            if gpu.lost is None:
                try:
                    self._read_fields(gpu, with_fast=False)
                except GpuLost as exc:
                    self._mark_lost(gpu, exc)

    def state_entries(self) -> list[str]:
        """Each GPU's state entry (its reading, utilisation and power null) as JSON text.

        An entry is encoded again only when its slow fields or link rates changed (a re-read
        that found them unchanged keeps the old tuple): building the reading and its JSON
        cost 0.07 ms of a 0.45 ms wake-up on an H200 (docs/gpu-agent.md)."""
        entries = []
        for gpu in self.gpus:
            if gpu.lost is not None:
                entries.append(json.dumps(vars(self._lost_reading(gpu))))
                continue
            links = gpu.link_rates
            made_of = gpu.state_of
            if made_of is None or made_of[0] is not gpu.slow or made_of[1] is not links:
                gpu.state = json.dumps(vars(self._reading(gpu, links)))
                gpu.state_of = (gpu.slow, links)
            entries.append(gpu.state)
        return entries

    def encode(self, wall: float) -> str:
        """The tick line of the fields read_fields read (sample_line's second half)."""
        entries = [
            self._entry(gpu) if gpu.lost is None else json.dumps(vars(self._lost_reading(gpu)))
            for gpu in self.gpus
        ]
        joined = ", ".join(entries)
        return f'{{"type": "tick", "wall": {round(wall, 3)!r}, "gpus": [{joined}]}}'

    def _entry(self, gpu: _Gpu) -> str:
        links = gpu.link_rates  # one attribute read: the links thread swaps whole tuples
        if (
            gpu.template_of is None
            or gpu.template_of[0] is not gpu.slow
            or (gpu.template_of[1] is not links)
        ):
            gpu.template = _entry_template(self._reading(gpu, links))
            gpu.template_of = (gpu.slow, links)
        fast = gpu.fast
        if None in fast:
            return gpu.template % tuple(_JsonNull(v) for v in fast)
        return gpu.template % fast  # type: ignore[operator]

    @staticmethod
    def _lost_reading(gpu: _Gpu) -> GpuReading:
        return GpuReading(index=gpu.index, uuid=gpu.uuid, name=gpu.name, error="gpu_is_lost")

    def _read(self, gpu: _Gpu) -> GpuReading:
        """One GPU's tick as a reading (see _read_fields)."""
        self._read_fields(gpu)
        return self._reading(gpu, gpu.link_rates)

    def _reading(self, gpu: _Gpu, links: tuple[float | None, ...]) -> GpuReading:
        pcie_tx, pcie_rx, nvlink_tx, nvlink_rx = links
        slow = gpu.slow
        assert slow is not None
        mem_used, mem_total, limit, temp, sm_clock, mem_clock, reasons, procs = slow
        fast = gpu.fast
        return GpuReading(
            index=gpu.index,
            uuid=gpu.uuid,
            name=gpu.name,
            util_gpu=fast[0],
            util_mem=fast[1],
            mem_used_mb=mem_used,
            mem_total_mb=mem_total,
            power_w=fast[2],
            power_limit_w=limit,
            temp_c=temp,
            sm_clock_mhz=sm_clock,
            mem_clock_mhz=mem_clock,
            pcie_tx_kbs=None if pcie_tx is None else round(pcie_tx, 1),
            pcie_rx_kbs=None if pcie_rx is None else round(pcie_rx, 1),
            nvlink_tx_kbs=None if nvlink_tx is None else round(nvlink_tx, 1),
            nvlink_rx_kbs=None if nvlink_rx is None else round(nvlink_rx, 1),
            throttle_reasons=reasons,
            processes=procs,
        )

    def _read_fields(self, gpu: _Gpu, with_fast: bool = True) -> None:
        """One GPU's tick: utilisation and power every tick, the slowly moving fields
        (memory, temperature, clocks, power limit, clock reasons, processes) every
        SLOW_FIELDS_INTERVAL_S, each GPU at its own moment so that their reads spread over
        the ticks. As a ticking agent sees them, NVML queries on an H200 cost 5-100 us of CPU
        each (docs/gpu-agent.md): all nine for 8 GPUs at 4 Hz would cost more than the
        agent's whole budget.

        Direct calls where every field answered before; any exception sends the tick down
        the careful path (one wrapper per query), which sorts out what failed. Without
        `with_fast` (nvidia-smi's loop reads utilisation and power), the slow fields only,
        whatever their due time.
        """
        now = time.monotonic()
        slow_due = gpu.slow is None or now >= gpu.slow_due or not with_fast
        fast: tuple[float | None, ...] | None = gpu.fast if not with_fast else None
        slow = gpu.slow
        done = False
        if gpu.direct_memory_args is not None:
            try:
                if with_fast:
                    fast = self._raw_fast(gpu) if gpu.raw is not None else None
                    if fast is None:
                        fast = self._direct_fast(gpu.handle)
                if slow_due:
                    slow = self._direct_slow(gpu.handle, gpu.direct_memory_args)
                done = True
            except Exception:
                gpu.direct_memory_args = None
                gpu.direct_failures += 1
        if not done:
            if with_fast:
                fast = self._careful_fast(gpu)
            if slow_due:
                slow = self._careful_slow(gpu)
            if (
                not gpu.unsupported & _TICK_FIELDS
                and None not in self._fast_calls
                and None not in self._slow_calls
                and gpu.direct_failures < DIRECT_FAILURES_MAX
            ):
                v2 = self._memory_v2 is not None and "memory_v2" not in gpu.unsupported
                gpu.direct_memory_args = (gpu.handle, self._memory_v2) if v2 else (gpu.handle,)
        if slow_due:
            if gpu.slow is None:  # the first read: stagger the GPUs over one interval
                spread = gpu.index / max(1, len(self.gpus))
                gpu.slow_due = now + SLOW_FIELDS_INTERVAL_S * (1.0 + spread)
            else:
                # Keep this GPU's place in the stagger. After a stall (a tick late by more
                # than an interval), skip the places less than half an interval away: moving
                # the due time to `now` instead read the slow fields again on the next tick,
                # and for every GPU at once from then on.
                due = gpu.slow_due + SLOW_FIELDS_INTERVAL_S
                behind = now + SLOW_FIELDS_INTERVAL_S / 2 - due
                if behind >= 0:
                    due += (behind // SLOW_FIELDS_INTERVAL_S + 1) * SLOW_FIELDS_INTERVAL_S
                gpu.slow_due = due
            # An unchanged re-read keeps the old tuple, so that the entry's template stays.
            if slow != gpu.slow:
                gpu.slow = slow
        gpu.fast = fast  # type: ignore[assignment]

    def _raw_fast(self, gpu: _Gpu) -> tuple[float | None, ...]:
        """Utilisation and power through the C functions; an NVML error raises, which sends
        the tick down the careful path."""
        utilization, power_usage = self._raw_fast_calls  # type: ignore[misc]
        util, util_ref, power, power_ref = gpu.raw  # type: ignore[misc]
        if utilization(gpu.handle, util_ref) or power_usage(gpu.handle, power_ref):
            raise RuntimeError("a raw NVML read failed")
        return (float(util.gpu), float(util.memory), round(power.value / 1000.0, 1))

    def _direct_fast(self, h: Any) -> tuple[float | None, ...]:
        utilization, power_usage = self._fast_calls
        util = utilization(h)
        return (float(util.gpu), float(util.memory), round(power_usage(h) / 1000.0, 1))

    def _direct_slow(self, h: Any, memory_args: tuple[Any, ...]) -> tuple[Any, ...]:
        memory_info, power_limit, temperature, clock, reasons, apps = self._slow_calls
        memory = memory_info(*memory_args)
        return (
            round(memory.used / MIB, 1),
            round(memory.total / MIB, 1),
            round(power_limit(h) / 1000.0, 1),
            float(temperature(h, NVML_TEMPERATURE_GPU)),
            float(clock(h, NVML_CLOCK_SM)),
            float(clock(h, NVML_CLOCK_MEM)),
            throttle_reason_names(int(reasons(h))),
            _processes(apps(h)),
        )

    def _careful_fast(self, gpu: _Gpu) -> tuple[float | None, ...]:
        h = gpu.handle
        util = self._query(gpu, "utilization", "nvmlDeviceGetUtilizationRates", h)
        power = self._query(gpu, "power", "nvmlDeviceGetPowerUsage", h)
        return (
            _number(getattr(util, "gpu", None)),
            _number(getattr(util, "memory", None)),
            _scaled(power, 1000.0),
        )

    def _careful_slow(self, gpu: _Gpu) -> tuple[Any, ...]:
        h = gpu.handle
        q = self._query
        memory = None
        if self._memory_v2 is not None:  # v2 leaves out driver-reserved memory, as nvidia-smi
            memory = q(gpu, "memory_v2", "nvmlDeviceGetMemoryInfo", h, self._memory_v2, quiet=True)
        if memory is None:
            memory = q(gpu, "memory", "nvmlDeviceGetMemoryInfo", h)
        limit = q(gpu, "power_limit", "nvmlDeviceGetEnforcedPowerLimit", h)
        temp = q(gpu, "temperature", "nvmlDeviceGetTemperature", h, NVML_TEMPERATURE_GPU)
        sm_clock = q(gpu, "sm_clock", "nvmlDeviceGetClockInfo", h, NVML_CLOCK_SM)
        mem_clock = q(gpu, "mem_clock", "nvmlDeviceGetClockInfo", h, NVML_CLOCK_MEM)
        reasons = q(gpu, "throttle_reasons", self._reasons_function, h)
        procs = q(gpu, "processes", "nvmlDeviceGetComputeRunningProcesses", h)
        return (
            _scaled(getattr(memory, "used", None), MIB),
            _scaled(getattr(memory, "total", None), MIB),
            _scaled(limit, 1000.0),
            _number(temp),
            _number(sm_clock),
            _number(mem_clock),
            None if reasons is None else throttle_reason_names(int(reasons)),
            _processes(procs),
        )


_SLOT = "\x01fast%d"  # placeholders for the fast fields while a template is built


def _entry_template(reading: GpuReading) -> str:
    """A GPU's wire entry (json.dumps of its reading) with "%r" where the fast fields go.

    A float's repr is its JSON text (json.dumps writes floats with float.__repr__), so the
    formatted entry is byte for byte what json.dumps(vars(reading)) writes."""
    values = dict(vars(reading))
    for slot, name in enumerate(("util_gpu", "util_mem", "power_w")):
        values[name] = _SLOT % slot
    text = json.dumps(values).replace("%", "%%")
    for slot in range(3):
        text = text.replace(json.dumps(_SLOT % slot), "%r")
    return text


class _JsonNull:
    """Formats as its value's JSON text under "%r": null for None."""

    __slots__ = ("value",)

    def __init__(self, value: float | None) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "null" if self.value is None else repr(self.value)


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _scaled(value: Any, divisor: float) -> float | None:
    number = _number(value)
    return None if number is None else round(number / divisor, 1)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _field_number(value: Any) -> float | None:
    """The number in an nvmlFieldValue_t, whatever its value type."""
    kind = getattr(value, "valueType", 3)
    union = getattr(value, "value", None)
    attribute = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}.get(
        kind, "ullVal"
    )
    return _number(getattr(union, attribute, None))


def _processes(procs: Any) -> tuple[tuple[int, float | None], ...]:
    if not procs:
        return ()
    out = []
    for proc in procs:
        pid = getattr(proc, "pid", None)
        if pid is None:
            continue
        used = getattr(proc, "usedGpuMemory", None)
        if used is not None and used >= 2**63:  # NVML's "not available" in old bindings
            used = None
        out.append((int(pid), _scaled(used, MIB)))
    return tuple(out)


class _Wake(Exception):
    """Raised by the stop signals' handler to end the ticker's sleep at once."""


class NvmlTicker:
    """Paces NVML samples on a monotonic schedule; a late tick never causes a burst."""

    def __init__(self, sampler: NvmlSampler, rate_hz: float, measure: bool = False) -> None:
        self.sampler = sampler
        self.period = 1.0 / rate_hz
        self._next: float | None = None
        self.measure = measure  # --report-cpu: time the reads (two clock calls per tick)
        self.sleeping = False  # in _wait's sleep, where a stop signal may raise _Wake
        # Set by the SIGCHLD handler of the nvidia-smi-rows stream: its loop may have ended,
        # so _wait returns (False, with stop unset) for the caller to look now.
        self.interrupted = False
        # Set by the SIGUSR1 handler of the nvidia-smi-rows stream: read the slow fields now.
        self.poked = False
        self.sample_cpu_s = 0.0  # the main thread's CPU in the NVML reads, for --report-cpu
        self.encode_cpu_s = 0.0  # and in the tick line's encoding

    def _wait(self, stop: threading.Event) -> bool:
        """Sleep until the next tick; False once stopped.

        In the main thread this is a plain time.sleep, which the stop signals cut short
        (run_agent's handler raises _Wake while `sleeping`): Event.wait's timed wait cost
        15-25 us more CPU per tick (docs/gpu-agent.md). Elsewhere, no handler can wake a
        sleep, so the stop event is waited on."""
        if self._next is None:
            self._next = time.monotonic()
        delay = self._next - time.monotonic()
        if delay <= 0:
            return not stop.is_set()
        if threading.current_thread() is not threading.main_thread():
            return not stop.wait(delay)
        try:
            self.sleeping = True
            if stop.is_set() or self.interrupted or self.poked:  # a signal before `sleeping`
                return False
            time.sleep(delay)
        except _Wake:
            return False
        finally:
            self.sleeping = False
        return not stop.is_set()

    def _advance(self) -> None:
        self._next += self.period  # type: ignore[operator]
        now = time.monotonic()
        if self._next < now:
            self._next = now

    def next_tick(self, stop: threading.Event) -> tuple[float, list[GpuReading]] | None:
        if not self._wait(stop):
            return None
        wall = time.time()
        started_cpu = time.thread_time()
        readings = self.sampler.sample()
        self.sample_cpu_s += time.thread_time() - started_cpu
        self._advance()
        return wall, readings

    def next_line(self, stop: threading.Event) -> str | None:
        """The next tick's wire line (NvmlSampler.sample_line), None once stopped."""
        if not self._wait(stop):
            return None
        if self.measure:
            wall = time.time()
            started_cpu = time.thread_time()
            self.sampler.read_fields()
            read_cpu = time.thread_time()
            line = self.sampler.encode(wall)
            self.encode_cpu_s += time.thread_time() - read_cpu
            self.sample_cpu_s += read_cpu - started_cpu
        else:
            line = self.sampler.sample_line(time.time())
        self._advance()
        return line


# --- the nvidia-smi fallback: one long-lived `-lms` process, the same schema -----------------

SMI_COLUMNS = (
    "index",
    "uuid",
    "name",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.total",
    "power.draw",
    "power.limit",
    "temperature.gpu",
    "clocks.sm",
    "clocks.mem",
    "clocks_throttle_reasons.active",
)
# Newer drivers call the throttle reasons "clock event reasons"; either name may be refused.
SMI_REASON_COLUMNS = ("clocks_throttle_reasons.active", "clocks_event_reasons.active")
SMI_FORMAT = "--format=csv,noheader,nounits"
SMI_COMPUTE_APPS = "--query-compute-apps=gpu_uuid,pid,used_memory"
_SMI_FLOAT_FIELDS = {
    "utilization.gpu": "util_gpu",
    "utilization.memory": "util_mem",
    "memory.used": "mem_used_mb",
    "memory.total": "mem_total_mb",
    "power.draw": "power_w",
    "power.limit": "power_limit_w",
    "temperature.gpu": "temp_c",
    "clocks.sm": "sm_clock_mhz",
    "clocks.mem": "mem_clock_mhz",
}


def _smi_cells(line: str) -> list[str]:
    return [cell.strip() for cell in next(csv.reader([line]))]


def _smi_value(cell: str) -> str | None:
    """nvidia-smi writes '[N/A]', '[Not Supported]' or 'N/A' for what it cannot read."""
    if not cell or cell.startswith("[") or cell in ("N/A", "Not Supported"):
        return None
    return cell


def reading_from_smi_csv(line: str, columns: tuple[str, ...] = SMI_COLUMNS) -> GpuReading:
    """One `nvidia-smi --query-gpu` CSV line (noheader, nounits) as a reading.

    Raises ValueError on a line that is not such a row (nvidia-smi's own messages, say).
    """
    cells = _smi_cells(line)
    if len(cells) != len(columns):
        raise ValueError(f"expected {len(columns)} columns, got {len(cells)}")
    values: dict[str, Any] = {}
    for column, cell in zip(columns, cells):  # noqa: B905 (3.8)
        value = _smi_value(cell)
        if column == "index":
            if value is None:
                raise ValueError("no GPU index")
            values["index"] = int(value)
        elif column in ("uuid", "name"):
            values[column] = value
        elif column in SMI_REASON_COLUMNS:
            values["throttle_reasons"] = (
                None if value is None else throttle_reason_names(int(value, 16))
            )
        elif column in _SMI_FLOAT_FIELDS:
            values[_SMI_FLOAT_FIELDS[column]] = None if value is None else float(value)
    return GpuReading(**values)


def processes_from_smi_csv(text: str) -> dict[str, tuple[tuple[int, float | None], ...]]:
    """`nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory` output, by GPU uuid."""
    found: dict[str, list[tuple[int, float | None]]] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = _smi_cells(line)
        if len(cells) != 3 or _smi_value(cells[0]) is None:
            continue
        try:
            pid = int(cells[1])
        except ValueError:
            continue
        used = _smi_value(cells[2])
        try:
            used_mb = None if used is None else float(used)
        except ValueError:
            used_mb = None
        found.setdefault(cells[0], []).append((pid, used_mb))
    return {uuid: tuple(procs) for uuid, procs in found.items()}


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return "no output"


class SmiSampler:
    """Reads every GPU from one `nvidia-smi --query-gpu ... -lms N` process, for hosts without
    pynvml. Compute processes come from a separate nvidia-smi call every few seconds."""

    source = "nvidia-smi"

    def __init__(
        self,
        notices: NoticeLog,
        rate_hz: float,
        processes_interval_s: float = DEFAULT_PROCESSES_INTERVAL_S,
        executable: str = "nvidia-smi",
    ) -> None:
        self.notices = notices
        self.period = 1.0 / rate_hz
        self.processes_interval_s = processes_interval_s
        self.executable = executable
        self.columns = SMI_COLUMNS
        self.driver: str | None = None
        self.nvml_version: str | None = None
        self.cuda: str | None = None
        self.gpu_count = 0
        self._loop: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue(maxsize=4096)
        self._pending: list[GpuReading] = []
        self._processes: dict[str, tuple[tuple[int, float | None], ...]] = {}
        self._processes_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._last_unparsed = ""

    def _run_once(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.executable, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=SMI_TIMEOUT_S,
            check=False,
        )

    def open(self, host: str) -> None:
        probe = None
        for reason_column in (*SMI_REASON_COLUMNS, None):
            columns = tuple(c for c in SMI_COLUMNS if c not in SMI_REASON_COLUMNS)
            if reason_column is not None:
                columns += (reason_column,)
            try:
                probe = self._run_once(
                    ["--query-gpu=driver_version," + ",".join(columns), SMI_FORMAT]
                )
            except FileNotFoundError:
                raise AgentAbsent(
                    f"no NVIDIA driver on host {host}: python3 ({sys.executable}) has no pynvml module "
                    "(nvidia-ml-py) and nvidia-smi is not on PATH"
                ) from None
            except (OSError, subprocess.SubprocessError) as exc:
                raise AgentFatal(
                    f"no NVIDIA driver on host {host}: nvidia-smi could not run: {exc}"
                ) from None
            if probe.returncode == 0 or "valid field" not in probe.stdout:
                self.columns = columns
                break
        assert probe is not None
        if probe.returncode != 0:
            message = _first_line(probe.stdout)
            if "no devices" in message.lower():
                raise AgentAbsent(f"no NVIDIA GPU on host {host}: nvidia-smi: {message}")
            raise AgentFatal(
                f"no NVIDIA driver on host {host}: nvidia-smi failed "
                f"(exit {probe.returncode}): {message}"
            )
        rows = [line for line in probe.stdout.splitlines() if line.strip()]
        if not rows:
            raise AgentAbsent(f"no NVIDIA GPU on host {host}: nvidia-smi lists no GPUs")
        self.gpu_count = len(rows)
        self.driver = _smi_value(_smi_cells(rows[0])[0])
        if self.columns[-1] not in SMI_REASON_COLUMNS:
            self.notices.once(
                "unsupported:throttle_reasons",
                "throttle_reasons: this nvidia-smi knows no clock reason field; reported as null",
            )
        self.notices.once(
            "smi:counters",
            "pcie and nvlink throughput: not available through nvidia-smi; reported as null",
        )
        self._refresh_processes()
        self._loop = subprocess.Popen(
            [
                self.executable,
                "--query-gpu=" + ",".join(self.columns),
                SMI_FORMAT,
                "-lms",
                str(max(1, round(self.period * 1000))),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            universal_newlines=True,
        )
        for target, name in ((self._read_loop, "smi-reader"), (self._processes_loop, "smi-apps")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def _read_loop(self) -> None:
        loop = self._loop
        assert loop is not None and loop.stdout is not None
        for line in loop.stdout:
            with contextlib.suppress(queue.Full):  # a stalled reader loses old samples: fine
                self._lines.put(line, timeout=1.0)
            if self._stop.is_set():
                break
        self._lines.put(None)

    def _refresh_processes(self) -> None:
        try:
            result = self._run_once([SMI_COMPUTE_APPS, SMI_FORMAT])
        except (OSError, subprocess.SubprocessError) as exc:
            self.notices.once("smi:apps", f"processes: nvidia-smi failed: {exc}")
            return
        if result.returncode != 0:
            self.notices.once(
                "smi:apps", f"processes: nvidia-smi failed: {_first_line(result.stdout)}"
            )
            return
        with self._processes_lock:
            self._processes = processes_from_smi_csv(result.stdout)

    def _processes_loop(self) -> None:
        while not self._stop.wait(self.processes_interval_s):
            self._refresh_processes()

    def next_tick(self, stop: threading.Event) -> tuple[float, list[GpuReading]] | None:
        stall_limit = max(10.0 * self.period, 10.0)
        last_line = time.monotonic()
        while not stop.is_set():
            try:
                line = self._lines.get(timeout=0.2)
            except queue.Empty:
                if time.monotonic() - last_line > stall_limit:
                    raise AgentFatal(
                        f"nvidia-smi stopped writing samples for {stall_limit:.0f} s"
                    ) from None
                continue
            if line is None:
                code = self._loop.wait(timeout=5.0) if self._loop is not None else None
                raise AgentFatal(
                    "nvidia-smi exited (code {}): {}".format(
                        code, self._last_unparsed or "no message"
                    )
                )
            last_line = time.monotonic()
            try:
                reading = reading_from_smi_csv(line, self.columns)
            except ValueError:
                self._last_unparsed = line.strip()
                if line.strip():
                    self.notices.once(
                        "smi:unparsed",
                        f"nvidia-smi wrote a line that is no sample: {line.strip()}",
                    )
                continue
            if any(r.index == reading.index for r in self._pending):
                complete, self._pending = self._pending, [reading]  # a GPU's row went missing
                return time.time(), self._with_processes(complete)
            self._pending.append(reading)
            if len(self._pending) >= self.gpu_count:
                complete, self._pending = self._pending, []
                return time.time(), self._with_processes(complete)
        return None

    def _with_processes(self, readings: list[GpuReading]) -> list[GpuReading]:
        with self._processes_lock:
            processes = self._processes
        out = []
        for reading in readings:
            procs = processes.get(reading.uuid or "", ())
            out.append(_replace_processes(reading, procs))
        return out

    def close(self) -> None:
        self._stop.set()
        loop = self._loop
        if loop is not None and loop.poll() is None:
            loop.terminate()
            try:
                loop.wait(timeout=3.0)
            except subprocess.TimeoutExpired:
                loop.kill()
                loop.wait(timeout=3.0)
        if loop is not None and loop.stdout is not None:
            loop.stdout.close()


def _replace_processes(
    reading: GpuReading, procs: tuple[tuple[int, float | None], ...]
) -> GpuReading:
    values = {name: getattr(reading, name) for name in _READING_FIELDS}
    values["processes"] = procs
    return GpuReading(**values)


# --- nvidia-smi's loop as the tick sampler, writing straight into the agent's stdout -------------

# The columns of a tick row, as nvidia-smi names them and as the header names them.
SMI_TICK_COLUMNS = ("timestamp", "index", "utilization.gpu", "utilization.memory", "power.draw")
TICK_ROW_FIELDS = ("timestamp", "index", "util_gpu", "util_mem", "power_w")
SMI_TIMESTAMP_FORMAT = "%Y/%m/%d %H:%M:%S.%f"  # nvidia-smi's, in UTC under TZ=UTC
SMI_CLOCK_SKEW_MAX_S = 60.0  # a probe row stamped further from time.time(): not trusted
try:
    import select as _select

    PIPE_BUF = int(getattr(_select, "PIPE_BUF", 512))
except ImportError:  # pragma: no cover - every POSIX Python has it
    PIPE_BUF = 512


def smi_timestamp(text: str) -> float:
    """Seconds since the epoch of nvidia-smi's timestamp column written under TZ=UTC."""
    import datetime

    stamp = datetime.datetime.strptime(text.strip(), SMI_TIMESTAMP_FORMAT)
    return stamp.replace(tzinfo=datetime.timezone.utc).timestamp()


class SmiTickRows:
    """`nvidia-smi --query-gpu=timestamp,index,utilization.gpu,utilization.memory,power.draw
    --format=csv,noheader,nounits -lms N` as the per-tick sampler, its stdout the agent's own.

    Measured on an H200 (docs/gpu-agent.md): nvidia-smi's C loop reads and writes a tick for
    ~0.08 ms of CPU where a Python process spends 56-96 us only to wake up, so with it the
    agent itself wakes every SLOW_FIELDS_INTERVAL_S for the other fields and never per tick.
    nvidia-smi writes a row cell by cell, one write(2) each (strace on an H200), and the
    agent whole lines in writes of at most PIPE_BUF, so the agent's lines stay whole but
    may land inside a row; the console's reader puts such a row back together
    (specmon.session.gpu_stream.AgentStream). It runs under TZ=UTC, so its timestamp column is the
    tick's UTC wall time. Its GPUs are named (`--id=0,1,...`): on one H200 the agent's row
    loop cost 0.80-0.88x of the same loop listing every GPU itself, in each of four windows
    (docs/gpu-agent.md, runs 16-17).
    """

    def __init__(self, rate_hz: float, executable: str = "nvidia-smi") -> None:
        self.period_ms = max(1, round(1000.0 / rate_hz))
        self.executable = executable
        self.process: subprocess.Popen[bytes] | None = None
        self._env = dict(os.environ, TZ="UTC")
        self._ids: list[str] = []  # `--id=...`, every GPU by index, once the probe has passed

    def _argv(self, *extra: str) -> list[str]:
        return [self.executable, "--query-gpu=" + ",".join(SMI_TICK_COLUMNS), SMI_FORMAT, *extra]

    def unusable(self, uuids: list[str | None]) -> str | None:
        """Why nvidia-smi's rows cannot stand for NVML's GPUs here, or None when they can:
        one probe row per GPU, in NVML's order (matched by uuid), with readable cells. The
        probe names the GPUs as the loop will, so what it checks is what the loop writes."""
        ids = ["--id=" + ",".join(str(index) for index in range(len(uuids)))] if uuids else []
        try:
            probe = subprocess.run(
                [
                    self.executable,
                    "--query-gpu=uuid," + ",".join(SMI_TICK_COLUMNS),
                    SMI_FORMAT,
                    *ids,
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                timeout=SMI_TIMEOUT_S,
                env=self._env,
                check=False,
            )
        except FileNotFoundError:
            return "nvidia-smi is not on PATH"
        except (OSError, subprocess.SubprocessError) as exc:
            return f"nvidia-smi could not run: {exc}"
        if probe.returncode != 0:
            return f"nvidia-smi failed (exit {probe.returncode}): {_first_line(probe.stdout)}"
        rows = [_smi_cells(line) for line in probe.stdout.splitlines() if line.strip()]
        if len(rows) != len(uuids):
            return f"nvidia-smi lists {len(rows)} GPUs, NVML {len(uuids)}"
        for position, (row, uuid) in enumerate(zip(rows, uuids)):  # noqa: B905 (3.8)
            if len(row) != 1 + len(SMI_TICK_COLUMNS):
                return f"nvidia-smi wrote {len(row)} columns, not {1 + len(SMI_TICK_COLUMNS)}"
            if uuid is None or row[0] != uuid or row[2] != str(position):
                return f"nvidia-smi's GPU {row[2]} ({row[0]}) is not NVML's GPU {position}"
            try:
                skew = abs(smi_timestamp(row[1]) - time.time())
            except ValueError:
                return f"nvidia-smi's timestamp {row[1]!r} is not {SMI_TIMESTAMP_FORMAT}"
            if skew > SMI_CLOCK_SKEW_MAX_S:
                return f"nvidia-smi's timestamp is {skew:.0f} s off this host's clock in UTC"
        self._ids = ids
        return None

    def start(self, stdout_fd: int) -> None:
        """Start the loop, writing to `stdout_fd` (the agent's stdout) from now on."""
        self.process = subprocess.Popen(
            self._argv(*self._ids, "-lms", str(self.period_ms)),
            stdout=stdout_fd,
            stdin=subprocess.DEVNULL,
            env=self._env,
        )

    def exit_code(self) -> int | None:
        """None while the loop runs, else its exit status (one waitpid, no blocking)."""
        return None if self.process is None else self.process.poll()

    def cpu_s(self) -> float:
        """The loop's CPU time so far (its threads' schedstat), for --report-cpu; 0 if unknown."""
        if self.process is None:
            return 0.0
        return _threads_cpu_s(self.process.pid)

    def close(self) -> None:
        """SIGKILL: nvidia-smi leaves its loop on SIGTERM only after its sleep (0.27 s to
        stop the agent on an H200, against 0.03 s before), and it holds nothing to save."""
        process = self.process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=3.0)


def _threads_cpu_s(pid: int) -> float:
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as stream:
                total += int(stream.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9


def state_lines(wall: float, entries: list[str]) -> list[str]:
    """One "state" line per GPU entry (JSON text of its reading)."""
    head = f'{{"type": "state", "wall": {round(wall, 3)!r}, "gpus": ['
    return [head + entry + "]}" for entry in entries]


def packed_writes(lines: list[str]) -> list[bytes]:
    """Whole lines packed into writes of at most PIPE_BUF bytes: such a write is atomic on a
    pipe, so nvidia-smi's cells can land between two of them but never inside one of the
    agent's lines. A line longer than that (thousands of processes) goes out alone."""
    chunks: list[bytes] = []
    current = b""
    for text in lines:
        line = (text + "\n").encode("utf-8")
        if current and len(current) + len(line) > PIPE_BUF:
            chunks.append(current)
            current = b""
        current += line
    if current:
        chunks.append(current)
    return chunks


# --- the command line and the main loop -------------------------------------------------------


class AgentUsage(Exception):
    """A bad agent command line: reported as one error line, exit 2."""


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise AgentUsage(message)


def build_arg_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(
        prog="agent.py",
        description="Sample every NVIDIA GPU and write one JSON line per tick.",
    )
    add_agent_arguments(parser)
    return parser


def add_agent_arguments(parser: argparse.ArgumentParser) -> None:
    """The agent's options, shared with `specmon agent`."""
    parser.add_argument(
        "--rate",
        type=float,
        default=DEFAULT_RATE_HZ,
        metavar="HZ",
        help=f"samples per second (default {DEFAULT_RATE_HZ:g}, at most {MAX_RATE_HZ:g})",
    )
    parser.add_argument(
        "--once", action="store_true", help="write the header and one tick, then exit"
    )
    parser.add_argument("--count", type=int, default=None, metavar="N", help="stop after N ticks")
    parser.add_argument(
        "--duration", type=float, default=None, metavar="S", help="stop after S seconds"
    )
    parser.add_argument(
        "--source",
        choices=("auto", "nvml", "nvidia-smi"),
        default="auto",
        help="auto: NVML through pynvml, or nvidia-smi when pynvml is missing",
    )
    parser.add_argument(
        "--pcie-interval",
        type=float,
        default=DEFAULT_PCIE_INTERVAL_S,
        metavar="S",
        help="seconds between PCIe and NVLink rate reads, which run apart from the tick "
        "(longer where the reads would cost more than 0.01%% of a core)",
    )
    parser.add_argument(
        "--tick-sampler",
        choices=("auto", "agent", "nvidia-smi"),
        default="auto",
        help="with NVML: who reads utilisation and power each tick. nvidia-smi: its own loop "
        "(-lms) writes them as CSV rows into the agent's stdout and the agent wakes only for "
        "the slower fields; agent: the agent reads them; auto (default): nvidia-smi where it "
        "is on PATH and agrees with NVML, for runs without --once/--count",
    )
    parser.add_argument(
        "--state-interval",
        type=float,
        default=DEFAULT_STATE_INTERVAL_S,
        metavar="S",
        help="with nvidia-smi's loop writing the ticks: seconds between the agent's reads of "
        f"memory, temperature, clocks, processes and the rest (default {DEFAULT_STATE_INTERVAL_S:g}"
        "; the agent ticking itself reads them every 2 s)",
    )
    parser.add_argument(
        "--processes-interval",
        type=float,
        default=DEFAULT_PROCESSES_INTERVAL_S,
        metavar="S",
        help="nvidia-smi fallback: seconds between compute-process listings",
    )
    parser.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        metavar="PID",
        help="exit when this process is gone (the shell that started the agent)",
    )
    parser.add_argument(
        "--watch-stdin",
        action="store_true",
        help="exit when stdin reaches end of file (the console closed the channel)",
    )
    parser.add_argument(
        "--report-cpu",
        action="store_true",
        help="at exit, write the agent's own CPU cost per tick to stderr as one JSON line",
    )


def check_agent_options(options: argparse.Namespace) -> None:
    """Raise AgentUsage for values argparse accepts but the agent must not run with."""
    if not 0 < options.rate <= MAX_RATE_HZ:
        raise AgentUsage(
            f"--rate must be above 0 and at most {MAX_RATE_HZ:g} Hz, got {options.rate:g}"
        )
    if options.count is not None and options.count < 1:
        raise AgentUsage(f"--count must be at least 1, got {options.count}")
    if options.duration is not None and options.duration <= 0:
        raise AgentUsage(f"--duration must be above 0, got {options.duration:g}")
    for name in ("pcie_interval", "processes_interval", "state_interval"):
        if getattr(options, name) < 0.1:
            raise AgentUsage("--{} must be at least 0.1 s".format(name.replace("_", "-")))


def _parent_alive(pid: int) -> bool:
    if os.getppid() == 1 and pid != 1:
        return False  # re-parented to init: the parent is gone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch_stdin(stop: threading.Event, wake_main: bool) -> None:
    """Set `stop` at end of input. Reads the raw descriptor: a thread blocked in
    sys.stdin.buffer holds its lock, and the interpreter's shutdown then aborts on it
    (SIGABRT, "could not acquire lock for <_io.BufferedReader name='<stdin>'>") whenever the
    agent is stopped by a signal while stdin is still open."""
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):
        return
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass
    stop.set()
    if wake_main:  # the main thread may be asleep until its next tick: SIGTERM wakes it
        with contextlib.suppress(OSError, ValueError):
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)


class CpuReport:
    """--report-cpu: what ticking costs, measured inside the agent between two of its ticks.

    The window opens at the first tick once the links thread has made its first two passes
    (and at least WARMUP_S after start) and closes at the last tick, so the interpreter's
    start, NVML's init and the shutdown stay out of it: a run-wide getrusage would have to
    subtract them, and their noise (+-0.02 s) is larger than a minute of ticking at 4 Hz.
    """

    WARMUP_S = 1.0

    def __init__(self, options: argparse.Namespace, ticker: Any, gpus: int) -> None:
        self.options = options
        self.ticker = ticker
        self.sampler = ticker.sampler if isinstance(ticker, NvmlTicker) else None
        self.gpus = gpus
        self.warm_at = time.monotonic() + self.WARMUP_S
        self.first: tuple[float, ...] | None = None
        self.last: tuple[float, ...] | None = None
        self.ticks = 0
        self.encode_s = 0.0
        self.write_s = 0.0

    def _snapshot(self) -> tuple[float, ...]:
        sample = self.ticker.sample_cpu_s if self.sampler is not None else 0.0
        encode = self.encode_s + (self.ticker.encode_cpu_s if self.sampler is not None else 0.0)
        passes, link_cpu, link_reads = 0, 0.0, 0
        if self.sampler is not None:
            with self.sampler._links_lock:
                passes = self.sampler.link_passes
                link_cpu = self.sampler.link_cpu_s
                link_reads = self.sampler.link_gpu_reads
        return (
            time.monotonic(),
            time.process_time(),
            time.thread_time(),
            sample,
            encode,
            self.write_s,
            passes,
            link_cpu,
            link_reads,
        )

    def tick_written(self, encode_s: float, write_s: float) -> None:
        """Called after each tick's line is out, with the CPU its encoding and write took."""
        if self.first is None:
            rates_done = self.sampler is None or self.sampler.first_rates.is_set()
            if rates_done and time.monotonic() >= self.warm_at:
                self.first = self._snapshot()
            return
        self.ticks += 1
        self.encode_s += encode_s
        self.write_s += write_s
        self.last = self._snapshot()

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "cpu_report",
            "source": "nvml" if self.sampler is not None else "nvidia-smi",
            "gpus": self.gpus,
            "rate_hz": self.options.rate,
            "link_interval_s": self.options.pcie_interval,
            "ticks": self.ticks,
        }
        if self.first is None or self.last is None or self.ticks == 0:
            out["error"] = "the run ended before the measuring window had two ticks"
            return out
        d = [b - a for a, b in zip(self.first, self.last)]  # noqa: B905 (3.8)
        wall, process, main, sample, encode, write, passes, link_cpu, link_reads = d
        per_tick = 1000.0 / self.ticks
        out.update(
            {
                "wall_s": round(wall, 3),
                "process_cpu_s": round(process, 6),
                "cpu_ms_per_tick": round(process * per_tick, 4),
                "core_percent": round(100.0 * process / wall, 4) if wall > 0 else None,
                "main_thread_ms_per_tick": {
                    "total": round(main * per_tick, 4),
                    "sample": round(sample * per_tick, 4),
                    "encode": round(encode * per_tick, 4),
                    "write": round(write * per_tick, 4),
                    "wait_and_loop": round((main - sample - encode - write) * per_tick, 4),
                },
                "links": {
                    "passes": int(passes),
                    "gpu_reads": int(link_reads),
                    "cpu_ms_per_pass": round(1000.0 * link_cpu / passes, 4) if passes else None,
                    "cpu_ms_per_gpu_read": (
                        round(1000.0 * link_cpu / link_reads, 4) if link_reads else None
                    ),
                    "cpu_ms_per_tick": round(link_cpu * per_tick, 4),
                },
            }
        )
        return out


def _open_sampler(options: argparse.Namespace, host: str, notices: NoticeLog) -> Any:
    if options.source != "nvidia-smi":
        try:
            import pynvml
        except ImportError:
            if options.source == "nvml":
                raise AgentAbsent(
                    f"pynvml (nvidia-ml-py) is not installed for {sys.executable} on host {host}"
                ) from None
        else:
            nvml_sampler = NvmlSampler(pynvml, notices, options.pcie_interval)
            nvml_sampler.open(host, links_thread=False)  # run_agent says who reads them
            return nvml_sampler
    smi_sampler = SmiSampler(notices, options.rate, options.processes_interval)
    try:
        smi_sampler.open(host)
    except BaseException:
        smi_sampler.close()
        raise
    return smi_sampler


def _tick_rows(
    options: argparse.Namespace, sampler: Any, notices: NoticeLog, count: int | None
) -> SmiTickRows | None:
    """nvidia-smi's loop for the ticks where --tick-sampler and the host allow it, else None.

    Not for --once/--count (their ticks are counted by the agent) nor where stdout has no
    descriptor to hand over."""
    if not isinstance(sampler, NvmlSampler) or options.tick_sampler == "agent":
        return None
    if count is not None:
        return None
    try:
        sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    rows = SmiTickRows(options.rate)
    reason = rows.unusable([gpu.uuid for gpu in sampler.gpus])
    if reason is None:
        return rows
    if options.tick_sampler == "nvidia-smi" or reason != "nvidia-smi is not on PATH":
        notices.once(
            "rows:unusable",
            f"ticks: read by the agent, not nvidia-smi's loop ({reason})",
        )
    return None


def _stream_rows(
    options: argparse.Namespace,
    sampler: NvmlSampler,
    rows: SmiTickRows,
    ticker: NvmlTicker,
    notices: NoticeLog,
    stop: threading.Event,
    child_watched: bool = False,
) -> bool:
    """The stream with nvidia-smi's rows as ticks: every --state-interval the agent reads
    each GPU's slow fields (and the link counters when due), writes the state lines that
    changed and sleeps in between. True when the run is over; False when nvidia-smi's loop
    ended and the agent must tick itself. With `child_watched` (run_agent's SIGCHLD handler
    sets ticker.interrupted), the loop's status is asked only after a SIGCHLD, at once;
    without, at every wake-up."""
    fd = sys.stdout.fileno()
    written: list[str | None] = [None] * len(sampler.gpus)
    started = time.monotonic()
    report = RowsReport(options, sampler, rows) if options.report_cpu else None
    while True:
        if rows.process is not None:
            if options.duration is not None:
                ticker._next = min(ticker._next or started, started + options.duration)
            if not ticker._wait(stop) and stop.is_set():
                break
            if ticker.poked:  # asked for a reading now: the next one an interval from now
                ticker.poked = False
                ticker._next = time.monotonic() + ticker.period
            else:
                ticker._advance()
            if options.duration is not None and time.monotonic() - started >= options.duration:
                break
            if options.parent_pid is not None and not _parent_alive(options.parent_pid):
                break
            code = None
            if ticker.interrupted or not child_watched:
                ticker.interrupted = False
                code = rows.exit_code()
            if code is not None:
                notices.once(
                    "rows:exited",
                    f"ticks: nvidia-smi's loop exited (code {code}); the agent reads "
                    "utilisation and power itself from now on",
                )
                for message in notices.drain():
                    _write(message_line("notice", message))
                return False
        sampler.read_slow_fields()
        sampler.read_links_if_due(time.monotonic())
        entries = sampler.state_entries()
        changed = [new for new, old in zip(entries, written) if new != old]  # noqa: B905 (3.8)
        written = list(entries)
        out = [message_line("notice", message) for message in notices.drain()]
        out += state_lines(time.time(), changed)
        for chunk in packed_writes(out):  # one write a wake-up, as a rule
            while chunk:
                chunk = chunk[os.write(fd, chunk) :]
        if rows.process is None:
            rows.start(fd)
            ticker._next = time.monotonic() + options.state_interval
        if report is not None:
            report.woke()
    if report is not None:
        sys.stderr.write(json.dumps(report.summary()) + "\n")
        sys.stderr.flush()
    return True


class RowsReport:
    """--report-cpu for the nvidia-smi-rows stream: the agent's and its nvidia-smi's CPU
    between two of the agent's wake-ups, once the links had their first two passes (which
    the wake-ups make: main_thread_ms_per_s includes links_ms_per_s)."""

    def __init__(self, options: argparse.Namespace, sampler: NvmlSampler, rows: SmiTickRows):
        self.options = options
        self.sampler = sampler
        self.rows = rows
        self.warm_at = time.monotonic() + CpuReport.WARMUP_S
        self.first: tuple[float, ...] | None = None
        self.last: tuple[float, ...] | None = None
        self.wakes = 0

    def _snapshot(self) -> tuple[float, ...]:
        with self.sampler._links_lock:
            link_cpu = self.sampler.link_cpu_s
        return (
            time.monotonic(),
            time.process_time(),
            time.thread_time(),
            link_cpu,
            self.rows.cpu_s(),
        )

    def woke(self) -> None:
        if self.first is None:
            if self.sampler.first_rates.is_set() and time.monotonic() >= self.warm_at:
                self.first = self._snapshot()
            return
        self.wakes += 1
        self.last = self._snapshot()

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "cpu_report",
            "source": "nvml",
            "ticks_by": "nvidia-smi",
            "gpus": len(self.sampler.gpus),
            "rate_hz": self.options.rate,
            "wakes": self.wakes,
        }
        if self.first is None or self.last is None:
            out["error"] = "the run ended before the measuring window had two wake-ups"
            return out
        wall, process, main, links, smi = (b - a for a, b in zip(self.first, self.last))  # noqa: B905
        out.update(
            {
                "wall_s": round(wall, 3),
                "agent_ms_per_s": round(1000.0 * process / wall, 4),
                "main_thread_ms_per_s": round(1000.0 * main / wall, 4),
                "links_ms_per_s": round(1000.0 * links / wall, 4),
                "nvidia_smi_ms_per_s": round(1000.0 * smi / wall, 4),
                "core_percent": round(100.0 * (process + smi) / wall, 4),
            }
        )
        return out


def _write(line: str) -> None:
    """One line to stdout as one write(2) where stdout has a descriptor, past Python's text
    and buffer layers (a tick is one system call); through sys.stdout where it has none."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        return
    data = (line + "\n").encode("utf-8")
    while data:
        data = data[os.write(fd, data) :]


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the exit flush cannot fail loudly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    """Run the agent until a signal, EOF on stdin (--watch-stdin), --count/--duration or a
    broken pipe. Exit codes: 0 stopped, 1 fatal error (one error line), 2 bad arguments."""
    try:
        options = build_arg_parser().parse_args(argv)
        check_agent_options(options)
        if options.watch_stdin and argv is None and sys.argv[0] == "-":
            raise AgentUsage(
                "--watch-stdin cannot be used when the agent itself is read from stdin "
                "(python3 - < agent.py): stdin is already at its end"
            )
    except AgentUsage as exc:
        _write(message_line("error", f"bad agent arguments: {exc}"))
        return 2
    return run_agent(options)


def run_agent(options: argparse.Namespace) -> int:
    host = socket.gethostname()
    notices = NoticeLog()
    stop = threading.Event()
    count = 1 if options.once else options.count
    previous_handlers = {}
    nvml_ticker: NvmlTicker | None = None

    def on_signal(*_: Any) -> None:
        stop.set()
        if nvml_ticker is not None and nvml_ticker.sleeping:
            raise _Wake

    def on_child(*_: Any) -> None:
        """SIGCHLD in the nvidia-smi-rows stream: its loop (the agent's only child then) may
        have ended; wake the main thread to look now rather than at its next wake-up."""
        if nvml_ticker is not None:
            nvml_ticker.interrupted = True
            if nvml_ticker.sleeping:
                raise _Wake

    sampler: Any = None
    rows: SmiTickRows | None = None
    streaming_rows = False

    def on_poke(*_: Any) -> None:
        """SIGUSR1 (the console's `supervise` passes on a byte written to its stdin): read
        the slow fields, memory first of all, now rather than at their next due time. The
        nvidia-smi-rows stream is woken for it; a ticking agent reads them at its next tick."""
        if isinstance(sampler, NvmlSampler):
            sampler.poke()
        if streaming_rows and nvml_ticker is not None:
            nvml_ticker.poked = True
            if nvml_ticker.sleeping:
                raise _Wake

    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        for signum in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGHUP", None)):
            if signum is not None:
                previous_handlers[signum] = signal.signal(signum, on_signal)
        poke_signal = getattr(signal, "SIGUSR1", None)
        if poke_signal is not None:
            previous_handlers[poke_signal] = signal.signal(poke_signal, on_poke)
    try:
        if options.watch_stdin:
            threading.Thread(
                target=_watch_stdin, args=(stop, in_main), name="stdin", daemon=True
            ).start()
        try:
            sampler = _open_sampler(options, host, notices)
        except AgentFatal as exc:
            _write(message_line("error", str(exc), retry=not isinstance(exc, AgentAbsent)))
            return 1
        gpus = sampler.gpu_count if isinstance(sampler, SmiSampler) else len(sampler.gpus)
        rows = _tick_rows(options, sampler, notices, count)
        if rows is not None:
            nvml_ticker = NvmlTicker(sampler, 1.0 / options.state_interval)
            _write(
                header_line(
                    sampler.source,
                    host,
                    gpus,
                    sampler.driver,
                    sampler.nvml_version,
                    sampler.cuda,
                    tick_rows=TICK_ROW_FIELDS,
                )
            )
            child_signal = getattr(signal, "SIGCHLD", None) if in_main else None
            if child_signal is not None:
                previous_handlers[child_signal] = signal.signal(child_signal, on_child)
            watched = child_signal is not None
            streaming_rows = True
            if _stream_rows(options, sampler, rows, nvml_ticker, notices, stop, watched):
                return 0
            streaming_rows = False
            if child_signal is not None:
                signal.signal(child_signal, previous_handlers.pop(child_signal))
            # nvidia-smi's loop ended under a running agent: tick in Python from here on.
        else:
            _write(
                header_line(
                    sampler.source, host, gpus, sampler.driver, sampler.nvml_version, sampler.cuda
                )
            )
        if isinstance(sampler, NvmlSampler):
            sampler.start_links_thread()
            nvml_ticker = NvmlTicker(sampler, options.rate, measure=options.report_cpu)
            ticker: Any = nvml_ticker
            if count == 1:  # a single tick waits (boundedly) for the PCIe/NVLink rates
                sampler.first_rates.wait(1.5)
        else:
            ticker = sampler
        report = CpuReport(options, ticker, gpus) if options.report_cpu else None
        started = time.monotonic()
        parent_checked = started
        ticks = 0
        while not stop.is_set():
            encode_s = 0.0
            try:
                if nvml_ticker is not None:
                    line = nvml_ticker.next_line(stop)
                else:
                    tick = ticker.next_tick(stop)
                    encode_start = time.thread_time()
                    line = None if tick is None else tick_line(tick[0], tick[1])
                    encode_s = time.thread_time() - encode_start
            except AgentFatal as exc:
                for message in notices.drain():
                    _write(message_line("notice", message))
                _write(message_line("error", str(exc), retry=not isinstance(exc, AgentAbsent)))
                return 1
            if line is None:
                break
            if notices.pending:
                for message in notices.drain():
                    _write(message_line("notice", message))
            if report is None:
                _write(line)
            else:
                write_start = time.thread_time()
                _write(line)
                report.tick_written(encode_s, time.thread_time() - write_start)
            ticks += 1
            if count is not None and ticks >= count:
                break
            if options.duration is not None and time.monotonic() - started >= options.duration:
                break
            if options.parent_pid is not None:
                now = time.monotonic()  # two system calls: once a second is soon enough
                if now - parent_checked >= 1.0 or count is not None:
                    parent_checked = now
                    if not _parent_alive(options.parent_pid):
                        break
        if report is not None:
            sys.stderr.write(json.dumps(report.summary()) + "\n")
            sys.stderr.flush()
        return 0
    except BrokenPipeError:
        _silence_stdout()
        return 0
    finally:
        if rows is not None:
            rows.close()
        if sampler is not None:
            sampler.close()
        for signum, handler in previous_handlers.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    sys.exit(main())

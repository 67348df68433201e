"""A fake ``pynvml`` for the agent's tests, shaped like nvidia-ml-py (errors, structs, names).

The agent runs as a real subprocess with this directory first on PYTHONPATH. The environment
variable FAKE_NVML_SCENARIO picks a host: driver generation, GPU count, unsupported fields, a
GPU that falls off the bus, or no driver at all. Python 3.8-compatible, like the agent.

What the tests look at besides the values: CALLS counts every device call per function and
GPU (and every field id asked of nvmlDeviceGetFieldValues as "field:<id>"), written as JSON
to FAKE_NVML_CALLS_FILE at nvmlShutdown when that is set; fail() makes a function raise for
one GPU; hold_readings() freezes the values that otherwise move with every utilisation read.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, ClassVar

NVML_SUCCESS = 0
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 18
nvmlMemory_v2 = 0x02000028

_MESSAGES = {
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """Like nvidia-ml-py: NVMLError(code) builds the subclass for that code, with ``value``."""

    _by_code: ClassVar[dict[int, type]] = {}

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._by_code.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")


def _error_class(name: str, code: int) -> type:
    cls = type(name, (NVMLError,), {})
    NVMLError._by_code[code] = cls
    return cls


NVMLError_NotSupported = _error_class("NVMLError_NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_DriverNotLoaded = _error_class("NVMLError_DriverNotLoaded", NVML_ERROR_DRIVER_NOT_LOADED)
NVMLError_LibraryNotFound = _error_class("NVMLError_LibraryNotFound", NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_FunctionNotFound = _error_class(
    "NVMLError_FunctionNotFound", NVML_ERROR_FUNCTION_NOT_FOUND
)
NVMLError_GpuIsLost = _error_class("NVMLError_GpuIsLost", NVML_ERROR_GPU_IS_LOST)
NVMLError_Unknown = _error_class("NVMLError_Unknown", NVML_ERROR_UNKNOWN)

# Each scenario is one kind of host. Keys not given take the values of "h200x2-r580".
SCENARIOS: dict[str, dict[str, Any]] = {
    # A current driver: every field, PCIe and NVLink byte counters, the clock-event API.
    "h200x2-r580": {
        "gpus": 2,
        "name": "NVIDIA H200",
        "driver": "580.159.04",
        "nvml": "13.580.159.04",
        "cuda": 13000,
        "memory_total_mib": 143771,
        "power_limit_mw": 700000,
        "pcie_counters": True,
        "nvlink": True,
        "event_reasons_api": True,
        "cuda_v2_api": True,
        "memory_v2_api": True,
        "unsupported": (),
        "missing": (),
        # nvmlDeviceGetNvLinkState: "up" (every link active, but see nvlink_down_gpus),
        # "absent" (no NVLink hardware: every link answers NotSupported), "missing" (a
        # binding without the function).
        "nvlink_state": "up",
        "nvlink_links": 18,
        "nvlink_down_gpus": (),  # GPUs whose links are all down: their counters read zeros
        "memory_grows": False,  # each memory read finds 1 MiB more used than the last
        "counter_cpu_ms": 0.0,  # CPU one nvmlDeviceGetFieldValues call burns (busy loop)
    },
    # An older driver and binding: bytes strings, no clock-event rename, no PCIe counters
    # (the blocking PCIe query instead), no per-process memory inside a container.
    "a100x4-r470": {
        "gpus": 4,
        "name": b"A100-SXM4-40GB",
        "driver": b"470.256.02",
        "nvml": b"11.470.256.02",
        "cuda": 11040,
        "memory_total_mib": 40536,
        "power_limit_mw": 400000,
        "pcie_counters": False,
        "event_reasons_api": False,
        "cuda_v2_api": False,
        "memory_v2_api": False,
        "process_memory": False,
    },
    # A consumer card on an old driver: many fields unsupported, no field values at all.
    "gtx1080-r418": {
        "gpus": 1,
        "name": "GeForce GTX 1080",
        "driver": "418.226.00",
        "nvml": "10.418.226.00",
        "cuda": 10010,
        "memory_total_mib": 8119,
        "pcie_counters": False,
        "nvlink": False,
        "nvlink_state": "absent",
        "event_reasons_api": False,
        "cuda_v2_api": False,
        "memory_v2_api": False,
        "unsupported": (
            "nvmlDeviceGetEnforcedPowerLimit",
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
            "nvmlDeviceGetPcieThroughput",
        ),
        "missing": ("nvmlDeviceGetFieldValues",),
    },
    # GPU 2 of 4 falls off the bus after FAKE_NVML_LOST_AFTER good ticks (default 2).
    "lost": {"gpus": 4, "lost_gpu": 2},
    # GPU 1 is already lost when the agent starts.
    "lost-at-start": {"gpus": 3, "lost_gpu": 1, "lost_at_start": True},
    # Eight GPUs whose PCIe query blocks like the real one (~20 ms), to check the tick pace.
    "slow-pcie": {"gpus": 8, "pcie_counters": False, "pcie_query_s": 0.02},
    # Eight GPUs whose used memory grows by 1 MiB with every read: ticks show each read.
    "growing-memory": {"gpus": 8, "memory_grows": True},
    # Four GPUs joined by NVLink, of which GPUs 1 and 3 have every link down.
    "nvlink-partly-down": {"gpus": 4, "nvlink_down_gpus": (1, 3)},
    # A binding without nvmlDeviceGetNvLinkState (an old nvidia-ml-py).
    "nvlink-state-missing": {"nvlink_state": "missing"},
    # Counter reads that cost CPU (FAKE_NVML_COUNTER_CPU_MS, default 5 ms per GPU read).
    "costly-counters": {"counter_cpu_ms": 5.0},
    "no-driver": {"init_error": NVML_ERROR_DRIVER_NOT_LOADED},
    "no-library": {"init_error": NVML_ERROR_LIBRARY_NOT_FOUND},
    "no-gpu": {"gpus": 0},
}

_NAME = os.environ.get("FAKE_NVML_SCENARIO", "h200x2-r580")
if _NAME not in SCENARIOS:
    raise ImportError(f"fake pynvml: unknown FAKE_NVML_SCENARIO {_NAME!r}")
_S = dict(SCENARIOS["h200x2-r580"])
_S.update(SCENARIOS[_NAME])
_S.setdefault("process_memory", True)
if "FAKE_NVML_GPUS" in os.environ:
    _S["gpus"] = int(os.environ["FAKE_NVML_GPUS"])
if "FAKE_NVML_COUNTER_CPU_MS" in os.environ:
    _S["counter_cpu_ms"] = float(os.environ["FAKE_NVML_COUNTER_CPU_MS"])
_LOST_AFTER = int(os.environ.get("FAKE_NVML_LOST_AFTER", "2"))
_CALLS_FILE = os.environ.get("FAKE_NVML_CALLS_FILE")
_state = {"initialised": False, "hold": False}
_reads: dict[int, int] = {}  # GPU index -> utilisation reads so far (one per tick)
CALLS: dict[str, dict[int, int]] = {}  # function (or "field:<id>") -> GPU index -> calls
_calls_lock = threading.Lock()  # the agent's links thread calls in too
_failures: dict[tuple[str, int], list[Any]] = {}  # (function, GPU) -> [code, times left]


def calls(function: str, index: int) -> int:
    """How many times the agent called one function (or asked one field id) of one GPU."""
    with _calls_lock:
        return CALLS.get(function, {}).get(index, 0)


def fail(function: str, index: int, code: int = NVML_ERROR_UNKNOWN, times: Any = 1) -> None:
    """Make the next `times` calls of one function for one GPU raise NVMLError(code);
    times=None: every call from now on."""
    _failures[(function, index)] = [code, times]


def hold_readings(hold: bool = True) -> None:
    """Hold utilisation, power, temperature and clock reasons where they are: reading them
    again then gives the same values, so two ways of reading one state can be compared."""
    _state["hold"] = hold


def _count(function: str, index: int) -> None:
    with _calls_lock:
        per_gpu = CALLS.setdefault(function, {})
        per_gpu[index] = per_gpu.get(index, 0) + 1


class _Struct:
    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)


class _Handle:
    def __init__(self, index: int) -> None:
        self.index = index


def _raise(code: int) -> None:
    raise NVMLError(code)


def _check(function: str, handle: _Handle | None = None) -> None:
    if not _state["initialised"]:
        _raise(1)
    if handle is not None:
        _count(function, handle.index)
        failure = _failures.get((function, handle.index))
        if failure is not None and failure[1] != 0:
            if failure[1] is not None:
                failure[1] -= 1
            _raise(failure[0])
    lost_here = handle is not None and _S.get("lost_gpu") == handle.index
    if lost_here and (_S.get("lost_at_start") or _reads.get(handle.index, 0) > _LOST_AFTER):
        _raise(NVML_ERROR_GPU_IS_LOST)
    if function in _S["unsupported"]:
        _raise(NVML_ERROR_NOT_SUPPORTED)


def nvmlInit() -> None:
    if "init_error" in _S:
        _raise(_S["init_error"])
    _state["initialised"] = True


def nvmlShutdown() -> None:
    _state["initialised"] = False
    if _CALLS_FILE:
        with _calls_lock, open(_CALLS_FILE, "w") as out:
            json.dump(CALLS, out)


def nvmlSystemGetDriverVersion() -> Any:
    _check("nvmlSystemGetDriverVersion")
    return _S["driver"]


def nvmlSystemGetNVMLVersion() -> Any:
    _check("nvmlSystemGetNVMLVersion")
    return _S["nvml"]


def nvmlSystemGetCudaDriverVersion() -> int:
    _check("nvmlSystemGetCudaDriverVersion")
    return _S["cuda"]


def nvmlSystemGetCudaDriverVersion_v2() -> int:
    _check("nvmlSystemGetCudaDriverVersion_v2")
    return _S["cuda"]


def nvmlDeviceGetCount() -> int:
    _check("nvmlDeviceGetCount")
    return _S["gpus"]


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
    _check("nvmlDeviceGetHandleByIndex")
    if not 0 <= index < _S["gpus"]:
        _raise(NVML_ERROR_INVALID_ARGUMENT)
    handle = _Handle(index)
    if _S.get("lost_at_start") and _S.get("lost_gpu") == index:
        _raise(NVML_ERROR_GPU_IS_LOST)
    return handle


def nvmlDeviceGetUUID(handle: _Handle) -> Any:
    _check("nvmlDeviceGetUUID", handle)
    uuid = f"GPU-fa4e0000-0000-4000-8000-{handle.index:012d}"
    return uuid.encode() if isinstance(_S["name"], bytes) else uuid


def nvmlDeviceGetName(handle: _Handle) -> Any:
    _check("nvmlDeviceGetName", handle)
    return _S["name"]


def _util(index: int) -> int:
    return (37 * _reads.get(index, 0) + 23 * index) % 101


def nvmlDeviceGetUtilizationRates(handle: _Handle) -> _Struct:
    _check("nvmlDeviceGetUtilizationRates", handle)
    if not _state["hold"] or handle.index not in _reads:
        _reads[handle.index] = _reads.get(handle.index, 0) + 1
    util = _util(handle.index)
    return _Struct(gpu=util, memory=util // 2)


def _process_mib(index: int) -> int:
    return 1024 * (index + 1)


RESERVED_MIB = 615  # what an H200's driver keeps back: in v1's "used", not in v2's


def nvmlDeviceGetMemoryInfo(handle: _Handle, version: Any = None) -> _Struct:
    _check("nvmlDeviceGetMemoryInfo", handle)
    if version is not None and not _S["memory_v2_api"]:
        _raise(NVML_ERROR_FUNCTION_NOT_FOUND)  # nvmlDeviceGetMemoryInfo_v2 came with r510
    mib = 1024 * 1024
    total = _S["memory_total_mib"] * mib
    used = (_process_mib(handle.index) + 512) * mib
    if _S["memory_grows"]:
        used += calls("nvmlDeviceGetMemoryInfo", handle.index) * mib
    if version is None:
        return _Struct(total=total, used=used + RESERVED_MIB * mib, free=total - used)
    return _Struct(total=total, reserved=RESERVED_MIB * mib, used=used, free=total - used)


def nvmlDeviceGetPowerUsage(handle: _Handle) -> int:
    _check("nvmlDeviceGetPowerUsage", handle)
    return 90000 + 5000 * _util(handle.index)


def _nvmlGetFunctionPointer(name: str) -> Any:
    """nvidia-ml-py's lookup of a C function. The agent calls two of them straight through
    ctypes every tick: like the C functions, these write through the byref() they are given
    and return an NVML code. Each call also counts as "raw:<name>"."""

    def utilization(handle: _Handle, ref: Any) -> int:
        _count("raw:" + name, handle.index)
        try:
            util = nvmlDeviceGetUtilizationRates(handle)
        except NVMLError as exc:
            return exc.value
        ref._obj.gpu, ref._obj.memory = util.gpu, util.memory
        return NVML_SUCCESS

    def power(handle: _Handle, ref: Any) -> int:
        _count("raw:" + name, handle.index)
        try:
            ref._obj.value = nvmlDeviceGetPowerUsage(handle)
        except NVMLError as exc:
            return exc.value
        return NVML_SUCCESS

    functions = {"nvmlDeviceGetUtilizationRates": utilization, "nvmlDeviceGetPowerUsage": power}
    if name not in functions:
        _raise(NVML_ERROR_FUNCTION_NOT_FOUND)
    return functions[name]


def nvmlDeviceGetEnforcedPowerLimit(handle: _Handle) -> int:
    _check("nvmlDeviceGetEnforcedPowerLimit", handle)
    return _S["power_limit_mw"]


def nvmlDeviceGetTemperature(handle: _Handle, sensor: int) -> int:
    _check("nvmlDeviceGetTemperature", handle)
    return 30 + _util(handle.index) // 3


def nvmlDeviceGetClockInfo(handle: _Handle, clock: int) -> int:
    _check("nvmlDeviceGetClockInfo", handle)
    return {NVML_CLOCK_SM: 1980, NVML_CLOCK_MEM: 3201}.get(clock, 0)


def _reasons(handle: _Handle) -> int:
    return 0x1 if _util(handle.index) < 5 else 0x4


def nvmlDeviceGetCurrentClocksEventReasons(handle: _Handle) -> int:
    _check("nvmlDeviceGetCurrentClocksEventReasons", handle)
    return _reasons(handle)


def nvmlDeviceGetCurrentClocksThrottleReasons(handle: _Handle) -> int:
    _check("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    return _reasons(handle)


def nvmlDeviceGetComputeRunningProcesses(handle: _Handle) -> list[_Struct]:
    _check("nvmlDeviceGetComputeRunningProcesses", handle)
    used = _process_mib(handle.index) * 1024 * 1024 if _S["process_memory"] else None
    return [_Struct(pid=40000 + handle.index, usedGpuMemory=used)]


PCIE_TX_BYTES_PER_S = 5000000.0
PCIE_RX_BYTES_PER_S = 2000000.0
NVLINK_TX_KIB_PER_S = 100000.0
NVLINK_RX_KIB_PER_S = 80000.0
PCIE_QUERY_KB_PER_S = {NVML_PCIE_UTIL_TX_BYTES: 1234, NVML_PCIE_UTIL_RX_BYTES: 567}


def nvmlDeviceGetPcieThroughput(handle: _Handle, counter: int) -> int:
    _check("nvmlDeviceGetPcieThroughput", handle)
    time.sleep(_S.get("pcie_query_s", 0.0))
    return PCIE_QUERY_KB_PER_S[counter]


def _links_down(index: int) -> bool:
    return _S["nvlink_state"] == "up" and index in _S["nvlink_down_gpus"]


def nvmlDeviceGetNvLinkState(handle: _Handle, link: int) -> int:
    """Whether one link is active; a link number the GPU does not have is an invalid argument."""
    _check("nvmlDeviceGetNvLinkState", handle)
    if _S["nvlink_state"] == "absent":
        _raise(NVML_ERROR_NOT_SUPPORTED)
    if not 0 <= link < _S["nvlink_links"]:
        _raise(NVML_ERROR_INVALID_ARGUMENT)
    return NVML_FEATURE_DISABLED if _links_down(handle.index) else NVML_FEATURE_ENABLED


def _burn_cpu(seconds: float) -> None:
    """Spend this much CPU time of the calling thread, like the real counter read does."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def nvmlDeviceGetFieldValues(handle: _Handle, field_ids: list[Any]) -> list[_Struct]:
    _check("nvmlDeviceGetFieldValues", handle)
    _burn_cpu(_S["counter_cpu_ms"] / 1000.0)
    now = time.time()
    nvlink_tx = 0.0 if _links_down(handle.index) else NVLINK_TX_KIB_PER_S  # down: zeros
    nvlink_rx = 0.0 if _links_down(handle.index) else NVLINK_RX_KIB_PER_S
    rates = {
        197: PCIE_TX_BYTES_PER_S if _S["pcie_counters"] else None,
        198: PCIE_RX_BYTES_PER_S if _S["pcie_counters"] else None,
        138: nvlink_tx if _S["nvlink"] else None,
        139: nvlink_rx if _S["nvlink"] else None,
    }
    out = []
    for requested in field_ids:
        field_id, scope = requested if isinstance(requested, tuple) else (requested, 0)
        _count(f"field:{field_id}", handle.index)
        rate = rates.get(field_id)
        code = NVML_ERROR_NOT_SUPPORTED if rate is None else NVML_SUCCESS
        value = _Struct(ullVal=0 if rate is None else int(now * rate))
        out.append(
            _Struct(
                fieldId=field_id,
                scopeId=scope,
                timestamp=int(now * 1e6),
                latencyUsec=0,
                valueType=NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                nvmlReturn=code,
                value=value,
            )
        )
    return out


# Functions this scenario's binding does not have at all (older nvidia-ml-py releases).
_missing = list(_S["missing"])
if not _S["event_reasons_api"]:
    _missing.append("nvmlDeviceGetCurrentClocksEventReasons")
if not _S["cuda_v2_api"]:
    _missing.append("nvmlSystemGetCudaDriverVersion_v2")
if _S["nvlink_state"] == "missing":
    _missing.append("nvmlDeviceGetNvLinkState")
for _function in _missing:
    globals().pop(_function, None)

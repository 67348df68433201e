"""The GPU agent's CPU-saving behaviours (docs/gpu-agent.md, "How it samples"): the two
field cadences, direct NVML calls with the careful wrapper as fallback, NVLink counters only
where a link is up, the links thread's CPU-bounded spacing, and --report-cpu.

Cadence and read paths are checked in-process: the fake pynvml is loaded as a module of its
own and the agent's clock is a manual one, so every tick's NVML calls are exact. The timing
and the report are checked on the agent as a real subprocess."""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from test_agent import (
    FAKE,
    nvml_env,
    of_type,
    read_json_line,
    run_agent,
    spawn,  # noqa: F401  (a fixture)
)

import specmon.remote.agent as agent
from specmon.remote.agent import (
    SLOW_FIELDS_INTERVAL_S,
    GpuReading,
    NoticeLog,
    NvmlSampler,
)

FAST_FUNCTIONS = ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPowerUsage")
# The slow fields' functions (either name of the clock reasons call, by driver generation)
# and how many calls one read of them makes: the clock call is made for SM and memory clocks.
SLOW_FUNCTIONS = (
    (("nvmlDeviceGetMemoryInfo",), 1),
    (("nvmlDeviceGetEnforcedPowerLimit",), 1),
    (("nvmlDeviceGetTemperature",), 1),
    (("nvmlDeviceGetClockInfo",), 2),
    (("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"), 1),
    (("nvmlDeviceGetComputeRunningProcesses",), 1),
)
# The fields the careful wrapper reads for a tick (the links thread's own are left out).
TICK_QUERY_FIELDS = agent._TICK_FIELDS | {"memory_v2"}
LINK_FIELDS = ("pcie_tx_kbs", "pcie_rx_kbs", "nvlink_tx_kbs", "nvlink_rx_kbs")
NVLINK_KIB_PER_S = 100_000  # the fake's NVLink TX rate (tests/fake_pynvml/pynvml.py)
BOUND_S = 10.0  # no wait in this file is longer


# --- in-process: the fake pynvml as a module, a manual clock, call counts --------------------


def load_fake(monkeypatch: pytest.MonkeyPatch, scenario: str, **env: str) -> ModuleType:
    """A fresh copy of the fake pynvml for one scenario (it reads its environment on import)."""
    for key in [k for k in os.environ if k.startswith("FAKE_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("FAKE_NVML_SCENARIO", scenario)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    spec = importlib.util.spec_from_file_location(f"fake_pynvml_{scenario}", FAKE / "pynvml.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class ManualClock:
    """Stands in for the agent module's `time`: monotonic() moves only when the test says so;
    everything else is the real time module."""

    def __init__(self) -> None:
        self.now = 1000.0  # binary-exact steps of 0.25 s keep every due time exact

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    manual = ManualClock()
    monkeypatch.setattr(agent, "time", manual)
    return manual


@pytest.fixture
def open_sampler(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Any]]:
    """Open NvmlSampler on a fake scenario (its links thread runs); closed at teardown."""
    opened: list[NvmlSampler] = []

    def open_(
        scenario: str, pcie_interval_s: float = 60.0, **env: str
    ) -> tuple[ModuleType, NvmlSampler]:
        fake = load_fake(monkeypatch, scenario, **env)
        sampler = NvmlSampler(fake, NoticeLog(), pcie_interval_s)
        sampler.open("test-host")
        opened.append(sampler)
        return fake, sampler

    yield open_
    for sampler in opened:
        sampler.close()


def call_counts(fake: ModuleType) -> dict[tuple[str, int], int]:
    with fake._calls_lock:
        return {(f, i): n for f, per_gpu in fake.CALLS.items() for i, n in per_gpu.items()}


def calls_during(fake: ModuleType, action: Callable[[], Any]) -> tuple[Any, dict]:
    """What action returned, and the NVML calls it made: (function, GPU) -> count."""
    before = call_counts(fake)
    result = action()
    after = call_counts(fake)
    return result, {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}


def slow_read_gpus(made: dict[tuple[str, int], int], gpus: int) -> set[int]:
    """The GPUs whose slow fields were read, checking that each read all of them or none."""
    read = set()
    expected = [per_read for _, per_read in SLOW_FUNCTIONS]
    for index in range(gpus):
        counts = [sum(made.get((f, index), 0) for f in names) for names, _ in SLOW_FUNCTIONS]
        assert counts in ([0] * len(counts), expected), (index, counts)
        if counts == expected:
            read.add(index)
    return read


@pytest.fixture
def careful_queries(monkeypatch: pytest.MonkeyPatch) -> Callable[[NvmlSampler], dict]:
    """Count the tick fields that go through the careful wrapper, per GPU."""

    def install(sampler: NvmlSampler) -> dict[int, int]:
        counts: dict[int, int] = {}
        original = sampler._query

        def counting(gpu: Any, field: str, function: str, *args: Any, **kwargs: Any) -> Any:
            if field in TICK_QUERY_FIELDS:
                counts[gpu.index] = counts.get(gpu.index, 0) + 1
            return original(gpu, field, function, *args, **kwargs)

        monkeypatch.setattr(sampler, "_query", counting)
        return counts

    return install


def without_link_rates(readings: list[GpuReading]) -> list[GpuReading]:
    """The links thread writes these between ticks; the tick's own reads are the rest."""
    return [dataclasses.replace(r, **dict.fromkeys(LINK_FIELDS)) for r in readings]


# --- 1. two cadences ------------------------------------------------------------------------


def test_slow_fields_are_read_every_two_seconds_per_gpu_staggered(open_sampler, clock):
    """8 GPUs at 4 Hz: the first tick reads everything, then one GPU's slow fields per tick,
    GPU i at 2 + i/4 s and every 2 s after; utilisation and power on every tick."""
    fake, sampler = open_sampler("growing-memory")
    period = 0.25
    assert SLOW_FIELDS_INTERVAL_S == 2.0
    previous: list[GpuReading] | None = None
    for tick in range(40):
        readings, made = calls_during(fake, sampler.sample)
        for index in range(8):
            for function in FAST_FUNCTIONS:
                assert made.get((function, index)) == 1, (tick, index, function)
        expected = set(range(8)) if tick == 0 else {i for i in range(8) if (tick - i) % 8 == 0}
        if 0 < tick < 8:
            expected = set()
        assert slow_read_gpus(made, 8) == expected, tick
        for reading in readings:
            assert reading.error is None and reading.util_gpu is not None
            base = 1024 * (reading.index + 1) + 512  # the fake adds 1 MiB per memory read
            reads_so_far = fake.calls("nvmlDeviceGetMemoryInfo", reading.index)
            assert reading.mem_used_mb == base + reads_so_far
            if reading.index in expected:  # fresh: temperature follows this tick's utilisation
                assert reading.temp_c == 30 + int(reading.util_gpu) // 3
            if previous is not None and reading.index not in expected:
                before = previous[reading.index]
                slow = ("mem_used_mb", "temp_c", "sm_clock_mhz", "throttle_reasons", "processes")
                for name in slow:
                    assert getattr(reading, name) == getattr(before, name), (tick, name)
                assert reading.util_gpu != before.util_gpu  # the fast fields stay live
        previous = readings
        clock.advance(period)


def test_the_first_tick_has_every_field_fresh(open_sampler, clock):
    fake, sampler = open_sampler("h200x2-r580")
    (first, second), made = calls_during(fake, sampler.sample)
    assert slow_read_gpus(made, 2) == {0, 1}
    for reading in (first, second):
        assert reading.mem_used_mb == 1024 * (reading.index + 1) + 512
        assert reading.mem_total_mb == 143771.0 and reading.power_limit_w == 700.0
        assert reading.temp_c == 30 + int(reading.util_gpu) // 3
        assert reading.sm_clock_mhz == 1980.0 and reading.mem_clock_mhz == 3201.0
        assert reading.throttle_reasons is not None
        assert reading.processes == ((40000 + reading.index, 1024.0 * (reading.index + 1)),)


def test_a_stalled_agent_reads_once_then_keeps_the_gpus_staggered(open_sampler, clock):
    """After a pause of several seconds (a stopped process, a paused VM) the late tick reads
    every GPU once; the ticks after it go back to one GPU at a time, none read twice running."""
    fake, sampler = open_sampler("growing-memory")
    for _ in range(10):
        sampler.sample()
        clock.advance(0.25)
    clock.advance(5.0)
    _, made = calls_during(fake, sampler.sample)
    assert slow_read_gpus(made, 8) == set(range(8))
    last_read = {index: 0 for index in range(8)}
    for tick in range(1, 17):
        clock.advance(0.25)
        _, made = calls_during(fake, sampler.sample)
        read = slow_read_gpus(made, 8)
        assert len(read) <= 1, (tick, read)
        for index in read:
            assert (tick - last_read[index]) * 0.25 >= 1.0, (tick, index)
            last_read[index] = tick
    assert all(tick > 0 for tick in last_read.values())  # each GPU read again within 4 s


# --- 2. direct calls, the careful fallback ----------------------------------------------------


@pytest.mark.parametrize(
    "scenario", ["h200x2-r580", "a100x4-r470", "gtx1080-r418", "lost", "lost-at-start"]
)
def test_the_tick_line_is_the_json_of_the_readings_byte_for_byte(open_sampler, clock, scenario):
    """sample_line formats each GPU's entry from a template instead of a reading, a dict and
    json.dumps: for the same state it writes exactly tick_line(wall, sample())'s text, through
    slow-field reads, link-rate passes, unsupported fields and a GPU that is lost."""
    fake, sampler = open_sampler(scenario, pcie_interval_s=0.1)
    fake.hold_readings()
    for tick in range(24):
        wall = 1_796_054_308.0 + tick * 0.2501
        line = sampler.sample_line(wall)
        assert line == agent.tick_line(wall, sampler.sample()), tick
        json.loads(line)
        if tick % 6 == 5:  # let the fast fields move and the links thread make a pass
            fake.hold_readings(False)
            sampler.sample()
            fake.hold_readings()
            time.sleep(0.15)
        clock.advance(0.75)


def test_every_tick_reads_utilisation_and_power_through_the_c_functions(
    open_sampler, clock, monkeypatch: pytest.MonkeyPatch
):
    """Once a GPU's fields all answered, its tick calls the C functions of utilisation and
    power straight through ctypes, not pynvml's wrappers; a pynvml without the function
    lookup gets the wrappers, with the same readings."""
    fake, sampler = open_sampler("h200x2-r580")
    fake.hold_readings()
    first = sampler.sample()
    clock.advance(0.25)
    readings, made = calls_during(fake, sampler.sample)
    for index in (0, 1):
        for function in FAST_FUNCTIONS:
            assert made.get(("raw:" + function, index)) == 1, (index, function)
    assert without_link_rates(readings) == without_link_rates(first)

    old_pynvml = load_fake(monkeypatch, "h200x2-r580")
    monkeypatch.delattr(old_pynvml, "_nvmlGetFunctionPointer")
    old_pynvml.hold_readings()
    wrapped = NvmlSampler(old_pynvml, NoticeLog(), 60.0)
    wrapped.open("test-host")
    try:
        assert all(gpu.raw is None for gpu in wrapped.gpus)
        wrapped.sample()
        clock.advance(0.25)
        readings, made = calls_during(old_pynvml, wrapped.sample)
        assert not any(function.startswith("raw:") for function, _ in made)
        assert made[("nvmlDeviceGetUtilizationRates", 0)] == 1
        assert without_link_rates(readings) == without_link_rates(first)
    finally:
        wrapped.close()


@pytest.mark.parametrize("scenario", ["h200x2-r580", "a100x4-r470"])
def test_direct_and_careful_reads_give_the_same_readings(
    open_sampler, clock, careful_queries, scenario
):
    """The first tick goes through the careful wrapper; once every field answered, ticks use
    direct calls; a direct call that raises sends that tick back through the wrapper. For
    the same fake state the three give identical readings."""
    fake, sampler = open_sampler(scenario)
    fake.hold_readings()
    careful = careful_queries(sampler)
    first = sampler.sample()
    assert all(careful.get(g.index, 0) > 0 for g in sampler.gpus)
    assert all(getattr(r, f) is not None for r in first for f in ("power_w", "temp_c"))

    careful.clear()
    clock.advance(4.0)  # every GPU's slow fields due: the direct path reads all of them
    direct, made = calls_during(fake, sampler.sample)
    assert careful == {}
    assert slow_read_gpus(made, len(first)) == set(range(len(first)))
    assert without_link_rates(direct) == without_link_rates(first)

    fake.fail("nvmlDeviceGetPowerUsage", 0)  # one direct call raises, the wrapper's succeeds
    clock.advance(4.0)
    fallback = sampler.sample()
    assert careful.get(0, 0) >= len(TICK_QUERY_FIELDS) - 2 and careful.get(1, 0) == 0
    assert without_link_rates(fallback) == without_link_rates(first)
    assert sampler.notices.drain() == []  # the wrapper's read answered: nothing to say

    careful.clear()
    assert without_link_rates(sampler.sample()) == without_link_rates(first)
    assert careful == {}  # one failure does not keep a GPU off the direct path


def test_a_gpu_whose_direct_reads_fail_three_times_stays_careful(
    open_sampler, clock, careful_queries
):
    fake, sampler = open_sampler("h200x2-r580")
    careful = careful_queries(sampler)
    sampler.sample()
    for failure in range(1, 4):
        fake.fail("nvmlDeviceGetUtilizationRates", 1)
        careful.clear()
        readings = sampler.sample()  # the failing tick: through the wrapper, all fields there
        assert careful.get(1, 0) > 0 and careful.get(0, 0) == 0
        assert readings[1].util_gpu is not None and readings[1].power_w is not None
        careful.clear()
        clock.advance(0.25)
        sampler.sample()
        if failure < 3:
            assert careful == {}, failure  # back on direct calls
    for _ in range(4):
        careful.clear()
        clock.advance(0.25)
        readings = sampler.sample()
        assert careful.get(1, 0) > 0 and careful.get(0, 0) == 0
        assert readings[1].util_gpu is not None
    assert sampler.notices.drain() == []


def test_a_field_turning_unsupported_on_the_direct_path_is_null_not_an_exception(
    open_sampler, clock, careful_queries
):
    fake, sampler = open_sampler("h200x2-r580")
    careful = careful_queries(sampler)
    sampler.sample()
    sampler.notices.drain()
    fake.fail("nvmlDeviceGetTemperature", 0, fake.NVML_ERROR_NOT_SUPPORTED, times=None)
    temperature_calls = []
    for _ in range(5):
        clock.advance(SLOW_FIELDS_INTERVAL_S + 1.0)
        careful.clear()
        gpu0, gpu1 = sampler.sample()
        assert gpu0.temp_c is None and gpu1.temp_c is not None
        assert gpu0.mem_used_mb is not None and gpu0.util_gpu is not None
        assert careful.get(1, 0) == 0  # the other GPU stays direct
        temperature_calls.append(fake.calls("nvmlDeviceGetTemperature", 0))
    assert len(set(temperature_calls)) == 1  # asked once more (by the wrapper), then never
    (notice,) = sampler.notices.drain()
    assert notice.startswith("temperature: not supported on GPU 0 (")


def test_a_gpu_with_unsupported_fields_stays_careful_and_null(open_sampler, clock, careful_queries):
    fake, sampler = open_sampler("gtx1080-r418")
    careful = careful_queries(sampler)
    for _ in range(12):
        careful.clear()
        (reading,) = sampler.sample()
        assert careful.get(0, 0) >= 2  # utilisation and power through the wrapper every tick
        assert reading.power_limit_w is None and reading.throttle_reasons is None
        assert reading.processes == () and reading.util_gpu is not None
        assert reading.mem_used_mb is not None and reading.temp_c is not None
        clock.advance(0.5)
    assert fake.calls("nvmlDeviceGetEnforcedPowerLimit", 0) == 1  # never asked again


# --- 3. NVLink counters only where a link is up ----------------------------------------------


def wait_for_link_passes(sampler: NvmlSampler, passes: int) -> None:
    deadline = time.monotonic() + BOUND_S
    while sampler.link_passes < passes:
        assert time.monotonic() < deadline, "the links thread made too few passes"
        time.sleep(0.02)


def nvlink_notices(notices: list[str]) -> list[str]:
    return [n for n in notices if n.startswith("nvlink:")]


def test_nvlink_counters_are_read_from_gpus_with_an_active_link(open_sampler):
    fake, sampler = open_sampler("h200x2-r580", pcie_interval_s=0.1)
    wait_for_link_passes(sampler, 4)
    for reading in sampler.sample():
        assert reading.nvlink_tx_kbs == pytest.approx(NVLINK_KIB_PER_S, rel=0.1)
        assert reading.pcie_tx_kbs is not None
        assert fake.calls("field:138", reading.index) >= 4
        assert fake.calls("nvmlDeviceGetNvLinkState", reading.index) == 1  # link 0 is up
    assert nvlink_notices(sampler.notices.drain()) == []


def test_gpus_with_every_link_down_report_null_nvlink_with_one_notice(open_sampler):
    """GPUs 1 and 3 of 4 have every link down: their NVLink counters (which would read
    zeros) are never asked, and one notice says so; the links are checked once."""
    fake, sampler = open_sampler("nvlink-partly-down", pcie_interval_s=0.1)
    wait_for_link_passes(sampler, 4)
    readings = sampler.sample()
    for index in (0, 2):
        assert readings[index].nvlink_tx_kbs == pytest.approx(NVLINK_KIB_PER_S, rel=0.1)
        assert fake.calls("field:138", index) >= 4
    for index in (1, 3):
        assert readings[index].nvlink_tx_kbs is None and readings[index].nvlink_rx_kbs is None
        assert readings[index].pcie_tx_kbs is not None  # PCIe still read on the same thread
        assert fake.calls("field:138", index) == 0 and fake.calls("field:139", index) == 0
        assert fake.calls("nvmlDeviceGetNvLinkState", index) == fake.NVML_NVLINK_MAX_LINKS
    notices = nvlink_notices(sampler.notices.drain())
    assert notices == ["nvlink: no NVLink of GPU 1 is active; reported as null"]


def test_without_the_link_state_call_the_counters_themselves_decide(open_sampler):
    fake, sampler = open_sampler("nvlink-state-missing", pcie_interval_s=0.1)
    assert not hasattr(fake, "nvmlDeviceGetNvLinkState")
    wait_for_link_passes(sampler, 3)
    for reading in sampler.sample():
        assert reading.nvlink_tx_kbs == pytest.approx(NVLINK_KIB_PER_S, rel=0.1)
    assert nvlink_notices(sampler.notices.drain()) == []


# --- the agent as a subprocess: timing, link spacing, --report-cpu ----------------------------


def test_on_the_wire_memory_moves_only_at_the_slow_cadence(tmp_path: Path):
    """8 GPUs at 20 Hz whose memory grows with every read: each GPU's value changes first
    at 2 + i/4 s, then every 2 s, and nowhere else; utilisation is read every tick."""
    calls_file = tmp_path / "calls.json"
    code, lines, stderr = run_agent(
        ["--rate", "20", "--duration", "4.4"],
        nvml_env("growing-memory", FAKE_NVML_CALLS_FILE=str(calls_file)),
    )
    assert code == 0, stderr
    ticks = of_type(lines, "tick")
    assert len(ticks) >= 40  # 88 expected; a loaded machine may lose some
    calls = json.loads(calls_file.read_text())
    start = ticks[0]["wall"]
    for index in range(8):
        memory = [t["gpus"][index]["mem_used_mb"] for t in ticks]
        assert memory[0] == 1024 * (index + 1) + 512 + 1  # the first tick read it
        changed_at = [
            t["wall"] - start
            for t, before, now in zip(ticks[1:], memory, memory[1:], strict=False)
            if now != before
        ]
        assert changed_at, index
        assert changed_at[0] == pytest.approx(2.0 + 0.25 * index, abs=0.3), index
        for earlier, later in itertools.pairwise(changed_at):
            assert later - earlier == pytest.approx(2.0, abs=0.3), index
        assert calls["nvmlDeviceGetMemoryInfo"][str(index)] == 1 + len(changed_at)
        assert calls["nvmlDeviceGetTemperature"][str(index)] == 1 + len(changed_at)
        assert calls["nvmlDeviceGetUtilizationRates"][str(index)] == len(ticks)


def link_reads(calls: dict[str, dict[str, int]], index: int) -> int:
    return calls.get("nvmlDeviceGetFieldValues", {}).get(str(index), 0)


def test_costly_link_reads_are_spaced_out_with_one_notice(tmp_path: Path):
    """A pass over 2 GPUs' counters costs 2 x 0.12 ms of CPU or more: at 0.01% of a core
    that allows one pass per ~2.4 s or more, not every --pcie-interval 0.2 s."""
    assert agent.LINK_CPU_SHARE == 0.0001
    calls_file = tmp_path / "calls.json"
    env = nvml_env(
        "costly-counters", FAKE_NVML_COUNTER_CPU_MS="0.12", FAKE_NVML_CALLS_FILE=str(calls_file)
    )
    code, lines, stderr = run_agent(
        ["--rate", "10", "--duration", "5", "--pcie-interval", "0.2"], env
    )
    assert code == 0, stderr
    calls = json.loads(calls_file.read_text())
    notices = [n["message"] for n in of_type(lines, "notice") if "pcie and nvlink" in n["message"]]
    assert len(notices) == 1, notices
    spaced = re.search(
        r"costs ([\d.]+) ms of CPU here, so they are read every ([\d.]+) s", notices[0]
    )
    assert spaced is not None, notices[0]
    spacing = float(spaced[2])
    assert float(spaced[1]) >= 0.2 and 2.0 <= spacing <= 6.0
    assert "instead of every 0.2 s" in notices[0]
    # Passes at 0 s, 0.2 s (the second comes soon), then `spacing` apart (about 2.4 s; more
    # where this machine measured the reads dearer): 3-4 in 5 s at 2.4 s, never 26. The
    # lower bound follows the spacing the agent measured, with 0.5 s for start-up.
    fewest = 2 + int((5 - 0.2 - 0.5) / spacing)
    for index in (0, 1):
        assert fewest <= link_reads(calls, index) <= 5, (spacing, calls)


REPORT_KEYS = {
    "type",
    "source",
    "gpus",
    "rate_hz",
    "link_interval_s",
    "ticks",
    "wall_s",
    "process_cpu_s",
    "cpu_ms_per_tick",
    "core_percent",
    "main_thread_ms_per_tick",
    "links",
}


def test_report_cpu_writes_one_line_to_stderr_at_exit(spawn, tmp_path: Path):  # noqa: F811
    """Stopped by SIGTERM as the console stops it: stdout is JSON lines of the wire format
    only, stderr exactly one cpu_report line. Cheap counters (the fake's pass costs ~0.1 ms,
    under the 0.4 ms that 0.01% of a core allows per 4 s: at 2 s a pass slowed by a busy
    machine went over and the reads were spaced, with a notice) are read every
    --pcie-interval (a minimum: never more often)."""
    calls_file = tmp_path / "calls.json"
    process = spawn(
        ["--rate", "20", "--pcie-interval", "4.0", "--report-cpu"],
        nvml_env("h200x2-r580", FAKE_NVML_CALLS_FILE=str(calls_file)),
    )
    lines = [read_json_line(process)]
    started = time.monotonic()
    while time.monotonic() - started < 9.0:  # link reads at 0, 0.5, 4.5 and 8.5 s
        lines.append(read_json_line(process))
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=BOUND_S)
    assert process.returncode == 0, err
    stdout_lines = lines + [json.loads(line) for line in out.splitlines()]
    assert {line["type"] for line in stdout_lines} == {"header", "tick"}
    elapsed = time.monotonic() - started
    calls = json.loads(calls_file.read_text())
    for index in (0, 1):  # at 0 s, 0.5 s (the second comes soon), then every 4 s
        assert 3 <= link_reads(calls, index) <= 2 + elapsed / 4.0, calls

    (report_line,) = err.splitlines()
    report = json.loads(report_line)
    assert set(report) == REPORT_KEYS
    assert report["type"] == "cpu_report" and report["source"] == "nvml"
    assert (report["gpus"], report["rate_hz"], report["link_interval_s"]) == (2, 20.0, 4.0)
    ticks = len(of_type(stdout_lines, "tick"))
    assert 10 <= report["ticks"] < ticks  # the window leaves out the first second
    assert report["wall_s"] >= 0.5 * report["ticks"] / 20.0  # seconds, at most 20 ticks a second
    assert report["process_cpu_s"] > 0 and report["cpu_ms_per_tick"] > 0
    main = report["main_thread_ms_per_tick"]
    assert set(main) == {"total", "sample", "encode", "write", "wait_and_loop"}
    parts = main["sample"] + main["encode"] + main["write"] + main["wait_and_loop"]
    assert parts == pytest.approx(main["total"], abs=0.001)
    assert main["sample"] > 0 and main["encode"] > 0
    links = report["links"]
    assert set(links) == {
        "passes",
        "gpu_reads",
        "cpu_ms_per_pass",
        "cpu_ms_per_gpu_read",
        "cpu_ms_per_tick",
    }
    assert links["passes"] >= 2 and links["gpu_reads"] == 2 * links["passes"]


def test_report_cpu_on_a_run_too_short_to_measure_says_so():
    code, lines, stderr = run_agent(
        ["--count", "2", "--rate", "20", "--report-cpu"], nvml_env("h200x2-r580")
    )
    assert code == 0
    assert [line["type"] for line in lines] == ["header", "tick", "tick"]
    (report_line,) = stderr.splitlines()
    report = json.loads(report_line)
    assert report["type"] == "cpu_report" and report["ticks"] == 0
    assert report["error"] == "the run ended before the measuring window had two ticks"


def test_state_entries_are_encoded_again_only_when_their_fields_change(monkeypatch):
    """The nvidia-smi-rows stream's state entries: a wake-up that finds a GPU's slow fields
    and link rates unchanged reuses that GPU's JSON text (the same object); new link rates
    give a new text, equal to the JSON of the GPU's reading."""
    fake = load_fake(monkeypatch, "h200x2-r580")
    fake.hold_readings()
    sampler = NvmlSampler(fake, NoticeLog(), 0.1)
    sampler.open("test-host", links_thread=False)
    try:
        sampler.read_slow_fields()
        first = sampler.state_entries()
        assert [json.loads(entry)["index"] for entry in first] == [0, 1]
        sampler.read_slow_fields()  # the same values again
        again = sampler.state_entries()
        assert all(a is b for a, b in zip(first, again, strict=True))
        for _ in range(2):  # two link passes make a rate
            sampler.read_links_if_due(time.monotonic())
            time.sleep(0.15)
        with_links = sampler.state_entries()
        for gpu, entry, old in zip(sampler.gpus, with_links, first, strict=True):
            assert entry != old
            assert entry == json.dumps(vars(sampler._reading(gpu, gpu.link_rates)))
            assert json.loads(entry)["pcie_tx_kbs"] is not None
            assert json.loads(entry)["util_gpu"] is None  # nvidia-smi's rows carry it
    finally:
        sampler.close()


def test_link_reads_in_the_callers_wake_ups_keep_their_spacing(monkeypatch):
    """read_links_if_due (the rows stream's wake-ups, no links thread): the first pass at
    once, the second after the short first wait, then not before --pcie-interval."""
    fake = load_fake(monkeypatch, "h200x2-r580")
    sampler = NvmlSampler(fake, NoticeLog(), 5.0)
    sampler.open("test-host", links_thread=False)
    try:
        assert sampler._links_thread is None

        def passes_after(now: float) -> int:
            sampler.read_links_if_due(now)
            return sampler.link_passes

        assert passes_after(100.0) == 1
        assert passes_after(100.3) == 1  # the second pass is due 0.5 s after the first
        assert passes_after(100.5) == 2 and sampler.first_rates.is_set()
        assert passes_after(104.0) == 2  # --pcie-interval 5 s
        assert passes_after(105.6) == 3
        assert fake.calls("field:197", 0) == 3
    finally:
        sampler.close()

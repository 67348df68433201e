"""The nvidia-smi fallback's parsers on CSV recorded from a real H200 (driver 580.159.04),
and the clock-reason names shared by both sources."""

from __future__ import annotations

import pytest
from support.paths import TESTS

from specmon.remote.agent import (
    SMI_COLUMNS,
    GpuReading,
    processes_from_smi_csv,
    reading_from_smi_csv,
    throttle_reason_names,
)

RECORDED = TESTS / "fake_pynvml" / "recorded"
UUID = "GPU-2864ba34-9f96-c327-58f3-76ec583443a3"


def recorded_rows() -> list[str]:
    """The recorded rows without their leading driver_version column: idle, load, after."""
    lines = (RECORDED / "h200-query-gpu.csv").read_text().splitlines()
    return [line.split(",", 1)[1].strip() for line in lines if line.strip()]


def test_an_idle_h200_row_parses_to_a_reading():
    assert reading_from_smi_csv(recorded_rows()[0]) == GpuReading(
        index=0,
        uuid=UUID,
        name="NVIDIA H200",
        util_gpu=0.0,
        util_mem=0.0,
        mem_used_mb=0.0,
        mem_total_mb=143771.0,
        power_w=81.17,
        power_limit_w=700.0,
        temp_c=38.0,
        sm_clock_mhz=345.0,
        mem_clock_mhz=3201.0,
        throttle_reasons=("gpu_idle",),
    )


def test_a_loaded_h200_row_parses_to_a_reading():
    reading = reading_from_smi_csv(recorded_rows()[1])
    assert (reading.util_gpu, reading.util_mem) == (99.0, 21.0)
    assert reading.mem_used_mb == 17613.0 and reading.power_w == 700.22
    assert reading.sm_clock_mhz == 1515.0 and reading.throttle_reasons == ("sw_power_cap",)
    assert reading.pcie_tx_kbs is None and reading.processes == ()


def test_fields_nvidia_smi_cannot_read_become_none():
    cells = recorded_rows()[0].split(", ")
    cells[SMI_COLUMNS.index("power.draw")] = "[N/A]"
    cells[SMI_COLUMNS.index("power.limit")] = "[Not Supported]"
    cells[SMI_COLUMNS.index("clocks_throttle_reasons.active")] = "[N/A]"
    reading = reading_from_smi_csv(", ".join(cells))
    assert reading.power_w is None and reading.power_limit_w is None
    assert reading.throttle_reasons is None and reading.temp_c == 38.0


@pytest.mark.parametrize(
    "line",
    [
        "No devices were found",
        "",
        "0, GPU-1, NVIDIA H200",
        "[N/A], GPU-1, NVIDIA H200, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0x1",
        "x, GPU-1, NVIDIA H200, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0x1",
        "0, GPU-1, NVIDIA H200, busy, 0, 0, 1, 1, 1, 1, 1, 1, 0x1",
    ],
)
def test_lines_that_are_no_sample_raise_value_error(line: str):
    with pytest.raises(ValueError):
        reading_from_smi_csv(line)


def test_compute_apps_recorded_under_load_name_the_pid():
    text = (RECORDED / "h200-compute-apps.csv").read_text()
    assert processes_from_smi_csv(text) == {UUID: ((470, 17604.0),)}


def test_compute_apps_tolerate_missing_memory_and_stray_lines():
    text = f"{UUID}, 470, 17604\n{UUID}, 471, [N/A]\n\nNo running processes found\nGPU-2, x, 5\n"
    assert processes_from_smi_csv(text) == {UUID: ((470, 17604.0), (471, None))}
    assert processes_from_smi_csv("") == {}


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (0x0, ()),
        (0x1, ("gpu_idle",)),
        (0x4, ("sw_power_cap",)),
        (0x4 | 0x40, ("sw_power_cap", "hw_thermal")),
        (0x1 | 0x1000, ("gpu_idle", "0x1000")),
    ],
)
def test_clock_reason_bits_are_named(mask: int, names: tuple[str, ...]):
    assert throttle_reason_names(mask) == names

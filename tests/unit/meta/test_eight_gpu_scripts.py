"""The 8-GPU check's scripts count every GPU: scripts/gpu_check.py checks each GPU against its
own load process, and benchmarks/agent_cost.py measures the agent directly on 8 real GPUs
instead of extrapolating from one (docs/eight-gpu-check.md)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from support.paths import REPO


def load(relative: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def reading(index: int, util: float, pids: tuple[int, ...], mem_mb: float) -> dict:
    return {
        "index": index,
        "util_gpu": util,
        "power_w": 100.0 + util * 5,
        "mem_used_mb": mem_mb,
        "processes": [[pid, mem_mb] for pid in pids],
    }


def test_gpu_check_reads_each_gpu_against_its_own_load():
    gpu_check = load("scripts/gpu_check.py", "gpu_check_under_test")
    idle = [{"type": "tick", "wall": 1.0, "gpus": [reading(0, 0, (), 500), reading(1, 0, (), 500)]}]
    loaded = [
        {
            "type": "tick",
            "wall": 10.0 + i,
            "gpus": [reading(0, 99, (4000,), 17000), reading(1, 97, (4001,), 18000)],
        }
        for i in range(4)
    ]
    after = [
        {"type": "tick", "wall": 20.0, "gpus": [reading(0, 1, (), 500), reading(1, 0, (), 500)]}
    ]
    ticks = idle + loaded + after
    mib = 1024.0 * 1024.0
    load_of_gpu1 = [(12.0, {"event": "mem", "wall": 12.0, "free": 0, "total": int(18000 * mib)})]
    figures = gpu_check.gpu_figures(1, 4001, load_of_gpu1, ticks, idle, loaded, after, 5.0)
    assert figures["load_pid_seen"] and figures["pids_seen_under_load"] == [4001]
    assert figures["util_load_median"] == 97 and figures["util_after_max"] == 0
    assert figures["memory_pairs"] == [
        {"torch_used_mb": 18000.0, "agent_used_mb": 18000, "relative_diff": 0.0}
    ]
    # GPU 0's load pid is not on GPU 1: the check is per GPU, not "anywhere on the host".
    assert not gpu_check.gpu_figures(1, 4000, [], ticks, idle, loaded, after, 5.0)["load_pid_seen"]


WINDOW = {
    "agent": {"cpu_ms_per_s": 6.0},
    "agent_no_links": {"cpu_ms_per_s": 5.0},
    "agent_ticking": {"cpu_ms_per_s": 9.0},
    "smi_console_fields": {"cpu_ms_per_s": 12.0},
    "smi_row_fields": {"cpu_ms_per_s": 4.4},
    "smi_tick_fields": {"cpu_ms_per_s": 4.0},
    "smi_index_only": {"cpu_ms_per_s": 2.0},
}


def test_agent_cost_on_one_gpu_keeps_its_extrapolation():
    cost = load("benchmarks/agent_cost.py", "agent_cost_under_test")
    window = {
        **WINDOW,
        "agent_x8": {"cpu_ms_per_s": 7.4},
        "agent_ticking_x8": {"cpu_ms_per_s": 16.0},
    }
    summary = cost.summarise(window, 1)
    assert summary["smi_row_fields_parts_ms_per_s"]["per_gpu"] == 2.4
    agent = summary["agent_parts_ms_per_s"]
    assert agent["per_gpu"] == round((7.4 - 6.0) / 7 + 2.4, 4)
    assert agent["8_gpus"] == round(6.0 - (0.2 + 2.4) + 8 * (0.2 + 2.4), 4)
    assert not any("measured_on" in key for key in summary)


def test_agent_cost_on_eight_gpus_is_measured_not_extrapolated():
    cost = load("benchmarks/agent_cost.py", "agent_cost_under_test")
    summary = cost.summarise(WINDOW, 8)
    assert summary["agent_measured_on_8_gpus_ms_per_s"] == {
        "ms_per_s": 6.0,
        "core_percent": 0.6,
        "target_met": False,
    }
    assert "agent_parts_ms_per_s" not in summary  # nothing derived from repeated GPUs
    # nvidia-smi's per-GPU part is its field cost over the 8 GPUs it read
    assert summary["smi_row_fields_parts_ms_per_s"]["per_gpu"] == round(2.4 / 8, 4)

    class Args:
        baseline = None
        fallback = False
        old_helper = None

    names = cost.contenders(Args(), 8)
    assert "agent" in names and not any(name.endswith("_x8") for name in names)
    assert "agent_x8" in cost.contenders(Args(), 1)


def test_agent_cost_takes_the_agents_nvidia_smi_part_from_the_loops_told_their_gpus():
    """The agent runs nvidia-smi with `--id=...`; its per-GPU part comes from those loops."""
    cost = load("benchmarks/agent_cost.py", "agent_cost_under_test")
    window = {
        **WINDOW,
        "agent": {"cpu_ms_per_s": 6.0, "own_cpu_ms_per_s": 2.5},
        "agent_x8": {"cpu_ms_per_s": 7.4},
        "smi_row_fields_id": {"cpu_ms_per_s": 3.0},
        "smi_index_only_id": {"cpu_ms_per_s": 1.5},
        "smi_agent_loop": {"cpu_ms_per_s": 3.1},
    }
    summary = cost.summarise(window, 1)
    assert summary["agent_parts_ms_per_s"]["per_gpu"] == round((7.4 - 6.0) / 7 + 1.5, 4)
    assert summary["smi_index_only_id/smi_index_only"] == 0.75
    assert summary["agent_nvidia_smi_ms_per_s"] == {
        "in_the_agent": 3.5,
        "alone": 3.1,
        "python_child": None,
    }

    class Args:
        baseline = None
        fallback = False
        old_helper = None

    names = cost.contenders(Args(), 2)
    assert "--id=0,1" in names["smi_row_fields_id"][0]
    assert names["smi_agent_loop"][0][:2] == ["env", "TZ=UTC"]

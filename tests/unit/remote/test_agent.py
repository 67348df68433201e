"""The GPU agent as a real subprocess: fake pynvml scenarios (driver generations, unsupported
fields, a GPU lost, no driver), the nvidia-smi fallback on recorded H200 output, and how it
stops (signals, closed pipe, stdin EOF, parent gone). Every process is killed at teardown."""

from __future__ import annotations

import ast
import itertools
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.paths import REPO, TESTS

from specmon.model.events import GpuSample
from specmon.remote import AGENT_SOURCE
from specmon.remote.agent import reading_from_smi_csv
from specmon.session.gpu_stream import AgentHeader, parse_agent_line, reading_problems

AGENT = AGENT_SOURCE
FAKE = TESTS / "fake_pynvml"
FAKE_BIN = FAKE / "bin"
RECORDED = FAKE / "recorded"
HOST = socket.gethostname()
TIMEOUT = 30


def nvml_env(scenario: str, **extra: str) -> dict[str, str]:
    """The fake pynvml first on the path, and no nvidia-smi anywhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_")}
    env.update(PYTHONPATH=str(FAKE), FAKE_NVML_SCENARIO=scenario, PATH="/usr/bin:/bin")
    env.update(extra)
    return env


def smi_env(scenario: str = "ok", path: str | None = None, **extra: str) -> dict[str, str]:
    """No pynvml (the agent runs with -S) and the fake nvidia-smi on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_")}
    env.pop("PYTHONPATH", None)
    env["PATH"] = path if path is not None else f"{FAKE_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["FAKE_SMI_SCENARIO"] = scenario
    env.update(extra)
    return env


def run_agent(
    args: list[str], env: dict[str, str], *, no_site: bool = False
) -> tuple[int, list[dict], str]:
    command = [sys.executable, *(["-S"] if no_site else []), str(AGENT), *args]
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def of_type(lines: list[dict], kind: str) -> list[dict]:
    return [line for line in lines if line["type"] == kind]


@pytest.fixture
def spawn() -> Iterator:
    """Start agents in their own process group; kill every group left at teardown."""
    started: list[subprocess.Popen] = []

    def start(args: list[str], env: dict[str, str], *, no_site: bool = False, **kwargs):
        command = [sys.executable, *(["-S"] if no_site else []), str(AGENT), *args]
        process = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            **kwargs,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        for stream in (process.stdout, process.stderr, process.stdin):
            if stream is not None:
                stream.close()


def child_commands(parent: int) -> dict[int, str]:
    """The direct children of a process and their command lines, from /proc."""
    children = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            children[int(entry.name)] = command
    return children


def read_json_line(process: subprocess.Popen) -> dict:
    line = process.stdout.readline()
    assert line, f"agent closed its output; stderr: {process.stderr.read()}"
    return json.loads(line)


def read_until_tick(process: subprocess.Popen) -> dict:
    for _ in range(20):
        line = read_json_line(process)
        if line["type"] == "tick":
            return line
    raise AssertionError("no tick in 20 lines")


# --- NVML through the fake pynvml ---------------------------------------------------------


def test_header_then_ticks_carry_every_field_on_a_current_driver():
    code, lines, stderr = run_agent(["--count", "3", "--rate", "20"], nvml_env("h200x2-r580"))
    assert code == 0, stderr
    assert lines[0] == {
        "type": "header",
        "schema": 2,
        "source": "nvml",
        "driver": "580.159.04",
        "nvml": "13.580.159.04",
        "cuda": "13.0",
        "host": HOST,
        "gpus": 2,
    }
    ticks = of_type(lines, "tick")
    assert len(ticks) == 3 and not of_type(lines, "notice")
    for tick in ticks:
        assert [gpu["index"] for gpu in tick["gpus"]] == [0, 1]
        for gpu in tick["gpus"]:
            assert reading_problems(gpu) == []
    first = ticks[0]["gpus"][0]
    assert first["name"] == "NVIDIA H200" and first["uuid"].startswith("GPU-")
    assert first["mem_total_mb"] == 143771.0 and first["mem_used_mb"] == 1536.0
    assert first["power_limit_w"] == 700.0 and first["sm_clock_mhz"] == 1980.0
    assert first["processes"] == [[40000, 1024.0]]
    assert ticks[1]["gpus"][1]["processes"] == [[40001, 2048.0]]
    assert {r for t in ticks for g in t["gpus"] for r in g["throttle_reasons"]} <= {
        "gpu_idle",
        "sw_power_cap",
    }
    assert ticks[0]["gpus"][0]["util_gpu"] != ticks[1]["gpus"][0]["util_gpu"]  # live values


def test_link_rates_come_from_byte_counters_and_once_waits_for_them():
    """PCIe and NVLink rates are deltas of NVML's byte counters, read on their own thread;
    a single tick (--once) waits for the two reads a rate needs."""
    code, lines, stderr = run_agent(["--once", "--pcie-interval", "0.2"], nvml_env("h200x2-r580"))
    assert code == 0, stderr
    (tick,) = of_type(lines, "tick")
    for gpu in tick["gpus"]:
        assert gpu["pcie_tx_kbs"] == pytest.approx(5_000_000 / 1024, rel=0.1)
        assert gpu["pcie_rx_kbs"] == pytest.approx(2_000_000 / 1024, rel=0.1)
        assert gpu["nvlink_tx_kbs"] == pytest.approx(100_000, rel=0.1)
        assert gpu["nvlink_rx_kbs"] == pytest.approx(80_000, rel=0.1)


def test_an_older_driver_generation_streams_through_the_old_names():
    code, lines, stderr = run_agent(
        ["--count", "6", "--rate", "10", "--pcie-interval", "0.1"], nvml_env("a100x4-r470")
    )
    assert code == 0, stderr
    header = lines[0]
    assert header["driver"] == "470.256.02" and header["cuda"] == "11.4"  # bytes, old call
    ticks = of_type(lines, "tick")
    assert len(ticks) == 6
    gpu = ticks[-1]["gpus"][3]
    assert gpu["name"] == "A100-SXM4-40GB" and gpu["uuid"].endswith("3")
    assert gpu["throttle_reasons"] is not None  # nvmlDeviceGetCurrentClocksThrottleReasons
    assert gpu["processes"] == [[40003, None]]  # no per-process memory in this container
    # No nvmlDeviceGetMemoryInfo_v2 before r510: v1's "used" includes the reserved 615 MiB.
    assert gpu["mem_used_mb"] == 4096 + 512 + 615
    assert not any("memory" in n["message"] for n in of_type(lines, "notice"))
    # No PCIe byte counters: the blocking query runs on its own thread and fills in.
    assert (gpu["pcie_tx_kbs"], gpu["pcie_rx_kbs"]) == (1234.0, 567.0)
    assert gpu["nvlink_tx_kbs"] == pytest.approx(100_000, rel=0.1)


def test_unsupported_fields_are_null_and_each_noticed_once():
    code, lines, stderr = run_agent(["--count", "4", "--rate", "20"], nvml_env("gtx1080-r418"))
    assert code == 0, stderr
    ticks = of_type(lines, "tick")
    assert len(ticks) == 4
    for tick in ticks:
        gpu = tick["gpus"][0]
        assert reading_problems(gpu) == []
        assert gpu["util_gpu"] is not None and gpu["power_w"] is not None
        for field in ("power_limit_w", "throttle_reasons", "pcie_tx_kbs", "nvlink_tx_kbs"):
            assert gpu[field] is None, field
        assert gpu["processes"] == []
    notices = [n["message"] for n in of_type(lines, "notice")]
    assert len(notices) == len(set(notices))
    for field in ("power_limit", "processes", "throttle_reasons", "field_values"):
        assert sum(message.startswith(field + ":") for message in notices) == 1, notices
    # Notices come before the first tick, never again after.
    assert lines.index(ticks[0]) > max(lines.index(n) for n in of_type(lines, "notice"))


def test_a_lost_gpu_is_reported_while_the_others_keep_streaming():
    code, lines, stderr = run_agent(
        ["--count", "5", "--rate", "20"], nvml_env("lost", FAKE_NVML_LOST_AFTER="2")
    )
    assert code == 0, stderr
    ticks = of_type(lines, "tick")
    assert len(ticks) == 5
    for number, tick in enumerate(ticks, start=1):
        lost = tick["gpus"][2]
        if number <= 2:
            assert lost["error"] is None and lost["util_gpu"] is not None
        else:
            assert lost["error"] == "gpu_is_lost" and lost["util_gpu"] is None
            assert lost["uuid"].endswith("2") and lost["name"] == "NVIDIA H200"
        for other in (0, 1, 3):
            assert tick["gpus"][other]["error"] is None
            assert tick["gpus"][other]["util_gpu"] is not None
    notices = of_type(lines, "notice")
    assert len(notices) == 1 and notices[0]["message"].startswith("GPU 2 (GPU-")
    assert "is lost" in notices[0]["message"]


def test_a_gpu_lost_before_start_is_reported_from_the_first_tick():
    code, lines, stderr = run_agent(["--count", "2", "--rate", "20"], nvml_env("lost-at-start"))
    assert code == 0, stderr
    assert lines[0]["gpus"] == 3
    for tick in of_type(lines, "tick"):
        assert [g["error"] for g in tick["gpus"]] == [None, "gpu_is_lost", None]


@pytest.mark.parametrize(
    ("scenario", "message"),
    [
        (
            "no-driver",
            f"no NVIDIA driver on host {HOST}: Driver Not Loaded (the nvidia kernel module "
            "is not loaded)",
        ),
        (
            "no-library",
            f"no NVIDIA driver on host {HOST}: NVML Shared Library Not Found "
            "(libnvidia-ml.so.1 is not installed)",
        ),
        ("no-gpu", f"no NVIDIA GPU on host {HOST}: NVML found 0 devices (driver 580.159.04)"),
    ],
)
def test_no_driver_or_no_gpu_is_one_clear_error_line(scenario: str, message: str):
    code, lines, _ = run_agent(["--rate", "4"], nvml_env(scenario))
    assert code == 1
    # nothing to read on this host: the console is told not to restart the agent
    assert lines == [{"type": "error", "message": message, "retry": False}]


def test_the_real_pynvml_on_a_host_without_a_driver_says_so():
    probe = subprocess.run(
        [sys.executable, "-c", "import pynvml; pynvml.nvmlInit()"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    if "No module named" in probe.stderr:
        pytest.skip("nvidia-ml-py is not installed here")
    if probe.returncode == 0:
        pytest.skip("this machine has an NVIDIA driver")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = "/usr/bin:/bin"
    code, lines, _ = run_agent(["--once"], env)
    assert code == 1 and len(lines) == 1 and lines[0]["type"] == "error"
    assert lines[0]["message"].startswith(f"no NVIDIA driver on host {HOST}: ")
    assert lines[0]["retry"] is False


def test_the_tick_keeps_time_with_eight_gpus_whose_pcie_query_blocks():
    """The ~20 ms PCIe query runs on its own thread: 8 GPUs at 10 Hz still tick on time."""
    code, lines, stderr = run_agent(
        ["--rate", "10", "--duration", "2.5", "--pcie-interval", "0.5"], nvml_env("slow-pcie")
    )
    assert code == 0, stderr
    ticks = of_type(lines, "tick")
    assert len(ticks[0]["gpus"]) == 8
    walls = [t["wall"] for t in ticks]
    intervals = [b - a for a, b in itertools.pairwise(walls)]
    assert len(ticks) >= 18  # 25 expected; a loaded CI machine may lose a few
    assert 0.09 <= statistics.median(intervals) <= 0.12
    assert ticks[-1]["gpus"][7]["pcie_tx_kbs"] == 1234.0


# --- the nvidia-smi fallback ----------------------------------------------------------------


def recorded_query_rows() -> list[str]:
    """The recorded H200 rows, without their leading driver_version column."""
    rows = []
    for line in (RECORDED / "h200-query-gpu.csv").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            rows.append(line.split(",", 1)[1].strip())
    return rows


def test_without_pynvml_the_agent_streams_from_nvidia_smi():
    code, lines, stderr = run_agent(
        ["--count", "3", "--rate", "20"], smi_env(FAKE_SMI_GPUS="2"), no_site=True
    )
    assert code == 0, stderr
    header = lines[0]
    recorded_driver = (RECORDED / "h200-query-gpu.csv").read_text().split(",", 1)[0].strip()
    assert header["source"] == "nvidia-smi" and header["driver"] == recorded_driver
    assert header["gpus"] == 2
    ticks = of_type(lines, "tick")
    assert len(ticks) == 3
    expected = [reading_from_smi_csv(row) for row in recorded_query_rows()]
    apps = (RECORDED / "h200-compute-apps.csv").read_text().split(",")
    for number, tick in enumerate(ticks):
        assert [g["index"] for g in tick["gpus"]] == [0, 1]
        gpu = tick["gpus"][0]
        assert reading_problems(gpu) == []
        want = expected[number % len(expected)]
        assert gpu["util_gpu"] == want.util_gpu and gpu["power_w"] == want.power_w
        assert gpu["mem_used_mb"] == want.mem_used_mb
        assert gpu["pcie_tx_kbs"] is None  # nvidia-smi has no throughput column
        assert gpu["processes"] == [[int(apps[1]), float(apps[2])]]
    notices = [n["message"] for n in of_type(lines, "notice")]
    assert any(n.startswith("pcie and nvlink throughput") for n in notices)


def test_the_fallback_uses_the_new_clock_reason_name_when_the_old_is_refused():
    code, lines, stderr = run_agent(
        ["--count", "2", "--rate", "20"], smi_env("event-reasons-only"), no_site=True
    )
    assert code == 0, stderr
    ticks = of_type(lines, "tick")
    assert len(ticks) == 2 and ticks[0]["gpus"][0]["throttle_reasons"] is not None


@pytest.mark.parametrize(
    ("scenario", "message", "final"),
    [
        (  # a driver mid-reload says this too: retried
            "no-driver",
            f"no NVIDIA driver on host {HOST}: nvidia-smi failed (exit 9): NVIDIA-SMI has "
            "failed because it couldn't communicate with the NVIDIA driver. Make sure that "
            "the latest NVIDIA driver is installed and running.",
            {},
        ),
        (
            "no-devices",
            f"no NVIDIA GPU on host {HOST}: nvidia-smi: No devices were found",
            {"retry": False},
        ),
    ],
)
def test_the_fallback_reports_nvidia_smi_failures_in_one_line(
    scenario: str, message: str, final: dict
):
    code, lines, _ = run_agent(["--once"], smi_env(scenario), no_site=True)
    assert code == 1
    assert lines == [{"type": "error", "message": message, **final}]


def test_neither_pynvml_nor_nvidia_smi_is_one_error_line():
    code, lines, _ = run_agent(["--once"], smi_env(path="/nonexistent"), no_site=True)
    assert code == 1 and len(lines) == 1
    message = lines[0]["message"]
    assert message.startswith(f"no NVIDIA driver on host {HOST}: python3 (")
    assert message.endswith("has no pynvml module (nvidia-ml-py) and nvidia-smi is not on PATH")
    assert lines[0]["retry"] is False


def test_nvidia_smi_dying_mid_run_ends_the_agent_with_its_message():
    code, lines, _ = run_agent(["--rate", "20"], smi_env("dies"), no_site=True)
    assert code == 1
    assert len(of_type(lines, "tick")) == 2
    assert lines[-1] == {
        "type": "error",
        "message": "nvidia-smi exited (code 15): Unable to determine the device handle for "
        "GPU0000:19:00.0: Unknown Error",
    }


# --- stopping ------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_stops_the_agent_cleanly(spawn, signum: int):
    agent = spawn(["--rate", "20"], nvml_env("h200x2-r580"))
    assert read_json_line(agent)["type"] == "header"
    assert read_json_line(agent)["type"] == "tick"
    agent.send_signal(signum)
    assert agent.wait(5) == 0
    assert agent.stderr.read() == ""


def test_the_fallback_takes_its_nvidia_smi_down_with_it(spawn):
    agent = spawn(["--rate", "20"], smi_env(), no_site=True)
    assert read_json_line(agent)["type"] == "header"
    read_until_tick(agent)
    children = child_commands(agent.pid)
    assert any("nvidia-smi" in command for command in children.values()), children
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(5) == 0
    deadline = time.monotonic() + 5
    while any(Path(f"/proc/{pid}").exists() for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(Path(f"/proc/{pid}").exists() for pid in children)


def test_a_closed_output_pipe_stops_the_agent_quietly(spawn):
    """The console closing the SSH channel: the next write fails and the agent exits 0."""
    agent = spawn(["--rate", "20"], nvml_env("h200x2-r580"))
    assert read_json_line(agent)["type"] == "header"
    agent.stdout.close()
    assert agent.wait(5) == 0
    assert agent.stderr.read() == ""  # no 'Exception ignored ... BrokenPipeError'


def test_watch_stdin_stops_the_agent_at_end_of_input(spawn):
    agent = spawn(["--rate", "20", "--watch-stdin"], nvml_env("h200x2-r580"), stdin=subprocess.PIPE)
    assert read_json_line(agent)["type"] == "header"
    assert read_json_line(agent)["type"] == "tick"
    agent.stdin.close()
    assert agent.wait(5) == 0


@pytest.mark.parametrize("how", ["sigterm", "stdin"])
def test_a_stop_cuts_the_sleep_between_ticks_short(spawn, how: str):
    """Between ticks the agent sleeps in time.sleep, which Python resumes after a signal
    handler that returns: the handler has to raise out of it (and --watch-stdin's thread has
    to signal the main thread), or a stop at 0.1 Hz would wait up to 10 s."""
    agent = spawn(
        ["--rate", "0.1", "--watch-stdin"], nvml_env("h200x2-r580"), stdin=subprocess.PIPE
    )
    assert read_json_line(agent)["type"] == "header"
    assert read_json_line(agent)["type"] == "tick"
    time.sleep(0.3)  # into the sleep before the second tick
    started = time.monotonic()
    if how == "sigterm":
        agent.send_signal(signal.SIGTERM)
    else:
        agent.stdin.close()
    assert agent.wait(5) == 0
    assert time.monotonic() - started < 2.0
    assert agent.stderr.read() == ""


def test_parent_pid_stops_the_agent_when_that_process_is_gone(spawn):
    parent = subprocess.Popen(["sleep", "30"])
    try:
        agent = spawn(["--rate", "20", "--parent-pid", str(parent.pid)], nvml_env("h200x2-r580"))
        assert read_json_line(agent)["type"] == "header"
        assert read_json_line(agent)["type"] == "tick"
        assert agent.poll() is None
    finally:
        parent.kill()
        parent.wait(5)
    assert agent.wait(5) == 0


# --- arguments, the command, portability ----------------------------------------------------


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--rate", "0"], "--rate must be above 0 and at most 50 Hz, got 0"),
        (["--rate", "51"], "--rate must be above 0 and at most 50 Hz, got 51"),
        (["--count", "0"], "--count must be at least 1, got 0"),
        (["--rate", "fast"], "argument --rate: invalid float value: 'fast'"),
    ],
)
def test_bad_arguments_are_one_error_line_and_exit_2(args: list[str], problem: str):
    code, lines, _ = run_agent(args, nvml_env("h200x2-r580"))
    assert code == 2
    assert lines == [{"type": "error", "message": f"bad agent arguments: {problem}"}]


def test_watch_stdin_is_refused_when_the_agent_comes_on_stdin():
    done = subprocess.run(
        [sys.executable, "-", "--watch-stdin"],
        input=AGENT.read_bytes(),
        env=nvml_env("h200x2-r580"),
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 2
    (line,) = done.stdout.decode().splitlines()
    assert json.loads(line)["message"].startswith(
        "bad agent arguments: --watch-stdin cannot be used when the agent itself is read"
    )


def test_specmon_agent_once_runs_it_locally():
    env = nvml_env("h200x2-r580", PYTHONPATH=f"{FAKE}{os.pathsep}{REPO}")
    done = subprocess.run(
        [sys.executable, "-m", "specmon", "agent", "--once", "--rate", "10"],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results = [parse_agent_line(line) for line in done.stdout.splitlines()]
    assert len(results) == 2 and isinstance(results[1], GpuSample)
    assert len(results[1].gpus) == 2


def test_specmon_agent_rejects_a_bad_rate_in_one_line():
    env = nvml_env("h200x2-r580", PYTHONPATH=f"{FAKE}{os.pathsep}{REPO}")
    done = subprocess.run(
        [sys.executable, "-m", "specmon", "agent", "--rate", "-1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "specmon agent: --rate must be above 0 and at most 50 Hz, got -1"


def old_python() -> str | None:
    """A Python 3.8 interpreter, if this machine has one that runs."""
    candidates = [shutil.which("python3.8"), "/root/.pyenv/versions/3.8.18/bin/python3.8"]
    for candidate in candidates:
        if candidate and os.path.exists(candidate):
            probe = subprocess.run(
                [candidate, "-c", "import sys; print(sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                check=False,
            )
            if probe.returncode == 0 and probe.stdout.strip() == "(3, 8)":
                return candidate
    return None


def test_the_agent_runs_on_python_38_fed_on_stdin():
    """The way it ships: `python3 - ARGS < agent.py` on a host with an old python3."""
    python = old_python()
    if python is None:
        pytest.skip("no Python 3.8 on this machine")
    done = subprocess.run(
        [python, "-", "--count", "2", "--rate", "20"],
        input=AGENT.read_bytes(),
        env=nvml_env("a100x4-r470"),
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results = [parse_agent_line(line) for line in done.stdout.decode().splitlines()]
    assert [type(r).__name__ for r in results] == ["AgentHeader", "GpuSample", "GpuSample"]
    # And its nvidia-smi fallback, with no site-packages (so no pynvml) under 3.8 too.
    done = subprocess.run(
        [python, "-S", "-", "--count", "2", "--rate", "20"],
        input=AGENT.read_bytes(),
        env=smi_env(),
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results = [parse_agent_line(line) for line in done.stdout.decode().splitlines()]
    assert isinstance(results[0], AgentHeader) and results[0].source == "nvidia-smi"
    assert sum(isinstance(r, GpuSample) for r in results) == 2


def test_the_agent_imports_only_the_standard_library_and_pynvml():
    tree = ast.parse(AGENT.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported - set(sys.stdlib_module_names) == {"pynvml"}
    top_level = {
        alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names
    }
    assert "pynvml" not in top_level  # imported when run, so the console can import the schema

"""The agent with nvidia-smi's loop as its tick sampler: rows and state lines on one stdout.

The agent runs as a real process over the fake pynvml (tests/fake_pynvml/pynvml.py) with the
fake nvidia-smi (tests/fake_pynvml/bin/nvidia-smi) on PATH, whose loop writes real CSV rows
into the agent's stdout; the console's reader (AgentStream) turns the stream back into ticks.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from support.paths import TESTS
from support.proc_stat import parent_of

from specmon.model.events import GpuSample
from specmon.remote import AGENT_SOURCE, agent
from specmon.remote.agent import PIPE_BUF, TICK_ROW_FIELDS, GpuReading, packed_writes, state_lines
from specmon.session.gpu_stream import AgentHeader, AgentNotice, AgentStream, AgentUnreadable

AGENT = AGENT_SOURCE
FAKE = TESTS / "fake_pynvml"
TIMEOUT = 30


def rows_env(smi_scenario: str = "ok", uuids: str = "nvml", **extra: str) -> dict[str, str]:
    """The fake pynvml (2 H200s) and the fake nvidia-smi listing the same 2 GPUs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_")}
    env.update(
        PYTHONPATH=str(FAKE),
        FAKE_NVML_SCENARIO="h200x2-r580",
        PATH=f"{FAKE / 'bin'}{os.pathsep}/usr/bin:/bin",
        FAKE_SMI_SCENARIO=smi_scenario,
        FAKE_SMI_UUIDS=uuids,
        FAKE_SMI_GPUS="2",
    )
    env.update(extra)
    return env


def run(args: list[str], env: dict[str, str]) -> tuple[int, list[str], str]:
    done = subprocess.run(
        [sys.executable, str(AGENT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    return done.returncode, done.stdout.splitlines(), done.stderr


@contextlib.contextmanager
def agent_process(args: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """The agent as a process of its own group; killed, with its group, if still running at
    the end, and its pipes closed."""
    process = subprocess.Popen(
        [sys.executable, str(AGENT), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def read_stream(lines: list[str]) -> list:
    stream = AgentStream()
    return [result for line in lines for result in stream.feed(line)]


def test_nvidia_smis_rows_are_the_ticks_and_the_agent_writes_state_lines():
    started = time.time()
    code, lines, stderr = run(["--rate", "10", "--duration", "2.5"], rows_env())
    assert code == 0, stderr
    header = json.loads(lines[0])
    assert header["schema"] == agent.SCHEMA_VERSION == 2
    assert header["tick_rows"] == list(TICK_ROW_FIELDS)
    states = [json.loads(line) for line in lines if line.startswith('{"type": "state"')]
    rows = [line for line in lines if line[:1].isdigit()]
    assert {s["gpus"][0]["index"] for s in states} == {0, 1}  # one line per GPU
    assert all(len(s["gpus"]) == 1 and s["gpus"][0]["util_gpu"] is None for s in states)
    assert len(rows) >= 2 * 15  # 10 Hz for 2.5 s, two GPUs each tick
    assert all(not line.startswith('{"type": "tick"') for line in lines)
    results = read_stream(lines)
    assert not [r for r in results if isinstance(r, (AgentUnreadable, AgentNotice))]
    ticks = [r for r in results if isinstance(r, GpuSample)]
    assert len(ticks) >= 15
    for tick in ticks:
        assert [g.index for g in tick.gpus] == [0, 1]
        assert started - 1 <= tick.wall <= time.time() + 1  # nvidia-smi's stamp, in UTC
    # the recorded H200 rows cycle idle (0%, 81.17 W) and loaded (99%, 700.22 W)
    assert {(g.util_gpu, g.power_w) for t in ticks for g in t.gpus} >= {
        (0.0, 81.17),
        (99.0, 700.22),
    }
    # and everything else is NVML's, from the state lines
    first = ticks[0].gpus[0]
    assert first.uuid == "GPU-fa4e0000-0000-4000-8000-000000000000"
    assert first.mem_total_mb == 143771.0 and first.temp_c is not None


def test_nvidia_smis_probe_and_loop_name_every_gpu(tmp_path: Path):
    """`--id=0,1`: nvidia-smi's loop costs less when told its GPUs (docs/gpu-agent.md, run
    16), and the probe is asked alike, so it checks the rows the loop will write."""
    log = tmp_path / "argv.log"
    code, lines, stderr = run(
        ["--rate", "10", "--duration", "1"], rows_env(FAKE_SMI_ARGV_LOG=str(log))
    )
    assert code == 0, stderr
    calls = log.read_text().splitlines()
    probes = [call for call in calls if "-lms" not in call]
    loops = [call for call in calls if "-lms" in call]
    assert len(probes) == 1 and "--query-gpu=uuid," in probes[0] and "--id=0,1" in probes[0]
    assert len(loops) == 1 and "--id=0,1 -lms 100" in loops[0]
    ticks = [r for r in read_stream(lines) if isinstance(r, GpuSample)]
    assert ticks and all([g.index for g in t.gpus] == [0, 1] for t in ticks)


def test_the_agent_and_its_nvidia_smi_stop_together_on_sigterm():
    with agent_process(["--rate", "4"], rows_env()) as process:
        assert process.stdout is not None
        for _ in range(10):  # header, state lines, then nvidia-smi's first row
            if process.stdout.readline()[:1].isdigit():
                break
        smi = [
            pid
            for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
            if parent_of(pid) == process.pid
        ]
        assert len(smi) == 1
        process.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        assert process.wait(5) == 0
        assert time.monotonic() - stopped < 2.0
        assert parent_of(smi[0]) is None  # gone (reaped by the agent), not orphaned


def test_when_nvidia_smis_loop_dies_the_agent_ticks_itself():
    """The fake loop writes two samples, then its error text, then exits 15: the stream
    shows the text as unreadable, the agent says so in a notice within one wake-up and
    carries on with its own JSON ticks."""
    code, lines, stderr = run(["--rate", "10", "--duration", "4"], rows_env("dies"))
    assert code == 0, stderr
    results = read_stream(lines)
    unreadable = [r for r in results if isinstance(r, AgentUnreadable)]
    assert [r.line.strip() for r in unreadable] == [
        "Unable to determine the device handle for GPU0000:19:00.0: Unknown Error"
    ]
    notices = [r.message for r in results if isinstance(r, AgentNotice)]
    assert any("nvidia-smi's loop exited (code 15)" in n for n in notices)
    json_ticks = [line for line in lines if line.startswith('{"type": "tick"')]
    assert len(json_ticks) >= 10  # the remaining ~2 s at 10 Hz
    ticks = [r for r in results if isinstance(r, GpuSample)]
    assert len(ticks) == 2 + len(json_ticks)


def test_nvidia_smi_listing_other_gpus_than_nvml_is_not_used():
    code, lines, stderr = run(["--rate", "20", "--duration", "0.5"], rows_env(uuids="recorded"))
    assert code == 0, stderr
    results = read_stream(lines)
    assert isinstance(results[0], AgentHeader) and results[0].tick_rows is None
    notices = [r.message for r in results if isinstance(r, AgentNotice)]
    assert any(
        "not nvidia-smi's loop (nvidia-smi's GPU 0 (GPU-2864ba34" in n
        and "is not NVML's GPU 0" in n
        for n in notices
    )
    assert len([r for r in results if isinstance(r, GpuSample)]) >= 5


def test_tick_sampler_agent_once_and_count_keep_the_agents_own_ticks():
    for args in (["--tick-sampler", "agent", "--duration", "0.5"], ["--once"], ["--count", "2"]):
        code, lines, stderr = run(["--rate", "20", *args], rows_env())
        assert code == 0, stderr
        header = json.loads(lines[0])
        assert "tick_rows" not in header, args
        assert all(line.startswith("{") for line in lines), args
        assert any(line.startswith('{"type": "tick"') for line in lines), args


def test_report_cpu_counts_the_agent_and_its_nvidia_smi():
    code, _, stderr = run(
        ["--rate", "10", "--duration", "5", "--state-interval", "1", "--report-cpu"], rows_env()
    )
    assert code == 0, stderr
    report = json.loads(stderr.strip().splitlines()[-1])
    assert report["ticks_by"] == "nvidia-smi" and report["wakes"] >= 1
    assert report["nvidia_smi_ms_per_s"] > 0 and report["agent_ms_per_s"] > 0
    total = report["agent_ms_per_s"] + report["nvidia_smi_ms_per_s"]
    assert abs(report["core_percent"] - total / 10) < 0.001


def test_state_writes_stay_within_pipe_buf_and_hold_whole_lines():
    """Writes of at most PIPE_BUF bytes are atomic on a pipe: nvidia-smi's cells can then
    only land between two of them, never inside one of the agent's lines."""
    entries = [
        json.dumps(vars(GpuReading(index=i, processes=tuple((p, 1.0) for p in range(i * 9)))))
        for i in range(8)
    ]
    chunks = packed_writes(state_lines(1.5, entries))
    assert len(chunks) > 1
    assert all(len(chunk) <= PIPE_BUF and chunk.endswith(b"\n") for chunk in chunks)
    lines = b"".join(chunks).decode().splitlines()
    assert [json.loads(line)["gpus"][0]["index"] for line in lines] == list(range(8))
    assert all(json.loads(line)["wall"] == 1.5 for line in lines)
    huge = json.dumps(vars(GpuReading(index=0, processes=tuple((p, 1.0) for p in range(999)))))
    (alone,) = packed_writes(state_lines(1.0, [huge]))
    assert len(alone) > PIPE_BUF  # a line is never cut: it goes out in one write of its own


RATE_4 = ("--rate", "4")


def test_the_rows_stream_reads_the_links_in_its_own_wake_ups():
    """With nvidia-smi's loop writing the ticks, the agent has one thread: its wake-ups read
    the slow fields and, when due, the PCIe/NVLink counters, whose rates reach the state
    lines (a links thread of its own woke apart from them before)."""
    args = [*RATE_4, "--state-interval", "0.3", "--pcie-interval", "0.1"]
    with agent_process(args, rows_env()) as process:
        assert process.stdout is not None
        deadline = time.monotonic() + TIMEOUT
        rates = None
        while rates is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            at = line.find('{"type": "state"')
            if at >= 0:  # a state line may follow a row's first cells (docs/gpu-agent.md)
                gpu = json.loads(line[at:])["gpus"][0]
                if gpu["pcie_tx_kbs"] is not None:
                    rates = gpu
        assert rates is not None
        assert rates["pcie_tx_kbs"] > 0 and rates["nvlink_tx_kbs"] > 0
        assert os.listdir(f"/proc/{process.pid}/task") == [str(process.pid)]
        process.send_signal(signal.SIGTERM)
        assert process.wait(5) == 0


def _memory_reads(calls_file: Path) -> dict[str, int]:
    calls = json.loads(calls_file.read_text())
    return calls.get("nvmlDeviceGetMemoryInfo", {})


def _poked_run(args: list[str], env: dict[str, str], wait_s: float, poke: bool) -> dict[str, int]:
    """The agent from its first rows or ticks for ``wait_s``, sent SIGUSR1 at the start of
    that time if ``poke``, then stopped: its memory reads per GPU (the fake's call counts)."""
    with agent_process(args, env) as process:
        assert process.stdout is not None
        for _ in range(20):  # header and state lines, then a row or tick
            line = process.stdout.readline()
            if line[:1].isdigit() or line.startswith('{"type": "tick"'):
                break
        if poke:
            process.send_signal(signal.SIGUSR1)
        time.sleep(wait_s)
        assert process.poll() is None  # SIGUSR1 does not end it
        process.send_signal(signal.SIGTERM)
        assert process.wait(TIMEOUT) == 0
    return _memory_reads(Path(env["FAKE_NVML_CALLS_FILE"]))


def test_sigusr1_makes_the_rows_stream_read_memory_at_once(tmp_path: Path):
    """With slow fields every 30 s, the GPUs' memory is read once in 1.5 s, and twice when
    the console asks for a reading (supervise passes a byte on as SIGUSR1): a relaunch need
    not wait for the next wake-up to see the old server's memory released."""
    args = ["--rate", "4", "--state-interval", "30"]
    env = rows_env(FAKE_NVML_CALLS_FILE=str(tmp_path / "calm.json"))
    calm = _poked_run(args, env, 1.5, poke=False)
    env = rows_env(FAKE_NVML_CALLS_FILE=str(tmp_path / "poked.json"))
    poked = _poked_run(args, env, 1.5, poke=True)
    assert calm == {"0": 1, "1": 1}, calm
    assert poked == {"0": 2, "1": 2}, poked


def test_sigusr1_makes_a_ticking_agent_read_memory_at_its_next_tick(tmp_path: Path):
    """Without nvidia-smi the agent ticks itself and reads memory every 2 s (staggered over
    the GPUs): asked, it reads both GPUs' at its next tick, and keeps ticking."""
    env = {k: v for k, v in rows_env().items() if not k.startswith("FAKE_SMI")}
    env["PATH"] = "/usr/bin:/bin"  # no nvidia-smi
    args = ["--rate", "4"]
    calm = _poked_run(args, {**env, "FAKE_NVML_CALLS_FILE": str(tmp_path / "c.json")}, 1.0, False)
    poked = _poked_run(args, {**env, "FAKE_NVML_CALLS_FILE": str(tmp_path / "p.json")}, 1.0, True)
    assert calm == {"0": 1, "1": 1}, calm
    assert poked == {"0": 2, "1": 2}, poked

"""Faults on demand (SPECMON_SIM_FAULT) and SGLang's own start-up refusals, end to end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from support.sim import REPO_ROOT, start_sim

from specmon.backends.sglang.parser import SGLangLogParser
from specmon.sim.gpus import pid_alive

FAST = 0.0015  # a whole start-up in about 1.3 s


def parse(text: str) -> list:
    parser = SGLangLogParser()
    return parser.feed(text.encode()) + parser.flush()


def errors(text: str) -> list:
    return [e for e in parse(text) if e.kind == "error"]


def assert_launch_failure(sim, category: str, root: str) -> str:
    code = sim.wait_exit(30)
    text = sim.log_text()
    assert code == -signal.SIGKILL, text[-2000:]  # kill_process_tree: 137 in a shell
    assert "Scheduler hit an exception: Traceback (most recent call last):" in text
    assert text.rstrip("\n").endswith(
        "Received sigquit from a child process. It usually means the child failed."
    )
    found = errors(text)
    assert found and found[0].category == category, found
    assert root in text
    assert "ready to roll" not in text
    return text


def test_oom_at_kv_cache_allocation(tmp_path):
    with start_sim(tmp_path, env={"SPECMON_SIM_FAULT": "oom"}, time_scale=FAST) as sim:
        text = assert_launch_failure(
            sim, "oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        )
        assert "GPU 0 has a total capacity of " in text and " MiB is free." in text
        kinds = [e.kind for e in parse(text)]
        assert "load_end" in kinds and "kv_cache" not in kinds and "graph_begin" not in kinds


def test_oom_at_weight_load_stops_the_shard_bar(tmp_path):
    with start_sim(tmp_path, env={"SPECMON_SIM_FAULT": "oom:load"}, time_scale=FAST) as sim:
        text = assert_launch_failure(sim, "oom", "CUDA out of memory.")
        shards = [e.done for e in parse(text) if e.kind == "shard_progress"]
        assert 0 < max(shards) < 64
        assert "Load weight end" not in text


def test_nccl_error_at_graph_capture(tmp_path):
    with start_sim(tmp_path, env={"SPECMON_SIM_FAULT": "nccl"}, time_scale=FAST) as sim:
        text = assert_launch_failure(
            sim, "nccl", "torch.distributed.DistBackendError: NCCL error in:"
        )
        assert "Capture cuda graph failed:" in text
        assert "Capture cuda graph end" not in text


def test_draft_refuses_the_longer_context_without_the_env_override(tmp_path):
    with start_sim(tmp_path, allow_long_context=False, time_scale=FAST) as sim:
        text = assert_launch_failure(
            sim,
            "other",
            "ValueError: Warning: Target model's context_length (262144) is greater than the "
            "derived context_length (8192).",
        )
        assert "To allow overriding this maximum, set the env var " in text
        assert "Capture cuda graph end" in text  # the target was fine; the draft load failed


def test_too_small_mem_fraction_is_not_enough_memory(tmp_path):
    with start_sim(tmp_path, args=["--mem-fraction-static", "0.3"], time_scale=FAST) as sim:
        assert_launch_failure(
            sim,
            "oom",
            "RuntimeError: Not enough memory. Please try to increase "
            "--mem-fraction-static. Current value: self.server_args.mem_fraction_static=0.3",
        )


def assert_hung(sim, last_phase_line: str) -> None:
    sim.wait_for_log(last_phase_line, 30)
    time.sleep(0.4)
    size = sim.log_path.stat().st_size
    time.sleep(1.0)
    assert sim.log_path.stat().st_size == size  # no more output
    assert sim.proc.poll() is None  # but the process lives
    with pytest.raises(httpx.ConnectError):
        httpx.get(sim.url("/health"), timeout=2)
    sim.proc.send_signal(signal.SIGTERM)
    assert sim.wait_exit(10) == -signal.SIGTERM  # not ready yet: the default action


@pytest.mark.parametrize(
    ("fault", "last_line"),
    [
        ("hang:load", "Loading safetensors checkpoint shards:  2"),
        ("hang:graphs", "Capture cuda graph begin."),
    ],
)
def test_hang_during_start_up(tmp_path, fault, last_line):
    with start_sim(tmp_path, env={"SPECMON_SIM_FAULT": fault}, time_scale=FAST) as sim:
        assert_hung(sim, last_line)
        assert "Load weight end" not in sim.log_text() or fault == "hang:graphs"


def test_hang_during_decode(tmp_path):
    env = {"SPECMON_SIM_FAULT": "hang:decode", "SGLANG_HEALTH_CHECK_TIMEOUT": "1"}
    args = ["--decode-log-interval", "5"]
    with start_sim(tmp_path, env=env, args=args, time_scale=FAST) as sim:
        sim.wait_ready()
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                sim.url("/generate"),
                json={"text": "x", "sampling_params": {"max_new_tokens": 200}},
                timeout=httpx.Timeout(5, read=2.5),
            )
        events = parse(sim.log_text())
        kinds = [e.kind for e in events]
        after_ready = kinds[kinds.index("ready") :]
        assert after_ready.count("decode") == 1  # one decode line of user traffic, then none
        started = time.monotonic()
        assert httpx.get(sim.url("/health"), timeout=10).status_code == 503
        assert 0.8 < time.monotonic() - started < 5
        assert "Health check failed. Server couldn't get a response from detokenizer" in (
            sim.log_text()
        )
        assert sim.proc.poll() is None
        sim.proc.send_signal(signal.SIGTERM)
        assert sim.wait_exit(10) == -signal.SIGKILL
        assert "Gracefully exiting... Remaining number of requests 1." in sim.log_text()


def test_crash_mid_decode(tmp_path):
    args = ["--decode-log-interval", "5"]
    with start_sim(tmp_path, env={"SPECMON_SIM_FAULT": "crash"}, args=args, time_scale=FAST) as sim:
        sim.wait_ready()
        with pytest.raises(httpx.HTTPError):
            httpx.post(
                sim.url("/generate"),
                json={"text": "x", "sampling_params": {"max_new_tokens": 200}},
                timeout=10,
            )
        assert sim.wait_exit(10) == -signal.SIGKILL
        text = sim.log_text()
        assert "Scheduler hit an exception: Traceback" in text
        assert "It usually means one child failed." in text
        assert errors(text)


def test_segfault_mid_decode(tmp_path):
    env = {"SPECMON_SIM_FAULT": "crash:segv"}
    with start_sim(
        tmp_path, env=env, args=["--tp", "2", "--decode-log-interval", "5"], time_scale=FAST
    ) as sim:
        sim.wait_ready()
        children = [g["pid"] for g in json.loads(sim.gpu_state_path.read_text())["gpus"]]
        assert len(children) == 2 and all(pid_alive(pid) for pid in children)
        with pytest.raises(httpx.HTTPError):
            httpx.post(
                sim.url("/generate"),
                json={"text": "x", "sampling_params": {"max_new_tokens": 200}},
                timeout=10,
            )
        assert sim.wait_exit(10) == -signal.SIGSEGV
        assert "Fatal Python error: Segmentation fault" in sim.log_text()
        deadline = time.monotonic() + 5  # the rank children die with their parent
        while any(pid_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(pid_alive(pid) for pid in children)


def test_unknown_fault_is_refused_with_the_accepted_values(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECMON_")}
    env.update(PYTHONPATH=str(REPO_ROOT), SPECMON_SIM_FAULT="explode")
    result = subprocess.run(
        [sys.executable, "-m", "specmon.sim", "--model-path", "m"],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert "SPECMON_SIM_FAULT='explode'" in result.stderr and "hang:decode" in result.stderr
    assert "Traceback" not in result.stderr

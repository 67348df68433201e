"""Start the simulated SGLang server as a real process for tests; always kill its group.

    from support.sim import sim_factory  # noqa: F401  (pytest fixture)

    def test_x(sim_factory):
        sim = sim_factory(time_scale=0.005, args=["--speculative-num-steps", "2"])
        sim.wait_ready()
        httpx.get(sim.url("/health"))
        sim.log_text()  # stdout and stderr together, as a host session's log file holds them

Or ``with start_sim(tmp_path, ...) as sim:`` outside pytest fixtures. The process runs in its
own session (``start_new_session``), so teardown's ``killpg`` takes its rank children too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_LINE = "The server is fired up and ready to roll!"
FAST_TIME_SCALE = 0.005  # a whole start-up in about 4-5 s

EAGLE3_TP8_ARGS: tuple[str, ...] = (
    "--model-path",
    "moonshotai/Kimi-K2.5",
    "--tp",
    "8",
    "--trust-remote-code",
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "/models/kimi-k2.5-eagle3",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
    "--mem-fraction-static",
    "0.85",
)

# The vLLM personality (``python -m specmon.sim.vllm``) as a plain `vllm serve` with EAGLE-3.
VLLM_EAGLE3_ARGS: tuple[str, ...] = (
    "serve",
    "meta-llama/Llama-3.3-70B-Instruct",
    "--tensor-parallel-size",
    "8",
    "--host",
    "127.0.0.1",
    "--speculative-config",
    '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B", '
    '"num_speculative_tokens": 3}',
)
VLLM_READY_LINE = "Application startup complete."


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def merge_args(base: Sequence[str], overrides: Sequence[str]) -> list[str]:
    """``base`` with any flag in ``overrides`` replaced (a later value wins, as in argparse)."""
    override_flags = {a for a in overrides if a.startswith("--")}
    out: list[str] = []
    skip = False
    for i, arg in enumerate(base):
        if skip:
            skip = False
            continue
        if arg in override_flags:
            has_value = i + 1 < len(base) and not base[i + 1].startswith("--")
            skip = has_value
            continue
        out.append(arg)
    return out + list(overrides)


@dataclass
class SimProcess:
    proc: subprocess.Popen[bytes]
    port: int
    workdir: Path
    log_path: Path
    gpu_state_path: Path
    probe_path: Path | None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def log_text(self) -> str:
        try:
            return self.log_path.read_bytes().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def wait_for_log(self, needle: str, timeout: float = 30.0, *, count: int = 1) -> str:
        """Wait until ``needle`` appears ``count`` times; fails with the log tail if not."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_text()
            if text.count(needle) >= count:
                return text
            if self.proc.poll() is not None:
                text = self.log_text()
                if text.count(needle) >= count:
                    return text
                raise AssertionError(
                    f"simulator exited ({self.proc.returncode}) before {needle!r}:\n{text[-3000:]}"
                )
            time.sleep(0.05)
        raise AssertionError(f"no {needle!r} within {timeout} s:\n{self.log_text()[-3000:]}")

    def wait_ready(self, timeout: float = 40.0) -> str:
        return self.wait_for_log(READY_LINE, timeout)

    def wait_exit(self, timeout: float = 20.0) -> int:
        return self.proc.wait(timeout=timeout)

    def kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


@contextlib.contextmanager
def start_sim(
    workdir: Path,
    *,
    args: Sequence[str] = (),
    base_args: Sequence[str] = EAGLE3_TP8_ARGS,
    env: dict[str, str] | None = None,
    time_scale: float = FAST_TIME_SCALE,
    allow_long_context: bool = True,
    probe: bool = True,
    port: int | None = None,
    module: str = "specmon.sim",
) -> Iterator[SimProcess]:
    """Run ``python -m specmon.sim`` (or another personality's ``module``, e.g.
    ``specmon.sim.vllm`` with VLLM_EAGLE3_ARGS) with ``base_args`` + ``args`` on a free port."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log_path = workdir / "server.log"
    gpu_state = workdir / "gpus.json"
    probe_path = workdir / "probe.jsonl" if probe else None
    full_env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SPECMON_", "NCCL_", "SGLANG_"))
    }
    full_env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        SPECMON_SIM_TIME_SCALE=str(time_scale),
        SPECMON_SIM_GPU_STATE=str(gpu_state),
        PYTHONUNBUFFERED="1",
    )
    if allow_long_context:
        full_env["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"] = "1"
    if probe_path is not None:
        full_env["SPECMON_PROBE_FILE"] = str(probe_path)
    full_env.update(env or {})
    argv = [sys.executable, "-m", module, *merge_args(base_args, args)]
    if "--port" not in args:
        argv += ["--port", str(port)]
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            argv,
            cwd=workdir,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    sim = SimProcess(proc, port, workdir, log_path, gpu_state, probe_path, full_env)
    try:
        yield sim
    finally:
        sim.kill_group()


@pytest.fixture
def sim_factory(tmp_path: Path) -> Iterator[Callable[..., SimProcess]]:
    """Start any number of simulators in a test; every one is killed (group) at teardown."""
    stack = contextlib.ExitStack()
    counter = iter(range(1000))

    def start(**kwargs: object) -> SimProcess:
        return stack.enter_context(start_sim(tmp_path / f"sim{next(counter)}", **kwargs))  # type: ignore[arg-type]

    with stack:
        yield start

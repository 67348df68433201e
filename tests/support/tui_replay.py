"""A recorded session for console tests: real parser events from the reference transcript plus
GPU samples and probe timings built from the measured figures, replayed into an EventBus.

Every event carries a fixed arrival time, and the app gets a frozen clock, so snapshots hold no
wall time. ``ReplayController`` is a HostController that only replays: launch and stop say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from specmon.backends.sglang.parser import SGLangLogParser
from specmon.launch.config import Profile
from specmon.launch.spec import FlagValue, LaunchSpec
from specmon.model.errors import SpecmonError
from specmon.model.events import (
    ConnectionState,
    Event,
    GpuSample,
    LogLine,
    ProbeTiming,
    RunInfo,
    ServerFailed,
)
from specmon.remote.agent import GpuReading
from specmon.state.controller import HostController
from specmon.state.run_status import RunStatus
from specmon.state.store import EventBus

# A copy of the reference transcript (/work/shared/reference/transcripts/), kept beside this
# module so snapshots are the same on every machine.
TRANSCRIPT = Path(__file__).resolve().parent / "tui_transcript_sglang-0.5.9-eagle3-tp8.log"

T0 = 1_770_714_855.0  # 2026-02-10 09:14:15 UTC, the transcript's first rank line
FROZEN_NOW = T0 + 600.0  # ten minutes after the launch
ARGV = (
    "python3",
    "-m",
    "sglang.launch_server",
    "--model-path",
    "moonshotai/Kimi-K2.5",
    "--tp",
    "8",
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
    "0.88",
    "--port",
    "8000",
)
ENV = (
    ("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1"),
    ("NCCL_PROTO", "LL"),
    ("NCCL_ALGO", "Ring"),
    ("NCCL_P2P_LEVEL", "SYS"),
)


def gpu_readings(step: int, loaded_fraction: float, busy: bool) -> tuple[GpuReading, ...]:
    """Eight H200-like GPUs; memory follows the load, rank 0 runs a little hotter."""
    readings = []
    for index in range(8):
        wobble = ((step * 7 + index * 3) % 11) - 5
        util = (88.0 + wobble + (4 if index == 0 else 0)) if busy else 0.0
        readings.append(
            GpuReading(
                index=index,
                uuid=f"GPU-0000000{index}",
                name="NVIDIA H200",
                util_gpu=util,
                util_mem=util * 0.6,
                mem_used_mb=600.0 + loaded_fraction * 115_700.0 + index * 40,
                mem_total_mb=143_771.0,
                power_w=(520.0 + wobble * 6) if busy else 118.0,
                power_limit_w=700.0,
                temp_c=(66.0 + wobble * 0.5) if busy else 34.0,
                sm_clock_mhz=1980.0 if busy else 345.0,
                mem_clock_mhz=3201.0,
                processes=((41234 + index, 115_000.0),) if loaded_fraction else (),
            )
        )
    return tuple(readings)


def recorded_session(*, ready: bool = True) -> list[tuple[float, Event]]:
    """(arrival time, event) pairs: connect, launch, the transcript's start-up, decode traffic."""
    lines = TRANSCRIPT.read_text(encoding="utf-8").splitlines()
    if not ready:
        lines = lines[: next(i for i, line in enumerate(lines) if "KV Cache" in line)]
    parser = SGLangLogParser()
    timeline: list[tuple[float, Event]] = [
        (T0 - 2, ConnectionState(host="root@gpu-box:22", state="connected")),
        (
            T0 - 1,
            RunInfo(
                run_id="20260210-091402-kimi",
                profile="kimi-eagle3-nccl",
                argv=ARGV,
                env=ENV,
                pid=41234,
                pgid=41234,
                started_at=T0 - 13,
            ),
        ),
    ]
    # Spread the transcript's lines over the ~4 minute load so the ETA and elapsed are real.
    offset = 0
    for number, line in enumerate(lines):
        at = T0 + number * (250.0 / len(lines))
        timeline.append((at, LogLine(text=line, offset=offset)))
        offset += len(line.encode()) + 1
        for event in parser.feed(line + "\n"):
            timeline.append((at, event))
        if number % 4 == 0:
            fraction = min(1.0, number / max(1, len(lines) - 10))
            timeline.append((at, GpuSample(wall=at, gpus=gpu_readings(number, fraction, False))))
    timeline.extend((T0 + 250.0, event) for event in parser.flush())
    if ready:
        for step in range(120):
            at = T0 + 300.0 + step * 0.25
            timeline.append((at, GpuSample(wall=at, gpus=gpu_readings(step, 1.0, True))))
            draft = 0.87 + (step % 5) * 0.01
            verify = 28.7 - (step % 7) * 0.05
            timeline.append(
                (
                    at,
                    ProbeTiming(
                        wall=at,
                        draft_ms=draft,
                        verify_ms=verify,
                        extend_ms=0.28,
                        cycle_ms=draft + verify + 0.28,
                        batch_size=1,
                        draft_tokens=4,
                        accepted_tokens=2 + step % 2,
                    ),
                )
            )
    return timeline


def failure_event() -> ServerFailed:
    return ServerFailed(
        run_id="20260210-091402-kimi",
        category="oom",
        exit_code=137,
        root_cause=(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 36.66 GiB. "
            "GPU 0 has a total capacity of 139.81 GiB of which 12.50 MiB is free.",
            "Received sigquit from a child process. It usually means the child failed.",
        ),
        command="python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8 ...",
        last_phase="KV cache",
    )


class ReplayController(HostController):
    """Replays a recorded event list into its bus on start; it cannot launch or stop."""

    can_launch = False

    def __init__(
        self,
        events: list[tuple[float, Event]],
        *,
        host_label: str = "root@gpu-box:22",
        profiles: list[str] | None = None,
    ) -> None:
        self.bus = EventBus()
        self.host_label = host_label
        self.events = events
        self._profiles = profiles or ["kimi-eagle3", "kimi-eagle3-nccl", "kimi-baseline"]

    def replay(self) -> None:
        for at, event in self.events:
            self.bus.publish(event, at)

    async def start(self) -> None:
        self.replay()

    async def close(self) -> None:
        return None

    async def launch(
        self,
        profile: str,
        *,
        flags: Mapping[str, FlagValue] | None = None,
        env: Mapping[str, str | None] | None = None,
    ) -> str:
        raise SpecmonError("a replayed session cannot launch servers")

    async def launch_spec(self, spec: LaunchSpec, *, profile: str | None = None) -> str:
        raise SpecmonError("a replayed session cannot launch servers")

    async def stop(self) -> None:
        raise SpecmonError("a replayed session cannot stop servers")

    def profiles(self) -> list[str]:
        return list(self._profiles)

    def add_profile(self, name: str, profile: Profile) -> None:
        self._profiles = sorted({*self._profiles, name})

    @property
    def current_run(self) -> RunStatus | None:
        return None

    async def http_base_url(self) -> str | None:
        return None

    @property
    def connected(self) -> bool:
        return True

    @property
    def is_local(self) -> bool:
        return False

    @property
    def host_python(self) -> str:
        return "python3"

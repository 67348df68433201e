"""The GPU agent runner against real agent processes (short Python scripts standing in for
the agent's wire output): an error a restart may cure is retried with backoff until the bound;
an error saying ``"retry": false`` (no driver, no GPU) is told once and never restarted, where
a host without NVIDIA GPUs used to see five starts and four "restarting" lines."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from specmon.model.events import AgentStatus, Event
from specmon.session.agent_runner import GpuAgentRunner
from specmon.session.local import LocalTransport
from specmon.session.options import SessionOptions


@dataclass
class FakeHost:
    """What the runner needs of a session; ``publish`` records."""

    options: SessionOptions
    transport: LocalTransport
    helper: object = None
    agent_kind: str = "nvml"
    sim_gpu_state_path: str = ""
    published: list[Event] = field(default_factory=list)

    def publish(self, event: Event, at: float | None = None) -> None:
        self.published.append(event)


class ScriptRunner(GpuAgentRunner):
    """The runner with the agent's command replaced by a script that counts its starts."""

    def __init__(self, host: FakeHost, lines: list[dict], starts: Path) -> None:
        super().__init__(host)
        self.script = (
            "import sys\n"
            f"open({str(starts)!r}, 'a').write('x')\n"
            + "".join(f"print({json.dumps(json.dumps(line))})\n" for line in lines)
            + "sys.exit(1)\n"
        )

    async def _argv(self, kind: str) -> list[str]:
        return [sys.executable, "-c", self.script]


async def run_agent(tmp_path: Path, lines: list[dict]) -> tuple[list[AgentStatus], int]:
    options = SessionOptions(state_dir=str(tmp_path), agent_max_failures=3)
    transport = LocalTransport()
    await transport.connect()
    host = FakeHost(options, transport)
    starts = tmp_path / "starts"
    try:
        await asyncio.wait_for(ScriptRunner(host, lines, starts).run(), timeout=20)
    finally:
        await transport.close()
    statuses = [e for e in host.published if isinstance(e, AgentStatus)]
    return statuses, len(starts.read_text())


async def test_an_error_a_restart_may_cure_is_retried_up_to_the_bound(tmp_path):
    statuses, starts = await run_agent(
        tmp_path, [{"type": "error", "message": "nvidia-smi exited (code 1): busy"}]
    )
    assert starts == 3
    assert [s.state for s in statuses].count("restarting") == 2
    assert "gave up after 3 failed starts: nvidia-smi exited" in (statuses[-1].detail or "")


async def test_no_driver_is_told_once_and_never_restarted(tmp_path):
    message = "no NVIDIA driver on host gpu1: NVML Shared Library Not Found"
    statuses, starts = await run_agent(
        tmp_path, [{"type": "error", "message": message, "retry": False}]
    )
    assert starts == 1
    assert [(s.state, s.detail) for s in statuses] == [
        ("error", f"{message}; GPU agent not restarted (nothing on this host for it to read)")
    ]

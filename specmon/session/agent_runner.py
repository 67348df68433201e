"""Runs the GPU agent on the host for the session's lifetime and turns its lines into events.

The agent runs under the helper's ``supervise`` wrapper, which kills it when our channel
closes, so no agent outlives the console. It is restarted with backoff if it dies; an agent
that reports an error (no NVIDIA driver) becomes an AgentStatus(state="error") event.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from specmon.model.errors import ConnectionLost
from specmon.model.events import AgentStatus, Event, GpuSample
from specmon.remote import AGENT_SOURCE
from specmon.session.gpu_stream import AgentStream
from specmon.session.helper_client import HelperClient
from specmon.session.options import GpuAgentKind, SessionOptions
from specmon.session.transport import RemoteProcess, Transport


class AgentHost(Protocol):
    """What the agent runner needs of the session: its transport and helper, its settings,
    which agent to run, and where samples go."""

    @property
    def options(self) -> SessionOptions: ...
    @property
    def transport(self) -> Transport: ...
    @property
    def helper(self) -> HelperClient: ...
    @property
    def agent_kind(self) -> GpuAgentKind: ...
    @property
    def sim_gpu_state_path(self) -> str: ...
    def publish(self, event: Event, at: float | None = None) -> None: ...


def parse_agent_message(
    line: bytes | str, stream: AgentStream | None = None
) -> list[GpuSample | AgentStatus]:
    """The events one agent line completes (specmon.session.gpu_stream reads the wire format): ticks
    become GpuSample, the header and errors AgentStatus; state lines, notices and stray lines
    give none. `stream` is the agent run's reader (nvidia-smi's tick rows need the lines
    before them); without one, the line is read alone."""
    from specmon.session.gpu_stream import AgentError, AgentHeader

    text = line.decode(errors="replace") if isinstance(line, bytes) else line
    events: list[GpuSample | AgentStatus] = []
    for parsed in (stream or AgentStream()).feed(text):
        if isinstance(parsed, GpuSample):
            events.append(parsed)
        elif isinstance(parsed, (AgentHeader, AgentError)):
            events.append(parsed.to_status())
    return events


class GpuAgentRunner:
    def __init__(self, session: AgentHost) -> None:
        self.session = session
        self.state = "stopped"
        self.last_sample: GpuSample | None = None
        self.last_sample_at = 0.0  # time.time() of arrival
        self.last_error: str | None = None
        self._proc: RemoteProcess | None = None  # the running agent's channel

    async def _argv(self, kind: str) -> list[str]:
        s = self.session
        opts = s.options
        python = s.transport.python_argv(opts.python)
        rate = str(opts.gpu_rate_hz)
        if kind == "sim":
            command = [*python, "-m", "specmon.sim.gpu_agent", "--state", s.sim_gpu_state_path]
            command += ["--rate", rate]
        else:
            # Installed into bin/ and run through the helper's bootstrap, which checks the
            # state dir and runs only the bytes whose digest this console asked for.
            agent = await s.helper.install_file("agent", AGENT_SOURCE.read_bytes())
            command = [*agent, "--rate", rate]
        return s.helper.argv("supervise", "--", *command)

    async def run(self) -> None:
        s = self.session
        kind = s.agent_kind
        if kind == "none":
            self.state = "stopped"
            s.publish(AgentStatus(state="stopped", detail="no GPU agent configured"))
            return
        failures = 0
        while True:
            proc = self._proc = await s.transport.start(await self._argv(kind))
            ticked = False
            stream = AgentStream()
            try:
                while True:
                    line = await proc.readline()
                    if not line:
                        break
                    for event in parse_agent_message(line, stream):
                        if stream.final_error is not None:
                            self.last_error = stream.final_error.message
                            continue  # told once the agent has ended, as not restarted
                        if isinstance(event, GpuSample):
                            ticked = True
                            self.state = "started"
                            self.last_sample, self.last_sample_at = event, time.time()
                        else:
                            self.state = event.state
                            if event.state == "error":
                                self.last_error = event.detail
                        s.publish(event)
            finally:
                self._proc = None
                await proc.kill()
            if not s.transport.connected:
                raise ConnectionLost("connection dropped while the GPU agent ran")
            self.state = "stopped"
            if stream.final_error is not None and not ticked:
                self.state = "error"
                s.publish(
                    AgentStatus(
                        state="error",
                        detail=f"{stream.final_error.message}; GPU agent not restarted "
                        "(nothing on this host for it to read)",
                    )
                )
                return
            failures = 0 if ticked else failures + 1
            if failures >= s.options.agent_max_failures:
                s.publish(
                    AgentStatus(
                        state="error",
                        detail=f"GPU agent gave up after {failures} failed starts"
                        + (f": {self.last_error}" if self.last_error else ""),
                    )
                )
                return
            delay = min(30.0, 0.5 * 2 ** max(0, failures - 1))
            s.publish(
                AgentStatus(
                    state="restarting",
                    detail=f"GPU agent ended; restarting in {delay:.1f}s"
                    + (f" (last error: {self.last_error})" if self.last_error else ""),
                )
            )
            await asyncio.sleep(delay)

    async def read_now(self) -> None:
        """Ask the agent for a fresh reading of the GPUs' slowly moving fields (memory among
        them), which it otherwise reads every few seconds: `supervise` passes the byte on as
        SIGUSR1."""
        proc = self._proc
        if proc is not None:
            await proc.write(b"\n")

    async def wait_gpu_released(self, since: float) -> tuple[bool, str]:
        """Wait for a sample taken after ``since`` in which every GPU is back near idle. The
        agent is asked for a fresh reading at once and then every second: its memory
        readings otherwise come every 4 s (docs/gpu-agent.md), and a sample's memory may be
        older than the sample (it is then the old server's, so the wait goes on)."""
        opts = self.session.options
        if self.session.agent_kind == "none" or self.state != "started":
            return True, "not checked: no GPU agent running"
        deadline = time.monotonic() + opts.gpu_release_timeout_s
        held: list[str] = []
        asked = 0.0
        while time.monotonic() < deadline:
            if time.monotonic() - asked >= 1.0:
                asked = time.monotonic()
                await self.read_now()
            sample = self.last_sample
            if sample is not None and self.last_sample_at > since:
                held = [
                    f"GPU {r.index} {r.mem_used_mb:.0f} MB"
                    for r in sample.gpus
                    if r.mem_used_mb is not None and r.mem_used_mb > opts.gpu_idle_mb
                ]
                if not held:
                    top = max((r.mem_used_mb or 0.0 for r in sample.gpus), default=0.0)
                    return True, f"{len(sample.gpus)} GPUs back near idle (max {top:.0f} MB)"
            await asyncio.sleep(0.1)
        return False, "still held: " + ", ".join(held[:8]) if held else "no fresh GPU sample"

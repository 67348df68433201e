"""What every simulated server does alike, whichever server it plays: the simulator's environment
(time scale, seed, shards, fault, the GPU state), scaled start-up waits, a hang, the signal
handlers, uvicorn's shutdown lines and the wind-down at exit.

A personality's server (specmon/backends/<name>/sim/server.py) subclasses ``SimServerBase`` and
keeps only what its server does its own way, so both stay byte for byte what they were.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from specmon.sim import faults, procs
from specmon.sim.gpus import GpuState

if TYPE_CHECKING:
    from specmon.sim.asgi import UvicornServing
    from specmon.sim.engine import Engine, EngineEvent
    from specmon.sim.logwriter import LogWriter


class EngineMetrics(Protocol):
    """The part of a personality's ``/metrics`` the engine feeds: request timings and counts,
    engine steps (specmon.sim.engine.EngineEvent)."""

    def observe(self, event: EngineEvent) -> None: ...


def probe_path(env: Mapping[str, str]) -> Path | None:
    """Where the probe's timing records go (``SPECMON_PROBE_FILE``), None when unset."""
    probe = env.get("SPECMON_PROBE_FILE")
    return Path(probe) if probe else None


class SimServerBase:
    """The shared half of a simulated server; the personality sets ``writer``, ``engine``,
    ``metrics`` and ``status`` and names its child processes in ``child_pids``."""

    writer: LogWriter
    engine: Engine
    metrics: EngineMetrics | None
    status: str  # starting -> ready -> shutting_down

    def init_sim(
        self,
        env: Mapping[str, str],
        *,
        default_shards: int,
        gpu_state_path: Path | None,
        local_gpus: int,
        child_pids: list[int],
    ) -> None:
        """Read the simulator's environment (checked by the personality's ``__main__``) and
        set up the GPU state file for this server's ``local_gpus`` ranks."""
        self.scale = max(0.0, float(env.get("SPECMON_SIM_TIME_SCALE", "1") or 1))
        self.seed = int(env.get("SPECMON_SIM_SEED", "0") or 0)
        self.shards = max(
            1, int(env.get("SPECMON_SIM_SHARDS", str(default_shards)) or default_shards)
        )
        self.fault = faults.parse_fault(env.get(faults.FAULT_ENV))
        self.rng = random.Random(self.seed)
        self.gpus = GpuState(
            gpu_state_path,
            local_gpus,
            os.getpid(),
            child_pids or None,
            self.seed,
            host_gpus=int(env.get("SPECMON_SIM_GPUS", "8") or 8),
        )
        self.http: UvicornServing | None = None
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []

    def child_pids(self) -> list[int]:
        """The server's child processes (ranks, workers), killed with it."""
        raise NotImplementedError

    async def run(self) -> int:
        """Start, serve until told to stop, return the exit code."""
        raise NotImplementedError

    # --- start-up --------------------------------------------------------------------------

    async def pause(self, seconds: float) -> None:
        """A scaled start-up wait with a little noise."""
        if seconds > 0 and self.scale > 0:
            await asyncio.sleep(seconds * self.scale * self.rng.uniform(0.95, 1.05))

    def hangs_at_shard(self, shard: int) -> bool:
        """``hang:load``: the weight load stops two fifths of the way through the shards."""
        return bool(
            self.fault and self.fault.at("hang", "load") and shard == max(1, self.shards * 2 // 5)
        )

    async def wait_forever(self) -> None:
        await self._stop.wait()
        await asyncio.sleep(3600)

    async def hang(self) -> None:
        """Stop logging and answering; the process keeps running until signalled."""
        self.writer.enabled = False
        self.engine.hung = True
        await self.wait_forever()

    # --- engine callbacks ------------------------------------------------------------------

    def _on_busy(self, fraction: float) -> None:
        self.gpus.set_util(94.0 * fraction)
        self.gpus.write(min_interval=0.25)

    def _on_engine_event(self, event: EngineEvent) -> None:
        if self.metrics is not None:
            self.metrics.observe(event)

    # --- signals and exit ------------------------------------------------------------------

    def install_signals(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.add_signal_handler(signal.SIGTERM, self._on_signal, signal.SIGTERM)
        loop.add_signal_handler(signal.SIGINT, self._on_signal, signal.SIGINT)

    def _on_signal(self, signum: int) -> None:
        """Still starting: die of the signal (children first); else shut down once."""
        if self.status == "starting":
            self.gpus.write("stopped")
            self.engine.flush_probe()
            procs.die_by_signal(self.child_pids(), signum)
        self._begin_shutdown(signum)

    def _begin_shutdown(self, signum: int = signal.SIGTERM) -> None:
        if self.status == "shutting_down":
            return
        self.status = "shutting_down"
        asyncio.get_running_loop().create_task(self._shutdown(signum))

    async def _shutdown(self, signum: int) -> None:
        raise NotImplementedError

    async def uvicorn_shutdown(self) -> None:
        """uvicorn's own exit: requests aborted, the port closed, its four lines, then the
        event loop ends."""
        self.writer.enabled = True
        self.writer.uvicorn("Shutting down")
        self.engine.abort_all()
        if self.http is not None:
            await self.http.stop()
        self.writer.uvicorn("Waiting for application shutdown.")
        self.writer.uvicorn("Application shutdown complete.")
        self.writer.uvicorn(f"Finished server process [{os.getpid()}]")
        self.engine.flush_probe()
        self._stop.set()

    async def wind_down(self) -> None:
        """The end of ``run``, however it ended: the probe flushed, the background tasks
        (the engine, periodic logs) cancelled, the port closed."""
        self.engine.flush_probe()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.http is not None:
            await self.http.stop()


def run_to_exit(server: SimServerBase) -> int:
    """Run a server's event loop to the end; its GPUs are idle and stopped after it."""
    code = asyncio.run(server.run())
    server.gpus.set_util(0.0)
    server.gpus.write("stopped")
    return code

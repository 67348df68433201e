"""Real-GPU check of a fresh reading on request: how soon the console sees GPU memory change.

A relaunch waits until the old server's GPU memory is released, and the agent reads memory
every --state-interval (4 s) when nvidia-smi's loop ticks. The console can ask for a reading
at once: it writes a byte to the remote helper's `supervise`, which passes it on to the agent
as SIGUSR1. This runs the agent as the console does (under `supervise`, with a long
--state-interval so that only a request can explain a fast reading), then on GPU 0 allocates
memory with PyTorch and frees it, each time measuring when the agent's stream first shows the
change: once without asking (it must not show within the wait) and once asking.

Run from the repository root on the GPU host (needs torch and nvidia-ml-py there):
    python3 scripts/agent_poke_check.py --out /tmp/poke-check
Writes agent_poke_check.json. Exit code 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from specmon.model.events import GpuSample  # noqa: E402
from specmon.session.gpu_stream import AgentStream  # noqa: E402

AGENT = REPO / "specmon" / "remote" / "agent.py"
HELPER_SOURCE = REPO / "specmon" / "remote" / "helper.py"  # as the console sends it
MIB = 1024.0 * 1024.0


class Memory:
    """GPU 0's memory used (MiB) as the agent's stream shows it, with arrival times."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.readings: list[tuple[float, float]] = []
        self.header: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        stream = AgentStream()
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode(errors="replace")
            if self.header is None and line.startswith('{"type": "header"'):
                self.header = json.loads(line)
            for parsed in stream.feed(line):
                if isinstance(parsed, GpuSample) and parsed.gpus:
                    used = parsed.gpus[0].mem_used_mb
                    if used is not None:
                        self.readings.append((time.monotonic(), used))

    def first_change(
        self, since: float, baseline: float, delta: float, wait: float
    ) -> float | None:
        """Seconds from ``since`` to the first reading at least ``delta`` MiB away from
        ``baseline``, or None within ``wait``."""
        deadline = since + wait
        while time.monotonic() < deadline:
            for at, used in list(self.readings):
                if at >= since and abs(used - baseline) >= delta:
                    return at - since
            time.sleep(0.005)
        return None

    def last(self) -> float:
        return self.readings[-1][1]


def main() -> int:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--out", type=Path, required=True)
    options.add_argument("--gib", type=float, default=20.0, help="memory to allocate on GPU 0")
    options.add_argument("--state-interval", type=float, default=30.0)
    options.add_argument("--unasked-wait", type=float, default=3.0)
    args = options.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    import torch

    state = tempfile.mkdtemp(prefix="poke-state-")
    supervise = [sys.executable, str(HELPER_SOURCE), "supervise", "--state-dir", state, "--"]
    agent = [sys.executable, str(AGENT), "--rate", "4"]
    helper = subprocess.Popen(
        [*supervise, *agent, "--state-interval", str(args.state_interval)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    memory = Memory(helper)
    result: dict[str, Any] = {"gib": args.gib, "state_interval_s": args.state_interval}
    try:
        deadline = time.monotonic() + 20
        while not memory.readings and time.monotonic() < deadline:
            time.sleep(0.05)
        result["header"] = memory.header
        assert memory.readings, "no reading from the agent"
        time.sleep(1.0)
        delta = args.gib * 1024 * 0.8

        def ask() -> None:
            assert helper.stdin is not None
            helper.stdin.write(b"\n")
            helper.stdin.flush()

        held: list[Any] = []

        def change(allocate: bool) -> None:
            if allocate:
                size = int(args.gib * 1024**3)
                held.append(torch.empty(size, dtype=torch.uint8, device="cuda:0"))
            else:
                held.clear()
                torch.cuda.empty_cache()
            torch.cuda.synchronize()

        def seen_after_asking(baseline: float) -> float | None:
            since = time.monotonic()
            ask()
            return memory.first_change(since, baseline, delta, 10.0)

        baseline = memory.last()
        change(allocate=True)
        result["allocate_unasked_s"] = memory.first_change(
            time.monotonic(), baseline, delta, args.unasked_wait
        )
        result["allocate_asked_s"] = seen_after_asking(baseline)
        for name, allocate in (("free", False), ("allocate_again", True), ("free_again", False)):
            time.sleep(0.5)
            baseline = memory.last()
            change(allocate)
            result[f"{name}_asked_s"] = seen_after_asking(baseline)
        result["agent_alive_after"] = helper.poll() is None
    finally:
        if helper.stdin is not None:
            helper.stdin.close()
        try:
            helper.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(helper.pid, signal.SIGKILL)
            helper.wait(10)
    asked = [
        result.get(f"{name}_asked_s")
        for name in ("allocate", "free", "allocate_again", "free_again")
    ]
    result["passed"] = bool(
        result["allocate_unasked_s"] is None
        and all(value is not None and value < 1.0 for value in asked)
        and result["agent_alive_after"]
        and (result["header"] or {}).get("tick_rows") is not None
    )
    (args.out / "agent_poke_check.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())

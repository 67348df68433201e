"""Load benchmark of the console: is it smooth while a busy server floods it with events?

Runs the real SpecmonApp in a child process on a pseudo-terminal (so every paint really goes
through Textual's output path), fed by a generator publishing ``--rate`` events/s (log lines,
decode batches, probe cycles, 8-GPU samples) into the same EventBus the host session uses.
The parent presses `p` (pause/resume: the header shows PAUSED / live) every half second and
times the press until the new header text appears on the terminal: keypress-to-paint latency.
It also samples the child's CPU time and RSS. Then the child replays ``--replay`` events into
the bus as fast as it can with the app running, and reports the time taken and its RSS.

    python3 benchmarks/tui_load.py                 # 2,000 events/s for 60 s, then 10M events
    python3 benchmarks/tui_load.py --duration 10 --replay 1000000   # a quick look

Targets (issue 6): p95 keypress-to-paint <= 50 ms, RSS <= 150 MB and flat.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import pty
import signal
import statistics
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MARKERS = {True: b"PAUSED", False: b"live"}
COLUMNS, ROWS = 160, 48


# --- the child: the app plus an event generator ------------------------------------------------


def build_event_pool() -> list:
    """A realistic mix: per 100 events ~45 log lines, ~45 probe cycles, ~8 decodes, 2 GPU."""
    from specmon.model.events import Decode, GpuSample, LogLine, ProbeTiming
    from specmon.remote.agent import GpuReading

    pool: list = []
    now = time.time()
    for i in range(1000):
        pool.append(
            LogLine(
                text=f"[2026-02-10 09:19:{i % 60:02d} TP0] Decode batch, #running-req: 6, "
                f"#token: {12000 + i}, token usage: 0.02, accept len: 2.9{i % 10}, "
                "accept rate: 0.74, cuda graph: True, gen throughput (token/s): 688.31, "
                "#queue-req: 0",
                offset=i * 200,
            )
        )
        pool.append(
            ProbeTiming(
                wall=now + i * 0.03,
                draft_ms=0.87 + (i % 7) * 0.01,
                verify_ms=28.7 - (i % 5) * 0.1,
                extend_ms=0.3,
                cycle_ms=29.9,
                batch_size=6,
                draft_tokens=6,
                accepted_tokens=3,
            )
        )
        if i % 6 == 0:
            pool.append(
                Decode(
                    running_req=6,
                    tokens=12000 + i,
                    token_usage=0.02,
                    accept_len=2.5 + (i % 9) / 10,
                    accept_rate=0.7,
                    gen_throughput=600 + (i % 13) * 10,
                    queue_req=i % 3,
                    cuda_graph=True,
                )
            )
        if i % 25 == 0:
            pool.append(
                GpuSample(
                    wall=now + i * 0.25,
                    gpus=tuple(
                        GpuReading(
                            index=g,
                            util_gpu=80.0 + (i + g) % 20,
                            mem_used_mb=115_000.0,
                            mem_total_mb=143_771.0,
                            power_w=500.0,
                            power_limit_w=700.0,
                            temp_c=66.0,
                            sm_clock_mhz=1980.0,
                            mem_clock_mhz=3201.0,
                        )
                        for g in range(8)
                    ),
                )
            )
    return pool


def inert_controller_base() -> type:
    """A HostController whose actions are refused and whose host is this machine: what a load
    generator (here and in fleet_load.py) adds is only its bus, start and close."""
    from specmon.model.errors import SpecmonError
    from specmon.state.controller import HostController

    class InertController(HostController):
        async def launch(self, profile: str, *, flags: Any = None, env: Any = None) -> str:
            raise SpecmonError("the load generator cannot launch")

        async def launch_spec(self, spec: Any, *, profile: str | None = None) -> str:
            raise SpecmonError("the load generator cannot launch")

        async def stop(self) -> None:
            raise SpecmonError("the load generator cannot stop")

        def profiles(self) -> list[str]:
            return []

        def add_profile(self, name: str, profile: Any) -> None:
            return None

        @property
        def current_run(self) -> None:
            return None

        async def http_base_url(self) -> str | None:
            return None

        @property
        def connected(self) -> bool:
            return True

        @property
        def is_local(self) -> bool:
            return True

        @property
        def host_python(self) -> str:
            return sys.executable

    return InertController


def run_child(rate: float, replay: int, result_path: str, no_gc_tuning: bool) -> int:
    from specmon.model.events import Ready, RunInfo
    from specmon.state.store import EventBus
    from specmon.tui.app import SpecmonApp, tune_gc_for_console

    pool = build_event_pool()
    if not no_gc_tuning:
        tune_gc_for_console()  # as run_console does

    class LoadController(inert_controller_base()):
        """Publishes ``rate`` events/s until told to replay, then replays as fast as it can."""

        def __init__(self) -> None:
            self.bus = EventBus()
            self.host_label = "load-generator"
            self._task: asyncio.Task[None] | None = None
            self.results: dict[str, float] = {}

        async def start(self) -> None:
            self.bus.publish(RunInfo(run_id="load", profile="bench", argv=("--tp", "8")))
            self.bus.publish(Ready())
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGUSR1, self._begin_replay)
            self._task = asyncio.create_task(self._steady())

        async def _steady(self) -> None:
            started = time.monotonic()
            sent = 0
            index = 0
            while True:
                await asyncio.sleep(0.01)
                due = int((time.monotonic() - started) * rate) - sent
                for _ in range(min(due, int(rate))):  # bounded catch-up after a stall
                    self.bus.publish(pool[index % len(pool)])
                    index += 1
                sent += due

        def _begin_replay(self) -> None:
            if self._task is not None:
                self._task.cancel()
            self._task = asyncio.create_task(self._replay())

        async def _replay(self) -> None:
            import psutil

            me = psutil.Process()
            rss_before = me.memory_info().rss
            peak = rss_before
            started = time.perf_counter()
            publish = self.bus.publish
            size = len(pool)
            rss_per_million: list[float] = []
            for start in range(0, replay, 5000):
                for index in range(start, min(replay, start + 5000)):
                    publish(pool[index % size])
                await asyncio.sleep(0)  # let the app tick and paint between slices
                if (start + 5000) % 1_000_000 == 0:
                    rss = me.memory_info().rss
                    peak = max(peak, rss)
                    rss_per_million.append(round(rss / 2**20, 1))
            elapsed = time.perf_counter() - started
            await asyncio.sleep(1.0)  # a few redraws after the flood
            rss_after = me.memory_info().rss
            Path(result_path).write_text(
                json.dumps(
                    {
                        "replay_events": replay,
                        "replay_seconds": elapsed,
                        "replay_events_per_s": replay / elapsed,
                        "rss_before_replay_mb": rss_before / 2**20,
                        "rss_peak_during_replay_mb": max(peak, rss_after) / 2**20,
                        "rss_after_replay_mb": rss_after / 2**20,
                        "rss_mb_after_each_million": rss_per_million,
                        "bus_dropped_for_ui": self.bus.dropped,
                    }
                )
            )
            app.exit()

        async def close(self) -> None:
            if self._task is not None:
                self._task.cancel()

    app = SpecmonApp(LoadController(), None)
    app.run()
    return 0


# --- the parent: terminal, keypresses, sampling -------------------------------------------------


class TerminalReader(threading.Thread):
    """Drains the pty (so the child never blocks) and notes when a marker is painted."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.lock = threading.Lock()
        self.waiting_for: bytes | None = None
        self.found = threading.Event()
        self.found_at = 0.0
        self.bytes_read = 0
        self._tail = b""

    def expect(self, marker: bytes) -> None:
        with self.lock:
            self.waiting_for = marker
            self.found.clear()
            self._tail = b""

    def run(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            now = time.perf_counter()
            self.bytes_read += len(chunk)
            with self.lock:
                if self.waiting_for is not None:
                    window = self._tail + chunk
                    if self.waiting_for in window:
                        self.found_at = now
                        self.waiting_for = None
                        self.found.set()
                    else:
                        self._tail = window[-32:]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run_parent(args: argparse.Namespace) -> int:
    import psutil

    result_path = Path(args.out).with_suffix(".child.json")
    result_path.unlink(missing_ok=True)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    env = dict(
        os.environ,
        TERM="xterm-256color",
        COLUMNS=str(COLUMNS),
        LINES=str(ROWS),
        PYTHONPATH=str(REPO),
    )
    child = subprocess.Popen(
        [
            sys.executable,
            __file__,
            *(["--no-gc-tuning"] if args.no_gc_tuning else []),
            "--child",
            "--rate",
            str(args.rate),
            "--replay",
            str(args.replay),
            "--out",
            str(result_path),
        ],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    reader = TerminalReader(master)
    reader.start()
    proc = psutil.Process(child.pid)
    try:
        time.sleep(args.warmup)
        cpu_start = sum(proc.cpu_times()[:2])
        wall_start = time.perf_counter()
        latencies: list[float] = []
        rss_samples: list[tuple[float, float]] = []
        misses = 0
        paused = False
        while time.perf_counter() - wall_start < args.duration:
            paused = not paused
            reader.expect(MARKERS[paused])
            pressed = time.perf_counter()
            os.write(master, b"p")
            if reader.found.wait(2.0):
                latencies.append((reader.found_at - pressed) * 1000)
            else:
                misses += 1
            rss_samples.append((time.perf_counter() - wall_start, proc.memory_info().rss / 2**20))
            time.sleep(0.5)
        wall = time.perf_counter() - wall_start
        cpu = sum(proc.cpu_times()[:2]) - cpu_start
        if paused:  # leave the panels live for the replay phase
            os.write(master, b"p")
        replay_started = time.perf_counter()
        child.send_signal(signal.SIGUSR1)
        peak_replay = 0.0
        while child.poll() is None and time.perf_counter() - replay_started < args.replay_timeout:
            peak_replay = max(peak_replay, proc.memory_info().rss / 2**20)
            time.sleep(0.5)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        os.close(master)
    child_results = json.loads(result_path.read_text()) if result_path.exists() else {}
    rss_values = [value for _, value in rss_samples]
    third = max(1, len(rss_values) // 3)
    report = {
        "rate_events_per_s": args.rate,
        "gc_tuning": not args.no_gc_tuning,
        "duration_s": round(wall, 1),
        "keypresses": len(latencies) + misses,
        "keypress_misses": misses,
        "latency_ms_median": round(statistics.median(latencies), 1) if latencies else None,
        "latency_ms_p95": round(percentile(latencies, 0.95), 1) if latencies else None,
        "latency_ms_max": round(max(latencies), 1) if latencies else None,
        "cpu_share_of_one_core": round(cpu / wall, 3),
        "rss_mb_first_third_mean": round(statistics.mean(rss_values[:third]), 1),
        "rss_mb_last_third_mean": round(statistics.mean(rss_values[-third:]), 1),
        "rss_mb_peak_steady": round(max(rss_values), 1),
        "rss_mb_peak_during_replay": round(peak_replay, 1),
        "terminal_bytes_painted": reader.bytes_read,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        **{k: round(v, 2) if isinstance(v, float) else v for k, v in child_results.items()},
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0 if latencies and child_results else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=2000.0, help="events per second")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of steady load")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring")
    parser.add_argument("--replay", type=int, default=10_000_000, help="events to replay")
    parser.add_argument("--replay-timeout", type=float, default=900.0)
    parser.add_argument("--out", default="tui_load.json", help="where to write the figures")
    parser.add_argument(
        "--no-gc-tuning", action="store_true", help="leave Python's GC thresholds at defaults"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return run_child(args.rate, args.replay, args.out, args.no_gc_tuning)
    return run_parent(args)


if __name__ == "__main__":
    raise SystemExit(main())

"""Load benchmark of the fleet console: 8 hosts x 8 GPUs flooding one console.

Three measurements, each in a child process on a pseudo-terminal (every paint goes through
Textual's output path), as benchmarks/tui_load.py does for one host:

1. Connecting: time from starting the console to the overview painting every host connected,
   for 8 real local hosts (host sessions over the local transport, each its own state dir:
   helper install, status, GPU agent none) against 1 host, measured in the same run. The hosts
   connect in parallel, so 8 should cost little more than 1.
2. Steady load: 8 generators publish ``--rate`` events/s in total (log lines, decode batches,
   probe cycles, 8-GPU samples) into 8 event buses. The parent presses `o` on the overview
   (the sort column cycles: the title's new text is the marker), then opens a host and presses
   `p` (pause/resume: its header), timing each press until the new text is painted.
3. Replay: ``--replay`` events go through the 8 stores round-robin as fast as they can with
   the app running; RSS is sampled after every million.

    python3 benchmarks/fleet_load.py                   # 2,000 events/s for 60 s, then 10M
    python3 benchmarks/fleet_load.py --duration 10 --replay 1000000   # a quick look

4. Reference: the one-host console (benchmarks/tui_load.py) at the same total rate, right
   after, so the fleet's keypress-to-paint can be read against what the machine's load does
   to a single host's.

Targets (issue 15): p95 keypress-to-paint <= 50 ms, RSS <= 200 MB and flat over 10M events.
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
import tempfile
import termios
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tui_load import (  # noqa: E402
    COLUMNS,
    ROWS,
    TerminalReader,
    build_event_pool,
    inert_controller_base,
    percentile,
)

HOSTS = 8
SORT_ORDER = ("host", "state", "tok/s", "accept", "verify", "gpus", "age")


# --- the children ------------------------------------------------------------------------------


def load_controller_class() -> type:
    from specmon.model.events import Ready, RunInfo, ShardProgress
    from specmon.state.store import EventBus

    class LoadController(inert_controller_base()):
        """One host's generator: ``rate`` events/s from ``pool`` into its own bus."""

        can_launch = False

        def __init__(self, name: str, rate: float, pool: list[Any]) -> None:
            self.bus = EventBus()
            self.host_label = name
            self.rate = rate
            self.pool = pool
            self.task: asyncio.Task[None] | None = None

        async def start(self) -> None:
            from specmon.model.events import ConnectionState

            self.bus.publish(ConnectionState(host=self.host_label, state="connected"))
            self.bus.publish(RunInfo(run_id="load", profile="bench", backend="sglang"))
            self.bus.publish(ShardProgress(done=64, total=64))
            self.bus.publish(Ready())
            self.task = asyncio.create_task(self.steady())

        async def steady(self) -> None:
            started = time.monotonic()
            sent = 0
            index = hash(self.host_label) % len(self.pool)
            while True:
                await asyncio.sleep(0.01)
                due = int((time.monotonic() - started) * self.rate) - sent
                for _ in range(min(due, int(self.rate))):  # bounded catch-up after a stall
                    self.bus.publish(self.pool[index % len(self.pool)])
                    index += 1
                sent += due

        async def close(self) -> None:
            if self.task is not None:
                self.task.cancel()

    return LoadController


def run_load_child(args: argparse.Namespace) -> int:
    from specmon.tui.app import tune_gc_for_console
    from specmon.tui.fleet_app import FleetApp

    pool = build_event_pool()
    tune_gc_for_console()  # as run_fleet_console does
    controller_class = load_controller_class()
    hosts = [
        (f"gpu-{i}", controller_class(f"gpu-{i}", args.rate / args.hosts, pool))
        for i in range(args.hosts)
    ]
    app = FleetApp(hosts, None)

    async def replay() -> None:
        import psutil

        for _, controller in hosts:
            if controller.task is not None:
                controller.task.cancel()
        me = psutil.Process()
        rss_before = me.memory_info().rss
        peak = rss_before
        buses = [controller.bus for _, controller in hosts]
        size = len(pool)
        rss_per_million: list[float] = []
        started = time.perf_counter()
        for slice_index, start in enumerate(range(0, args.replay, 5000)):
            publish = buses[slice_index % len(buses)].publish
            for index in range(start, min(args.replay, start + 5000)):
                publish(pool[index % size])
            await asyncio.sleep(0)  # let the app tick and paint between slices
            if (start + 5000) % 1_000_000 == 0:
                rss = me.memory_info().rss
                peak = max(peak, rss)
                rss_per_million.append(round(rss / 2**20, 1))
        elapsed = time.perf_counter() - started
        await asyncio.sleep(1.0)
        rss_after = me.memory_info().rss
        Path(args.out).write_text(
            json.dumps(
                {
                    "replay_events": args.replay,
                    "replay_seconds": elapsed,
                    "replay_events_per_s": args.replay / elapsed,
                    "rss_before_replay_mb": rss_before / 2**20,
                    "rss_peak_during_replay_mb": max(peak, rss_after) / 2**20,
                    "rss_after_replay_mb": rss_after / 2**20,
                    "rss_mb_after_each_million": rss_per_million,
                    "bus_dropped_for_ui": sum(bus.dropped for bus in buses),
                }
            )
        )
        app.exit()

    def begin_replay() -> None:
        asyncio.get_running_loop().create_task(replay())

    async def install_signal() -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, begin_replay)

    app.call_later(install_signal)
    app.run()
    return 0


def run_connect_child(args: argparse.Namespace) -> int:
    """The fleet console over ``--hosts`` real local host sessions (own state dirs)."""
    from specmon.launch.config import load_config
    from specmon.session import SessionOptions, open_session
    from specmon.tui.fleet_app import FleetApp

    config = load_config(None, skip_untrusted=True)  # built-in local host; run from anywhere
    root = Path(args.state_root)
    hosts = [
        (
            f"local-{i}",
            open_session(
                "local",
                config,
                options=SessionOptions(state_dir=str(root / f"host-{i}"), gpu_agent="none"),
            ),
        )
        for i in range(args.hosts)
    ]
    FleetApp(hosts, config).run()
    return 0


# --- the parent ----------------------------------------------------------------------------------


def spawn(args: list[str]) -> tuple[subprocess.Popen[bytes], int, TerminalReader]:
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
        [sys.executable, __file__, *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    reader = TerminalReader(master)
    reader.start()
    return child, master, reader


def end(child: subprocess.Popen[bytes], master: int) -> None:
    try:
        child.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    os.close(master)


def time_to_connected(hosts: int, timeout: float) -> float | None:
    """Seconds from starting the console until its overview paints every host connected."""
    with tempfile.TemporaryDirectory(prefix="specmon-fleet-bench-") as root:
        started = time.perf_counter()
        child, master, reader = spawn(
            ["--connect-child", "--hosts", str(hosts), "--state-root", root]
        )
        reader.expect(f"connected: {hosts}".encode())
        seen = reader.found.wait(timeout)
        elapsed = reader.found_at - started if seen else None
        os.write(master, b"q")
        end(child, master)
    return elapsed


def press_and_time(
    master: int, reader: TerminalReader, key: bytes, marker: bytes, out: list[float]
) -> bool:
    reader.expect(marker)
    pressed = time.perf_counter()
    os.write(master, key)
    if reader.found.wait(2.0):
        out.append((reader.found_at - pressed) * 1000)
        return True
    return False


def single_host_reference(args: argparse.Namespace) -> dict[str, Any]:
    """tui_load.py's measurement of the one-host console at the same total event rate."""
    import contextlib
    import io

    import tui_load

    with tempfile.TemporaryDirectory(prefix="specmon-fleet-ref-") as root:
        out = Path(root) / "reference.json"
        reference = argparse.Namespace(
            rate=args.rate,
            duration=args.reference_duration,
            warmup=args.warmup,
            replay=1000,
            replay_timeout=60.0,
            out=str(out),
            no_gc_tuning=False,
        )
        with contextlib.redirect_stdout(io.StringIO()):
            tui_load.run_parent(reference)
        return json.loads(out.read_text()) if out.exists() else {}


def run_parent(args: argparse.Namespace) -> int:
    import psutil

    connect_one = time_to_connected(1, args.connect_timeout)
    connect_all = time_to_connected(args.hosts, args.connect_timeout)

    result_path = Path(args.out).with_suffix(".child.json")
    result_path.unlink(missing_ok=True)
    child, master, reader = spawn(
        [
            "--load-child",
            "--hosts",
            str(args.hosts),
            "--rate",
            str(args.rate),
            "--replay",
            str(args.replay),
            "--out",
            str(result_path),
        ]
    )
    proc = psutil.Process(child.pid)
    overview_ms: list[float] = []
    host_ms: list[float] = []
    misses = 0
    try:
        time.sleep(args.warmup)
        cpu_start = sum(proc.cpu_times()[:2])
        wall_start = time.perf_counter()
        rss_samples: list[float] = []
        column = 0
        while time.perf_counter() - wall_start < args.duration / 2:
            column = (column + 1) % len(SORT_ORDER)
            marker = f"sorted by {SORT_ORDER[column]} ".encode()
            misses += not press_and_time(master, reader, b"o", marker, overview_ms)
            rss_samples.append(proc.memory_info().rss / 2**20)
            time.sleep(0.5)
        reader.expect(b"PAUSED")  # anything: opening the host repaints the screen
        os.write(master, b"\r")  # open the host under the cursor
        time.sleep(1.0)
        paused = False
        while time.perf_counter() - wall_start < args.duration:
            paused = not paused
            marker = b"PAUSED" if paused else b"live"
            misses += not press_and_time(master, reader, b"p", marker, host_ms)
            rss_samples.append(proc.memory_info().rss / 2**20)
            time.sleep(0.5)
        wall = time.perf_counter() - wall_start
        cpu = sum(proc.cpu_times()[:2]) - cpu_start
        if paused:
            os.write(master, b"p")
        os.write(master, b"f")  # back to the overview for the replay
        time.sleep(0.5)
        replay_started = time.perf_counter()
        child.send_signal(signal.SIGUSR1)
        peak_replay = 0.0
        while child.poll() is None and time.perf_counter() - replay_started < args.replay_timeout:
            peak_replay = max(peak_replay, proc.memory_info().rss / 2**20)
            time.sleep(0.5)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        end(child, master)
    child_results = json.loads(result_path.read_text()) if result_path.exists() else {}
    result_path.unlink(missing_ok=True)
    reference = single_host_reference(args) if args.reference_duration > 0 else {}
    every = overview_ms + host_ms
    third = max(1, len(rss_samples) // 3)
    report = {
        "hosts": args.hosts,
        "gpus_per_host": 8,
        "rate_events_per_s_total": args.rate,
        "connect_s_one_host": round(connect_one, 3) if connect_one else None,
        f"connect_s_{args.hosts}_hosts": round(connect_all, 3) if connect_all else None,
        "connect_ratio_all_to_one": round(connect_all / connect_one, 2)
        if connect_one and connect_all
        else None,
        "duration_s": round(wall, 1),
        "keypresses": len(every) + misses,
        "keypress_misses": misses,
        "latency_ms_p95_overview_sort": round(percentile(overview_ms, 0.95), 1)
        if overview_ms
        else None,
        "latency_ms_p95_host_pause": round(percentile(host_ms, 0.95), 1) if host_ms else None,
        "latency_ms_median": round(statistics.median(every), 1) if every else None,
        "latency_ms_p95": round(percentile(every, 0.95), 1) if every else None,
        "latency_ms_max": round(max(every), 1) if every else None,
        "cpu_share_of_one_core": round(cpu / wall, 3),
        "rss_mb_first_third_mean": round(statistics.mean(rss_samples[:third]), 1),
        "rss_mb_last_third_mean": round(statistics.mean(rss_samples[-third:]), 1),
        "rss_mb_peak_during_replay": round(peak_replay, 1),
        "terminal_bytes_painted": reader.bytes_read,
        # The one-host console (tui_load.py) at the same total rate, right after: what this
        # machine's load does to keypress-to-paint, whatever the number of hosts.
        "reference_one_host_latency_ms_p95": reference.get("latency_ms_p95"),
        "reference_one_host_keypresses": reference.get("keypresses"),
        "p95_ratio_fleet_to_one_host": round(
            percentile(every, 0.95) / reference["latency_ms_p95"], 2
        )
        if every and reference.get("latency_ms_p95")
        else None,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        **{k: round(v, 2) if isinstance(v, float) else v for k, v in child_results.items()},
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0 if every and child_results else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=HOSTS, help="hosts in the fleet")
    parser.add_argument("--rate", type=float, default=2000.0, help="events per second, in all")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of steady load")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring")
    parser.add_argument("--replay", type=int, default=10_000_000, help="events to replay")
    parser.add_argument("--replay-timeout", type=float, default=1200.0)
    parser.add_argument("--connect-timeout", type=float, default=60.0)
    parser.add_argument(
        "--reference-duration",
        type=float,
        default=30.0,
        help="seconds of the one-host console at the same rate, for reference (0: skip)",
    )
    parser.add_argument("--out", default="fleet_load.json", help="where to write the figures")
    parser.add_argument("--load-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--connect-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--state-root", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load_child:
        return run_load_child(args)
    if args.connect_child:
        return run_connect_child(args)
    return run_parent(args)


if __name__ == "__main__":
    raise SystemExit(main())

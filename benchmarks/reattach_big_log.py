"""Reattaching to a server whose log has grown to gigabytes: time until the console is live.

Launches the simulator through a host session (the local transport, or the test OpenSSH sshd
on 127.0.0.1 with --ssh), waits for ready, closes the session (the server keeps running) and
reattaches once with the log as it is (the reference, a few hundred KB), then appends decode
lines (a week of DP8 serving, in 1 MiB blocks) until the log is --gb gigabytes and reattaches
again, once listening as the console does (a lossy subscriber: the replay is read as a summary)
and once as `watch` does (lossless: every replayed line is an event). For each reattach it prints the time from `start()` until the console is live: the run
known (reattached), its state, the last tok/s taken from the newest decode line of the log,
and a GPU sample; the log bytes transferred (what the session's log tail read) against the
configured replay window, and how many of the replay's lines came out as log lines (the last
LOG_LINES: the replay is a summary, see specmon/session/log_follower.py); and whether the
load time of the run still shows.
Usage: python3 benchmarks/reattach_big_log.py [--gb G] [--ssh]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
# The "remote" python over the test sshd: this checkout and this interpreter's packages (the
# simulator needs prometheus_client, which a bare system python may lack).
REMOTE_PYTHONPATH = f"{ROOT}:{sysconfig.get_paths()['purelib']}"

from support.hosts import (  # noqa: E402
    Recorder,
    kill_everything_under,
    local_session,
    sim_profiles,
    ssh_session,
)

from specmon.model.events import Decode, GpuSample, LogLine  # noqa: E402

LAST_GEN = 4321.5  # the newest decode line's throughput: seen only if the tail was read


def decode_block(rng_seed: int = 1) -> bytes:
    """1 MiB of DP8 decode lines (ranks interleaved), as a week-old server writes them."""
    lines = []
    size = 0
    n = rng_seed
    while size < (1 << 20):
        rank = n % 8
        line = (
            f"[2026-02-17 09:{n // 60 % 60:02d}:{n % 60:02d} DP{rank} TP{rank}] Decode batch, "
            f"#running-req: {n % 48 + 1}, #token: {n % 90000}, token usage: 0.{n % 90 + 10}, "
            f"accept len: 2.{n % 90 + 10}, accept rate: 0.{n % 50 + 40}, cuda graph: True, "
            f"gen throughput (token/s): {400 + n % 500}.{n % 90 + 10}, #queue-req: {n % 3}\n"
        )
        lines.append(line)
        size += len(line)
        n += 1
    return "".join(lines).encode()


def grow(log: Path, target_bytes: int) -> float:
    started = time.perf_counter()
    block = decode_block()
    with log.open("ab") as out:
        while out.tell() < target_bytes:
            out.write(block)
        out.write(
            b"[2026-02-17 10:00:00 DP0 TP0] Decode batch, #running-req: 9, #token: 9000, "
            b"token usage: 0.10, accept len: 3.10, accept rate: 0.77, cuda graph: True, "
            + f"gen throughput (token/s): {LAST_GEN:.2f}, #queue-req: 0\n".encode()
        )
    return time.perf_counter() - started


class ConsoleRecorder(Recorder):
    """Every event a lossy subscriber gets, as the console subscribes."""

    def __init__(self, session: Any) -> None:
        self.events = []
        self._bus = session.bus
        self._queue = session.bus.subscribe(lossy=True)
        self._task = asyncio.get_running_loop().create_task(self._drain())


async def reattach(make_session: Any, log: Path, *, grown: bool, lossy: bool) -> dict[str, Any]:
    """Reattach; the console is live when the run, its state, the log's tail (and on the
    grown log the newest decode's tok/s) and a GPU sample are in."""
    end = log.stat().st_size
    session = make_session()
    recorder = ConsoleRecorder(session) if lossy else Recorder(session)
    started = time.monotonic()
    await session.start()
    marks: dict[str, float] = {"start() returned": time.monotonic() - started}
    deadline = started + 120
    wanted = {"run", "state", "log tail", "gpu"} | ({"last tok/s"} if grown else set())
    try:
        while time.monotonic() < deadline:
            now = time.monotonic() - started
            store = session.bus.store
            if "run" not in marks and store.run is not None and store.run.reattached:
                marks["run"] = now
            if "state" not in marks and store.run_state in ("ready", "loading"):
                marks["state"] = now
            if "log tail" not in marks and any(
                isinstance(e, LogLine) and (e.offset or 0) + len(e.text) + 1 >= end
                for _, e in recorder.events[-200:]
            ):
                marks["log tail"] = now
            last = store.last_decode
            if (
                "last tok/s" not in marks
                and isinstance(last, Decode)
                and abs(last.gen_throughput - (LAST_GEN if grown else last.gen_throughput)) < 1e-6
            ):
                marks["last tok/s"] = now
            if "gpu" not in marks and any(isinstance(e, GpuSample) for _, e in recorder.events):
                marks["gpu"] = now
            if wanted <= marks.keys():
                break
            await asyncio.sleep(0.01)
        offsets = [e.offset for _, e in recorder.events if isinstance(e, LogLine)]
        store = session.bus.store
        run = session.current_run
        window = session.options.replay_log_bytes
        follower = session._follow.log if session._follow else None  # what the tail has read
        read = follower.log_offset - max(0, end - window) if follower else 0
        return {
            "marks": marks,
            "live_s": max(marks.get(k, float("inf")) for k in wanted),
            "transferred": read,
            "shown": end - min(offsets) if offsets else 0,
            "lines": len(offsets),
            "events": len(recorder.events),
            "load_shown": store.loading.ready_at is not None
            and store.loading.started_at is not None,
            "run_load_s": (run.ready_at - run.started_at)
            if run and run.ready_at and run.started_at
            else None,
        }
    finally:
        recorder.close()
        await session.close()


async def main_async(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        state = Path(scratch) / "state"
        profiles = sim_profiles()
        server = None
        if args.ssh:
            from support.sshd import start_sshd, stop_sshd

            server = start_sshd(Path(scratch) / "sshd", python_path=REMOTE_PYTHONPATH)

            def make_session() -> Any:
                return ssh_session(server, state, profiles)
        else:

            def make_session() -> Any:
                return local_session(state, profiles)

        try:
            first = make_session()
            await first.start()
            run_id = await first.launch("fast")
            await first.wait_for(lambda s: s.run_state in ("ready", "failed"), 120)
            await first.close()
            log = state / "runs" / run_id / "server.log"
            window = first.options.replay_log_bytes
            small = await reattach(make_session, log, grown=False, lossy=True)
            small_size = log.stat().st_size
            took = grow(log, int(args.gb * (1 << 30)))
            big = await reattach(make_session, log, grown=True, lossy=True)
            watch = await reattach(make_session, log, grown=True, lossy=False)
        finally:
            kill_everything_under(state)
            if server is not None:
                stop_sshd(server.proc)
    load = os.getloadavg()
    print(
        f"transport: {'OpenSSH sshd on 127.0.0.1' if args.ssh else 'local'}; "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; replay window "
        f"{window / (1 << 20):.0f} MiB"
    )
    print(f"log grown to {log_size_text(args.gb)} in {took:.1f} s")
    for name, size, result in (
        ("reference (small log, as the console)", small_size, small),
        ("big log, as the console (lossy)", 0, big),
        ("big log, as watch (lossless)", 0, watch),
    ):
        marks = ", ".join(f"{k} {v:.2f} s" for k, v in result["marks"].items())
        print(
            f"{name}: live in {result['live_s']:.2f} s ({marks}); "
            f"{result['transferred'] / 1e6:.2f} MB of log transferred (its last "
            f"{result['lines']} lines, {result['shown'] / 1e6:.1f} MB, as log lines); "
            f"{result['events']} events; "
            f"load time shown: {'yes' if result['load_shown'] else 'no'} "
            f"(run record: {result['run_load_s'] and round(result['run_load_s'], 2)} s)"
            + (f"; log {size / 1e3:.0f} KB" if size else "")
        )
    for name, result in (("console", big), ("watch", watch)):
        ratio = result["live_s"] / max(small["live_s"], 1e-9)
        print(
            f"{name}: big/small time-to-live {ratio:.1f}x; within 2 s: "
            f"{'yes' if result['live_s'] <= 2 else 'NO'}; transferred within the window: "
            f"{'yes' if result['transferred'] <= window + (1 << 18) else 'NO'}"
        )
    return 0


def log_size_text(gb: float) -> str:
    return f"{gb:g} GiB"


def main() -> int:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--gb", type=float, default=3.0, help="log size to grow to, GiB")
    options.add_argument("--ssh", action="store_true", help="over the test sshd, not locally")
    return asyncio.run(main_async(options.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())

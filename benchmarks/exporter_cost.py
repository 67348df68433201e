"""What `specmon export` adds in CPU for 8 hosts scraped every 15 s, next to what specmon
already spends on those 8 hosts' event streams (the reference, measured in the same run).

Eight state stores are filled with a steady-state host's events (8 GPUs at 4 Hz, a probe
cycle every 30 ms, a decode line a second, three log lines a second, errors now and then),
then served by the exporter's own server (aiohttp + the collector) on loopback. The cost is
the CPU time of the event-loop thread (time.thread_time) over many scrapes made from another
thread, so the client's own work is not counted; the idle cost between scrapes is measured
too (the collector runs only when scraped). The reference is the CPU time of applying 15 s
of those 8 hosts' events to their stores (the work the exporter's sessions do regardless).

    python3 benchmarks/exporter_cost.py [--hosts 8] [--scrapes 200] [--interval 15]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from specmon.exporter.collector import WatchedHost  # noqa: E402
from specmon.exporter.server import MetricsServer, build_registry  # noqa: E402
from specmon.model.events import (  # noqa: E402
    ConnectionState,
    Decode,
    Event,
    GpuSample,
    LoadBegin,
    LogLine,
    ProbeTiming,
    Ready,
    RunInfo,
    ServerError,
)
from specmon.remote.agent import GpuReading  # noqa: E402
from specmon.state.store import EventBus  # noqa: E402

ARGV = (
    "python3", "-m", "sglang.launch_server", "--model-path", "moonshotai/Kimi-K2.5", "--tp", "8",
    "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
)  # fmt: skip


def host_events(seconds: float, start: float) -> list[tuple[float, Event]]:
    """A ready EAGLE-3 TP8 host's events over ``seconds``, with arrival times."""
    out: list[tuple[float, Event]] = []
    steps = int(seconds * 1000)
    for ms in range(0, steps, 1):
        at = start + ms / 1000.0
        if ms % 250 == 0:
            gpus = tuple(
                GpuReading(
                    index=i, util_gpu=90.0 + i % 5, mem_used_mb=120_000.0, mem_total_mb=143_771.0,
                    power_w=580.0, temp_c=57.0, sm_clock_mhz=1980.0,
                )
                for i in range(8)
            )  # fmt: skip
            out.append((at, GpuSample(wall=at - 0.01, gpus=gpus)))
        if ms % 30 == 0:
            out.append((at, ProbeTiming(wall=at, draft_ms=0.9, verify_ms=28.0 + ms % 7, extend_ms=0.3, cycle_ms=29.5)))  # fmt: skip
        if ms % 1000 == 0:
            decode = Decode(running_req=4, tokens=900, token_usage=0.2, accept_len=2.3, accept_rate=0.4, gen_throughput=290.0, queue_req=0)  # fmt: skip
            out.append((at, decode))
        if ms % 333 == 0:
            out.append((at, LogLine(text=f"[ts] INFO: 127.0.0.1 - GET /health {ms}")))
        if ms % 5000 == 0:
            out.append((at, ServerError(category="other", message="a warning-level error")))
    return out


def filled_buses(hosts: int) -> list[EventBus]:
    buses = []
    for _ in range(hosts):
        bus = EventBus()
        bus.publish(ConnectionState(host="h", state="connected"), 0.0)
        bus.publish(RunInfo(run_id="r1", profile="p", argv=ARGV, env=(("NCCL_PROTO", "LL"),)), 0.0)
        bus.publish(LoadBegin(), 1.0)
        bus.publish(Ready(), 60.0)
        for at, event in host_events(60.0, 61.0):  # a minute of history, as after a while
            bus.publish(event, at)
        buses.append(bus)
    return buses


def reference_cpu_s(hosts: int, interval: float) -> float:
    """CPU seconds to apply ``interval`` seconds of ``hosts`` hosts' events to their stores."""
    buses = filled_buses(hosts)
    streams = [host_events(interval, 200.0) for _ in buses]
    begin = time.thread_time()
    for bus, stream in zip(buses, streams, strict=True):
        for at, event in stream:
            bus.publish(event, at)
    return time.thread_time() - begin


async def exporter_cpu(hosts: int, scrapes: int) -> tuple[float, float, int]:
    """(CPU s per scrape, CPU s of the serving thread per idle second, bytes per scrape)."""
    buses = filled_buses(hosts)
    watched = [WatchedHost(f"gpu-{i:02d}", bus) for i, bus in enumerate(buses)]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = MetricsServer(build_registry(lambda: watched, {"p": "sglang"}), "127.0.0.1", port)
    await server.start()
    sizes: list[int] = []

    def client() -> None:
        with httpx.Client() as http:
            for _ in range(scrapes):
                sizes.append(len(http.get(server.url).content))

    try:
        idle_begin = time.thread_time()
        await asyncio.sleep(3.0)
        idle_per_s = (time.thread_time() - idle_begin) / 3.0
        thread = threading.Thread(target=client)
        await asyncio.to_thread(lambda: None)  # the default executor exists before timing
        begin = time.thread_time()
        thread.start()
        while thread.is_alive():
            await asyncio.sleep(0.01)
        spent = time.thread_time() - begin
    finally:
        await server.close()
    # The loop's own polling (sleep(0.01)) is idle cost, counted in `spent` and kept: small.
    return spent / scrapes, idle_per_s, sizes[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--interval", type=float, default=15.0, help="scrape interval, s")
    args = parser.parse_args()
    per_scrape, idle_per_s, size = asyncio.run(exporter_cpu(args.hosts, args.scrapes))
    reference = reference_cpu_s(args.hosts, args.interval)
    added = per_scrape / args.interval + idle_per_s
    reference_share = reference / args.interval
    print(f"hosts {args.hosts}, scrape every {args.interval:g} s, {size} bytes per scrape")
    print(f"exporter: {per_scrape * 1000:.2f} ms CPU per scrape, idle {idle_per_s * 1000:.3f} ms/s")
    print(f"exporter adds {added * 100:.3f}% of one core")
    print(
        f"reference (applying the {args.hosts} hosts' events to their stores): "
        f"{reference_share * 100:.2f}% of one core"
    )
    print(f"ratio exporter / reference: {added / reference_share:.3f}")


if __name__ == "__main__":
    main()

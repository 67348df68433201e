"""How soon `tail -F server.log | specmon parse - --json` prints a line's event, against
`tail -F server.log | cat` in the same run.

A writer appends SGLang decode lines to a log file at a steady rate, noting when it wrote each
(its #running-req is the line's number); `tail -F` follows the file into the process, a reader
notes when each output line comes back. Prints the latency per line (median, 99th percentile,
worst) for both pipelines and their ratio. Python's stdout is buffered as a user has it
(PYTHONUNBUFFERED unset). Usage: python3 benchmarks/parse_pipe_latency.py [--lines N] [--rate R]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

LINE = (
    "[2026-02-10 09:19:12 TP0] Decode batch, #running-req: {n}, #token: 12188, token usage: "
    "0.02, accept len: 3.12, accept rate: 0.78, cuda graph: True, gen throughput (token/s): "
    "412.55, #queue-req: 1\n"
)
START = "[2026-02-10 09:14:02 TP0] Load weight begin. avail mem=138.21 GB\n"


def measure(pipeline: str, log: Path, lines: int, rate: float, number_of) -> list[float]:
    """Latency of each line through ``pipeline`` (a shell command reading the log)."""
    log.write_text(START)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    process = subprocess.Popen(
        ["bash", "-c", pipeline],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # its own process group: tail and the reader end together
    )
    assert process.stdout is not None
    arrived: dict[int, float] = {}
    done = threading.Event()

    def read() -> None:
        for raw in process.stdout:  # type: ignore[union-attr]
            number = number_of(raw)
            if number is not None:
                arrived[number] = time.monotonic()
                if number == lines - 1:
                    done.set()

    threading.Thread(target=read, daemon=True).start()
    time.sleep(1.5)  # the pipeline starts (Python imports) before the clock matters
    written: dict[int, float] = {}
    with log.open("a") as out:
        for number in range(lines):
            out.write(LINE.format(n=number))
            out.flush()
            written[number] = time.monotonic()
            time.sleep(1 / rate)
    done.wait(timeout=30)
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=10)
    return [arrived[n] - written[n] for n in range(lines) if n in arrived]


def summary(latencies: list[float], lines: int) -> str:
    if not latencies:
        return "no line came back"
    ordered = sorted(latencies)
    p50 = ordered[len(ordered) // 2] * 1000
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
    return (
        f"{len(latencies)}/{lines} lines back; median {p50:.1f} ms, p99 {p99:.1f} ms, "
        f"worst {ordered[-1] * 1000:.1f} ms"
    )


def main() -> int:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--lines", type=int, default=200, help="lines written")
    options.add_argument("--rate", type=float, default=50.0, help="lines per second")
    args = options.parse_args()
    tail = shutil.which("tail")
    if tail is None:
        raise SystemExit("tail is not on PATH")
    specmon = f"{shlex.quote(sys.executable)} -m specmon parse - --json"

    def from_json(raw: bytes) -> int | None:
        record = json.loads(raw)
        return record["running_req"] if record["kind"] == "decode" else None

    def from_text(raw: bytes) -> int | None:
        text = raw.decode()
        if "#running-req: " not in text:
            return None
        return int(text.split("#running-req: ")[1].split(",")[0])

    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "server.log"
        follow = f"{tail} -F -n +1 {shlex.quote(str(log))}"
        reference = measure(f"{follow} | cat", log, args.lines, args.rate, from_text)
        parsed = measure(f"{follow} | {specmon}", log, args.lines, args.rate, from_json)
    print(
        f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"{args.lines} lines at {args.rate:g}/s"
    )
    print(f"tail -F | cat:                  {summary(reference, args.lines)}")
    print(f"tail -F | specmon parse - --json: {summary(parsed, args.lines)}")
    if reference and parsed:
        ref, got = sorted(reference), sorted(parsed)
        print(
            f"ratio to cat: median {got[len(got) // 2] / max(ref[len(ref) // 2], 1e-6):.1f}x, "
            f"worst {got[-1] / max(ref[-1], 1e-6):.1f}x; "
            f"every event within 100 ms: {'yes' if got[-1] < 0.1 else 'NO'}"
        )
    return 0 if len(parsed) == args.lines else 1


if __name__ == "__main__":
    raise SystemExit(main())

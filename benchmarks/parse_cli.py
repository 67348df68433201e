"""`specmon parse` as a user runs it, against a bare compiled-regex pass over the same file.

Builds the 1M-line SGLang benchmark log (benchmarks/parse_throughput.py), then times whole
processes, from start to exit with the output written to a file: the floor (a fresh Python that
reads the file in 1 MiB chunks, decodes it and runs one compiled regex that captures a decode
line's fields over each chunk: what any Python log reader pays at least) and `specmon parse`
with --json --summary --events, the text form, --summary (the summary alone), --kind and
--since/--until, and --json --summary on one core (--jobs 1; by default a log file is read
on every core, specmon/logs/parts.py). Each figure is lines/s (wall; CPU, user+sys, in
brackets) and its ratio to the floor of the same run; the summaries with and without events are compared, and with
--check every JSON line is loaded. Usage: python3 benchmarks/parse_cli.py [--lines N]
[--repeat N] [--check]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from parse_throughput import write_log

FLOOR = r"""
import re, sys
decode = re.compile(
    r"\[(\S+ \S+) TP(\d+)\] Decode batch, #running-req: (\d+), #token: (\d+), "
    r"token usage: ([\d.]+), accept len: ([\d.]+), accept rate: ([\d.]+), cuda graph: (\w+), "
    r"gen throughput \(token/s\): ([\d.]+), #queue-req: (\d+)"
)
found = 0
with open(sys.argv[1], "rb") as log:
    while chunk := log.read(1 << 20):
        found += len(decode.findall(chunk.decode("utf-8", "replace")))
print(found)
"""


# As a user runs it: stdout buffered as Python buffers it for a file or pipe.
USER_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


class Run(NamedTuple):
    wall_s: float
    cpu_s: float
    out_bytes: int


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], out: Path) -> Run:
    """One process, start to exit, its standard output written to ``out``."""
    cpu = _children_cpu()
    started = time.perf_counter()
    with out.open("wb") as sink:
        done = subprocess.run(argv, stdout=sink, stderr=subprocess.PIPE, env=USER_ENV, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode()[-500:]}")
    return Run(wall, _children_cpu() - cpu, out.stat().st_size)


def best(runs: list[Run]) -> Run:
    return Run(min(r.wall_s for r in runs), min(r.cpu_s for r in runs), runs[0].out_bytes)


def main() -> int:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--lines", type=int, default=1_000_000, help="log length in lines")
    options.add_argument("--repeat", type=int, default=3, help="runs of each; the best counts")
    options.add_argument("--check", action="store_true", help="load every JSON line written")
    args = options.parse_args()
    specmon = [sys.executable, "-m", "specmon", "parse"]
    with tempfile.TemporaryDirectory() as scratch:
        log, out = Path(scratch) / "server.log", Path(scratch) / "out"
        lines = write_log(log, args.lines)
        size_mb = log.stat().st_size / 1e6
        cases = {
            "floor (bare regex pass)": [sys.executable, "-c", FLOOR, str(log)],
            "--json --summary --events": [*specmon, str(log), "--json", "--summary", "--events"],
            "--summary --events (text)": [*specmon, str(log), "--summary", "--events"],
            "--json --summary --events --jobs 1 (one core)": [
                *specmon,
                str(log),
                "--json",
                "--summary",
                "--events",
                "--jobs",
                "1",
            ],
            "--summary (the summary alone)": [*specmon, str(log), "--summary"],
            "--json --kind error --kind ready": [
                *specmon,
                str(log),
                "--json",
                "--kind",
                "error",
                "--kind",
                "ready",
            ],
            "--json --since/--until (1 h)": [
                *specmon,
                str(log),
                "--json",
                "--since",
                "2026-02-10 10:00",
                "--until",
                "2026-02-10 10:59",
            ],
        }
        load = os.getloadavg()
        results: dict[str, Run] = {}
        for _ in range(max(1, args.repeat)):  # interleaved, so load changes hit all alike
            for name, argv in cases.items():
                run = timed(argv, out)
                results[name] = best([results[name], run]) if name in results else run
        with_events = (
            timed(cases["--summary --events (text)"], out) and out.read_text().splitlines()
        )
        timed(cases["--summary (the summary alone)"], out)
        alone = out.read_text().splitlines()
        same_summary = with_events[-len(alone) :] == alone
        if args.check:
            timed(cases["--json --summary --events"], out)
            with out.open() as written:
                records = sum(1 for line in written if json.loads(line))
            print(f"check: {records} JSON lines loaded")
        load_after = os.getloadavg()
    floor = results["floor (bare regex pass)"]
    cores = len(os.sched_getaffinity(0))
    print(f"log: {lines:,} lines, {size_mb:.1f} MB; {cores} cores for this process")
    print(
        f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"after: {load_after[0]:.2f}"
    )
    print(f"{'':36} {'lines/s wall':>13} {'(cpu)':>11} {'x floor':>8} {'(cpu)':>6} {'out MB':>7}")
    for name, run in results.items():
        print(
            f"{name:36} {lines / run.wall_s:13,.0f} {lines / run.cpu_s:11,.0f} "
            f"{floor.wall_s / run.wall_s:8.2f} {floor.cpu_s / run.cpu_s:6.2f} "
            f"{run.out_bytes / 1e6:7.1f}"
        )
    print(f"summary with --no-events equals the one with events: {'yes' if same_summary else 'NO'}")
    return 0 if same_summary else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""How long `specmon --help` takes to print, against a bare interpreter started the same way.

The target (issue 2) is <= 150 ms: the CLI imports its subcommands' argparse parts only, and
Textual, asyncssh and httpx load when a command runs. The bare `python -c pass` start-up,
measured in the same run, is the floor no CLI can go under.

    python3 benchmarks/cli_startup.py [--runs 30]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

TARGET_MS = 150.0


def wall_ms(argv: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        times.append((time.perf_counter() - started) * 1000.0)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    wall_ms([sys.executable, "-m", "specmon", "--help"], 3)  # warm the page cache
    bare = wall_ms([sys.executable, "-c", "pass"], args.runs)
    help_ = wall_ms([sys.executable, "-m", "specmon", "--help"], args.runs)
    for name, times in (("python -c pass", bare), ("specmon --help", help_)):
        print(
            f"{name:16s} median {statistics.median(times):6.1f} ms   "
            f"p90 {sorted(times)[int(0.9 * (len(times) - 1))]:6.1f} ms   "
            f"min {min(times):6.1f} ms   ({len(times)} runs)"
        )
    median = statistics.median(help_)
    print(
        f"specmon --help costs {median - statistics.median(bare):.1f} ms over a bare interpreter "
        f"({median / statistics.median(bare):.2f}x); target <= {TARGET_MS:.0f} ms: "
        f"{'met' if median <= TARGET_MS else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

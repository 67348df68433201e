"""How long the simulator takes from process start to its first HTTP answer, against a bare
interpreter started the same way.

Tests start `python -m specmon.sim` many times, so its own start-up (imports, argument
parsing, the rank forks, the HTTP server) is paid over and over. With
SPECMON_SIM_TIME_SCALE=0 the simulated loading takes no time, so what is left is the real
cost: from `Popen` to the first answer on `/health` (503 during warm-up) and to the first
200 (warm-up done through real HTTP). The bare `python -c pass`, measured in the same run,
is the floor. On a loaded machine wall times swell; the CPU time the server process has used
by its first 200 (from /proc, Linux) is the steadier figure. `--time-scale 0.002` (the tests' usual scale, ~1.7 s of simulated loading)
shows what tests pay, with the HTTP stack's imports overlapping the simulated loading.

    python3 benchmarks/sim_startup.py [--runs 10] [--time-scale 0]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from support.sim import EAGLE3_TP8_ARGS, free_port  # noqa: E402

POLL_S = 0.002
LIMIT_S = 30.0


def health_status(port: int) -> int | None:
    """One GET /health on a fresh connection; None while the port refuses."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            head = sock.recv(64)
    except OSError:
        return None
    parts = head.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_launch(workdir: Path, time_scale: str) -> tuple[float, float, float]:
    """Seconds from Popen to the first /health answer and to the first 200, and the CPU
    seconds the server process had used by then."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECMON_", "SGLANG_"))}
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        SPECMON_SIM_TIME_SCALE=time_scale,
        SPECMON_SIM_GPU_STATE=str(workdir / "gpus.json"),
        SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN="1",
    )
    argv = [sys.executable, "-m", "specmon.sim", *EAGLE3_TP8_ARGS, "--port", str(port)]
    first = ready = None
    cpu = 0.0
    started = time.perf_counter()
    with (workdir / "server.log").open("wb") as log:
        proc = subprocess.Popen(
            argv, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        while ready is None and time.perf_counter() - started < LIMIT_S:
            status = health_status(port)
            now = time.perf_counter() - started
            if status is not None and first is None:
                first = now
            if status == 200:
                ready = now
                cpu = cpu_seconds(proc.pid)
            time.sleep(POLL_S)
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
    if first is None or ready is None:
        raise SystemExit(f"the simulator did not answer within {LIMIT_S} s")
    return first, ready, cpu


def bare_start() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--time-scale", default="0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        one_launch(Path(tmp), args.time_scale)  # warm the page cache
        firsts, readies, cpus, bares = [], [], [], []
        for n in range(args.runs):
            workdir = Path(tmp) / str(n)
            workdir.mkdir()
            first, ready, cpu = one_launch(workdir, args.time_scale)
            firsts.append(first * 1000)
            readies.append(ready * 1000)
            cpus.append(cpu * 1000)
            bares.append(bare_start() * 1000)
    bare = statistics.median(bares)
    for name, times in (
        ("python -c pass", bares),
        ("first /health answer", firsts),
        ("first /health 200", readies),
    ):
        median = statistics.median(times)
        print(
            f"{name:22s} median {median:7.1f} ms   min {min(times):7.1f} ms   "
            f"ratio to bare python {median / bare:5.1f}x"
        )
    print(f"{'server CPU by first 200':22s} median {statistics.median(cpus):7.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`specmon watch HOST --json` over SSH against a server logging 10,000 lines/s: lag per line.

Starts the test OpenSSH sshd on 127.0.0.1 (tests/support/sshd.py), launches the simulator
through a host session and closes it (the server keeps running), starts `specmon watch HOST
--json` as a user would (a subprocess, host keys verified), then appends decode lines to the
run's log at --rate lines/s for --seconds, each numbered in its #token field with its write
time noted. A reader notes when each decode event is printed. Prints the lag per line
(median, 99th percentile, worst), how many came back, and the same for the reference measured
in the same run: `ssh HOST tail -F LOG` through the same sshd (the transport alone).
Usage: python3 benchmarks/watch_rate.py [--rate R] [--seconds S]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
# The "remote" python over the test sshd: this checkout and this interpreter's packages (the
# simulator needs prometheus_client, which a bare system python may lack).
REMOTE_PYTHONPATH = f"{ROOT}:{sysconfig.get_paths()['purelib']}"

from support.hosts import kill_everything_under, sim_profiles, ssh_session  # noqa: E402
from support.sshd import start_sshd, stop_sshd  # noqa: E402

LINE = (
    "[2026-02-17 09:00:00 DP{r} TP{r}] Decode batch, #running-req: 12, #token: {n}, token "
    "usage: 0.10, accept len: 3.10, accept rate: 0.77, cuda graph: True, gen throughput "
    "(token/s): 512.25, #queue-req: 0\n"
)


def follow(
    argv: list[str], number_of: Any, arrived: dict[int, float], errors: Path
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=errors.open("wb"),
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )

    def read() -> None:
        for raw in process.stdout:  # type: ignore[union-attr]
            number = number_of(raw)
            if number is not None:
                arrived.setdefault(number, time.monotonic())

    threading.Thread(target=read, daemon=True).start()
    return process


def write_lines(log: Path, rate: float, seconds: float, first: int) -> dict[int, float]:
    """Append lines at ``rate`` in 10 ms batches; the write time of each line."""
    written: dict[int, float] = {}
    batch = max(1, int(rate / 100))
    number = first
    started = time.monotonic()
    with log.open("a") as out:
        while time.monotonic() - started < seconds:
            text = "".join(LINE.format(r=(number + i) % 8, n=number + i) for i in range(batch))
            out.write(text)
            out.flush()
            now = time.monotonic()
            for i in range(batch):
                written[number + i] = now
            number += batch
            next_at = started + (number - first) / rate
            time.sleep(max(0.0, next_at - time.monotonic()))
    return written


def lags(written: dict[int, float], arrived: dict[int, float]) -> str:
    got = sorted(arrived[n] - t for n, t in written.items() if n in arrived)
    if not got:
        return "no line came back"
    return (
        f"{len(got)}/{len(written)} back; lag median {got[len(got) // 2] * 1000:.0f} ms, "
        f"p99 {got[min(len(got) - 1, int(len(got) * 0.99))] * 1000:.0f} ms, "
        f"worst {got[-1] * 1000:.0f} ms"
    )


def from_watch(raw: bytes) -> int | None:
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    return record.get("tokens") if record.get("kind") == "decode" else None


def from_tail(raw: bytes) -> int | None:
    text = raw.decode(errors="replace")
    if "#token: " not in text:
        return None
    return int(text.split("#token: ")[1].split(",")[0])


def stop(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def main() -> int:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--rate", type=float, default=10_000, help="log lines per second")
    options.add_argument("--seconds", type=float, default=10, help="how long to write")
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        server = start_sshd(Path(scratch) / "sshd", python_path=REMOTE_PYTHONPATH)
        state = Path(scratch) / "state"
        try:
            session = ssh_session(server, state, sim_profiles())

            async def launch() -> str:
                await session.start()
                run_id = await session.launch("fast")
                await session.wait_for(lambda s: s.run_state in ("ready", "failed"), 120)
                await session.close()
                return run_id

            run_id = asyncio.run(launch())
            tail_errors, watch_errors = Path(scratch) / "tail.err", Path(scratch) / "watch.err"
            log = state / "runs" / run_id / "server.log"
            ssh = [
                "ssh",
                "-F",
                str(server.ssh_config),
                "-o",
                f"UserKnownHostsFile={server.known_hosts}",
                "specmon-test",
            ]
            tail_arrived: dict[int, float] = {}
            tail = follow(
                [*ssh, "tail", "-F", "-n", "0", str(log)], from_tail, tail_arrived, tail_errors
            )
            time.sleep(2)
            tail_written = write_lines(log, args.rate, args.seconds, 0)
            time.sleep(3)
            stop(tail)
            watch_arrived: dict[int, float] = {}
            watch = follow(
                [
                    sys.executable,
                    "-m",
                    "specmon",
                    "watch",
                    "specmon-test",
                    "--json",
                    "--ssh-config",
                    str(server.ssh_config),
                    "--known-hosts",
                    str(server.known_hosts),
                    "-i",
                    str(server.client_key),
                    "--state-dir",
                    str(state),
                    "--gpu-agent",
                    "sim",
                ],
                from_watch,
                watch_arrived,
                watch_errors,
            )
            time.sleep(8)  # connect, reattach, replay
            first = 10_000_000
            watch_written = write_lines(log, args.rate, args.seconds, first)
            time.sleep(5)
            stop(watch)
            for name, path in (("ssh tail", tail_errors), ("watch", watch_errors)):
                said = path.read_text(errors="replace").strip()
                if said:
                    print(f"{name} stderr: {said[-300:]}")
        finally:
            kill_everything_under(state)
            stop_sshd(server.proc)
    load = os.getloadavg()
    print(
        f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"{args.rate:g} lines/s for {args.seconds:g} s over OpenSSH on 127.0.0.1"
    )
    print(f"reference, ssh tail -F:    {lags(tail_written, tail_arrived)}")
    print(f"specmon watch HOST --json: {lags(watch_written, watch_arrived)}")
    got = sorted(watch_arrived[n] - t for n, t in watch_written.items() if n in watch_arrived)
    kept = len(got) == len(watch_written)
    print(
        f"every line's event printed: {'yes' if kept else 'NO'}; lag under 1 s for all: "
        f"{'yes' if kept and got and got[-1] < 1 else 'NO'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

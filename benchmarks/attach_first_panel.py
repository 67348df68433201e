"""`connect --attach`: time from opening the console to its first live panel, over the test
OpenSSH sshd on 127.0.0.1, against a reference measured in the same run.

Two simulators run on the "host": one launched by specmon (the reference: `connect` to a
launched run, which reattaches it) and one started by a plain shell (`nohup ... > log &`, what
`--attach` watches). Each round opens the console (SpecmonApp under Textual's Pilot, an SSH
host session with a fresh connection) on each in turn and times, from the app's start, the
first live panel: the header showing the run ready (its log replayed, so the loading phases
and ready are on screen) and the GPU panel filled by the agent. Prints each figure, the
medians and the ratio attach / reference.

The attach path adds one helper call (`servers`: a /proc scan, plus docker ps and nvidia-smi
where present) before the log is followed; the reference asks the helper for its runs only.
Usage: python3 benchmarks/attach_first_panel.py [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
REMOTE_PYTHONPATH = f"{ROOT}:{sysconfig.get_paths()['purelib']}"

from support.by_hand import kill_group, start_by_hand, wait_listening  # noqa: E402
from support.hosts import free_port, kill_everything_under, sim_profiles, ssh_session  # noqa: E402
from support.sshd import start_sshd, stop_sshd  # noqa: E402

from specmon.tui.app import SpecmonApp  # noqa: E402
from specmon.tui.widgets.header import HeaderBar  # noqa: E402

TIMEOUT_S = 60.0


async def first_panel(session: Any) -> float:
    """Seconds from the console's start to its header saying ready with the GPUs shown."""
    app = SpecmonApp(session, None)
    store = session.bus.store
    began = time.perf_counter()
    async with app.run_test(size=(140, 44)) as pilot:
        while True:
            if time.perf_counter() - began > TIMEOUT_S:
                raise SystemExit(f"no live panel within {TIMEOUT_S}s")
            if store.run is not None and store.run_state == "ready" and store.gpus:
                header = str(app.main.query_one(HeaderBar).render())
                if " ready " in header:
                    took = time.perf_counter() - began
                    break
            await pilot.pause(0.01)
    await session.close()
    return took


async def main_async(rounds: int) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        state = base / "state"
        state.mkdir(mode=0o700)
        server = start_sshd(base / "sshd", python_path=REMOTE_PYTHONPATH)
        profiles = sim_profiles(shards=4)
        by_hand = None
        try:
            launcher = ssh_session(server, state, profiles)
            await launcher.start()
            await launcher.launch("fast")
            await launcher.wait_for(lambda s: s.run_state in ("ready", "failed"), 120)
            await launcher.close()
            port = free_port()
            flags = "--model-path moonshotai/Kimi-K2.5 --tp 8 --enable-metrics"
            by_hand = start_by_hand(
                base, "foreign", f"{sys.executable} -m specmon.sim {flags} --port {port}", port,
                env={
                    "SPECMON_SIM_GPU_STATE": str(state / "sim-gpus.json"),
                    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1",
                    "SPECMON_SIM_SHARDS": "4",
                },
            )  # fmt: skip
            wait_listening(port)
            while "fired up and ready" not in by_hand.log.read_text(errors="replace"):
                await asyncio.sleep(0.05)
            reference: list[float] = []
            attach: list[float] = []
            for _ in range(rounds):
                reference.append(await first_panel(ssh_session(server, state, profiles)))
                attach.append(
                    await first_panel(ssh_session(server, state, {}, attach=str(by_hand.pid)))
                )
        finally:
            if by_hand is not None:
                kill_group(by_hand.pgid)
            kill_everything_under(state)
            stop_sshd(server.proc)
    load = os.getloadavg()
    ref, att = statistics.median(reference), statistics.median(attach)
    print(f"transport: OpenSSH sshd on 127.0.0.1; load average {load[0]:.2f} {load[1]:.2f}")
    print("reference (connect, a launched run):  " + "  ".join(f"{x:.2f}" for x in reference))
    print("connect --attach PID (by hand):       " + "  ".join(f"{x:.2f}" for x in attach))
    print(
        f"median: reference {ref:.2f} s, attach {att:.2f} s; ratio attach/reference {att / ref:.2f}"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    return asyncio.run(main_async(parser.parse_args().rounds))


if __name__ == "__main__":
    sys.exit(main())

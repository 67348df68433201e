"""sgtop (0.1.7, a third-party SGLang monitor from the package index) against the simulated
SGLang, as a person runs it: its own command in a terminal (a pty read by pyte), talking
straight to the server (``--mode direct``: /metrics and /get_server_info, nothing else).

sgtop's KV row is ``kv-cache USED/MAX`` from ``sglang:kv_used_tokens`` and
``sglang:max_total_num_tokens``; its queue row is p50/p90 of ``sglang:queue_time_seconds``
over bucket deltas between its scrapes (sgtop/prom.py, sgtop/direct.py). Its author checked
those names against SGLang 0.5.18, so the simulator plays 0.5.18 here
(``SPECMON_SIM_SGLANG_VERSION``); against the default 0.5.9, which has no ``kv_used_tokens``,
the KV row reads 0 used, as it would against a real 0.5.9. Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from support.pty_screen import PtyScreen
from support.sim import start_sim

pytest.importorskip("sgtop", reason="sgtop is in the test extras (pyproject.toml)")

KV_ROW = re.compile(r"kv-cache (\d+)/(\d+) \(")
QUEUE_ROW = re.compile(r"DP0 queue p50=\s*(\S+) p90=\s*(\S+)")
REQUESTS = 12  # more than one prefill batch: the later ones queue behind a decode cycle


def _sgtop_argv(port: int) -> list[str]:
    return [
        sys.executable,
        "-c",
        "from sgtop.cli import main; main()",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--mode",
        "direct",
        "--interval",
        "0.25",
    ]


def _load(url: str, stop: threading.Event) -> None:
    """Waves of concurrent /generate requests until told to stop."""
    with httpx.Client(timeout=60) as client:
        while not stop.is_set():
            threads = [
                threading.Thread(
                    target=client.post,
                    args=(url,),
                    kwargs={
                        "json": {"text": "hello " * 40, "sampling_params": {"max_new_tokens": 60}}
                    },
                )
                for _ in range(REQUESTS)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()


def _watch(
    tmp_path: Path, version: str, enough: Callable[[list[int], list[str]], bool]
) -> tuple[list[int], list[str], list[str]]:
    """Run sgtop against a loaded simulator playing ``version`` until ``enough(used, queue)``
    (or 30 s): the KV row's used-token counts seen, its queue row's p50 values seen, and the
    last screen."""
    env = {"SPECMON_SIM_SGLANG_VERSION": version}
    with start_sim(tmp_path / "sim", args=["--enable-metrics"], env=env) as sim:
        sim.wait_ready()
        stop = threading.Event()
        with PtyScreen(_sgtop_argv(sim.port), columns=120, lines=50) as term:
            term.wait_for(lambda lines: any(KV_ROW.search(line) for line in lines), timeout=30)
            load = threading.Thread(target=_load, args=(sim.url("/generate"), stop))
            load.start()
            used: list[int] = []
            queue: list[str] = []
            try:
                term.wait_for(
                    lambda lines: _read_rows(lines, used, queue) and enough(used, queue),
                    timeout=30,
                )
            except AssertionError:
                pass  # the caller asserts on what was seen
            finally:
                stop.set()
                load.join(timeout=90)
            last = term.lines()
            term.send("q")
    return used, queue, last


def _read_rows(lines: list[str], used: list[int], queue: list[str]) -> bool:
    for line in lines:
        if match := KV_ROW.search(line):
            used.append(int(match.group(1)))
        if match := QUEUE_ROW.search(line):
            queue.append(match.group(1))
    return bool(used)


@pytest.mark.timeout(180)
def test_sgtop_shows_kv_and_queue_rows_against_the_simulated_sglang_0_5_18(tmp_path: Path) -> None:
    used, queue, last = _watch(tmp_path, "0.5.18", lambda used, queue: max(used) > 0 and queue)
    screen = "\n".join(last)
    assert used and max(used) > 0, f"sgtop's KV row never showed used tokens:\n{screen}"
    assert queue, f"sgtop's queue row never showed queue-time percentiles:\n{screen}"
    assert "not enabled" not in screen


@pytest.mark.timeout(180)
def test_sgtop_against_0_5_9_has_queue_times_but_no_kv_used_gauge(tmp_path: Path) -> None:
    """0.5.9 serves ``queue_time_seconds`` but not ``kv_used_tokens``: sgtop's queue row has
    percentiles and its KV row reads 0 used (what it shows against a real 0.5.9)."""
    used, queue, last = _watch(tmp_path, "0.5.9", lambda used, queue: len(used) > 40 and queue)
    screen = "\n".join(last)
    assert queue, f"sgtop's queue row never showed queue-time percentiles:\n{screen}"
    assert used and max(used) == 0, screen

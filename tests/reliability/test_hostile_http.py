"""A hostile server's HTTP answers cost a bounded amount (issue 24, item 3): the attacks as
reproduced, run against real processes (tests/hostile_server.py posing as vLLM, `specmon
watch` and `specmon export` as subprocesses, their peak RSS read from the kernel).

- one ``position="200000"`` (or ``"20000000"``) sample on /metrics: `watch --json` printed
  1 MB lines, `export` served 200,003 series (14.9 MB a scrape), 221 MB of memory;
- an endless /metrics body: httpx read it whole before parsing, without bound;
- a SpecDecoding log line listing a million positions.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.hostile import hostile_profile_toml
from support.hosts import free_port, kill_everything_under
from support.paths import REPO

MIB = 1 << 20
# Address space a `watch` or `export` under attack may map: on the unfixed code an endless
# body would otherwise take the machine's memory; the assertions below ask far less.
ADDRESS_SPACE_LIMIT = 3 << 30
# Peak RSS a watch or an export stays under, attacked or not (measured 60-75 MB unattacked;
# a position="20000000" sample took 1.9 GB before the caps).
PEAK_RSS_LIMIT = 150 * MIB


@dataclass
class Finished:
    stdout: str
    stderr: str
    returncode: int
    peak_rss: int  # bytes: the program's own high-water mark (VmHWM)


class HostileBox:
    """A config whose profile runs the hostile server as a vLLM server, and the specmon
    command line that reaches it on ``local``."""

    def __init__(self, tmp_path: Path, mode: str) -> None:
        self.tmp = tmp_path
        self.port = free_port()
        self.config = tmp_path / "specmon.toml"
        self.config.write_text(hostile_profile_toml(mode, port=self.port, backend="vllm"))
        self.state = tmp_path / "state"

    def argv(self, command: str, *args: str) -> list[str]:
        where = ["local", "--state-dir", str(self.state)]
        return [
            sys.executable,
            "-m",
            "specmon",
            "--config",
            str(self.config),
            command,
            *where,
            *args,
        ]

    def run(self, command: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(command, *args),
            capture_output=True,
            text=True,
            timeout=90,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )

    def start(self, command: str, *args: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
        """``command`` running, its output in files (no pipe to fill), its address space
        capped (a safety net for the unfixed code)."""
        out, err = self.tmp / f"{command}.out", self.tmp / f"{command}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            process = subprocess.Popen(
                self.argv(command, *args),
                stdout=stdout,
                stderr=stderr,
                env={**os.environ, "PYTHONPATH": str(REPO)},
                preexec_fn=_limit_address_space,
            )
        return process, out, err

    def finish(self, started: tuple[subprocess.Popen[bytes], Path, Path]) -> Finished:
        """Wait for the command (bounded), then its output and its peak RSS.

        The peak is the program's own high-water mark (VmHWM, read every 0.1 s while it
        runs), not ``ru_maxrss``: a child forked from a long-lived pytest worker starts with the
        worker's high-water mark in its ``ru_maxrss``, whatever the program itself used."""
        process, out, err = started
        peak = 0
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            peak = max(peak, _high_water_mark(process.pid))
            pid, status, _ = os.wait4(process.pid, os.WNOHANG)
            if pid:
                process.returncode = os.waitstatus_to_exitcode(status)
                return Finished(
                    out.read_text(errors="replace"),
                    err.read_text(errors="replace"),
                    process.returncode,
                    peak,
                )
            time.sleep(0.1)
        process.kill()
        os.wait4(process.pid, 0)
        process.returncode = -9
        raise AssertionError(
            f"{process.args[5]} did not end in 90 s (peak RSS {peak / MIB:.0f} MB)"
        )


def _high_water_mark(pid: int) -> int:
    """The process's peak resident set in bytes (VmHWM), 0 once it has exited."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))


@pytest.fixture
def box_factory(tmp_path: Path) -> Iterator[list[HostileBox]]:
    boxes: list[HostileBox] = []
    try:
        yield boxes
    finally:
        for box in boxes:
            kill_everything_under(box.state)


def _launched(boxes: list[HostileBox], tmp_path: Path, mode: str) -> HostileBox:
    box = HostileBox(tmp_path, mode)
    boxes.append(box)
    launched = box.run("launch", "-p", "hostile")
    assert launched.returncode == 0, launched.stderr
    return box


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("position", ["200000", "20000000"])
def test_a_huge_position_label_costs_watch_json_nothing(
    box_factory: list[HostileBox], tmp_path: Path, position: str
) -> None:
    box = _launched(box_factory, tmp_path, f"http:position={position},serve")
    watched = box.finish(box.start("watch", "--json", "--duration", "8"))
    longest = max(map(len, watched.stdout.splitlines()), default=0)
    print(f"watch: longest line {longest} B, peak RSS {watched.peak_rss / MIB:.0f} MB")
    assert watched.returncode == 0, watched.stderr[-2000:]
    assert longest < 4096, f"a {longest}-byte line"
    events = _events(watched.stdout)
    specs = [e for e in events if e["kind"] == "spec_decode"]
    assert specs, "the counters' rise was read (two scrapes)"
    assert all(len(e["per_position"]) <= 64 for e in specs)
    assert specs[-1]["per_position"] == [1.0, 1.0]  # the honest positions, as served
    notices = [e for e in events if e["kind"] == "notice"]
    assert len(notices) == 1, notices  # once, not at every scrape
    assert "past position 64" in notices[0]["message"]
    assert watched.peak_rss < PEAK_RSS_LIMIT, f"peak RSS {watched.peak_rss / MIB:.0f} MB"


def _scrape(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.read()


def test_a_huge_position_label_leaves_the_exporter_bounded(
    box_factory: list[HostileBox], tmp_path: Path
) -> None:
    box = _launched(box_factory, tmp_path, "http:position=200000,serve")
    listen = free_port()
    started = box.start("export", "--listen", f"127.0.0.1:{listen}", "--duration", "14")
    url = f"http://127.0.0.1:{listen}/metrics"
    positions: list[str] = []
    page = b""
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline and len(positions) < 2:
        time.sleep(0.5)
        try:
            page = _scrape(url)
        except OSError:
            continue
        positions = [
            s.labels["position"]
            for family in text_string_to_metric_families(page.decode())
            for s in family.samples
            if s.name == "specmon_spec_position_acceptance_ratio"
        ]
    exported = box.finish(started)
    series = [line for line in page.splitlines() if line and not line.startswith(b"#")]
    print(
        f"export: {len(series)} series, {len(page)} B a scrape, peak RSS {exported.peak_rss / MIB:.0f} MB"
    )
    assert positions == ["1", "2"], f"{len(positions)} position series"
    assert len(series) < 300, f"{len(series)} series"
    assert len(page) < 64 * 1024, f"{len(page)} bytes a scrape"
    assert exported.peak_rss < PEAK_RSS_LIMIT, f"peak RSS {exported.peak_rss / MIB:.0f} MB"


def test_an_endless_metrics_body_is_cut_at_its_cap(
    box_factory: list[HostileBox], tmp_path: Path
) -> None:
    box = _launched(box_factory, tmp_path, "http:endless,serve")
    watched = box.finish(box.start("watch", "--json", "--duration", "8"))
    print(f"endless: peak RSS {watched.peak_rss / MIB:.0f} MB, rc {watched.returncode}")
    assert watched.returncode == 0, watched.stderr[-2000:]
    events = _events(watched.stdout)
    assert [e["status"] for e in events if e["kind"] == "health"] == [200]
    notices = [e for e in events if e["kind"] == "notice"]
    assert [n["source"] for n in notices] == ["/metrics"], notices  # once for the run
    assert notices[0]["message"] == (
        "/metrics: the answer ran past the 8 MiB cap; cut there; not scraped again for this run"
    )
    assert watched.peak_rss < PEAK_RSS_LIMIT, f"peak RSS {watched.peak_rss / MIB:.0f} MB"


def test_a_million_positions_in_a_log_line_are_cut_in_parse(tmp_path: Path) -> None:
    rates = ", ".join(["0.5"] * 1_000_000)
    line = (
        "INFO 01-01 00:00:00 [metrics.py:1] SpecDecoding metrics: Mean acceptance length: "
        "2.50, Accepted throughput: 10.00 tokens/s, Drafted throughput: 20.00 tokens/s, "
        "Accepted: 100 tokens, Drafted: 200 tokens, Per-position acceptance rate: "
        f"{rates}, Avg Draft acceptance rate: 50.0%\n"
    )
    log = tmp_path / "vllm.log"
    log.write_text(line * 3)
    parsed = subprocess.run(
        [sys.executable, "-m", "specmon", "parse", "--backend", "vllm", "--json", str(log)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert parsed.returncode == 0, parsed.stderr
    events = _events(parsed.stdout)
    specs = [e for e in events if e["kind"] == "spec_decode"]
    assert len(specs) == 3 and all(e["per_position"] == [0.5] * 64 for e in specs)
    assert [e["kind"] for e in events].count("notice") == 1


def test_a_million_positions_in_a_log_line_are_cut_in_watch(
    box_factory: list[HostileBox], tmp_path: Path
) -> None:
    box = _launched(box_factory, tmp_path, "specpos:1000000,specpos:1000000,serve")
    watched = box.finish(box.start("watch", "--json", "--duration", "4"))
    assert watched.returncode == 0, watched.stderr[-2000:]
    events = _events(watched.stdout)
    specs = [e for e in events if e["kind"] == "spec_decode"]
    assert [len(e["per_position"]) for e in specs] == [64, 64]
    assert [e["source"] for e in events if e["kind"] == "notice"] == ["log"]
    assert max(map(len, watched.stdout.splitlines())) < 4096


async def test_the_console_shows_the_notice_as_a_toast(tmp_path: Path) -> None:
    from support.console import local_console, wait_until

    from specmon.launch.config import parse_config_text

    text = hostile_profile_toml("http:endless,serve", port=free_port(), backend="vllm")
    config = parse_config_text(text, None, environ={})
    state = tmp_path / "state"
    try:
        with local_console(config, state, gpu_agent="none") as app:
            async with app.run_test(size=(140, 40)) as pilot:
                await wait_until(
                    pilot,
                    lambda: (
                        getattr(app.controller.bus.store.connection, "state", "") == "connected"
                    ),
                    10,
                    "connect",
                )
                await app.controller.launch("hostile")
                await wait_until(
                    pilot,
                    lambda: any("8 MiB cap" in n.message for n in app._notifications),
                    30,
                    "the notice's toast",
                )
    finally:
        kill_everything_under(state)

"""`specmon export` end to end: the simulator (a demo session with client traffic) watched by
the exporter as a real process; its scrape passes `promtool check metrics`, and a real
Prometheus server scraping it answers for up, all 8 GPUs, verify time and tok/s. A relaunch by
another client is read back from Prometheus as the sequence of series over its scrapes. The
Grafana dashboard's queries: tests/e2e/test_grafana_prometheus.py."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import hosts
from support.hosts import free_port, kill_everything_under, sim_profiles
from support.paths import REPO
from support.prom import (
    SHIPPED_CONFIG,
    require_binary,
    run_prometheus,
    start_exporter,
    stop_exporter,
)

from specmon.launch.config import Profile
from specmon.session.demo import DemoSession
from specmon.session.host import HostSession
from specmon.session.local import LocalTransport
from specmon.sim import perf

SCRAPE_S = 1.0  # support.prom's scrape interval

REPO_ROOT = REPO


def simulated_verify_ms(profile: Profile) -> float:
    """The verify time the simulator's model gives ``profile`` at one running request (the
    demo's clients send one request at a time), before its per-cycle jitter."""
    spec = profile.speculative
    assert spec is not None
    settings = perf.SpecSettings.from_launch(
        spec.num_steps, spec.eagle_topk, spec.num_draft_tokens, False, profile.env
    )
    return perf.cycle_cost(settings, batch_size=1).verify_ms


async def scrape_when(
    url: str, needles: tuple[str, ...], timeout: float, exporter: subprocess.Popen[bytes], log: Path
) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    async with httpx.AsyncClient(timeout=5) as client:
        while time.monotonic() < deadline and exporter.poll() is None:
            try:
                text = (await client.get(url)).text
            except httpx.HTTPError:
                text = ""
            if all(n in text for n in needles):
                return text
            await asyncio.sleep(0.3)
    missing = [n for n in needles if n not in text]
    raise AssertionError(f"no {missing} in the scrape after {timeout}s\n{log.read_text()[-2000:]}")


async def test_exporter_scraped_by_prometheus(tmp_path: Path) -> None:
    promtool = require_binary("promtool", "prometheus")
    require_binary("prometheus", "prometheus")
    state_dir = tmp_path / "state"
    profiles = sim_profiles()
    session = DemoSession(
        LocalTransport(),
        profiles=profiles,
        options=hosts.test_options(state_dir),
        stop_server_on_close=True,
        autolaunch="fast",
    )
    port = free_port()
    exporter_log = tmp_path / "export.log"
    exporter = None
    try:
        await session.start()  # launches the simulator; its clients keep it decoding
        exporter = start_exporter(state_dir, port, exporter_log)
        url = f"http://127.0.0.1:{port}/metrics"
        assert session.bus.store.run is not None
        run = f'run_id="{session.bus.store.run.run_id}"'  # a run's own series carry its id
        needles = (
            'specmon_host_up{host="local"} 1.0',
            'specmon_gpu_utilization_ratio{gpu="7",host="local"}',
            'specmon_spec_phase_seconds_bucket{host="local",le="+Inf",phase="verify"}',
            f'specmon_generation_tokens_per_second{{host="local",{run}}}',
            f'specmon_ready{{host="local",{run}}} 1.0',
        )
        text = await scrape_when(url, needles, 60.0, exporter, exporter_log)
        checked = subprocess.run(
            [promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=30
        )
        assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
        assert f'specmon_spec_position_acceptance_ratio{{host="local",position="3",{run}}}' in text
        assert 'spec_algorithm="EAGLE3"' in text and 'model="moonshotai/Kimi-K2.5"' in text

        with run_prometheus(tmp_path / "prom", [f"127.0.0.1:{port}"]) as prom:
            up = await asyncio.to_thread(prom.wait_query, 'up{job="specmon"} == 1')
            assert up[0]["metric"]["instance"] == f"127.0.0.1:{port}"
            gpus = await asyncio.to_thread(
                prom.wait_query, 'specmon_gpu_utilization_ratio{host="local"}', count=8
            )
            assert sorted(int(s["metric"]["gpu"]) for s in gpus) == list(range(8))
            assert all(0.0 <= float(s["value"][1]) <= 1.0 for s in gpus)
            # The mean verify time (the histogram's _sum over its _count, in seconds) is the
            # simulator's model for this profile at one request: 28.7 ms, 3 % jitter a cycle.
            expected_verify_s = simulated_verify_ms(profiles["fast"]) / 1000
            mean_verify = await asyncio.to_thread(
                prom.wait_query,
                'rate(specmon_spec_phase_seconds_sum{phase="verify"}[5s])'
                ' / rate(specmon_spec_phase_seconds_count{phase="verify"}[5s]) > 0',
            )
            assert float(mean_verify[0]["value"][1]) == pytest.approx(expected_verify_s, rel=0.15)
            # The median from the buckets lies in the bucket that holds the model's time.
            verify = await asyncio.to_thread(
                prom.wait_query,
                'histogram_quantile(0.5, rate(specmon_spec_phase_seconds_bucket{phase="verify"}[5s])) > 0',
            )
            assert (
                0.020 < float(verify[0]["value"][1]) <= 0.030 and 0.020 < expected_verify_s <= 0.030
            )
            tok_s = await asyncio.to_thread(
                prom.wait_query, 'specmon_generation_tokens_per_second{host="local"} > 0'
            )
            assert float(tok_s[0]["value"][1]) > 0
            for expr in ('specmon_host_up{host="local"}', 'specmon_ready{host="local"}'):
                assert [s["value"][1] for s in prom.query(expr)] == ["1"], expr
    finally:
        stop_exporter(exporter)
        await session.close()
        kill_everything_under(state_dir)
    assert exporter.returncode in (0, 130), exporter_log.read_text()[-2000:]


def series_samples(prom: Any, selector: str, window_s: int) -> dict[str, list[tuple[float, float]]]:
    """Every sample Prometheus stored for ``selector`` over the last ``window_s`` seconds, by
    run id (a range selector: the raw samples of each scrape, with their scrape times)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for series in prom.query(f"{selector}[{window_s}s]"):
        points = [(float(at), float(value)) for at, value in series["values"]]
        out.setdefault(series["metric"].get("run_id", ""), []).extend(points)
    return out


async def wait_ready(session: HostSession, run_id: str, timeout: float) -> float:
    """When ``session``'s store turned ready on ``run_id`` (polled every 50 ms): its ready
    line seen and its port found its own, as the exporter's session has to see them too."""
    store = session.bus.store
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if store.run is not None and store.run.run_id == run_id and store.run_state == "ready":
            return time.time()
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} not ready within {timeout}s ({store.run_state})")


async def test_a_relaunch_by_another_client_through_prometheus(tmp_path: Path) -> None:
    """Prometheus, scraping every second while another client relaunches the server: the old
    run's ready and tok/s series end, the new run's appear within a scrape of its ready, and
    no scrape ever says `failed`."""
    require_binary("prometheus", "prometheus")
    state_dir = tmp_path / "state"
    profiles = sim_profiles()
    first = DemoSession(  # the operator's console: launches run 1, its clients decode
        LocalTransport(),
        profiles=profiles,
        options=hosts.test_options(state_dir),
        stop_server_on_close=True,
        autolaunch="fast",
    )
    other = hosts.local_session(state_dir, profiles)  # another client on the same host
    port = free_port()
    exporter_log = tmp_path / "export.log"
    exporter = None
    started = time.time()
    try:
        await first.start()
        old_run = first.bus.store.run
        assert old_run is not None
        exporter = start_exporter(state_dir, port, exporter_log)
        with run_prometheus(tmp_path / "prom", [f"127.0.0.1:{port}"]) as prom:
            old = f'run_id="{old_run.run_id}"'
            await asyncio.to_thread(
                prom.wait_query, f"specmon_generation_tokens_per_second{{{old}}} > 0", timeout=40
            )
            await other.start()
            new_run_id = await other.launch("fast")
            ready_at = await wait_ready(other, new_run_id, 30.0)
            new = f'run_id="{new_run_id}"'
            with contextlib.suppress(AssertionError):  # told below, after the old run's end
                await asyncio.to_thread(prom.wait_query, f"specmon_ready{{{new}}} == 1", timeout=15)
            await asyncio.sleep(3 * SCRAPE_S)  # scrapes after the new run is ready
            window = int(time.time() - started) + 5
            ready = series_samples(prom, 'specmon_ready{host="local"}', window)
            tok_s = series_samples(
                prom, 'specmon_generation_tokens_per_second{host="local"}', window
            )
            states = prom.query(f'specmon_run_state{{host="local"}}[{window}s]')
        # The old run's own series end: no sample of it after the new run is ready (plus the
        # scrape in flight), and none of its values under the new run's id.
        for name, by_run in (("ready", ready), ("tok/s", tok_s)):
            assert by_run.get(old_run.run_id), f"no {name} of the old run was scraped"
            last_old = max(at for at, _ in by_run[old_run.run_id])
            assert last_old <= ready_at + SCRAPE_S, (name, last_old - ready_at)
        # The new run's series from within one scrape of its ready (the exporter's session
        # reads the ready line and checks the port as the other client's does: a second more
        # for the two to differ by).
        assert any(v == 1 for _, v in ready.get(new_run_id, ())), (
            f"the new run {new_run_id} was never scraped ready; runs scraped: {sorted(ready)}"
        )
        first_ready = min(at for at, value in ready[new_run_id] if value == 1)
        assert first_ready <= ready_at + SCRAPE_S + 1.0, first_ready - ready_at
        # No scrape said the run failed, crashed or was killed: it was replaced.
        for series in states:
            state = series["metric"]["state"]
            if state in ("failed", "crashed", "killed"):
                assert all(float(v) == 0 for _, v in series["values"]), series
    finally:
        stop_exporter(exporter)
        await other.close()
        await first.close()
        kill_everything_under(state_dir)


async def test_connect_export_serves_beside_the_event_stream(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECMON_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    argv = [sys.executable, "-m", "specmon", *SHIPPED_CONFIG, "connect", "local", "--headless"]
    argv += ["--state-dir", str(tmp_path / "state"), "--gpu-agent", "none"]
    argv += ["--export", f"127.0.0.1:{port}", "--duration", "20"]
    log = tmp_path / "connect.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        text = await scrape_when(
            f"http://127.0.0.1:{port}/metrics",
            ('specmon_host_up{host="local"} 1.0', "specmon_connection_state"),
            20.0,
            proc,
            log,
        )
        assert 'specmon_connection_state{host="local",state="connected"} 1.0' in text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        kill_everything_under(tmp_path / "state")
    assert "connection  local connected" in log.read_text()


def test_export_rejects_bad_arguments_in_one_line() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    for extra in (["local", "--listen", "nowhere"], ["local", "local"]):
        result = subprocess.run(
            [sys.executable, "-m", "specmon", "export", *extra],
            capture_output=True,
            text=True,
            timeout=30,
            env=env,
        )
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


async def test_an_unreachable_host_is_exported_as_down_and_retried(tmp_path: Path) -> None:
    port, closed = free_port(), free_port()
    unreachable = f"nobody@127.0.0.1:{closed}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECMON_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    argv = [sys.executable, "-m", "specmon", *SHIPPED_CONFIG, "export", "local", unreachable]
    argv += ["--state-dir", str(tmp_path / "state"), "--gpu-agent", "none"]
    argv += ["--known-hosts", str(tmp_path / "known_hosts"), "--listen", f"127.0.0.1:{port}"]
    log = tmp_path / "export.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        text = await scrape_when(
            f"http://127.0.0.1:{port}/metrics",
            ('specmon_host_up{host="local"} 1.0', f'specmon_host_up{{host="{unreachable}"}} 0.0'),
            20.0,
            proc,
            log,
        )
        assert f'host="{unreachable}",state="disconnected"}} 1.0' in text
        deadline = time.monotonic() + 10
        while log.read_text().count("; retrying in") < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert log.read_text().count("; retrying in") >= 2  # tried again, still exporting
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        kill_everything_under(tmp_path / "state")

"""Watching a server specmon did not launch, over the real test sshd (issue 28, "watch them").

The simulator is started by a plain shell (`nohup ... > log &`, no specmon involved), fast
(SPECMON_SIM_TIME_SCALE) and with its simulated GPUs in the state dir's sim-gpus.json (what
the sim GPU agent reads, as NVML reads a real host's GPUs). Then:

- `specmon watch HOST --attach PID --json` shows its loading phases (replayed from the start
  of its log file), ready, then decode lines, /metrics and GPUs, and ends leaving it running;
  `--attach auto` picks it when it is the only foreign server and otherwise refuses in one
  line naming its pid (other tests' servers may run on this machine);
- `connect --attach PID` (Pilot, the console over an SSH session) shows loading (replayed),
  ready, decode, GPUs, the header's ATTACHED and the probe panel's message; stop is refused
  in one line; after the console quits the server is still alive.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.by_hand import Started, alive, kill_group, start_by_hand, wait_listening
from support.console import wait_until
from support.hosts import free_port, kill_everything_under, ssh_session
from support.paths import REPO
from support.sshd import SshdServer

from specmon.session.host import RunConflictError
from specmon.tui.app import SpecmonApp
from specmon.tui.widgets.header import HeaderBar
from specmon.tui.widgets.timing import TimingPanel

SIM_FLAGS = (
    "--model-path moonshotai/Kimi-K2.5 --tp 2 --enable-metrics --decode-log-interval 1 "
    "--speculative-algorithm EAGLE3 --speculative-draft-model-path /models/eagle3 "
    "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
)


@pytest.fixture
def by_hand(tmp_path: Path) -> Iterator[tuple[Started, Path]]:
    """The simulator started by a plain shell, ready; its state dir (0700, made first: the
    sim writes its GPUs there); killed by process group at the end."""
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    port = free_port()
    server = start_by_hand(
        tmp_path,
        "sglang",
        f"{sys.executable} -m specmon.sim {SIM_FLAGS} --port {port}",
        port,
        env={
            "SPECMON_SIM_GPU_STATE": str(state_dir / "sim-gpus.json"),
            "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1",
        },
    )
    try:
        wait_listening(port)
        deadline = time.monotonic() + 30
        while "fired up and ready" not in server.log.read_text(errors="replace"):
            assert time.monotonic() < deadline, server.log.read_text()[-2000:]
            time.sleep(0.05)
        yield server, state_dir
    finally:
        kill_group(server.pgid)
        kill_everything_under(state_dir)


class Traffic:
    """One long generation after another in a thread, so the server logs decode lines."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        body = {"text": "Tell me a long story.", "sampling_params": {"max_new_tokens": 200}}
        with httpx.Client(timeout=60, trust_env=False) as client:
            while not self.stop.is_set():
                try:
                    client.post(f"http://127.0.0.1:{self.port}/generate", json=body)
                except httpx.HTTPError:
                    time.sleep(0.1)

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(70)


def write_config(tmp_path: Path, sshd: SshdServer, state_dir: Path, extra: str = "") -> Path:
    path = tmp_path / "specmon.toml"
    path.write_text(
        extra
        + f"""
[ui]
http_poll_s = 0.5

{sshd.host_toml(state_dir)}
"""
    )
    return path


def specmon(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specmon", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=90,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(config.parent)},
    )


def test_watch_attach_json_replays_loading_then_follows(
    sshd: SshdServer, tmp_path: Path, by_hand: tuple[Started, Path]
) -> None:
    server, state_dir = by_hand
    config = write_config(tmp_path, sshd, state_dir)
    with Traffic(server.port):
        done = specmon(
            config, "watch", "testbox", "--attach", str(server.pid), "--gpu-agent", "sim",
            "--json", "--duration", "6",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [e["kind"] for e in events]
    run = next(e for e in events if e["kind"] == "run")
    assert run["foreign"] is True and run["reattached"] is True
    assert run["pid"] == server.pid and run["run_id"] == f"pid-{server.pid}"
    assert run["backend"] == "sglang" and run["profile"] is None
    assert run["log_source"] == f"file: {server.log.resolve()}"
    # The log file replayed from its start: the loading phases, then its ready line.
    ready = kinds.index("ready")
    for kind in ("load_begin", "shard_progress", "load_end", "kv_cache", "graph_end"):
        assert kind in kinds[:ready], (kind, kinds[:ready])
    assert events[ready]["replayed"] is True and events[ready]["load_seconds"] is None
    # Then live: decode lines of the traffic, the server's /metrics, its GPUs.
    assert "decode" in kinds[ready:], sorted(set(kinds))
    assert "metrics" in kinds and "health" in kinds and "server_info" in kinds
    # The host's GPUs as its agent gives them (the sim's 8, from its state file); the server
    # (TP2) holds memory on GPUs 0 and 1.
    used = {
        g["index"]: g["mem_used_mb"] for g in [e for e in events if e["kind"] == "gpu"][-1]["gpus"]
    }
    assert set(used) == set(range(8)), used
    assert min(used[0], used[1]) > max(used[i] for i in range(2, 8)), used
    assert not [e for e in events if e["kind"] in ("server_failed", "notice")]
    assert alive(server.pid), "watch --attach ended the server it watched"

    # auto: ours when it is the only foreign server here, else refused naming its pid.
    auto = specmon(config, "watch", "testbox", "--attach", "--json", "--duration", "1")
    if auto.returncode == 0:
        first = next(json.loads(x) for x in auto.stdout.splitlines() if '"run"' in x)
        assert first["pid"] == server.pid
    else:
        assert auto.returncode == 2, auto.stderr
        assert len(auto.stderr.splitlines()) == 1
        assert (
            "servers on root@127.0.0.1" in auto.stderr and "specmon did not launch" in auto.stderr
        )
        assert f"pid {server.pid}" in auto.stderr and "--attach PID" in auto.stderr
    # A pid that is no server: the survey's own refusal, in one line.
    refused = specmon(config, "watch", "testbox", "--attach", "1", "--json", "--duration", "1")
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert "pid 1 on " in refused.stderr, refused.stderr
    assert alive(server.pid)


def test_watch_with_a_profile_whose_attach_key_is_the_pid(
    sshd: SshdServer, tmp_path: Path, by_hand: tuple[Started, Path]
) -> None:
    """`attach = PID` in a profile: `watch HOST -p P --json` follows that server as `--attach
    PID` does (no flag): the foreign run, its loading replayed from its log, ready."""
    server, state_dir = by_hand
    profile = f'[profiles.running]\nmodel_path = "moonshotai/Kimi-K2.5"\nattach = {server.pid}\n'
    config = write_config(tmp_path, sshd, state_dir, profile)
    done = specmon(
        config, "watch", "testbox", "-p", "running", "--gpu-agent", "sim", "--json",
        "--until", "ready", "--duration", "30",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [e["kind"] for e in events]
    run = next(e for e in events if e["kind"] == "run")
    assert run["foreign"] is True and run["pid"] == server.pid, run
    assert run["run_id"] == f"pid-{server.pid}" and run["profile"] is None
    assert run["log_source"] == f"file: {server.log.resolve()}"
    ready = kinds.index("ready")
    for kind in ("load_begin", "shard_progress", "load_end"):
        assert kind in kinds[:ready], (kind, kinds[:ready])
    assert events[ready]["replayed"] is True
    assert alive(server.pid), "watch -p ended the server it watched"


async def test_connect_attach_console_shows_it_and_leaves_it_running(
    sshd: SshdServer, by_hand: tuple[Started, Path]
) -> None:
    server, state_dir = by_hand
    session = ssh_session(sshd, state_dir, {}, attach=str(server.pid))
    app = SpecmonApp(session, None)
    store = session.bus.store
    traffic = Traffic(server.port)
    try:
        async with app.run_test(size=(140, 44)) as pilot:
            await wait_until(pilot, lambda: store.run is not None, 20, "attached")
            assert store.run is not None and store.run.foreign and store.run.pid == server.pid
            await wait_until(pilot, lambda: store.run_state == "ready", 20, "ready")
            assert "target weights" in store.loading.done_phases  # replayed from the log
            assert (
                "target CUDA graphs" in store.loading.done_phases and store.loading.loads_seen == 2
            )
            traffic.__enter__()
            await wait_until(pilot, lambda: store.last_decode is not None, 30, "decode")
            await wait_until(pilot, lambda: len(store.gpus) == 8, 20, "GPUs")
            await pilot.pause(0.5)  # a redraw
            header = str(app.main.query_one(HeaderBar).render())
            assert f"ATTACHED pid {server.pid}" in header, header
            timing = str(app.main.query_one(TimingPanel).render())
            assert "No probe: attached server" in timing and "take-over" in timing, timing
            await pilot.press("s")  # stop: refused in one line, nothing asked
            await pilot.pause(0.2)
            said = [n.message for n in app._notifications]
            assert any("is not specmon's run" in m and "take-over" in m for m in said), said
            with pytest.raises(RunConflictError, match="not specmon's run"):
                await session.stop()
            await pilot.press("q")
            await pilot.pause(0.5)
    finally:
        traffic.__exit__()
        await asyncio.wait_for(session.close(), 30)
    assert alive(server.pid), "the console stopped a server it only watched"

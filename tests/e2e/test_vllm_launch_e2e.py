"""A vLLM profile through specmon end to end, against the simulator's vLLM personality, with
the local transport and through the real sshd (tests/support/sshd.py): the headless launch
(EAGLE-3, 3 speculative tokens) reads vLLM's start-up phases and ready from the log; `watch`
gets ``decode`` and ``spec_decode`` from the stats lines, probe cycles, and, with the stats
lines off, acceptance by position from /metrics' counters; a relaunch with 2 speculative
tokens from the headless command (``--set``); stop leaves no process group and a free port;
a start-up failure is surfaced with its root-cause line and category. The same sequence runs
against a real vLLM in tests/e2e/test_real_vllm.py."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.console import local_console, wait_until
from support.hosts import free_port, group_alive, kill_everything_under
from support.paths import REPO
from support.real_vllm import port_free
from support.sshd import SshdServer, start_sshd, stop_sshd
from textual.widgets import Button, Input, Select

from specmon.launch.config import load_config
from specmon.tui.screens.relaunch import RelaunchScreen, field_id

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SERVED = "tiny-llama8"

HOSTS = """
[hosts.testbox]
address = "127.0.0.1"
port = {ssh_port}
user = "{user}"
identity_file = "{key}"
known_hosts = "{known_hosts}"
python = "{python}"
state_dir = "{remote_state}"
"""
PROFILE = """
[profiles.simvllm]
backend = "vllm"
command = ["{{python}}", "-m", "specmon.sim.vllm", "serve"]
model_path = "{model}"
draft_model_path = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
host_bind = "127.0.0.1"
port = {server_port}
probe = true
gpu_agent = "none"
stop_grace_s = 10.0
extra_args = ["--served-model-name", "{served}", "--max-model-len", "1024"]

[profiles.simvllm.speculative]
method = "eagle3"
num_speculative_tokens = 3

[profiles.simvllm.env]
SPECMON_SIM_TIME_SCALE = "0.003"
SPECMON_SIM_SHARDS = "8"
VLLM_LOG_STATS_INTERVAL = "1"
"""


class Box:
    """A config naming the sshd host, and the specmon command line for either transport."""

    def __init__(self, tmp_path: Path, host: str, sshd: SshdServer | None) -> None:
        self.host = host
        self.state = tmp_path / "remote-state"
        self.config = tmp_path / "specmon.toml"
        self.port = free_port()
        hosts = ""
        if sshd is not None:
            hosts = HOSTS.format(
                ssh_port=sshd.port,
                user=sshd.user,
                key=sshd.client_key,
                known_hosts=sshd.known_hosts,
                python=sys.executable,
                remote_state=self.state,
            )
        profile = PROFILE.format(server_port=self.port, model=MODEL, served=SERVED)
        self.config.write_text(hosts + profile)

    def argv(self, command: str, *args: str) -> list[str]:
        argv = [sys.executable, "-m", "specmon", "--config", str(self.config), command]
        argv.append(self.host)
        if self.host == "local":
            argv += ["--state-dir", str(self.state)]
        return [*argv, *args]

    def run(self, command: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.argv(command, *args),
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            check=False,
        )

    def watch(self, seconds: float) -> list[dict]:
        watched = self.run("watch", "--json", "--duration", str(seconds), timeout=seconds + 60)
        assert watched.returncode == 0, watched.stderr
        return [json.loads(line) for line in watched.stdout.splitlines()]


@pytest.fixture(params=["local", "testbox"])
def box(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Box]:
    sshd = start_sshd(tmp_path / "sshd") if request.param == "testbox" else None
    made = Box(tmp_path, request.param, sshd)
    try:
        yield made
    finally:
        kill_everything_under(made.state)
        if sshd is not None:
            stop_sshd(sshd.proc)


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def completions(port: int, count: int, max_tokens: int = 64) -> None:
    for index in range(count):
        response = httpx.post(
            f"http://127.0.0.1:{port}/v1/completions",
            json={"model": SERVED, "prompt": f"River stone {index}", "max_tokens": max_tokens},
            timeout=60,
        )
        assert response.status_code == 200, response.text


def tokens_field(form: object) -> str | None:
    """The form's `num speculative tokens` value, None while vLLM's fields are not there."""
    found = form.query("#" + field_id("num_speculative_tokens"))  # type: ignore[attr-defined]
    return found.first(Input).value if found else None


def speculative_config(argv: list[str]) -> dict:
    return json.loads(argv[argv.index("--speculative-config") + 1])


def test_launch_watch_relaunch_and_stop_a_vllm_profile(box: Box) -> None:
    launched = box.run("launch", "-p", "simvllm", "--wait", "ready", "--json")
    assert launched.returncode == 0, launched.stderr
    lines = json_lines(launched.stdout)
    run = lines[0]
    assert run["backend"] == "vllm"
    assert speculative_config(run["argv"])["num_speculative_tokens"] == 3
    kinds = [line["kind"] for line in lines[1:]]
    for kind in ("load_begin", "shard_progress", "load_end", "kv_cache", "ready"):
        assert kind in kinds, (kind, kinds)
    roles = [line["role"] for line in lines[1:] if line["kind"] == "weights_loaded"]
    assert roles == ["target", "draft"]

    with contextlib.ExitStack() as stack:
        watcher = stack.enter_context(
            subprocess.Popen(
                box.argv("watch", "--json", "--duration", "8"),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
        )
        time.sleep(2.0)  # the watcher replays the run, then follows it
        completions(box.port, 4)
        out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, err
    events = json_lines(out)
    decodes = [e for e in events if e["kind"] == "decode" and e.get("engine") == 0]
    assert decodes and any(d["gen_throughput"] > 0 for d in decodes)
    specs = [e for e in events if e["kind"] == "spec_decode" and e.get("drafted")]
    assert specs and all(len(s["per_position"]) == 3 for s in specs)
    assert [e for e in events if e["kind"] == "probe"], sorted({e["kind"] for e in events})

    # Relaunch with 2 speculative tokens, the stats lines off: acceptance comes from /metrics.
    relaunched = box.run(
        "launch", "-p", "simvllm", "--set", "num_speculative_tokens=2",
        "--env", "VLLM_LOG_STATS_INTERVAL=3600", "--wait", "ready", "--json",
    )  # fmt: skip
    assert relaunched.returncode == 0, relaunched.stderr
    new = json_lines(relaunched.stdout)[0]
    assert new["run_id"] != run["run_id"]
    assert speculative_config(new["argv"])["num_speculative_tokens"] == 2
    assert not group_alive(run["pgid"]), "the first run's group outlived the relaunch"
    with contextlib.ExitStack() as stack:
        watcher = stack.enter_context(
            subprocess.Popen(
                box.argv("watch", "--json", "--duration", "10"),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
        )
        time.sleep(3.0)
        completions(box.port, 6, max_tokens=128)
        out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, err
    events = json_lines(out)
    from_metrics = [
        e for e in events if e["kind"] == "spec_decode" and e.get("per_position") is not None
    ]
    assert from_metrics, sorted({e["kind"] for e in events})
    assert all(e.get("drafted") is None for e in from_metrics)  # the log said nothing
    assert all(len(e["per_position"]) == 2 for e in from_metrics)
    assert all(e["mean_accept_len"] >= 1.0 for e in from_metrics)

    stopped = box.run("stop")
    assert stopped.returncode == 0, stopped.stderr
    deadline = time.monotonic() + 15
    while group_alive(new["pgid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group_alive(new["pgid"])
    assert port_free(box.port)


def test_a_start_up_failure_surfaces_its_root_cause(box: Box) -> None:
    """A draft that does not fit (the simulator's ``oom:load``) ends as vLLM's does: the
    worker's `Failed to load model - not enough GPU memory.`, then `Engine core initialization
    failed. See root cause above.`; specmon reports the worker's line, not that one, as the
    root cause, category oom."""
    failed = box.run(
        "launch", "-p", "simvllm", "--env", "SPECMON_SIM_FAULT=oom:load", "--wait", "ready",
        "--json",
    )  # fmt: skip
    assert failed.returncode == 1
    events = json_lines(failed.stdout)
    errors = [e for e in events[1:] if e["kind"] == "error"]
    assert errors, [e["kind"] for e in events[1:]]
    assert errors[0]["category"] == "oom"
    assert "Failed to load model - not enough GPU memory." in errors[0]["message"]
    assert "See root cause above" not in errors[0]["message"]
    run = events[0]
    deadline = time.monotonic() + 15
    while group_alive(run["pgid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group_alive(run["pgid"]) and port_free(box.port)


async def test_relaunch_from_the_console_form_and_stop(tmp_path: Path) -> None:
    """The console (local transport) on a vLLM profile: the relaunch form shows vLLM's fields
    (its cursor on the first of them), 2 speculative tokens are entered and launched; the run
    reaches ready with k=2 in the header; stop from the console leaves no process group and a
    free port."""
    made = Box(tmp_path, "local", None)
    config = load_config(made.config)
    with local_console(config, made.state, gpu_agent="none") as app:
        async with app.run_test(size=(140, 44)) as pilot:
            store = app.controller.bus.store
            await wait_until(
                pilot,
                lambda: store.connection is not None and store.connection.state == "connected",
                30,
                "connected",
            )
            await pilot.press("r")
            await wait_until(pilot, lambda: isinstance(app.screen, RelaunchScreen), 10, "the form")
            form = app.screen
            form.query_one("#profile", Select).value = "simvllm"
            await wait_until(pilot, lambda: tokens_field(form) == "3", 10, "vLLM's fields")
            tokens = form.query_one("#" + field_id("num_speculative_tokens"), Input)
            assert form.query_one("#" + field_id("method"), Select).value == "eagle3"
            tokens.value = "2"
            await pilot.pause(0.2)
            assert not form.query_one("#launch", Button).disabled, form.problems
            await pilot.press("ctrl+s")
            await pilot.pause(0.2)
            await pilot.press("y")
            await wait_until(pilot, lambda: store.run_state == "ready", 60, "ready")
            run = store.run
            assert run is not None and run.pgid is not None
            assert speculative_config(list(run.argv))["num_speculative_tokens"] == 2
            assert "k=2" in str(app.main.query_one("#header").render())
            await pilot.press("s")
            await pilot.pause(0.2)
            await pilot.press("y")
            await wait_until(pilot, lambda: store.run_state == "stopped", 40, "stopped")
            deadline = time.monotonic() + 15
            while group_alive(run.pgid) and time.monotonic() < deadline:
                await pilot.pause(0.1)
            assert not group_alive(run.pgid)
    assert port_free(made.port)

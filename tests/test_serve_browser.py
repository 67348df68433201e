"""`specmon serve` in a real browser: headless Chromium (Debian's `chromium`) opens the page
against the demo and the console's GPU panel and tok/s appear; a read-only page cannot
relaunch. Plus the address and token rules, which need no browser."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from support.browser import open_page
from support.hosts import free_port, processes_mentioning
from support.prom import require_binary

REPO_ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def serve(tmp_path: Path, *extra: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECMON_")}
    env.update(PYTHONPATH=str(REPO_ROOT), SPECMON_SIM_TIME_SCALE="0.003", TMPDIR=str(tmp_path))
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "specmon", "serve", "--listen", f"127.0.0.1:{port}", *extra],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=2).status_code in (200, 401):
                    break
            assert time.monotonic() < deadline and proc.poll() is None, (
                tmp_path / "serve.log"
            ).read_text()[-2000:]
            time.sleep(0.2)
        yield url, proc
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # textual-serve closes its consoles: demos clean up
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()
        for pid, _ in processes_mentioning(str(tmp_path)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


async def test_browser_shows_the_demo_console(tmp_path: Path) -> None:
    chromium = require_binary("chromium", "chromium")
    with serve(tmp_path) as (url, _):
        async with open_page(chromium, url, tmp_path) as page:
            text = await page.wait_text(
                (r"─ GPUs ─", r"│ +7 .+%", r"tok/s \d+\.\d", r"verify \d+\.\d+ ms"), timeout=60
            )
            await page.screenshot(tmp_path / "console.png")
    assert "r Relaunch" in text  # the footer offers it when not read-only


async def test_read_only_page_cannot_relaunch(tmp_path: Path) -> None:
    chromium = require_binary("chromium", "chromium")
    with serve(tmp_path, "--read-only") as (url, _):
        async with open_page(chromium, url, tmp_path) as page:
            text = await page.wait_text(("─ GPUs ─", "q Quit"), timeout=60)
            assert "r Relaunch" not in text and "s Stop" not in text and "e Experiments" not in text
            await page.press("r")
            await asyncio.sleep(2.0)  # the form, were it allowed, opens within a redraw
            assert "num steps" not in await page.screen_text()
            await page.press("?")  # keys do reach the console: the help opens
            text = await page.wait_text(("command palette: every action by name",), timeout=15)
            assert "num steps" not in text and "Relaunch" not in text


def test_public_address_needs_public_and_a_token(tmp_path: Path) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "specmon", "serve", "--listen", "0.0.0.0:8765"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert refused.returncode == 2 and "--public" in refused.stderr
    assert "Traceback" not in refused.stderr
    with serve(tmp_path, "--public") as (url, _):
        assert httpx.get(url, timeout=5).status_code == 401
        assert httpx.get(url + "?token=wrong", timeout=5).status_code == 401
        printed = (tmp_path / "serve.log").read_text()
        token = printed.split("?token=", 1)[1].split()[0]
        response = httpx.get(url + "?token=" + token, timeout=5)
        assert response.status_code == 200 and "specmon_token" in response.headers["set-cookie"]
        assert printed.count(token) == 1
        # the page's websocket URL follows the host the browser asked for (not 0.0.0.0)
        host = {"Host": "gpu-wall.example:8765"}
        page = httpx.get(url, headers=host, cookies={"specmon_token": token}, timeout=5)
        assert "ws://gpu-wall.example:8765/ws" in page.text

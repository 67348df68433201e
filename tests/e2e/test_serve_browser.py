"""`specmon serve` in a real browser: headless Chromium (Debian's `chromium`) opens the printed
URL against the demo and the console's GPU panel and tok/s appear; a read-only page cannot
relaunch and says so; a page served from another origin cannot drive the console, even with
the cookie in the browser. Plus the address, origin, token and session rules over plain HTTP
and websockets."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import httpx
import pytest
from aiohttp import web
from support.browser import Page, open_page
from support.hosts import free_port, processes_mentioning
from support.paths import REPO
from support.proc_stat import parent_of, running
from support.prom import require_binary

REPO_ROOT = REPO


def printed_url(tmp_path: Path) -> str:
    """The URL `specmon serve` printed (with ``?token=`` unless --no-token)."""
    for line in (tmp_path / "serve.log").read_text().splitlines():
        if line.startswith("specmon serve: open "):
            return line.split()[3]
    raise AssertionError((tmp_path / "serve.log").read_text()[-2000:])


def token_of(tmp_path: Path) -> str:
    return printed_url(tmp_path).split("?token=", 1)[1]


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


async def evaluate(page: Page, expression: str) -> object:
    result = await page.call("Runtime.evaluate", expression=expression, returnByValue=True)
    return result["result"].get("value")


async def test_browser_shows_the_demo_console(tmp_path: Path) -> None:
    """The printed URL's token is swapped for an HttpOnly cookie and a redirect to the bare
    URL; the console works; the token is in no other output line of the whole session."""
    chromium = require_binary("chromium", "chromium")
    with serve(tmp_path) as (url, _):
        token = token_of(tmp_path)
        async with open_page(chromium, printed_url(tmp_path), tmp_path) as page:
            text = await page.wait_text(
                (r"─ GPUs ─", r"│ +7 .+%", r"tok/s \d+\.\d", r"verify \d+\.\d+ ms"), timeout=60
            )
            await page.screenshot(tmp_path / "console.png")
            assert await evaluate(page, "location.href") == url  # the token left the address
            assert token not in str(await evaluate(page, "document.cookie"))  # HttpOnly
            history = await page.call("Page.getNavigationHistory")
            assert not any(token in entry["url"] for entry in history["entries"][1:])
            await page.press("?")  # keys reach the console through the cookie's websocket
            await page.wait_text(("command palette: every action by name",), timeout=15)
    assert "r Relaunch" in text  # the footer offers it when not read-only
    output = (tmp_path / "serve.log").read_text()
    assert output.count(token) == 1, output  # the printed URL only: never in the access log
    assert '"GET /" 303' in output and '"GET /ws" 101' in output  # the access log is on, path only


async def test_read_only_page_cannot_relaunch(tmp_path: Path) -> None:
    chromium = require_binary("chromium", "chromium")
    with serve(tmp_path, "--read-only", "--no-token") as (url, _):
        async with open_page(chromium, url, tmp_path) as page:
            text = await page.wait_text(("─ GPUs ─", "q Quit", "READ-ONLY"), timeout=60)
            assert "r Relaunch" not in text and "s Stop" not in text and "e Experiments" not in text
            await page.press("r")
            text = await page.wait_text(("Read-only console",), timeout=15)  # says so
            assert "num steps" not in text
            await page.press("?")  # keys do reach the console: the help opens
            text = await page.wait_text(("command palette: every action by name",), timeout=15)
            assert "num steps" not in text and "Relaunch" not in text


ATTACK_PAGE = """<!doctype html><title>another origin</title><script>
window.__attack = {opened: false, bytes: 0, closed: null};
const ws = new WebSocket("ws://127.0.0.1:PORT/ws?width=120&height=40");
ws.binaryType = "arraybuffer";
ws.onopen = () => {
  window.__attack.opened = true;
  for (const key of ["?", "s", "y"]) ws.send(JSON.stringify(["stdin", key]));
};
ws.onmessage = (e) => { window.__attack.bytes += e.data.byteLength || e.data.length; };
ws.onclose = (e) => { window.__attack.closed = e.code; };
</script>"""


@contextlib.asynccontextmanager
async def attack_site(serve_port: int) -> AsyncIterator[str]:
    """A page on another origin (another loopback port) that opens the console's websocket
    and types into it, as any web page open in the user's browser could."""
    app = web.Application()
    page = ATTACK_PAGE.replace("PORT", str(serve_port))

    async def attack_page(_: web.Request) -> web.Response:
        return web.Response(text=page, content_type="text/html")

    app.router.add_get("/", attack_page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()


def is_console(pid: int | str) -> bool:
    with contextlib.suppress(OSError):
        return b"--console" in Path(f"/proc/{pid}/cmdline").read_bytes()
    return False


def consoles_of(serve_pid: int) -> list[int]:
    """The console processes (one per websocket) `specmon serve` started. A console's own
    child is not one: forked, it shows its parent's command line until it runs its own (a
    third "console" was counted so once, a child of one of the two)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or not running(name):
            continue
        pid, ancestor = int(name), parent_of(name)
        inside_console = False
        while ancestor not in (None, 0, 1, serve_pid):
            inside_console = inside_console or is_console(ancestor)
            ancestor = parent_of(ancestor)
        if ancestor == serve_pid and not inside_console and is_console(pid):
            found.append(pid)
    return found


@pytest.mark.parametrize("extra", [(), ("--public",)], ids=["loopback", "public"])
async def test_a_page_from_another_origin_cannot_drive_the_console(
    tmp_path: Path, extra: tuple[str, ...]
) -> None:
    """The attack: the user has the console open (its cookie is in the browser); a page on
    another port of the same address opens the console's websocket and sends `?`, `s`, `y`.
    A page on another port is same-site, so a SameSite=Strict cookie goes with it: only the
    Origin check refuses it."""
    chromium = require_binary("chromium", "chromium")
    with serve(tmp_path, *extra) as (url, proc):
        port = int(url.rsplit(":", 1)[1].strip("/"))
        async with open_page(chromium, printed_url(tmp_path), tmp_path) as page:
            await page.wait_text((r"─ GPUs ─",), timeout=60)  # the user's own console
            async with attack_site(port) as evil:
                await page.call("Page.navigate", url=evil)
                deadline = time.monotonic() + 30
                attack: dict[str, object] = {}
                while time.monotonic() < deadline:
                    attack = dict(await evaluate(page, "window.__attack") or {})  # type: ignore[call-overload]
                    if attack.get("closed") is not None or int(attack.get("bytes", 0)) > 2000:  # type: ignore[call-overload]
                        break
                    await asyncio.sleep(0.3)
                assert attack.get("closed") is not None, attack  # refused: the socket closed
                assert attack["opened"] is False and attack["bytes"] == 0, attack
                deadline = time.monotonic() + 30  # the user's console ends (page left) ...
                while consoles_of(proc.pid) and time.monotonic() < deadline:
                    await asyncio.sleep(0.3)
                assert consoles_of(proc.pid) == []  # ... and none was started for the attacker
    assert "refused a request from another origin" in (tmp_path / "serve.log").read_text()


def test_origin_host_and_token_rules(tmp_path: Path) -> None:
    """Without a browser: 403 for another origin or a non-loopback Host (DNS rebinding) or a
    websocket without Origin; 401 without the token; the token URL answers 303 + cookie."""
    with serve(tmp_path) as (url, _):
        token = token_of(tmp_path)
        port = url.rsplit(":", 1)[1].strip("/")
        assert httpx.get(url, timeout=5).status_code == 401
        assert "printed when it started" in httpx.get(url, timeout=5).text
        assert httpx.get(url + "?token=wrong", timeout=5).status_code == 401
        swapped = httpx.get(url + "?token=" + token + "&fontsize=20", timeout=5)
        assert swapped.status_code == 303 and swapped.headers["location"] == "/?fontsize=20"
        cookie = swapped.headers["set-cookie"]
        assert f"specmon_token_{port}={token}" in cookie
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
        cookies = {f"specmon_token_{port}": token}
        assert httpx.get(url, cookies=cookies, timeout=5).status_code == 200
        for origin in (f"http://127.0.0.1:{free_port()}", "http://evil.example", "null"):
            refused = httpx.get(url, cookies=cookies, headers={"Origin": origin}, timeout=5)
            assert refused.status_code == 403, origin
        same = httpx.get(url, cookies=cookies, headers={"Origin": url.rstrip("/")}, timeout=5)
        assert same.status_code == 200
        rebound = {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}
        assert httpx.get(url, cookies=cookies, headers=rebound, timeout=5).status_code == 403
        upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13"}
        upgrade["Sec-WebSocket-Key"] = "dGhlIHNhbXBsZSBub25jZQ=="
        assert httpx.get(url + "ws", cookies=cookies, headers=upgrade, timeout=5).status_code == 403
    output = (tmp_path / "serve.log").read_text()
    assert output.count(token) == 1, output


async def test_sessions_are_capped_and_idle_ones_end(tmp_path: Path) -> None:
    """--max-sessions 2: a third websocket is told "too many sessions" and starts no process;
    with no keystroke for --idle-timeout the consoles are closed and their processes end."""
    with serve(tmp_path, "--max-sessions", "2", "--idle-timeout", "8s") as (url, proc):
        port = url.rsplit(":", 1)[1].strip("/")
        headers = {
            "Origin": url.rstrip("/"),
            "Cookie": f"specmon_token_{port}={token_of(tmp_path)}",
        }
        ws_url = url + "ws?width=100&height=30"
        async with aiohttp.ClientSession(headers=headers) as http:
            connected = time.monotonic()  # the idle clock of each starts at its upgrade
            first = await http.ws_connect(ws_url)
            second = await http.ws_connect(ws_url)
            for ws in (first, second):  # each console draws its screen
                message = await ws.receive(timeout=60)
                assert message.type == aiohttp.WSMsgType.BINARY, message
            third = await http.ws_connect(ws_url)
            told = await third.receive(timeout=10)
            assert told.type == aiohttp.WSMsgType.BINARY and b"too many sessions" in told.data
            assert (await third.receive(timeout=10)).type == aiohttp.WSMsgType.CLOSE
            assert third.close_code == aiohttp.WSCloseCode.TRY_AGAIN_LATER
            assert len(consoles_of(proc.pid)) == 2
            for ws in (first, second):  # no keystroke: each ends after 8 s
                seen = b""
                async for message in ws:
                    if message.type == aiohttp.WSMsgType.BINARY:
                        seen += message.data
                assert b"without a keystroke" in seen
            assert 8.0 <= time.monotonic() - connected < 45.0
            deadline = time.monotonic() + 30
            while consoles_of(proc.pid) and time.monotonic() < deadline:
                await asyncio.sleep(0.3)
            assert consoles_of(proc.pid) == []
            again = await http.ws_connect(ws_url)  # the places are free again
            message = await again.receive(timeout=60)
            assert message.type == aiohttp.WSMsgType.BINARY and b"too many" not in message.data
            await again.close()


def run_serve(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specmon", "serve", *argv],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )


def test_bad_serve_options_are_refused_in_one_line() -> None:
    taken = socket.create_server(("127.0.0.1", 0))
    taken_port = taken.getsockname()[1]
    for argv, said in (
        (["--listen", f"127.0.0.1:{taken_port}"], "address already in use"),
        (["--listen", "0.0.0.0:8765"], "--public"),
        (["--public", "--no-token", "--listen", "127.0.0.1:8765"], "--no-token"),
        (["--public", "--no-token", "--listen", "0.0.0.0:8765"], "--no-token"),
        (["--max-sessions", "0"], "--max-sessions"),
        (["--idle-timeout", "soon"], "--idle-timeout"),
        (["--idle-timeout", "0s"], "--idle-timeout"),
    ):
        refused = run_serve(*argv)
        assert refused.returncode == 2 and said in refused.stderr, (argv, refused.stderr)
        assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    taken.close()


def test_serve_refuses_an_untrusted_config_before_it_serves(tmp_path: Path) -> None:
    """A host's console reads the config: an untrusted ./specmon.toml is refused at start, in
    one line, not later inside each browser tab (and nothing is served meanwhile)."""
    (tmp_path / "specmon.toml").write_text('[hosts.gpu-box]\naddress = "127.0.0.1"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECMON_")}
    env |= {"PYTHONPATH": str(REPO_ROOT), "SPECMON_CONFIG_DIR": str(tmp_path / "config")}
    port = socket.create_server(("127.0.0.1", 0))
    free = port.getsockname()[1]
    port.close()
    argv = [sys.executable, "-m", "specmon", "serve", "gpu-box", "--listen", f"127.0.0.1:{free}"]
    refused = subprocess.run(
        argv, capture_output=True, text=True, timeout=30, cwd=tmp_path, env=env
    )
    assert refused.returncode == 2, refused
    assert refused.stderr == (
        "specmon: ./specmon.toml is not trusted (found in the working directory): "
        "review it, then run: specmon trust ./specmon.toml\n"
    )
    assert "open http" not in refused.stdout


def test_public_address_page_follows_the_host_asked_for(tmp_path: Path) -> None:
    with serve(tmp_path, "--public") as (url, _):
        port = url.rsplit(":", 1)[1].strip("/")
        token = token_of(tmp_path)
        # The token URL and the page's websocket URL follow the host the browser asked for.
        host = {"Host": "gpu-wall.example:8765"}
        cookies = {f"specmon_token_{port}": token}
        page = httpx.get(url, headers=host, cookies=cookies, timeout=5)
        assert "ws://gpu-wall.example:8765/ws" in page.text

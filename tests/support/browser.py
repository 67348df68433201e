"""Headless Chromium (Debian's `chromium`) driven over the DevTools protocol with aiohttp's
websocket client, to read what a textual-serve page shows. xterm.js draws the terminal on a
canvas, so the text is read from xterm's own buffer: a script added before the page's own
catches the page's Terminal object when textual.js stores it (``this.terminal = ...``)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from support.hosts import free_port

CATCH_TERMINAL = """
Object.defineProperty(Object.prototype, "terminal", {
  configurable: true,
  set(value) {
    Object.defineProperty(this, "terminal", {value, writable: true, configurable: true});
    window.__terminal = value;
  },
});
"""
READ_SCREEN = """(() => {
  const t = window.__terminal;
  if (!t) return "";
  const b = t.buffer.active, lines = [];
  for (let i = 0; i < b.length; i++) lines.push(b.getLine(i).translateToString(true));
  return lines.join("\\n");
})()"""
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)


class Page:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self._ids)
        await self.ws.send_str(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads((await self.ws.receive(timeout=30)).data)
            if message.get("id") == call_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))

    async def screen_text(self) -> str:
        result = await self.call("Runtime.evaluate", expression=READ_SCREEN, returnByValue=True)
        return str(result["result"].get("value") or "")

    async def wait_text(self, needles: tuple[str, ...], timeout: float) -> str:
        """Poll the screen until every needle (a regular expression) is found on it."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = await self.screen_text()
            if all(re.search(n, text) for n in needles):
                return text
            await asyncio.sleep(0.5)
        raise AssertionError(f"{needles} not all on the page after {timeout}s:\n{text}")

    async def press(self, key: str) -> None:
        """Type one character as a keyboard would (into xterm's focused helper textarea)."""
        await self.call("Runtime.evaluate", expression="window.__terminal.focus()")
        code = f"Key{key.upper()}" if key.isalpha() else ""
        for kind in ("keyDown", "keyUp"):
            await self.call(
                "Input.dispatchKeyEvent",
                type=kind,
                key=key,
                code=code,
                text=key if kind == "keyDown" else "",
                windowsVirtualKeyCode=ord(key.upper()),
            )

    async def screenshot(self, path: Path) -> None:
        import base64

        data = await self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(data["data"]))


@contextlib.asynccontextmanager
async def open_page(chromium: str, url: str, workdir: Path) -> AsyncIterator[Page]:
    port = free_port()
    profile = workdir / "chromium-profile"
    log = (workdir / "chromium.log").open("wb")
    proc = subprocess.Popen(
        [
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--remote-debugging-port={port}",
            "about:blank",
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        async with aiohttp.ClientSession() as http:
            targets: list[dict[str, Any]] = []
            deadline = time.monotonic() + 30
            while not targets:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError("chromium's DevTools endpoint did not come up")
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{port}/json/list") as response:
                        targets = [t for t in await response.json() if t.get("type") == "page"]
                await asyncio.sleep(0.2)
            async with http.ws_connect(targets[0]["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                page = Page(ws)
                await page.call("Page.enable")
                await page.call("Page.addScriptToEvaluateOnNewDocument", source=CATCH_TERMINAL)
                await page.call("Page.navigate", url=url)
                yield page
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()

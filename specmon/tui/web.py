"""textual-serve's Server, hardened for a console that can stop GPU servers.

- Origin: a websocket upgrade must carry an ``Origin`` naming this server (scheme, host and
  port as the browser asked for it), and any request whose ``Origin`` names another is
  refused (403): a page on another site, or on another port of this host, cannot drive it.
  Served on loopback without --public, the ``Host`` must be a loopback name (DNS rebinding).
- Token: with one set, ``?token=`` (compared in constant time) is swapped for an HttpOnly
  SameSite=Strict cookie and a 303 to the same URL without it; anything else gets 401.
- The access log shows paths without their query, so the token never reaches a log.
- At most ``max_sessions`` consoles (one process per websocket); one with no keystroke from
  its browser for ``idle_timeout`` seconds is closed and its process ended.
The page's URLs follow the host the browser asked for."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import shlex
import signal
import time
from asyncio.subprocess import PIPE, Process
from collections.abc import Sequence

from aiohttp import WSCloseCode, web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.typedefs import Handler
from aiohttp.web_runner import GracefulExit
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int
from yarl import URL

from specmon.model.errors import UsageError
from specmon.model.listen import is_loopback, url_host
from specmon.model.terminal_text import safe_text

log = logging.getLogger("textual-serve")

COOKIE_PREFIX = "specmon_token_"  # then the port: two servers on one host keep their cookies
QUIT_GRACE_S = 10.0  # a console told to quit gets this long before SIGTERM, then as long again
UNAUTHORIZED_PAGE = (
    "<!doctype html><title>specmon serve: token required</title>"
    "<p>specmon serve needs its access token. Open the URL that <code>specmon serve</code> "
    "printed when it started (it ends in <code>?token=...</code>); the token is printed only "
    "then, so restart <code>specmon serve</code> for a new one.</p>"
)


def too_many_sessions(limit: int) -> bytes:
    return (
        f"\r\nspecmon serve: too many sessions: {limit} consoles are open (--max-sessions "
        f"{limit}). Close another tab, or restart specmon serve with a higher "
        "--max-sessions.\r\n"
    ).encode()


def idle_message(idle_timeout: float) -> bytes:
    return (
        f"\r\nspecmon serve: this console ended after {idle_timeout:g} s without a keystroke "
        "(--idle-timeout). Reload the page for a new one.\r\n"
    ).encode()


class PathOnlyAccessLogger(AbstractAccessLogger):
    """aiohttp's access log without the query string (the first request carries the token)
    and without control characters (the path is the client's text)."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        path = safe_text(request.rel_url.raw_path)
        self.logger.info(
            '%s "%s %s" %s %.3fs', request.remote, request.method, path, response.status, time
        )


class ConsoleProcess(AppService):
    """One browser tab's console: started without a shell (one process, which can be ended
    if it does not quit), with the time of its browser's last keystroke."""

    def __init__(self, argv: Sequence[str], **kwargs: object) -> None:
        super().__init__(shlex.join(argv), **kwargs)  # type: ignore[arg-type]
        self.argv = list(argv)
        self.last_input = time.monotonic()

    async def _open_app_process(self, width: int = 80, height: int = 24) -> Process:
        environment = self._build_environment(width=width, height=height)
        self._process = process = await asyncio.create_subprocess_exec(
            *self.argv, stdin=PIPE, stdout=PIPE, stderr=PIPE, env=environment
        )
        assert process.stdin is not None
        self._stdin = process.stdin
        return process

    async def send_bytes(self, data: bytes) -> bool:
        self.last_input = time.monotonic()
        return await super().send_bytes(data)

    async def stop(self) -> None:
        """Ask the console to quit; end its process if it has not within the grace time."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(super().stop(), QUIT_GRACE_S)
        process = self._process
        if process is None:
            return
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None and process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(sig)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait(), QUIT_GRACE_S)
                return


class ConsoleServer(Server):
    """Serves ``argv`` (the console) once per websocket; ``token=None`` (loopback only) means
    no token."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        host: str,
        port: int,
        token: str | None,
        public: bool,
        max_sessions: int,
        idle_timeout: float,
        title: str = "specmon",
    ) -> None:
        super().__init__(shlex.join(argv), host=host, port=port, title=title)
        self.argv = list(argv)
        self._token = token
        self.cookie = f"{COOKIE_PREFIX}{port}"
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout
        # Not --public on loopback: a browser can only have come by a loopback name; any other
        # Host is a DNS-rebinding page (with --public the Host may be a reverse proxy's name).
        self.loopback_only = is_loopback(host) and not public
        self.sessions = 0

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(self._guard)
        return app

    def serve(self, debug: bool = False) -> None:
        """textual-serve's ``serve`` with the path-only access log."""
        self.debug = debug
        self.initialize_logging()
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.add_signal_handler(signal.SIGINT, self.request_exit)
        loop.add_signal_handler(signal.SIGTERM, self.request_exit)
        try:
            web.run_app(
                self._make_app(),
                host=self.host,
                port=self.port,
                handle_signals=False,
                loop=loop,
                print=lambda *args: None,
                access_log_class=PathOnlyAccessLogger,
            )
        except OSError as exc:  # the address is taken or not this machine's: one line
            where = f"{url_host(self.host)}:{self.port}"
            raise UsageError(f"cannot listen on {where}: {exc.strerror or exc}") from None

    def request_exit(self) -> None:
        raise GracefulExit()

    # --- who may ask ---------------------------------------------------------------------------

    def _refusal(self, request: web.Request) -> str | None:
        """Why this request is refused (403), or None: a Host that is not loopback on a
        loopback server, a websocket without Origin, an Origin other than this server."""
        try:
            asked = request.url
        except ValueError:
            return "specmon serve: a malformed Host header\n"
        if self.loopback_only and not is_loopback(asked.host or ""):
            return (
                "specmon serve: this console answers only at a loopback address "
                "(127.0.0.1, localhost or [::1])\n"
            )
        origin = request.headers.get("Origin")
        if origin is None:
            if request.path == "/ws":
                return "specmon serve: a websocket without an Origin header is refused\n"
            return None
        if not same_origin(origin, asked):
            log.warning("refused a request from another origin: %r", safe_text(origin)[:200])
            return "specmon serve: requests from another origin are refused\n"
        return None

    def _accepted(self, given: str | None) -> bool:
        assert self._token is not None
        return given is not None and hmac.compare_digest(given.encode(), self._token.encode())

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        refusal = self._refusal(request)
        if refusal is not None:
            return web.Response(status=403, text=refusal)
        if self._token is not None:
            given = request.query.get("token")
            if given is not None and self._accepted(given):
                # The token leaves the address bar (and the history) at once.
                kept = {k: v for k, v in request.query.items() if k != "token"}
                response = web.Response(
                    status=303, headers={"Location": str(request.rel_url.with_query(kept))}
                )
                response.set_cookie(
                    self.cookie, self._token, httponly=True, samesite="Strict", path="/"
                )
                return response
            if not self._accepted(request.cookies.get(self.cookie)):
                return web.Response(status=401, text=UNAUTHORIZED_PAGE, content_type="text/html")
        return await handler(request)

    # --- the page and its consoles -------------------------------------------------------------

    async def handle_index(self, request: web.Request) -> web.StreamResponse:  # type: ignore[override]
        """The page, with its websocket and static URLs on the host the browser used (a
        wildcard bind address such as 0.0.0.0 is no address a browser can connect to)."""
        self.public_url = f"{request.scheme}://{request.host}"
        return await super().handle_index(request)  # type: ignore[no-any-return]

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """One console per websocket, at most ``max_sessions`` at once; ended when idle."""
        websocket = web.WebSocketResponse(heartbeat=15)
        if self.sessions >= self.max_sessions:
            log.warning("refused a console: %d open (--max-sessions)", self.sessions)
            await websocket.prepare(request)
            await websocket.send_bytes(too_many_sessions(self.max_sessions))
            await websocket.close(code=WSCloseCode.TRY_AGAIN_LATER, message=b"too many sessions")
            return websocket
        self.sessions += 1
        service: ConsoleProcess | None = None
        idle: asyncio.Task[None] | None = None
        try:
            await websocket.prepare(request)
            service = ConsoleProcess(
                self.argv,
                write_bytes=websocket.send_bytes,
                write_str=websocket.send_str,
                close=websocket.close,
                download_manager=self.download_manager,
                debug=self.debug,
            )
            width = to_int(request.query.get("width", "80"), 80)
            height = to_int(request.query.get("height", "24"), 24)
            await service.start(width, height)
            idle = asyncio.create_task(self._end_when_idle(websocket, service))
            await self._process_messages(websocket, service)
        except asyncio.CancelledError:
            await websocket.close()
        except Exception as error:
            log.warning("console session ended: %s", safe_text(str(error))[:300])
        finally:
            if idle is not None:
                idle.cancel()
            if service is not None:
                await service.stop()
            self.sessions -= 1
        return websocket

    async def _end_when_idle(
        self, websocket: web.WebSocketResponse, service: ConsoleProcess
    ) -> None:
        """Close the websocket once its browser sent no keystroke for ``idle_timeout``; the
        handler then ends the console's process."""
        while (left := service.last_input + self.idle_timeout - time.monotonic()) > 0:
            await asyncio.sleep(left)
        log.info("ending a console idle for %g s (--idle-timeout)", self.idle_timeout)
        with contextlib.suppress(ConnectionError, RuntimeError):
            await websocket.send_bytes(idle_message(self.idle_timeout))
        await websocket.close(code=WSCloseCode.GOING_AWAY, message=b"idle")


def same_origin(origin: str, asked: URL) -> bool:
    """``Origin`` names the server the browser asked for: scheme, host and port alike."""
    try:
        url = URL(origin)
        return (
            url.scheme.lower() == asked.scheme.lower()
            and (url.host or "").lower() == (asked.host or "").lower()
            and url.port == asked.port
            and url.path in ("", "/")
        )
    except (ValueError, TypeError):
        return False

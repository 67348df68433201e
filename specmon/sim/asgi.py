"""The simulator's HTTP stack, the one the real servers run on: a Starlette (ASGI) app built
from a personality's route table, served by uvicorn, with uvicorn's access lines written in
the server's log format.

A personality (SGLang today) owns its routes, its error bodies and when it starts listening:
SGLang listens only after loading (connection refused before), another server may listen
early and answer 503. Signals stay with the personality too: uvicorn's own SIGINT/SIGTERM
capture is turned off, so the simulated server's exit path (SGLang's graceful drain, then
``kill_process_tree``) is the only one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Protocol

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

KEEPALIVE_TIMEOUT_S = 5  # SGLang and vLLM both pass timeout_keep_alive=5 to uvicorn
GRACEFUL_SHUTDOWN_S = 3.0  # bounded, so a hung handler cannot hold the exit

ExceptionHandler = Callable[[Request, Exception], Awaitable[Response]]


class HttpLog(Protocol):
    """Where the HTTP server's lines go: uvicorn's own records and its access lines."""

    def uvicorn(self, message: str, level: str = "INFO") -> None: ...

    def access(self, client: str, method: str, path: str, status: int, reason: str) -> None: ...


async def fastapi_http_error(request: Request, exc: Exception) -> Response:
    """FastAPI's default body for an HTTP error: ``{"detail": ...}`` (404, 405, ...)."""
    assert isinstance(exc, HTTPException)
    if exc.status_code in (204, 304):
        return Response(status_code=exc.status_code, headers=exc.headers)
    return JSONResponse({"detail": exc.detail}, exc.status_code, headers=exc.headers)


@dataclass(frozen=True, slots=True)
class HttpExchange:
    """One finished request/response, as the servers' HTTP metrics middlewares see it.

    ``route`` is the matching route's path template, None when no route matched (then
    ``path`` is the raw path); ``seconds`` runs from the request to the response's last body
    byte; the sizes are the ``content-length`` headers (0 without one: a stream)."""

    method: str
    path: str
    route: str | None
    status: int
    seconds: float
    request_bytes: int
    response_bytes: int
    headers: Mapping[str, str]


def _content_length(headers: Sequence[tuple[bytes, bytes]]) -> int:
    for name, value in headers:
        if name.lower() == b"content-length":
            with contextlib.suppress(ValueError):
                return int(value)
    return 0


class AccessLogApp:
    """uvicorn's access line per response (client, request line, status and phrase), written
    when the response starts as uvicorn writes it, through the server's own log writer;
    ``on_request(method, path)`` when a request comes in and ``on_response(exchange)`` when
    its response is done, for the personality's HTTP metrics."""

    def __init__(
        self,
        app: ASGIApp,
        log: HttpLog,
        on_request: Callable[[str, str], None] | None,
        on_response: Callable[[HttpExchange], None] | None = None,
        routes: Sequence[BaseRoute] = (),
    ) -> None:
        self.app = app
        self.log = log
        self.on_request = on_request
        self.on_response = on_response
        self.routes = list(routes)

    def route_of(self, scope: Scope) -> str | None:
        """The path template of the route that fully matches, as FastAPI middlewares name it."""
        for route in self.routes:
            match, _ = route.matches(scope)
            if match == Match.FULL:
                return getattr(route, "path", None)
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        if self.on_request is not None:
            self.on_request(scope["method"], scope["path"])
        host, port = scope.get("client") or ("127.0.0.1", 0)
        path = scope.get("root_path", "") + scope["path"]
        if scope.get("query_string"):
            path += "?" + scope["query_string"].decode("ascii", "replace")
        status = 500
        response_bytes = 0

        async def send_logged(message: Message) -> None:
            nonlocal status, response_bytes
            if message["type"] == "http.response.start":
                status = int(message["status"])
                response_bytes = _content_length(message.get("headers", []))
                self.log.access(
                    f"{host}:{port}", scope["method"], path, status, HTTPStatus(status).phrase
                )
            await send(message)

        try:
            await self.app(scope, receive, send_logged)
        finally:
            if self.on_response is not None:
                raw_headers = scope.get("headers", [])
                self.on_response(
                    HttpExchange(
                        scope["method"],
                        scope["path"],
                        self.route_of(scope),
                        status,
                        time.perf_counter() - started,
                        _content_length(raw_headers),
                        response_bytes,
                        {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw_headers},
                    )
                )


def build_app(
    routes: Sequence[BaseRoute],
    log: HttpLog,
    *,
    exception_handlers: Mapping[Any, ExceptionHandler] | None = None,
    on_request: Callable[[str, str], None] | None = None,
    on_response: Callable[[HttpExchange], None] | None = None,
) -> ASGIApp:
    """A personality's route table as an ASGI app: FastAPI-style ``{"detail": ...}`` bodies
    for unknown paths and wrong methods unless ``exception_handlers`` says otherwise, an
    access line per response, ``on_request(method, path)`` per request and
    ``on_response(exchange)`` per finished response (for the HTTP metrics)."""
    handlers: dict[Any, ExceptionHandler] = {HTTPException: fastapi_http_error}
    handlers.update(exception_handlers or {})
    return AccessLogApp(
        Starlette(routes=list(routes), exception_handlers=handlers),
        log,
        on_request,
        on_response,
        routes,
    )


class _UvicornRecords(logging.Handler):
    """uvicorn's own log records (warnings such as "Invalid HTTP request received." and
    errors with their traceback) in the server's format, through the server's log writer."""

    def __init__(self, log: HttpLog) -> None:
        super().__init__(logging.WARNING)
        self.log = log
        self._formatter = logging.Formatter()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + self._formatter.formatException(record.exc_info)
        self.log.uvicorn(text, record.levelname)


class _SignalFreeServer(uvicorn.Server):
    """uvicorn without its signal capture: the simulated server handles SIGTERM/SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound now (OSError when the port is taken), listening once
    uvicorn serves it."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


class UvicornServing:
    """One uvicorn server for ``app`` on ``host:port``, started when the caller decides (a
    personality may listen after loading or from the first second) and stopped on request.

    It prints none of uvicorn's INFO lines (the personality writes the ones its server
    prints, where it prints them); warnings and errors go through ``log``."""

    def __init__(self, app: ASGIApp, host: str, port: int, log: HttpLog) -> None:
        self.host = host
        self.port = port
        self.config = uvicorn.Config(
            app,
            host=host,
            port=port,
            loop="asyncio",
            http=H11Protocol,  # imported with this module, not when the port opens
            ws="none",
            lifespan="off",
            access_log=False,
            log_config=None,
            log_level="warning",
            timeout_keep_alive=KEEPALIVE_TIMEOUT_S,
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        )
        error_logger = logging.getLogger("uvicorn.error")
        error_logger.handlers = [_UvicornRecords(log)]
        error_logger.propagate = False
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._sock: socket.socket | None = None

    def bind(self) -> None:
        """Bind the port now without listening (connections are refused until start()), as
        vLLM does before loading; OSError when the port is taken."""
        if self._sock is None:
            self._sock = _bind(self.host, self.port)

    async def start(self) -> None:
        """Bind (unless bind() did) and serve; returns once connections are accepted.
        OSError: port taken."""
        sock, self._sock = self._sock or _bind(self.host, self.port), None
        server = _SignalFreeServer(self.config)
        self._server = server
        self._task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not self._task.done():
            await asyncio.sleep(0.001)
        if self._task.done():
            self._task.result()  # re-raises what stopped it

    async def stop(self) -> None:
        """Stop accepting, let responses in flight finish (bounded), close the socket."""
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(self._task), GRACEFUL_SHUTDOWN_S + 1.0)
        if not self._task.done():
            self._server.force_exit = True
            self._task.cancel()

"""The simulator's generic app/serving seam (specmon/sim/asgi.py) that every personality builds
on: its own route table and error handler, served when it decides, stopped cleanly."""

from __future__ import annotations

import socket

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from support.sim import free_port

from specmon.sim.asgi import UvicornServing, build_app


class _Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def uvicorn(self, message: str, level: str = "INFO") -> None:
        self.lines.append(f"{level}: {message}")

    def access(self, client: str, method: str, path: str, status: int, reason: str) -> None:
        self.lines.append(f"{method} {path} {status} {reason}")


async def test_a_personality_route_table_served_late_then_stopped():
    """What a second personality does: its own routes and error handler, listening only once
    it decides to (connection refused before), every request logged, the port freed on stop."""

    async def version(request: Request) -> Response:
        return JSONResponse({"version": "0.0.test"})

    async def teapot(request: Request, exc: Exception) -> Response:
        return JSONResponse({"object": "error", "message": "no such route"}, 404)

    lines = _Lines()
    seen: list[tuple[str, str]] = []
    app = build_app(
        [Route("/version", version, methods=["GET"])],
        lines,
        exception_handlers={404: teapot},
        on_request=lambda method, path: seen.append((method, path)),
    )
    port = free_port()
    serving = UvicornServing(app, "127.0.0.1", port, lines)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        with pytest.raises(httpx.ConnectError):
            await client.get("/version")
        await serving.start()
        assert (await client.get("/version")).json() == {"version": "0.0.test"}
        missing = await client.get("/missing")
        assert missing.status_code == 404 and missing.json()["message"] == "no such route"
        wrong = await client.post("/version")
        assert wrong.status_code == 405 and wrong.json() == {"detail": "Method Not Allowed"}
        await serving.stop()
    assert seen == [("GET", "/version"), ("GET", "/missing"), ("POST", "/version")]
    assert lines.lines == [
        "GET /version 200 OK",
        "GET /missing 404 Not Found",
        "POST /version 405 Method Not Allowed",
    ]
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))

"""textual-serve's Server with an optional access token: with one set, every request must
carry it (``?token=`` once, then an HttpOnly same-site cookie), compared in constant time.
The page's URLs follow the host the browser asked for."""

from __future__ import annotations

import hmac

from aiohttp import web
from aiohttp.typedefs import Handler
from textual_serve.server import Server

COOKIE = "specmon_token"


class TokenServer(Server):
    """Serves the console command; ``token=None`` (loopback only) means no token."""

    def __init__(self, command: str, *, token: str | None = None, **kwargs: object) -> None:
        super().__init__(command, **kwargs)  # type: ignore[arg-type]
        self._token = token

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        if self._token is not None:
            app.middlewares.append(self._require_token)
        return app

    async def handle_index(self, request: web.Request) -> web.StreamResponse:  # type: ignore[override]
        """The page, with its websocket and static URLs on the host the browser used (a
        wildcard bind address such as 0.0.0.0 is no address a browser can connect to)."""
        self.public_url = f"{request.scheme}://{request.host}"
        return await super().handle_index(request)  # type: ignore[no-any-return]

    def _accepted(self, given: str | None) -> bool:
        assert self._token is not None
        return given is not None and hmac.compare_digest(given.encode(), self._token.encode())

    @web.middleware
    async def _require_token(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        from_query = request.query.get("token")
        if not (self._accepted(from_query) or self._accepted(request.cookies.get(COOKIE))):
            raise web.HTTPUnauthorized(text="specmon serve: an access token is required\n")
        response = await handler(request)
        if from_query is not None and isinstance(response, web.Response):
            response.set_cookie(COOKIE, from_query, httponly=True, samesite="Strict")
        return response

"""textual-serve's Server with an optional access token: with one set, every request must
carry it (``?token=`` once, then an HttpOnly same-site cookie), compared in constant time."""

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

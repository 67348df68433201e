"""`/metrics` over HTTP on the caller's event loop (aiohttp, with prometheus-client's own
aiohttp handler), so each scrape reads the stores on the thread that writes them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.aiohttp import make_aiohttp_handler

from specmon.exporter.auth import ScrapeAuth
from specmon.exporter.collector import SpecmonCollector, WatchedHost
from specmon.model.errors import UsageError
from specmon.model.listen import url_host

INDEX_TEXT = "specmon exporter: the metrics are at /metrics\n"


def build_registry(
    hosts: Callable[[], Sequence[WatchedHost]], backend_of_profile: Mapping[str, str]
) -> CollectorRegistry:
    """A registry holding only specmon's collector (no process or GC metrics of the exporter)."""
    registry = CollectorRegistry()
    registry.register(SpecmonCollector(hosts, backend_of_profile=backend_of_profile))
    return registry


class MetricsServer:
    """An HTTP server for one registry at ``/metrics``; ``start`` binds, ``close`` unbinds.
    With ``auth``, every request must carry its credentials (401 otherwise)."""

    def __init__(
        self, registry: CollectorRegistry, host: str, port: int, auth: ScrapeAuth | None = None
    ) -> None:
        self.registry = registry
        self.auth = auth
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{url_host(self.host)}:{self.port}/metrics"

    async def start(self) -> None:
        app = web.Application(middlewares=[self.auth.middleware] if self.auth else [])
        app.router.add_get("/metrics", make_aiohttp_handler(self.registry))
        app.router.add_get("/", _index)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            reason = exc.strerror or str(exc)
            raise UsageError(
                f"cannot listen on {url_host(self.host)}:{self.port}: {reason}"
            ) from None
        if self.port == 0:  # a free port was asked for: say which one was taken
            self.port = int(runner.addresses[0][1])
        self._runner = runner

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


async def _index(request: web.Request) -> web.Response:
    return web.Response(text=INDEX_TEXT)

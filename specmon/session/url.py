"""A server watched by its URL alone (`specmon watch http://HOST:PORT`, `specmon connect
http://HOST:PORT`): no SSH, no log, no GPUs, nothing launched or stopped.

``UrlController`` is a read-only ``HostController`` (``can_launch`` False) that polls the
server's health, server info and ``/metrics`` with the same ``HttpPoller`` a launched run
uses, feeding the same typed events into the same store; ``/metrics`` is read with the
backend's HTTP-only reader, so throughput and acceptance come from the server's own counters
and gauges. Which server it is comes from its answers: every registered backend names the
paths that tell it (``HttpApi.probe_paths``) and rates their answers (``http_likeness``).

Everything the server sends is untrusted: each answer is read up to its cap
(``http_body``), parsed with isinstance checks, and what reaches a terminal is safe_text'd
by the printers and widgets as for any host.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from specmon.model.errors import SpecmonError, UsageError
from specmon.model.events import AgentStatus, ConnectionState, Event, RunInfo, RunState
from specmon.model.terminal_text import safe_text
from specmon.session.http import HttpPoller, PollTarget
from specmon.session.http_body import BodyTooLarge, request_capped
from specmon.session.options import SessionOptions
from specmon.state.controller import HostController
from specmon.state.store import EventBus

if TYPE_CHECKING:
    from specmon.backends import Backend
    from specmon.launch.config import Profile
    from specmon.launch.spec import FlagValue, LaunchSpec
    from specmon.state.run_status import RunStatus, StopReport

DEFAULT_PORTS = {"http": 80, "https": 443}
GPUS_NOT_VISIBLE = "GPUs: not visible over HTTP"
_HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,251}[A-Za-z0-9])?")


@dataclass(frozen=True, slots=True)
class UrlTarget:
    """``http(s)://HOST:PORT``: a scheme, a host name or address, a port."""

    scheme: str
    host: str  # an IPv6 address without its brackets
    port: int

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def is_url_target(text: str) -> bool:
    """Whether a HOST argument is a URL (``scheme://...``), not a host for SSH: told apart
    before any config or SSH lookup, so ``ftp://x`` is refused as a URL, not looked up."""
    return "://" in text


def parse_url_target(text: str) -> UrlTarget:
    """``http://HOST:PORT`` or ``https://HOST:PORT`` (the port defaults to the scheme's, a
    trailing ``/`` is allowed); anything else is a UsageError in one line."""
    shown = safe_text(text)[:200]
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"{shown}: not a URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise UsageError(f"{shown}: only http:// and https:// URLs can be watched")
    if "@" in parts.netloc:
        raise UsageError(f"{shown}: a user or password in the URL is not taken")
    if parts.path not in ("", "/") or parts.query or parts.fragment or text.endswith(("?", "#")):
        raise UsageError(f"{shown}: only {scheme}://HOST:PORT, with no path, query or fragment")
    host = parts.hostname or ""
    if not host:
        raise UsageError(f"{shown}: no host in the URL")
    if not _valid_host(host):
        raise UsageError(f"{shown}: {safe_text(host)[:100]!r} is not a host name or address")
    return UrlTarget(scheme, host, port if port is not None else DEFAULT_PORTS[scheme])


def _valid_host(host: str) -> bool:
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(host)
        return True
    return ":" not in host and _HOSTNAME.fullmatch(host) is not None


async def probe_answers(
    client: httpx.AsyncClient, base_url: str, paths: list[str]
) -> tuple[dict[str, Any], str | None]:
    """GET each path once: path -> its JSON (None when no 200 JSON answer came), and why
    nothing answered at all (None when something did)."""
    answers: dict[str, Any] = {}
    answered = False
    failure: str | None = None
    for path in paths:
        answers[path] = None
        try:
            response = await request_capped(client, "GET", base_url + path, what=path)
        except BodyTooLarge:
            answered = True
            continue
        except httpx.HTTPError as exc:
            failure = failure or _why(exc)
            continue
        answered = True
        if response.status_code == 200:
            with contextlib.suppress(ValueError):
                answers[path] = response.json()
    return answers, (None if answered else failure or "no answer")


_NAME_ERRORS = ("name or service not known", "nodename nor servname", "no address associated")


def _why(exc: httpx.HTTPError) -> str:
    """An HTTP failure in a few words (the server's own text left out)."""
    if isinstance(exc, httpx.ConnectError):
        if any(text in str(exc).lower() for text in _NAME_ERRORS):
            return NO_SUCH_HOST
        return "connection refused or host unreachable"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return type(exc).__name__


def pick_backend(answers: Mapping[str, Any], backends: list[Backend]) -> Backend | None:
    """The backend that rates the answers highest; None when none claims them or two claim
    them equally."""
    scores = sorted(
        ((min(max(float(b.http_likeness(answers)), 0.0), 1.0), b.name, b) for b in backends),
        key=lambda item: (-item[0], item[1]),
    )
    if not scores or scores[0][0] <= 0.0:
        return None
    if len(scores) > 1 and scores[1][0] == scores[0][0]:
        return None
    return scores[0][2]


NO_SUCH_HOST = "no such host name"


class NoAnswer(SpecmonError):
    """Nothing answered at the URL: a server still loading (its HTTP comes up last) looks
    like this, so a watch waits; ``failure`` says why in a few words."""

    def __init__(self, message: str, failure: str) -> None:
        super().__init__(message)
        self.failure = failure


async def detect_backend(base_url: str, *, timeout_s: float) -> Backend:
    """Ask the server the paths every registered backend names and let the backends rate
    its answers; NoAnswer when nothing answered, a SpecmonError naming what was tried when
    none is sure."""
    from specmon.backends import all_backends

    backends = all_backends()
    paths = list(dict.fromkeys(p for b in backends for p in b.probe_paths))
    async with httpx.AsyncClient(timeout=timeout_s, trust_env=False) as client:
        answers, failure = await probe_answers(client, base_url, paths)
    tried = "; ".join(f"{b.name}: {', '.join(b.probe_paths)}" for b in backends)
    if failure is not None:
        raise NoAnswer(
            f"{base_url}: {failure} (tried {', '.join(paths)}); is the server up?", failure
        )
    backend = pick_backend(answers, backends)
    if backend is None:
        names = "|".join(b.name for b in backends)
        raise SpecmonError(
            f"{base_url}: not recognised as a known server (tried {tried}); "
            f"name it with --backend {names}"
        )
    return backend


class _Direct:
    """The poller's way to the port: none needed, the URL is reached as it is."""

    async def forward_port(self, remote_port: int) -> int:
        return remote_port

    async def close_forward(self, local_port: int) -> None:
        return None


class UrlController(HostController):
    """A server reached by its URL, read-only: health, server info and ``/metrics``."""

    can_launch = False

    def __init__(
        self,
        target: UrlTarget,
        *,
        backend: str | None = None,
        options: SessionOptions | None = None,
    ) -> None:
        from specmon.backends import get_backend

        self.target = target
        self.url = target.base_url
        self.bus = EventBus()
        self.host_label = f"{self.url} (HTTP only)"
        self.read_only_reason = (
            f"{self.url} is watched over HTTP only: launch, stop, relaunch, sweeps, GPUs and "
            "the log need its host over SSH (specmon connect HOST)"
        )
        self.options = options or SessionOptions()
        self.forced_backend = get_backend(backend) if backend is not None else None
        self.backend: Backend | None = None
        self.transport = _Direct()
        self.http = HttpPoller(
            self,
            interval_s=lambda: self.options.health_interval_s,
            timeout_s=self.options.http_timeout_s,
            log_stats_quiet=lambda own: True,  # no log: /metrics says every figure
            http_only=True,
            latency_window_s=lambda: self.options.latency_window_s,
        )
        self._task: asyncio.Task[None] | None = None
        self._connected = False
        self._closing = False
        self._ready = False

    # --- what the poller asks of its host ----------------------------------------------------

    def poll_target(self) -> PollTarget | None:
        if self.backend is None or self._closing:
            return None
        return PollTarget(
            run_id=self.url, port=self.target.port, backend=self.backend.name, base_url=self.url
        )

    def is_following(self, run_id: str) -> bool:
        return run_id == self.url and not self._closing

    def publish(self, event: Event, at: float | None = None) -> None:
        self.bus.publish(event, at)

    def on_healthy(self, run_id: str) -> None:
        """The health endpoint said ready: the run is ready (once)."""
        if not self._ready:
            self._ready = True
            self.publish(RunState(run_id=self.url, state="ready"))

    # --- HostController ----------------------------------------------------------------------

    async def start(self) -> None:
        """Detect the server, then poll it. A server that answers is known before this
        returns, and one no backend recognises (or a host name that does not resolve) is an
        error here; one that does not answer yet (loading: its HTTP comes up last) is waited
        for, asked again every health interval, with a ``connecting`` line saying so."""
        self.publish(ConnectionState(host=self.url, state="connecting"))
        if self.forced_backend is not None:
            self._begin(self.forced_backend)
            return
        try:
            backend = await detect_backend(self.url, timeout_s=self.options.http_timeout_s)
        except NoAnswer as exc:
            if exc.failure == NO_SUCH_HOST:
                raise
            self.publish(
                ConnectionState(
                    host=self.url,
                    state="connecting",
                    detail=f"no answer yet ({exc.failure}): waiting for the server, asking "
                    f"every {self.options.health_interval_s:g} s (--backend NAME says which)",
                )
            )
            self._task = asyncio.get_running_loop().create_task(
                self._wait_then_poll(), name="specmon-url-wait"
            )
            return
        self._begin(backend)

    async def _wait_then_poll(self) -> None:
        """Ask until the server answers, then poll it; one that answers but is no known
        server ends the watch as a disconnect saying so."""
        while not self._closing:
            await asyncio.sleep(self.options.health_interval_s)
            try:
                backend = await detect_backend(self.url, timeout_s=self.options.http_timeout_s)
            except NoAnswer:
                continue
            except SpecmonError as exc:
                self.publish(ConnectionState(host=self.url, state="disconnected", detail=str(exc)))
                return
            except (httpx.HTTPError, OSError, ValueError):
                continue  # a half-started server's odd answer: asked again, as the poller does
            self._begin(backend)
            await self._poll()
            return

    def _begin(self, backend: Backend) -> None:
        """Known: say so and start the poller (unless already waiting in its own task)."""
        self.backend = backend
        self._connected = True
        self.publish(ConnectionState(host=self.url, state="connected", detail="HTTP only"))
        self.publish(RunInfo(run_id=self.url, backend=self.backend.name, reattached=True))
        self.publish(AgentStatus(state="stopped", detail=GPUS_NOT_VISIBLE))
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._poll(), name="specmon-url-poll"
            )

    async def _poll(self) -> None:
        """The poller, restarted after an error it did not expect (a server's answers are
        untrusted; the watch must not end on one)."""
        while not self._closing:
            try:
                await self.http.run()
                return
            except (SpecmonError, httpx.HTTPError, OSError, ValueError):
                await asyncio.sleep(self.options.health_interval_s)

    async def close(self) -> None:
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._connected:
            self._connected = False
            self.publish(ConnectionState(host=self.url, state="closed"))

    def _refuse(self) -> SpecmonError:
        return SpecmonError(self.read_only_reason)

    async def launch(
        self,
        profile: str,
        *,
        flags: Mapping[str, FlagValue] | None = None,
        env: Mapping[str, str | None] | None = None,
    ) -> str:
        raise self._refuse()

    async def launch_spec(self, spec: LaunchSpec, *, profile: str | None = None) -> str:
        raise self._refuse()

    async def check_launch(self) -> None:
        raise self._refuse()

    async def stop(self) -> StopReport | None:
        raise self._refuse()

    def profiles(self) -> list[str]:
        return []

    def add_profile(self, name: str, profile: Profile) -> None:
        raise self._refuse()

    @property
    def current_run(self) -> RunStatus | None:
        return None

    async def http_base_url(self) -> str | None:
        return self.url if self.backend is not None else None

    @property
    def connected(self) -> bool:
        return self._connected

    @property
    def is_local(self) -> bool:
        return False

    @property
    def host_python(self) -> str:
        return "python3"


def url_controller_from_args(target: str, backend: str | None) -> UrlController:
    """The controller for a URL HOST argument (a UsageError in one line for a bad one)."""
    return UrlController(parse_url_target(target), backend=backend)

"""HTTP to the server's port (through an SSH port forward, or plain localhost): health and
server info (the run's backend names the endpoints) on a self-paced loop (one request at a time, so a slow answer never piles
requests up), and /metrics scraped with prometheus-client's parser when the server has it.

The server is not trusted: every answer is read up to a cap (specmon/session/http_body.py: 8 MiB for
/metrics, 1 MiB for the rest), and a snapshot keeps at most MAX_SNAPSHOT_SAMPLES samples of
at most MAX_SAMPLE_KEY characters, MAX_SNAPSHOT_CHARS in all (so a `watch --json` line stays
small); what is left out is said once per run and endpoint (a ``notice``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import httpx

from specmon.model.events import Event, HealthStatus, MetricsSnapshot, Notice, ServerInfo
from specmon.model.quantiles import DEFAULT_WINDOW_S
from specmon.session.http_body import METRICS_BODY_LIMIT, BodyTooLarge, request_capped

if TYPE_CHECKING:
    from specmon.backends import HttpApi, MetricsReader
    from specmon.backends.latency import LatencyReader


@dataclass(frozen=True, slots=True)
class PollTarget:
    """The run to poll: its id, its port on the host and its backend's name; ``base_url``,
    when set, is where to reach it as it is (a server watched by its URL: no forward)."""

    run_id: str
    port: int
    backend: str
    base_url: str | None = None
    argv: tuple[str, ...] = ()  # the run's command line, where known (its flags' limits)


class PortForwarder(Protocol):
    """How the poller reaches a port on the host (an SSH forward, or plain localhost)."""

    async def forward_port(self, remote_port: int) -> int: ...
    async def close_forward(self, local_port: int) -> None: ...


class PolledHost(Protocol):
    """What the poller needs of the session: the run to poll, whether it is still followed,
    the way to its port, and where its findings go."""

    @property
    def transport(self) -> PortForwarder: ...
    def poll_target(self) -> PollTarget | None: ...
    def is_following(self, run_id: str) -> bool: ...
    def publish(self, event: Event, at: float | None = None) -> None: ...
    def on_healthy(self, run_id: str) -> None: ...


INFO_EVERY = 10  # polls between server-info refreshes once the server answers
METRICS_EVERY = 2  # polls between /metrics scrapes
# The simulator's vLLM page keeps 24 samples (2.2 KB of keys); a real server's grows with its
# engines and labels.
MAX_SNAPSHOT_SAMPLES = 2000
# Characters of ``name{labels}``: a longer key is a label stuffed. A real server's own info
# gauges are long: vLLM 0.32's vllm:cache_config_info is 1,053 (37 labels of its cache
# config) and grows as releases add fields; MAX_SNAPSHOT_CHARS still bounds the whole.
MAX_SAMPLE_KEY = 4096
MAX_SNAPSHOT_CHARS = 256 * 1024  # of all keys together


def metrics_values(
    text: str, backend: HttpApi, left_out: list[int] | None = None
) -> tuple[tuple[str, float], ...]:
    """The backend's samples from a Prometheus text page, histogram buckets left out, at
    most MAX_SNAPSHOT_SAMPLES of them with keys of at most MAX_SAMPLE_KEY characters and
    MAX_SNAPSHOT_CHARS in all; the count of samples left out past those is added to
    ``left_out[0]`` when given."""
    from prometheus_client.parser import text_string_to_metric_families

    values: list[tuple[str, float]] = []
    dropped = chars = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not backend.metric_sample_kept(sample.name):
                continue
            labels = ",".join(f'{k}="{_escaped(v)}"' for k, v in sorted(sample.labels.items()))
            key = f"{sample.name}{{{labels}}}" if labels else sample.name
            if (
                len(values) >= MAX_SNAPSHOT_SAMPLES
                or len(key) > MAX_SAMPLE_KEY
                or chars + len(key) > MAX_SNAPSHOT_CHARS
            ):
                dropped += 1
                continue
            chars += len(key)
            values.append((key, sample.value))
    if left_out is not None:
        left_out[0] += dropped
    return tuple(values)


def _escaped(value: str) -> str:
    """A label value as the Prometheus text format writes it (backslash, quote and newline
    escaped), so a value holding ``,`` or ``}`` cannot pass for another label in a key."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class HttpPoller:
    """Polls the followed run's health, server info and metrics, one request at a time."""

    def __init__(
        self,
        host: PolledHost,
        *,
        interval_s: Callable[[], float],
        timeout_s: float,
        log_stats_quiet: Callable[[Event | None], bool] | None = None,
        http_only: bool = False,
        latency_window_s: Callable[[], float] | None = None,
    ) -> None:
        self.host = host
        # The rolling window of the ``latency`` events (the session's option).
        self._latency_window_s = latency_window_s or (lambda: DEFAULT_WINDOW_S)
        self.http_only = http_only  # no log at all: /metrics says every figure
        # Whether the log's decode stats are quiet (given the poller's own last decode):
        # only then are the events the backend reads from /metrics published.
        self._log_stats_quiet = log_stats_quiet
        self._own_decode: Event | None = None
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._answers: dict[str, float] = {}
        self.base_url: str | None = None  # where the poller reaches the current run now
        self.run_id: str | None = None
        self._noticed: set[tuple[str | None, str]] = set()  # (run, source) said once

    def _notice_once(self, source: str, message: str) -> None:
        """Publish a ``notice`` the first time the run's ``source`` has something left out
        (not at every scrape)."""
        if (self.run_id, source) not in self._noticed:
            self._noticed.add((self.run_id, source))
            self.host.publish(Notice(source=source, message=message))

    def last_answer(self, run_id: str) -> float:
        """time.monotonic() of the run's last HTTP answer (0.0: never)."""
        return self._answers.get(run_id, 0.0)

    async def run(self) -> None:
        from specmon.backends import get_backend

        target = self.host.poll_target()
        if target is None:
            return
        backend = get_backend(target.backend)
        latency = backend.new_latency_reader(target.argv, self._latency_window_s())
        if target.base_url is not None:
            await self._poll_at(target.run_id, target.base_url, backend, latency)
            return
        local_port = await self.host.transport.forward_port(target.port)
        try:
            await self._poll_at(target.run_id, f"http://127.0.0.1:{local_port}", backend, latency)
        finally:
            await self.host.transport.close_forward(local_port)

    async def _poll_at(
        self, run_id: str, base: str, backend: HttpApi, latency: LatencyReader | None = None
    ) -> None:
        self.base_url, self.run_id = base, run_id
        try:
            await self._poll(run_id, base, backend, latency)
        finally:
            if self.base_url == base:
                self.base_url = self.run_id = None

    async def _poll(
        self, run_id: str, base: str, backend: HttpApi, latency: LatencyReader | None = None
    ) -> None:
        host = self.host
        last_status: int | str | None = "unset"
        metrics_supported: bool | None = None
        reader = self._reader(backend) if self._log_stats_quiet is not None else None
        polls = 0
        async with httpx.AsyncClient(timeout=self._timeout_s, trust_env=False) as client:
            while host.is_following(run_id):
                started = time.monotonic()
                status: int | None = None
                try:
                    status = await self._health_status(client, base + backend.health_path)
                    self._answers[run_id] = time.monotonic()
                except httpx.HTTPError:
                    pass
                latency_ms = (time.monotonic() - started) * 1000
                if status != last_status:
                    host.publish(HealthStatus(status=status, latency_ms=round(latency_ms, 1)))
                    last_status = status
                if backend.ready_on_health(status):
                    host.on_healthy(run_id)
                if status == 200:
                    if polls % INFO_EVERY == 0 and backend.info_paths:
                        await self._server_info(
                            client, base + backend.info_paths[0], backend, latency
                        )
                    if metrics_supported is not False and polls % METRICS_EVERY == 0:
                        metrics_supported = await self._metrics(
                            client, base + backend.metrics_path, backend, reader, latency
                        )
                    polls += 1
                elapsed = time.monotonic() - started
                await asyncio.sleep(max(0.05, self._interval_s() - elapsed))

    def _reader(self, backend: HttpApi) -> MetricsReader | None:
        """The backend's reader of ``/metrics`` into events (a host's session: the one for a
        server whose log can go quiet; ``http_only``: the one for a server with no log)."""
        if self.http_only:
            return backend.new_http_only_metrics_reader()
        return backend.new_metrics_reader()

    async def _health_status(self, client: httpx.AsyncClient, url: str) -> int:
        """The health endpoint's status; its body (read up to its cap, then let go) says
        nothing more. A body past the cap still answered: its status counts."""
        try:
            return (await request_capped(client, "GET", url, what=_path(url))).status_code
        except BodyTooLarge as exc:
            self._notice_once(_path(url), str(exc))
            return exc.status_code

    async def _server_info(
        self,
        client: httpx.AsyncClient,
        url: str,
        backend: HttpApi,
        latency: LatencyReader | None = None,
    ) -> None:
        try:
            response = await request_capped(client, "GET", url, what=_path(url))
            if response.status_code == 200:
                data = response.json()
                values = backend.server_info_values(data)
                if latency is not None:
                    latency.server_info(data)
                if values:
                    self.host.publish(ServerInfo(values=values))
        except BodyTooLarge as exc:
            self._notice_once(_path(url), str(exc))
        except (httpx.HTTPError, ValueError):
            pass

    async def _metrics(
        self,
        client: httpx.AsyncClient,
        url: str,
        backend: HttpApi,
        reader: MetricsReader | None = None,
        latency: LatencyReader | None = None,
    ) -> bool | None:
        what = _path(url)
        try:
            response = await request_capped(client, "GET", url, limit=METRICS_BODY_LIMIT, what=what)
        except BodyTooLarge as exc:  # a page that size will not shrink: not read again
            self._notice_once(what, f"{exc}; not scraped again for this run")
            return False
        except httpx.HTTPError:
            return None
        if response.status_code == 404:
            if self.http_only:  # nothing else would say tok/s or acceptance: say why once
                hint = f" ({backend.metrics_hint})" if backend.metrics_hint else ""
                self._notice_once(what, f"{what} not served{hint}: no tok/s or acceptance")
            return False
        if response.status_code != 200:
            return None
        text = response.text
        left_out = [0]
        try:
            values = metrics_values(text, backend, left_out)
        except ValueError:
            return None
        if left_out[0]:
            self._notice_once(
                what + " samples",
                f"{what}: {left_out[0]} samples left out (a snapshot keeps "
                f"{MAX_SNAPSHOT_SAMPLES}, with names and labels of at most "
                f"{MAX_SAMPLE_KEY} characters, {MAX_SNAPSHOT_CHARS // 1024} KiB in all)",
            )
        if values:
            self.host.publish(MetricsSnapshot(values=values))
        if latency is not None:
            figures = latency.read(text, time.monotonic())
            if figures is not None:
                self.host.publish(figures)
        if reader is not None and self._log_stats_quiet is not None:
            events = reader.read(text, time.monotonic())
            for notice in (event for event in events if isinstance(event, Notice)):
                self._notice_once(notice.source, notice.message)
            events = [event for event in events if not isinstance(event, Notice)]
            if events and self._log_stats_quiet(self._own_decode):
                for event in events:
                    self.host.publish(event)
                    if event.kind == "decode":
                        self._own_decode = event
        return True


def _path(url: str) -> str:
    """The path of ``url`` (``/metrics``): what a notice names, the port forward left out."""
    return httpx.URL(url).path or "/"

"""The demo's host session: a local simulator, plus simulated clients sending it requests.

A real server has users; the simulator has none, so without traffic the demo's throughput,
acceptance and draft/verify panels would sit empty. The clients go through the server's real
HTTP API (the backend's generation endpoint), exactly as an operator's users would, one request at a time (the
batch-1 case of the story), with a mix of prompt lengths from the shipped prompt set.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

from specmon.model.errors import SpecmonError
from specmon.session.host import HostSession

# Completion lengths cycle through these, so the throughput line shows requests starting
# and ending rather than one flat plateau.
DEMO_MAX_TOKENS = (192, 384, 128, 256)
PAUSE_BETWEEN_REQUESTS_S = 0.4
REQUEST_TIMEOUT_S = 60.0
NOT_READY_POLL_S = 0.5


class DemoTraffic:
    """Sends generation requests (the server's own endpoint and body) to the session's ready
    server until stopped."""

    def __init__(self, session: HostSession) -> None:
        self.session = session
        self.requests_ok = 0
        self.requests_failed = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="demo-traffic")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        import httpx

        from specmon.backends import DEFAULT_BACKEND, get_backend
        from specmon.model.prompts import load_prompt_set
        from specmon.session.http_body import BodyTooLarge, request_capped

        prompts = itertools.cycle(load_prompt_set().schedule(48))
        lengths = itertools.cycle(DEMO_MAX_TOKENS)
        store = self.session.bus.store
        async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as client:
            while True:
                base_url = await self._ready_url(store)
                if base_url is None:
                    await asyncio.sleep(NOT_READY_POLL_S)
                    continue
                # The followed run's server says how a request looks (SGLang's /generate,
                # vLLM's OpenAI /v1/completions).
                run = store.run
                backend = get_backend((run.backend if run else None) or DEFAULT_BACKEND)
                body = backend.generate_body(next(prompts).text, next(lengths), stream=False)
                url = base_url + backend.generate_path
                try:
                    response = await request_capped(client, "POST", url, json=body)
                    ok = response.status_code == 200
                except (httpx.HTTPError, BodyTooLarge):
                    ok = False
                if ok:
                    self.requests_ok += 1
                else:
                    self.requests_failed += 1  # a relaunch or stop in progress: wait it out
                await asyncio.sleep(PAUSE_BETWEEN_REQUESTS_S if ok else NOT_READY_POLL_S)

    async def _ready_url(self, store: Any) -> str | None:
        if store.run_state != "ready":
            return None
        try:
            return await self.session.http_base_url()
        except (SpecmonError, OSError):  # the run went away between the check and the forward
            return None


class DemoSession(HostSession):
    """A HostSession whose ready server also gets simulated client traffic."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.traffic = DemoTraffic(self)

    async def start(self, *, streams: bool = True) -> None:
        await super().start(streams=streams)
        if streams:
            self.traffic.start()

    async def close(self) -> None:
        await self.traffic.stop()
        await super().close()

"""SGLang's warm-up thread: real HTTP requests (httpx) from the server to itself once it
listens, before it logs that it is ready. A module of its own so that httpx loads apart from
the HTTP server the port needs first."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

WARM_UP_TIMEOUT_S = 120.0


async def warm_up(base_url: str, *, model: str, vlm: bool) -> None:
    """SGLang's warm-up thread, through real HTTP to the server itself: ``GET /model_info``,
    then one short generation (chat with an image for a VLM, else /generate)."""
    async with httpx.AsyncClient(base_url=base_url, timeout=WARM_UP_TIMEOUT_S) as client:
        calls: list[Callable[[], Awaitable[httpx.Response]]] = [lambda: client.get("/model_info")]
        if vlm:
            body: dict[str, Any] = {
                "model": model,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": "data:image/png;base64,"}},
                            {"type": "text", "text": "Describe the image."},
                        ],
                    }
                ],
                "max_tokens": 8,
            }
            calls.append(lambda: client.post("/v1/chat/completions", json=body))
        else:
            body = {
                "text": "The capital city of France is",
                "sampling_params": {"temperature": 0, "max_new_tokens": 8},
            }
            calls.append(lambda: client.post("/generate", json=body))
        for call in calls:
            with contextlib.suppress(httpx.HTTPError):  # as before: a failed call is skipped
                await call()

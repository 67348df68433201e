"""SGLang's warm-up thread: real HTTP requests (httpx) from the server to itself once it
listens, before it logs that it is ready. A module of its own so that httpx loads apart from
the HTTP server the port needs first."""

from __future__ import annotations

import contextlib
import ssl
from typing import Any

import httpx

WARM_UP_TIMEOUT_S = 120.0


def _generation(model: str, vlm: bool) -> tuple[str, dict[str, Any]]:
    """The warm-up generation: chat with an image for a VLM (Kimi-K2.5), else /generate."""
    if vlm:
        image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,"}}
        text = {"type": "text", "text": "Describe the image."}
        message = {"role": "user", "content": [image, text]}
        return "/v1/chat/completions", {"model": model, "messages": [message], "max_tokens": 8}
    return "/generate", {
        "text": "The capital city of France is",
        "sampling_params": {"temperature": 0, "max_new_tokens": 8},
    }


async def warm_up(base_url: str, *, model: str, vlm: bool) -> None:
    """SGLang's warm-up thread, through real HTTP to the server itself: ``GET /model_info``,
    then one short generation. A failed call is skipped, as the server goes on regardless."""
    # Plain HTTP to ourselves: a TLS context with no CA loaded (any TLS peer would fail
    # verification) spares the 50-90 ms httpx spends loading certifi's bundle.
    no_ca = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    path, body = _generation(model, vlm)
    async with httpx.AsyncClient(
        base_url=base_url, timeout=WARM_UP_TIMEOUT_S, verify=no_ca
    ) as client:
        with contextlib.suppress(httpx.HTTPError):
            await client.get("/model_info")
        with contextlib.suppress(httpx.HTTPError):
            await client.post(path, json=body)

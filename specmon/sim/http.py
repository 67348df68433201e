"""What the personalities' HTTP APIs share: FastAPI's body validation, server-sent events, and
the OpenAI usage object, so that SGLang's and vLLM's route tables (specmon/backends/<name>/sim/)
answer these alike, byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import StreamingResponse

if TYPE_CHECKING:
    from specmon.sim.engine import SimRequest


class BadBody(Exception):
    """The body fails FastAPI's validation (each personality answers 400 with its own error object)."""


def _dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def sse(chunks: AsyncIterator[Any]) -> StreamingResponse:
    """Server-sent events as SGLang and vLLM stream them: ``data: {json}`` per chunk, then [DONE]."""

    async def events() -> AsyncIterator[str]:
        async for chunk in chunks:
            yield f"data: {_dumps(chunk)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


async def json_body(request: Request, *, require_json_type: bool = False) -> dict[str, Any]:
    """The body as FastAPI hands it to a handler, or BadBody with FastAPI's error list."""
    if require_json_type:  # SGLang's validate_json_request on the /v1 endpoints
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            raise BadBody(
                str(
                    [
                        {
                            "loc": ["header", "content-type"],
                            "msg": "Unsupported Media Type: Only 'application/json' is allowed",
                            "type": "value_error",
                        }
                    ]
                )
            )
    raw = await request.body()
    try:
        data = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadBody(
            str(
                [
                    {
                        "type": "json_invalid",
                        "loc": ("body", getattr(exc, "pos", 0)),
                        "msg": "JSON decode error",
                        "input": {},
                        "ctx": {"error": getattr(exc, "msg", str(exc))},
                    }
                ]
            )
        ) from None
    if not isinstance(data, dict):
        raise BadBody(
            str(
                [
                    {
                        "type": "model_attributes_type",
                        "loc": ("body",),
                        "msg": "Input should be a valid dictionary or object to extract "
                        "fields from",
                        "input": data,
                    }
                ]
            )
        )
    return data


def include_usage(data: dict[str, Any]) -> bool:
    """A streamed request asked for the final usage chunk (``stream_options.include_usage``)."""
    options = data.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


def openai_usage(request: SimRequest) -> dict[str, Any]:
    """The OpenAI ``usage`` object both servers send, in their key order (SGLang adds to it)."""
    return {
        "prompt_tokens": request.prompt_tokens,
        "total_tokens": request.prompt_tokens + request.completion_tokens,
        "completion_tokens": request.completion_tokens,
        "prompt_tokens_details": None,
    }

"""vLLM 0.33's HTTP API as the simulator's route table (vllm.md §5): /health (200 empty, 503
once the engine died), /ping, /version, /load, /v1/models, the OpenAI completions and chat
endpoints (plain and SSE-streamed at the simulated decode rate) and /metrics.

Errors are vLLM's ``{"error": {"message", "type", "param", "code"}}``, with ``param`` naming
the offending field and the message ending ``(parameter=..., value=...)`` where vLLM raises a
VLLMValidationError; unknown paths get FastAPI's ``{"detail": "Not Found"}``. Checked against a
real vLLM by tests/support/vllm_conformance.py.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from specmon.backends.vllm.sim.args import VLLM_VERSION
from specmon.sim.asgi import HttpExchange, build_app
from specmon.sim.engine import SimRequest
from specmon.sim.http import BadBody, include_usage, json_body, openai_usage, sse

if TYPE_CHECKING:
    from specmon.backends.vllm.sim.args import VllmLaunch
    from specmon.backends.vllm.sim.logs import VllmLogWriter
    from specmon.backends.vllm.sim.metrics import VllmMetrics
    from specmon.sim.engine import Engine


class VllmHost(Protocol):
    """What the handlers read of the simulated server (the server module is not imported:
    it builds this API, so importing it back would make a cycle)."""

    launch: VllmLaunch
    args: Any  # the parsed ``vllm serve`` command line
    engine: Engine
    engine_dead: bool
    max_model_len: int
    metrics: VllmMetrics | None
    writer: VllmLogWriter


CHAT_ANSWER_TOKENS = 256  # where a simulated chat answer ends (its EOS) without max_tokens
COMPLETION_DEFAULT_MAX_TOKENS = 16  # vLLM's (OpenAI's) default for /v1/completions


def vllm_error(
    message: str, kind: str = "BadRequestError", status: int = 400, param: str | None = None
) -> Response:
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return JSONResponse(body, status)


def validation_error(message: str, parameter: str, value: Any = None) -> Response:
    """A VLLMValidationError as vLLM answers it: 400, ``param`` set, and the parameter (and
    value) appended to the message."""
    extras = [f"parameter={parameter}"] + ([] if value is None else [f"value={value}"])
    return vllm_error(f"{message} ({', '.join(extras)})", param=parameter)


def system_fingerprint(tp: int, command: str) -> str:
    """vLLM's default (``--fingerprint-mode full``) ``vllm-<version>[-tpN]-<hash8>``, the hash
    (of the config in vLLM) here of the command line."""
    parts = [f"vllm-{VLLM_VERSION}"] + ([f"tp{tp}"] if tp > 1 else [])
    return "-".join([*parts, hashlib.sha256(command.encode()).hexdigest()[:8]])


def _engine_dead() -> Response:
    return vllm_error(
        "EngineCore encountered an issue. See stack trace (above) for the root cause.",
        "InternalServerError",
        500,
    )


def _prompt_tokens(prompt: Any) -> int:
    if isinstance(prompt, list):
        return sum(
            len(p)
            if isinstance(p, list)
            else len(str(p).split()) * 4 // 3 + 1
            if not isinstance(p, int)
            else 1
            for p in prompt
        )
    return len(str(prompt).split()) * 4 // 3 + 1


class VllmApi:
    """The handlers, one instance per simulated server."""

    def __init__(self, host: VllmHost) -> None:
        self.host = host

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/health", self.health, methods=["GET"]),
            Route("/ping", self.health, methods=["GET", "POST"]),
            Route("/load", self.load, methods=["GET"]),
            Route("/version", self.version, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
        ]

    def route_listing(self) -> list[tuple[str, str]]:
        """The `Route: PATH, Methods: ...` lines vLLM prints at start-up."""
        listing = []
        for route in self.routes():
            assert isinstance(route, Route)
            methods = ", ".join(sorted(m for m in route.methods or () if m != "HEAD"))
            listing.append((route.path, methods))
        return listing

    def _count_response(self, exchange: HttpExchange) -> None:
        if self.host.metrics is not None:
            self.host.metrics.http_request_done(exchange)

    def app(self) -> ASGIApp:
        return build_app(self.routes(), self.host.writer, on_response=self._count_response)

    # --- plain endpoints ------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return Response(status_code=503 if self.host.engine_dead else 200)

    async def load(self, request: Request) -> Response:
        engine = self.host.engine
        return JSONResponse({"server_load": len(engine.running) + len(engine.waiting)})

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": VLLM_VERSION})

    async def metrics(self, request: Request) -> Response:
        body = b"" if self.host.metrics is None else self.host.metrics.render(self.host.engine)
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    async def models(self, request: Request) -> Response:
        launch = self.host.launch
        card = {
            "id": launch.served_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "vllm",
            "root": launch.model,
            "parent": None,
            "max_model_len": self.host.max_model_len,
            "permission": [
                {
                    "id": f"modelperm-{uuid.uuid4().hex}",
                    "object": "model_permission",
                    "created": int(time.time()),
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        return JSONResponse({"object": "list", "data": [card]})

    # --- generation -----------------------------------------------------------------------

    def _check_model(self, data: dict[str, Any]) -> Response | None:
        model = data.get("model")
        names = self.host.args.served_model_name or [self.host.launch.model]
        if model is not None and model not in names:
            return vllm_error(
                f"The model `{model}` does not exist. Valid aliases: {', '.join(names)}.",
                "NotFoundError",
                404,
                param="model",
            )
        return None

    @property
    def fingerprint(self) -> str:
        launch = self.host.launch
        return system_fingerprint(launch.tp, " ".join(map(str, vars(self.host.args).values())))

    def _submit(
        self, prompt_tokens: int, max_tokens: Any, *, stream: Any = False, ends_itself: bool = False
    ) -> SimRequest | Response:
        """Queue a request; vLLM 0.33's checks: max_tokens >= 1 and <= max_model_len (else
        400), a prompt longer than the context refused, max_tokens clamped to the room left.
        ``ends_itself``: a chat answer without max_tokens, which stops at its own end (its
        ``max_tokens`` is then where, and the request had no max_tokens parameter)."""
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            return validation_error(
                f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens", max_tokens
            )
        limit = self.host.max_model_len
        if max_tokens > limit:
            return validation_error(
                f"max_tokens={max_tokens} cannot be greater than max_model_len={limit}. "
                "Please request fewer output tokens.",
                "max_tokens",
                max_tokens,
            )
        if prompt_tokens > limit:
            return validation_error(
                f"This model's maximum context length is {limit} tokens. However, your prompt "
                f"contains {prompt_tokens} input tokens, which exceeds this limit even without "
                "any output tokens. Please reduce the length of the input prompt.",
                "input_tokens",
                prompt_tokens,
            )
        request = SimRequest(
            rid=uuid.uuid4().hex,
            prompt_tokens=max(1, prompt_tokens),
            max_new_tokens=max(1, min(max_tokens, limit - prompt_tokens)),
            finish_reason="stop" if ends_itself else "length",
            max_tokens_param=None if ends_itself else max_tokens,
            streaming=bool(stream),
        )
        self.host.engine.submit(request)
        return request

    async def _body(self, http_request: Request, required: str) -> dict[str, Any] | Response:
        if self.host.engine_dead:
            return _engine_dead()
        try:
            data = await json_body(http_request)
        except BadBody as exc:
            return vllm_error(str(exc))
        if (
            required == "prompt"
            and data.get("prompt") in (None, "")
            and not data.get("prompt_embeds")
        ):
            return validation_error(
                "Either prompt or prompt_embeds must be provided and non-empty.", "prompt"
            )
        if required not in data:
            return vllm_error(
                f"[{{'type': 'missing', 'loc': ('body', '{required}'), 'msg': 'Field required'}}]"
            )
        return self._check_model(data) or data

    def _finish_reason(self, request: SimRequest, chat_eos: bool) -> str:
        return "stop" if chat_eos else "length"

    async def completions(self, http_request: Request) -> Response:
        data = await self._body(http_request, "prompt")
        if isinstance(data, Response):
            return data
        max_tokens = data.get("max_tokens")
        submitted = self._submit(
            _prompt_tokens(data["prompt"]),
            COMPLETION_DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
            stream=data.get("stream"),
        )
        if isinstance(submitted, Response):
            return submitted
        request = submitted
        rid, created, model = f"cmpl-{request.rid}", int(time.time()), self.host.launch.served_name

        def body(text: str, finish: str | None) -> dict[str, Any]:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
                "prompt_token_ids": None,
                "token_ids": None,
            }
            return {
                "id": rid,
                "object": "text_completion",
                "created": created,
                "model": model,
                "choices": [choice],
            }

        if not data.get("stream"):
            await request.done.wait()
            if self.host.engine_dead:
                return _engine_dead()
            full = body(request.text(), "length")
            full["choices"][0] |= {"prompt_logprobs": None, "routed_experts": None}
            usage = openai_usage(request) | {"completion_tokens_details": None}
            return JSONResponse(
                full
                | {
                    "service_tier": None,
                    "system_fingerprint": self.fingerprint,
                    "usage": usage,
                    "kv_transfer_params": None,
                    "ec_transfer_params": None,
                    "metrics": None,
                }
            )

        async def chunks() -> AsyncIterator[dict[str, Any]]:
            sent = ""
            async for finished in request.cycles():
                if self.host.engine_dead:
                    yield {
                        "error": {
                            "message": "EngineCore encountered an issue.",
                            "type": "InternalServerError",
                            "param": None,
                            "code": 500,
                        }
                    }
                    return
                text = request.text()
                delta, sent = text[len(sent) :], text
                yield body(delta, "length" if finished else None)
            if include_usage(data):  # the usage chunk: no prompt_tokens_details, fingerprint
                usage = openai_usage(request)
                del usage["prompt_tokens_details"]
                yield body("", None) | {
                    "choices": [],
                    "usage": usage,
                    "system_fingerprint": self.fingerprint,
                }

        return sse(chunks())

    async def chat(self, http_request: Request) -> Response:
        data = await self._body(http_request, "messages")
        if isinstance(data, Response):
            return data
        messages = data["messages"]
        if not isinstance(messages, list) or not messages:
            return vllm_error("messages must be a non-empty list")
        words = sum(
            len(str(m.get("content", "")).split()) if isinstance(m, dict) else 0 for m in messages
        )
        max_tokens = data.get("max_completion_tokens", data.get("max_tokens"))
        chat_eos = max_tokens is None
        submitted = self._submit(
            words * 4 // 3 + 8,
            CHAT_ANSWER_TOKENS if chat_eos else max_tokens,
            stream=data.get("stream"),
            ends_itself=chat_eos,
        )
        if isinstance(submitted, Response):
            return submitted
        request = submitted
        rid, created = f"chatcmpl-{request.rid}", int(time.time())
        model = self.host.launch.served_name
        finish = "stop" if chat_eos else "length"

        def chunk(delta: dict[str, Any], finish_reason: str | None) -> dict[str, Any]:
            return {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "delta": delta,
                        "logprobs": None,
                        "finish_reason": finish_reason,
                        "stop_reason": None,
                    }
                ],
            }

        if not data.get("stream"):
            await request.done.wait()
            if self.host.engine_dead:
                return _engine_dead()
            return JSONResponse(
                {
                    "id": rid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {
                                "role": "assistant",
                                "content": request.text(),
                                "refusal": None,
                                "annotations": None,
                                "audio": None,
                                "function_call": None,
                                "tool_calls": [],
                                "reasoning_content": None,
                            },
                            "logprobs": None,
                            "finish_reason": finish,
                            "stop_reason": None,
                        }
                    ],
                    "service_tier": None,
                    "system_fingerprint": self.fingerprint,
                    "usage": openai_usage(request),
                    "prompt_logprobs": None,
                    "kv_transfer_params": None,
                }
            )

        async def chunks() -> AsyncIterator[dict[str, Any]]:
            yield chunk({"role": "assistant", "content": ""}, None)
            sent = ""
            async for finished in request.cycles():
                if self.host.engine_dead:
                    return
                text = request.text()
                delta, sent = text[len(sent) :], text
                if delta:
                    yield chunk({"content": delta}, None)
                if finished:
                    yield chunk({}, finish)
            if include_usage(data):
                yield chunk({}, None) | {"choices": [], "usage": openai_usage(request)}

        return sse(chunks())

"""SGLang's HTTP API as the simulator's route table: the paths, status codes, JSON shapes and
error bodies of SGLang's FastAPI server (sglang.md section 3) and streamed responses as SSE at
the simulated decode rate.

Errors are SGLang's: ``{"error": {"message"}}`` for a /generate the tokenizer rejects, the
OpenAI ``{"object": "error", "message", "type", "param", "code"}`` for the /v1 endpoints and
for bodies that fail validation, FastAPI's ``{"detail": ...}`` for unknown paths and methods.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from http import HTTPStatus
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from specmon.backends.sglang.sim.args import SimLaunch
from specmon.backends.sglang.sim.metrics import SimMetrics
from specmon.sim.asgi import HttpExchange, build_app
from specmon.sim.engine import Engine, SimRequest
from specmon.sim.http import BadBody, include_usage, json_body, openai_usage, sse
from specmon.sim.logwriter import LogWriter
from specmon.sim.perf import SpecSettings

FLUSH_CACHE_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)


class SGLangHost(Protocol):
    """What SGLang's HTTP server reads from the simulated server behind it."""

    status: str  # starting -> ready -> shutting_down
    engine: Engine
    metrics: SimMetrics | None
    writer: LogWriter
    settings: SpecSettings
    launch: SimLaunch
    health_check_timeout: float
    last_heartbeat: float
    context_len: int

    def server_info(self) -> dict[str, Any]: ...

    def model_info(self) -> dict[str, Any]: ...

    async def wait_forever(self) -> None: ...


def openai_error(message: str, kind: str = "BadRequestError", status: int = 400) -> Response:
    """OpenAIServingBase.create_error_response's body (``type`` "Bad Request" for bodies that
    fail validation, as SGLang's RequestValidationError handler writes it)."""
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return JSONResponse(body, status)


def generate_error(message: str) -> Response:
    """/generate's answer when the tokenizer manager raises ValueError."""
    return JSONResponse({"error": {"message": message}}, 400)


def _missing(field: str, data: dict[str, Any]) -> BadBody:
    return BadBody(
        str([{"type": "missing", "loc": ("body", field), "msg": "Field required", "input": data}])
    )


class SGLangApi:
    """The handlers, one instance per simulated server."""

    def __init__(self, host: SGLangHost) -> None:
        self.host = host

    # --- the route table -------------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        table = [
            Route("/health", self.health, methods=["GET"]),
            Route("/health_generate", self.health, methods=["GET"]),
            Route("/model_info", self.model_info, methods=["GET"]),
            Route("/get_model_info", self.model_info, methods=["GET"]),
            Route("/server_info", self.server_info, methods=["GET"]),
            Route("/get_server_info", self.server_info, methods=["GET"]),
            Route("/flush_cache", self.flush_cache, methods=["GET", "POST"]),
            Route("/generate", self.generate, methods=["POST", "PUT"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
        ]
        if self.host.launch.args.enable_metrics:  # without it /metrics is a 404
            table.append(Route("/metrics", self.metrics, methods=["GET"]))
        return table

    def _count_request(self, method: str, path: str) -> None:
        if self.host.metrics is not None:
            self.host.metrics.http_request_started(method, path)

    def _count_response(self, exchange: HttpExchange) -> None:
        if self.host.metrics is not None:
            self.host.metrics.http_request_done(exchange)

    def app(self) -> ASGIApp:
        return build_app(
            self.routes(),
            self.host.writer,
            on_request=self._count_request,
            on_response=self._count_response,
        )

    # --- plain endpoints -------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        host = self.host
        if host.status != "ready":
            return Response(status_code=503)
        if host.engine.hung:
            await asyncio.sleep(host.health_check_timeout)
            host.writer.main(
                "Health check failed. Server couldn't get a response from detokenizer for last "
                f"{host.health_check_timeout:g} seconds. tic start time: "
                f"{time.time() - host.health_check_timeout:.2f}. last_heartbeat time: "
                f"{host.last_heartbeat:.2f}"
            )
            return Response(status_code=503)
        await asyncio.sleep(0.005)  # the 1-token health generation through the scheduler
        return Response(status_code=200)

    async def model_info(self, request: Request) -> Response:
        return JSONResponse(self.host.model_info())

    async def server_info(self, request: Request) -> Response:
        if self.host.engine.hung:  # the scheduler does not answer get_internal_state
            await self.host.wait_forever()
        return JSONResponse(self.host.server_info())

    async def metrics(self, request: Request) -> Response:
        assert self.host.metrics is not None
        return Response(
            self.host.metrics.render(self.host.engine),
            media_type="text/plain; version=0.0.4; charset=utf-8",
        )

    async def flush_cache(self, request: Request) -> Response:
        busy = bool(self.host.engine.running or self.host.engine.waiting)
        return Response(FLUSH_CACHE_TEXT, status_code=400 if busy else 200)

    def _model_name(self, data: dict[str, Any] | None = None) -> str:
        """The model the OpenAI endpoints name: the request's, else the served name."""
        requested = (data or {}).get("model")
        if isinstance(requested, str) and requested:
            return requested
        args = self.host.launch.args
        return args.served_model_name or args.model_path

    async def models(self, request: Request) -> Response:
        name = self._model_name()
        card = {
            "id": name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sglang",
            "root": name,
            "max_model_len": self.host.context_len,
        }
        return JSONResponse({"object": "list", "data": [card]})

    # --- generation ------------------------------------------------------------------------

    def _submit(
        self, prompt_tokens: int, params: dict[str, Any], rid: Any, stream: Any = False
    ) -> SimRequest:
        """Queue a request (ValueError with SGLang's message for bad sampling params)."""
        max_new = params.get("max_new_tokens", params.get("max_tokens", 128))
        if max_new is None:
            max_new = 128
        if not isinstance(max_new, int) or isinstance(max_new, bool):
            raise ValueError("max_new_tokens must be an integer.")
        if max_new < 0:
            raise ValueError(f"max_new_tokens must be at least 0, got {max_new}.")
        request = SimRequest(
            rid=str(rid) if rid else uuid.uuid4().hex,
            prompt_tokens=max(1, prompt_tokens),
            max_new_tokens=max_new,
            max_tokens_param=max_new,
            streaming=bool(stream),
        )
        self.host.engine.submit(request)
        return request

    def _meta_info(self, request: SimRequest, finished: bool) -> dict[str, Any]:
        host = self.host
        meta: dict[str, Any] = {
            "id": request.rid,
            "finish_reason": (
                {"type": "length", "length": request.completion_tokens} if finished else None
            ),
            "prompt_tokens": request.prompt_tokens,
            "weight_version": "default",
            "total_retractions": 0,
            "completion_tokens": request.completion_tokens,
            "cached_tokens": 0,
            "e2e_latency": round(time.time() - request.created, 6),
        }
        settings = host.settings
        if settings.speculative:
            verify_ct = max(1, request.verify_ct)
            drafts = request.verify_ct * max(0, settings.num_draft_tokens - 1)
            meta.update(
                spec_accept_rate=round(request.accepted_drafts / drafts, 6) if drafts else 0.0,
                spec_accept_length=round(request.completion_tokens / verify_ct, 6),
                spec_accept_token_num=request.accepted_drafts,
                spec_draft_token_num=drafts,
                spec_verify_ct=request.verify_ct,
            )
        if host.metrics is not None:
            decode_s = (request.finished_at or time.time()) - (
                request.first_token_at or request.created
            )
            meta.update(
                queue_time=round(request.queue_time, 6),
                request_received_ts=request.created,
                decode_finished_ts=request.finished_at,
                inference_time=round((request.finished_at or time.time()) - request.created, 6),
                decode_throughput=(
                    round(request.completion_tokens / decode_s, 3) if decode_s > 0 else 0.0
                ),
            )
        return meta

    async def generate(self, http_request: Request) -> Response:
        try:
            data = await json_body(http_request)
        except BadBody as exc:
            return openai_error(str(exc), HTTPStatus.BAD_REQUEST.phrase)
        text, input_ids = data.get("text"), data.get("input_ids")
        params = data.get("sampling_params") or {}
        if not isinstance(params, dict):
            return openai_error(
                str(
                    [
                        {
                            "type": "dict_type",
                            "loc": ("body", "sampling_params"),
                            "msg": "Input should be a valid dictionary",
                            "input": params,
                        }
                    ]
                ),
                HTTPStatus.BAD_REQUEST.phrase,
            )
        try:
            if text is None and input_ids is None:
                raise ValueError("Either text, input_ids or input_embeds should be provided.")
            prompt_tokens = (
                len(input_ids)
                if isinstance(input_ids, list)
                else max(1, len(str(text).split()) * 4 // 3)
            )
            request = self._submit(prompt_tokens, params, data.get("rid"), data.get("stream"))
        except ValueError as exc:
            self.host.writer.main(f"[http_server] Error: {exc}")
            return generate_error(str(exc))
        if not data.get("stream"):
            await request.done.wait()
            return JSONResponse(
                {
                    "text": request.text(),
                    "output_ids": request.output_ids,
                    "meta_info": self._meta_info(request, True),
                }
            )

        async def chunks() -> AsyncIterator[dict[str, Any]]:
            async for finished in request.cycles():  # cumulative text, as SGLang sends
                yield {
                    "text": request.text(),
                    "output_ids": list(request.output_ids),
                    "meta_info": self._meta_info(request, finished),
                }

        return sse(chunks())

    @staticmethod
    def _usage(request: SimRequest) -> dict[str, Any]:
        return openai_usage(request) | {"reasoning_tokens": 0}

    async def completions(self, http_request: Request) -> Response:
        """/v1/completions (``text_completion``), plain and streamed."""
        try:
            data = await json_body(http_request, require_json_type=True)
            if "prompt" not in data:
                raise _missing("prompt", data)
        except BadBody as exc:
            return openai_error(str(exc), HTTPStatus.BAD_REQUEST.phrase)
        prompt = data["prompt"]
        if not prompt:
            return openai_error("Prompt cannot be empty")
        if isinstance(prompt, list):
            prompt_tokens = sum(
                len(p) if isinstance(p, list) else len(str(p).split()) * 4 // 3 for p in prompt
            )
        else:
            prompt_tokens = len(str(prompt).split()) * 4 // 3
        try:
            request = self._submit(
                prompt_tokens,
                {"max_tokens": data.get("max_tokens", 16)},
                None,
                data.get("stream"),
            )
        except ValueError as exc:
            return openai_error(str(exc))
        created = int(time.time())
        model = self._model_name(data)

        def body(text: str, finish: str | None, usage: Any = None) -> dict[str, Any]:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish,
                "matched_stop": None,
            }
            return {
                "id": request.rid,
                "object": "text_completion",
                "created": created,
                "model": model,
                "choices": [choice],
                "usage": usage,
            }

        if not data.get("stream"):
            await request.done.wait()
            return JSONResponse(
                body(request.text(), "length", self._usage(request))
                | {"metadata": {"weight_version": "default"}}
            )

        async def chunks() -> AsyncIterator[dict[str, Any]]:
            sent = ""
            async for finished in request.cycles():
                text = request.text()
                delta, sent = text[len(sent) :], text
                yield body(delta, "length" if finished else None)
            if include_usage(data):
                yield body("", None, self._usage(request)) | {"choices": []}

        return sse(chunks())

    async def chat(self, http_request: Request) -> Response:
        """/v1/chat/completions (``chat.completion`` / ``chat.completion.chunk``)."""
        try:
            data = await json_body(http_request, require_json_type=True)
            if "messages" not in data:
                raise _missing("messages", data)
        except BadBody as exc:
            return openai_error(str(exc), HTTPStatus.BAD_REQUEST.phrase)
        messages = data["messages"]
        if not isinstance(messages, list) or not messages:
            return openai_error("Messages cannot be empty.")
        words = 0
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):  # multimodal parts: text and images
                words += sum(
                    len(str(p.get("text", ""))) // 4 + (256 if p.get("type") == "image_url" else 0)
                    for p in content
                    if isinstance(p, dict)
                )
            else:
                words += len(str(content or "").split())
        try:
            request = self._submit(words * 4 // 3 + 8, data, None, data.get("stream"))
        except ValueError as exc:
            return openai_error(str(exc))
        created = int(time.time())
        model = self._model_name(data)

        def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
            return {
                "id": request.rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "role": None,
                            "content": None,
                            "reasoning_content": None,
                            "tool_calls": None,
                        }
                        | delta,
                        "logprobs": None,
                        "finish_reason": finish,
                        "matched_stop": None,
                    }
                ],
                "usage": None,
            }

        if not data.get("stream"):
            await request.done.wait()
            return JSONResponse(
                {
                    "id": request.rid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {
                                "role": "assistant",
                                "content": request.text(),
                                "reasoning_content": None,
                                "tool_calls": None,
                            },
                            "logprobs": None,
                            "finish_reason": "length",
                            "matched_stop": None,
                        }
                    ],
                    "usage": self._usage(request),
                    "metadata": {"weight_version": "default"},
                }
            )

        async def chunks() -> AsyncIterator[dict[str, Any]]:
            yield chunk({"role": "assistant", "content": ""}, None)
            sent = ""
            async for _ in request.cycles():
                text = request.text()
                delta, sent = text[len(sent) :], text
                if delta:
                    yield chunk({"content": delta}, None)
            yield chunk({}, "length")
            if include_usage(data):
                yield chunk({}, None) | {"choices": [], "usage": self._usage(request)}

        return sse(chunks())

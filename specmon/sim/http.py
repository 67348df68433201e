"""SGLang's HTTP API on asyncio streams: same paths, status codes and JSON shapes
(sglang.md section 3), uvicorn-style access lines, SSE streaming at the simulated rate."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from specmon.sim.engine import SimRequest

if TYPE_CHECKING:
    from specmon.sim.server import SimServer

MAX_HEADER_BYTES = 65536
MAX_BODY_BYTES = 16 * 1024 * 1024
KEEPALIVE_TIMEOUT_S = 5.0  # uvicorn's default


@dataclass
class HttpRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body or b"{}")


class BadRequest(Exception):
    pass


async def read_request(reader: asyncio.StreamReader) -> HttpRequest | None:
    """One request off a keep-alive connection; None when the client closed it."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), KEEPALIVE_TIMEOUT_S)
    except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError):
        return None
    except asyncio.LimitOverrunError as exc:
        raise BadRequest("header too large") from exc
    if len(head) > MAX_HEADER_BYTES:
        raise BadRequest("header too large")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise BadRequest("bad request line")
    method, target, _ = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError as exc:
        raise BadRequest("bad content-length") from exc
    if length < 0 or length > MAX_BODY_BYTES:
        raise BadRequest("bad content-length")
    body = await reader.readexactly(length) if length else b""
    path, _, query = target.partition("?")
    return HttpRequest(method.upper(), path, query, headers, body)


class HttpApi:
    """Routes requests to the simulated server; one instance per server."""

    def __init__(self, server: SimServer) -> None:
        self.server = server
        self._tcp: asyncio.base_events.Server | None = None
        self.active = 0

    async def start(self, host: str, port: int) -> None:
        self._tcp = await asyncio.start_server(
            self._serve_connection, host, port, limit=MAX_HEADER_BYTES, reuse_address=True
        )

    async def close(self) -> None:
        if self._tcp is not None:
            self._tcp.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._tcp.wait_closed(), 1.0)

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        peer = writer.get_extra_info("peername") or ("127.0.0.1", 0)
        client = f"{peer[0]}:{peer[1]}"
        try:
            while True:
                try:
                    request = await read_request(reader)
                except (BadRequest, asyncio.IncompleteReadError):
                    await self._send(writer, 400, b"Invalid HTTP request received.", "text/plain")
                    break
                if request is None:
                    break
                keep_alive = request.headers.get("connection", "").lower() != "close"
                self.active += 1
                try:
                    status = await self._dispatch(request, writer)
                finally:
                    self.active -= 1
                self.server.writer.access(
                    client, request.method, request.path, status, HTTPStatus(status).phrase
                )
                if not keep_alive:
                    break
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    # --- responses -------------------------------------------------------------------------

    @staticmethod
    async def _send(
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        content_type: str = "application/json",
    ) -> int:
        head = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
            f"date: {time.strftime('%a, %d %b %Y %H:%M:%S GMT', time.gmtime())}\r\n"
            "server: uvicorn\r\n"
            f"content-length: {len(body)}\r\n"
            f"content-type: {content_type}\r\n\r\n"
        )
        writer.write(head.encode("latin-1") + body)
        await writer.drain()
        return status

    async def _send_json(self, writer: asyncio.StreamWriter, status: int, data: Any) -> int:
        return await self._send(writer, status, json.dumps(data).encode())

    async def _error(self, writer: asyncio.StreamWriter, status: int, message: str) -> int:
        return await self._send_json(
            writer,
            status,
            {"object": "error", "message": message, "type": "BadRequest", "code": status},
        )

    async def _dispatch(self, request: HttpRequest, writer: asyncio.StreamWriter) -> int:
        server = self.server
        if server.metrics is not None:
            server.metrics.http_requests.labels(method=request.method, path=request.path).inc()
        route = (request.method, request.path)
        if request.path in ("/health", "/health_generate") and request.method == "GET":
            return await self._health(writer)
        if route in (("GET", "/model_info"), ("GET", "/get_model_info")):
            return await self._send_json(writer, 200, server.model_info())
        if route in (("GET", "/server_info"), ("GET", "/get_server_info")):
            if server.engine.hung:
                await server.wait_forever()
            return await self._send_json(writer, 200, server.server_info())
        if route == ("GET", "/metrics"):
            if server.metrics is None:
                return await self._send(writer, 404, b'{"detail":"Not Found"}')
            return await self._send(
                writer,
                200,
                server.metrics.render(server.engine),
                "text/plain; version=0.0.4; charset=utf-8",
            )
        if request.path == "/flush_cache" and request.method in ("GET", "POST"):
            if server.engine.running or server.engine.waiting:
                return await self._send(
                    writer, 400, b"Cache not flushed. Requests are running.\n", "text/plain"
                )
            return await self._send(
                writer,
                200,
                b"Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n",
                "text/plain",
            )
        if route == ("POST", "/generate"):
            return await self._generate(request, writer)
        if route == ("POST", "/v1/chat/completions"):
            return await self._chat(request, writer)
        if request.path in (
            "/health",
            "/model_info",
            "/server_info",
            "/get_server_info",
            "/generate",
            "/v1/chat/completions",
        ):
            return await self._send(writer, 405, b'{"detail":"Method Not Allowed"}')
        return await self._send(writer, 404, b'{"detail":"Not Found"}')

    async def _health(self, writer: asyncio.StreamWriter) -> int:
        server = self.server
        if server.status != "ready":
            return await self._send(writer, 503, b"", "text/plain")
        if server.engine.hung:
            await asyncio.sleep(server.health_check_timeout)
            server.writer.main(
                "Health check failed. Server couldn't get a response from detokenizer for last "
                f"{server.health_check_timeout:g} seconds. tic start time: "
                f"{time.time() - server.health_check_timeout:.2f}. last_heartbeat time: "
                f"{server.last_heartbeat:.2f}"
            )
            return await self._send(writer, 503, b"", "text/plain")
        await asyncio.sleep(0.005)  # the 1-token health generation through the scheduler
        return await self._send(writer, 200, b"", "text/plain")

    # --- generation ------------------------------------------------------------------------

    def _new_request(
        self, prompt_tokens: int, params: dict[str, Any], rid: str | None
    ) -> SimRequest:
        max_new = params.get("max_new_tokens", params.get("max_tokens", 128))
        if not isinstance(max_new, int) or isinstance(max_new, bool) or max_new < 0:
            raise ValueError("max_new_tokens must be a non-negative integer")
        return SimRequest(
            rid=rid or uuid.uuid4().hex,
            prompt_tokens=max(1, prompt_tokens),
            max_new_tokens=max_new,
        )

    def _meta_info(self, request: SimRequest, finished: bool) -> dict[str, Any]:
        server = self.server
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
        settings = server.settings
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
        if server.metrics is not None:
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

    async def _read_json(self, request: HttpRequest) -> dict[str, Any]:
        try:
            data = request.json()
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"invalid JSON body: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError("the JSON body must be an object")
        return data

    async def _generate(self, http_request: HttpRequest, writer: asyncio.StreamWriter) -> int:
        try:
            data = await self._read_json(http_request)
            text = data.get("text")
            input_ids = data.get("input_ids")
            if text is None and input_ids is None:
                raise ValueError("Either text or input_ids should be provided.")
            prompt_tokens = (
                len(input_ids)
                if isinstance(input_ids, list)
                else max(1, len(str(text).split()) * 4 // 3)
            )
            params = data.get("sampling_params") or {}
            if not isinstance(params, dict):
                raise ValueError("sampling_params must be an object")
            request = self._new_request(prompt_tokens, params, data.get("rid"))
        except ValueError as exc:
            return await self._error(writer, 400, str(exc))
        self.server.engine.submit(request)
        if not data.get("stream"):
            await request.done.wait()
            return await self._send_json(
                writer,
                200,
                {
                    "text": request.text(),
                    "output_ids": request.output_ids,
                    "meta_info": self._meta_info(request, True),
                },
            )

        async def chunks() -> Any:
            while True:
                finished = await request.updates.get()
                finished = finished or request.done.is_set()
                yield {
                    "text": request.text(),
                    "output_ids": list(request.output_ids),
                    "meta_info": self._meta_info(request, finished),
                }
                if finished:
                    return

        return await self._stream(writer, chunks())

    async def _chat(self, http_request: HttpRequest, writer: asyncio.StreamWriter) -> int:
        try:
            data = await self._read_json(http_request)
            messages = data.get("messages")
            if not isinstance(messages, list) or not messages:
                raise ValueError("messages must be a non-empty list")
            words = 0
            for message in messages:
                content = message.get("content") if isinstance(message, dict) else None
                if isinstance(content, list):  # multimodal parts: text and images
                    words += sum(
                        len(str(p.get("text", ""))) // 4
                        + (256 if p.get("type") == "image_url" else 0)
                        for p in content
                        if isinstance(p, dict)
                    )
                else:
                    words += len(str(content or "").split())
            request = self._new_request(words * 4 // 3 + 8, data, None)
        except ValueError as exc:
            return await self._error(writer, 400, str(exc))
        server = self.server
        chat_id = uuid.uuid4().hex
        created = int(time.time())
        server.engine.submit(request)
        if not data.get("stream"):
            await request.done.wait()
            usage = {
                "prompt_tokens": request.prompt_tokens,
                "total_tokens": request.prompt_tokens + request.completion_tokens,
                "completion_tokens": request.completion_tokens,
                "prompt_tokens_details": None,
                "reasoning_tokens": 0,
            }
            return await self._send_json(
                writer,
                200,
                {
                    "id": chat_id,
                    "object": "chat.completion",
                    "created": created,
                    "model": server.launch.args.served_model_name or server.launch.args.model_path,
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
                    "usage": usage,
                    "metadata": {"weight_version": "default"},
                },
            )

        async def chunks() -> Any:
            sent = ""
            while True:
                finished = await request.updates.get()
                finished = finished or request.done.is_set()
                text = request.text()
                delta, sent = text[len(sent) :], text
                yield {
                    "id": chat_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": server.launch.args.served_model_name or server.launch.args.model_path,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": delta},
                            "logprobs": None,
                            "finish_reason": "length" if finished else None,
                            "matched_stop": None,
                        }
                    ],
                }
                if finished:
                    return

        return await self._stream(writer, chunks())

    async def _stream(self, writer: asyncio.StreamWriter, chunks: Any) -> int:
        """Server-sent events with chunked transfer encoding, as StreamingResponse sends them."""
        head = (
            "HTTP/1.1 200 OK\r\n"
            f"date: {time.strftime('%a, %d %b %Y %H:%M:%S GMT', time.gmtime())}\r\n"
            "server: uvicorn\r\n"
            "content-type: text/event-stream; charset=utf-8\r\n"
            "transfer-encoding: chunked\r\n\r\n"
        )
        writer.write(head.encode("latin-1"))

        def chunk(payload: bytes) -> bytes:
            return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"

        async for item in chunks:
            writer.write(chunk(b"data: " + json.dumps(item).encode() + b"\n\n"))
            await writer.drain()
        writer.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        return 200

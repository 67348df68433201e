"""The simulator's HTTP as the real servers' stack (starlette on uvicorn) behaves: keep-alive,
SSE streamed chunk by chunk, SGLang's error bodies, uvicorn's lines, a clean stop (the generic
app/serving seam another personality builds on: tests/unit/sim/test_sim_asgi.py)."""

from __future__ import annotations

import itertools
import json
import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from support.sim import REPO_ROOT, start_sim

ACCESS = re.compile(r'INFO:     127\.0\.0\.1:(\d+) - "(\w+) (\S+) HTTP/1\.1" (\d+) ')


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("sim-http")
    with start_sim(workdir, args=["--tp", "2"], time_scale=0.002) as process:
        process.wait_ready()
        yield process


def access_lines(text: str) -> list[tuple[int, str, str, int]]:
    return [(int(p), m, path, int(s)) for p, m, path, s in ACCESS.findall(text)]


def test_keep_alive_two_requests_share_one_connection(sim):
    with httpx.Client(base_url=sim.url("")) as client:
        first = client.get("/health")
        second = client.get("/model_info?probe=1")
    assert first.status_code == 200 and second.status_code == 200
    assert first.headers["server"] == "uvicorn" and "date" in first.headers
    assert first.headers.get("connection", "keep-alive") != "close"
    lines = access_lines(sim.wait_for_log('"GET /model_info?probe=1 HTTP/1.1" 200 OK'))
    health = [port for port, _, path, _ in lines if path == "/health"][-1]
    probe = [port for port, _, path, _ in lines if path == "/model_info?probe=1"][-1]
    assert health == probe  # the same client port: one TCP connection


def stream_events(url: str, body: dict) -> tuple[list[str], list[float]]:
    """The SSE ``data:`` payloads and when each arrived (seconds since the request)."""
    payloads: list[str] = []
    arrivals: list[float] = []
    started = time.monotonic()
    with httpx.stream("POST", url, json=body, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert response.headers.get("transfer-encoding") == "chunked"
        for line in response.iter_lines():
            if line.startswith("data: "):
                payloads.append(line[6:])
                arrivals.append(time.monotonic() - started)
            else:
                assert line == ""  # events are separated by one blank line
    return payloads, arrivals


def assert_incremental(arrivals: list[float], tokens: int) -> None:
    """Chunks come as the simulated decode makes them (~75 tok/s), not in one lump."""
    assert len(arrivals) >= 6
    assert arrivals[-1] - arrivals[0] > 0.5 * tokens / 100
    assert len({round(t, 2) for t in arrivals}) >= len(arrivals) // 2


def test_generate_streams_cumulative_chunks_then_done(sim):
    tokens = 40
    payloads, arrivals = stream_events(
        sim.url("/generate"),
        {"text": "Hi", "sampling_params": {"max_new_tokens": tokens}, "stream": True},
    )
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert_incremental(arrivals[:-1], tokens)
    texts = [c["text"] for c in chunks]
    assert all(b.startswith(a) for a, b in itertools.pairwise(texts))  # cumulative
    assert [c["meta_info"]["finish_reason"] for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": tokens}
    assert len(chunks[-1]["output_ids"]) == tokens


def test_completions_stream_text_deltas_and_usage(sim):
    tokens = 40
    payloads, arrivals = stream_events(
        sim.url("/v1/completions"),
        {
            "model": "kimi",
            "prompt": "Once upon a time",
            "max_tokens": tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert_incremental(arrivals[:-2], tokens)
    *deltas, usage = chunks
    assert {c["object"] for c in chunks} == {"text_completion"}
    assert {c["id"] for c in chunks} == {chunks[0]["id"]} and chunks[0]["model"] == "kimi"
    assert [c["choices"][0]["finish_reason"] for c in deltas][-1] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in deltas[:-1])
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == tokens
    whole = httpx.post(
        sim.url("/v1/completions"),
        json={"model": "kimi", "prompt": "Once", "max_tokens": 5},
        timeout=30,
    ).json()
    assert whole["object"] == "text_completion" and whole["usage"]["completion_tokens"] == 5
    assert whole["choices"][0]["finish_reason"] == "length" and whole["choices"][0]["text"]


def test_chat_streams_role_then_content_then_finish_and_usage(sim):
    tokens = 40
    payloads, arrivals = stream_events(
        sim.url("/v1/chat/completions"),
        {
            "model": "kimi",
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert_incremental(arrivals[1:-3], tokens)
    first, *content, finish, usage = chunks
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert first["choices"][0]["delta"]["role"] == "assistant"
    assert first["choices"][0]["delta"]["content"] == ""
    assert all(c["choices"][0]["delta"]["content"] for c in content)
    assert all(c["choices"][0]["finish_reason"] is None for c in [first, *content])
    assert finish["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == tokens
    assert usage["usage"]["total_tokens"] == tokens + usage["usage"]["prompt_tokens"]
    plain, _ = stream_events(
        sim.url("/v1/chat/completions"),
        {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "stream": True},
    )
    assert all(json.loads(p)["choices"] for p in plain[:-1])  # no usage chunk unless asked


def test_a_client_leaving_mid_stream_leaves_no_error_in_the_log(sim):
    body = {"text": "Hi", "sampling_params": {"max_new_tokens": 200}, "stream": True}
    with httpx.stream("POST", sim.url("/generate"), json=body, timeout=30) as response:
        for n, _ in enumerate(response.iter_lines()):
            if n == 4:
                break  # closes the connection with the response half sent
    assert httpx.get(sim.url("/health"), timeout=10).status_code == 200
    text = sim.log_text()
    assert "ERROR" not in text and "Traceback" not in text


def test_a_malformed_request_gets_uvicorns_400_and_warning_line(sim):
    with socket.create_connection(("127.0.0.1", sim.port), timeout=5) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):  # uvicorn closes the connection after its answer
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert answer.endswith(b"\r\n\r\nInvalid HTTP request received.")
    line = sim.wait_for_log("Invalid HTTP request received.").splitlines()[-1]
    assert re.fullmatch(r"\[[0-9-]+ [0-9:]+\] WARNING:  Invalid HTTP request received\.", line)


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "body"),
    [
        ("GET", "/nope", {}, 404, {"detail": "Not Found"}),
        ("POST", "/health", {}, 405, {"detail": "Method Not Allowed"}),
        ("DELETE", "/generate", {}, 405, {"detail": "Method Not Allowed"}),
        (
            "POST",
            "/generate",
            {"json": {"sampling_params": {"max_new_tokens": 4}}},
            400,
            {"error": {"message": "Either text, input_ids or input_embeds should be provided."}},
        ),
        (
            "POST",
            "/generate",
            {"json": {"text": "x", "sampling_params": {"max_new_tokens": -1}}},
            400,
            {"error": {"message": "max_new_tokens must be at least 0, got -1."}},
        ),
        (
            "POST",
            "/v1/chat/completions",
            {"json": {"model": "m", "messages": []}},
            400,
            {
                "object": "error",
                "message": "Messages cannot be empty.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            },
        ),
        (
            "POST",
            "/v1/completions",
            {"json": {"model": "m", "prompt": ""}},
            400,
            {
                "object": "error",
                "message": "Prompt cannot be empty",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            },
        ),
    ],
)
def test_error_bodies_are_sglangs(sim, method, path, kwargs, status, body):
    response = httpx.request(method, sim.url(path), timeout=10, **kwargs)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert response.json() == body


@pytest.mark.parametrize(
    ("path", "kwargs", "needle"),
    [
        ("/generate", {"content": b"{nope"}, "json_invalid"),
        ("/v1/chat/completions", {"json": {"model": "m"}}, "'loc': ('body', 'messages')"),
        ("/v1/chat/completions", {"content": b'{"messages": []}'}, "Unsupported Media Type"),
    ],
)
def test_invalid_bodies_get_the_validation_error_object(sim, path, kwargs, needle):
    response = httpx.post(sim.url(path), timeout=10, **kwargs)
    assert response.status_code == 400
    error = response.json()
    assert error["object"] == "error" and error["type"] == "Bad Request" and error["code"] == 400
    assert needle in error["message"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_server_and_frees_its_port(tmp_path, signum):
    """SIGINT: uvicorn's shutdown lines, exit 0; SIGTERM: SGLang's drain and kill_process_tree
    (exit -9). Either way, with a keep-alive client still connected, the port is free after."""
    with start_sim(tmp_path, args=["--tp", "2"], time_scale=0.002) as process:
        process.wait_ready()
        with httpx.Client(base_url=process.url("")) as client:  # an idle keep-alive client
            assert client.get("/health").status_code == 200
            process.proc.send_signal(signum)
            code = process.wait_exit(10)
        text = process.log_text()
        if signum == signal.SIGINT:
            assert code == 0
            tail = [line.split("] ", 1)[1] for line in text.splitlines()[-4:]]
            assert tail == [
                "INFO:     Shutting down",
                "INFO:     Waiting for application shutdown.",
                "INFO:     Application shutdown complete.",
                f"INFO:     Finished server process [{process.pid}]",
            ]
        else:
            assert code == -signal.SIGKILL
            assert "Gracefully exiting... Remaining number of requests 0." in text
        with socket.socket() as sock:  # the port is free again
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", process.port))
            sock.listen()


def test_port_in_use_is_uvicorns_one_error_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with start_sim(tmp_path, args=["--tp", "2", "--port", str(port)], time_scale=0) as sim:
            assert sim.wait_exit(20) == -signal.SIGKILL
            errors = [line for line in sim.log_text().splitlines() if "ERROR:" in line]
    assert len(errors) == 1
    assert errors[0].endswith(
        f"] ERROR:    [Errno 98] error while attempting to bind on address "
        f"('127.0.0.1', {port}): address already in use"
    )


def test_the_sglang_routes_do_not_import_the_server_module():
    """sim/http.py and sim/server.py used to import each other; the routes read the server
    through a Protocol now."""
    code = (
        "import sys, specmon.backends.sglang.sim.http, specmon.backends.sglang.sim.warmup, specmon.sim.asgi;"
        "print('specmon.backends.sglang.sim.server' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True
    )
    assert out.stdout.strip() == "False"

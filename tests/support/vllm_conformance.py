"""What any vLLM server must look like to specmon: one body for the real server and the
simulator's vLLM personality alike, so the simulator cannot drift from the real thing unnoticed.

    report = check_vllm_conformance(base_url, log_path, ready_timeout=600)

Call it on a server that was just started: it watches the endpoints while the server loads
(every one refuses the TCP connection: vLLM binds its socket but listens only once the engine
is ready, there is no 503 phase), then checks the ready endpoints (/health, /v1/models,
/version, /metrics: its metric names, their labels, the engine's sleep state), sends greedy
completions (vLLM's response shape and ``system_fingerprint``), checks the error shapes (an
unknown model, bad parameters and a missing prompt, each with the ``param`` vLLM names, an
unknown route), and reads the log with specmon's own
parser until the serving events appear (``decode`` from `Engine 000:` lines, ``spec_decode``
from `SpecDecoding metrics:` lines). Only what specmon relies on is checked; every value that
differs between a 2-core CPU and eight GPUs (timings, throughputs) is only type-checked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from specmon.backends.vllm import metrics as vllm_metrics
from specmon.backends.vllm.parser import VLLMLogParser
from specmon.model.events import Decode, Event, ServerError, SpecDecode

LOADING_ENDPOINTS = ("/health", "/v1/models", "/metrics", "/version")
# The start-up event kinds specmon's loading view is built from, in the order vLLM logs them.
# (CPU builds print no CUDA-graph lines; their compile phase is a warm-up, see docs/vllm.md.)
STARTUP_KINDS = ("load_begin", "shard_progress", "load_end", "kv_cache", "http_up", "ready")
REQUIRED_METRICS = (
    vllm_metrics.DRAFTS,
    vllm_metrics.DRAFT_TOKENS,
    vllm_metrics.ACCEPTED_TOKENS,
    vllm_metrics.ACCEPTED_PER_POSITION,
    vllm_metrics.GENERATION_TOKENS,
    vllm_metrics.PROMPT_TOKENS,
    vllm_metrics.RUNNING,
    vllm_metrics.WAITING,
    vllm_metrics.KV_CACHE_USAGE[0],
)
# The labels of the spec-decode counters (per engine, per served model; per position).
SPEC_DECODE_LABELS = {
    vllm_metrics.DRAFTS: {"engine", "model_name"},
    vllm_metrics.ACCEPTED_TOKENS: {"engine", "model_name"},
    vllm_metrics.ACCEPTED_PER_POSITION: {"engine", "model_name", "position"},
}
PROMPTS = (
    "The draft model verify",
    "Quick engine worker rank",
    "River stone cloud light north",
    "A request prompt speed rate",
)


@dataclass
class ConformanceReport:
    refused_while_loading: int = 0  # /health etc. probes refused before ready
    seconds_to_ready: float = 0.0
    model: str = ""
    metric_names: set[str] = field(default_factory=set)
    completions: int = 0
    events: list[Event] = field(default_factory=list)

    def kinds(self) -> list[str]:
        return [event.kind for event in self.events]


def wait_until_ready(
    base_url: str,
    timeout: float,
    report: ConformanceReport,
    alive: Callable[[], bool] | None = None,
) -> None:
    """Poll until /health is 200; before that every endpoint must refuse the connection.
    ``alive`` (where the caller owns the process) stops the wait when the server has died."""
    started = time.monotonic()
    deadline = started + timeout
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise AssertionError("the server exited before it was ready")
        try:
            health = httpx.get(f"{base_url}/health", timeout=5.0)
        except httpx.ConnectError:
            report.refused_while_loading += 1
            for path in LOADING_ENDPOINTS[1:]:
                status = _status_or_refused(f"{base_url}{path}")
                # 200: it became ready in between; anything else is a loading phase vLLM lacks
                assert status in (None, 200), f"{path} answered {status} while loading"
            time.sleep(0.5)
            continue
        assert health.status_code == 200, f"/health answered {health.status_code} while loading"
        report.seconds_to_ready = round(time.monotonic() - started, 1)
        return
    raise AssertionError(f"not ready within {timeout} s")


def _status_or_refused(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=5.0).status_code
    except httpx.ConnectError:
        return None


def check_ready_endpoints(base_url: str, report: ConformanceReport) -> None:
    health = httpx.get(f"{base_url}/health", timeout=10.0)
    assert (health.status_code, health.content) == (200, b"")
    models = httpx.get(f"{base_url}/v1/models", timeout=10.0).json()
    assert models["object"] == "list" and len(models["data"]) == 1
    card = models["data"][0]
    assert card["object"] == "model" and card["owned_by"] == "vllm"
    assert isinstance(card["id"], str) and isinstance(card["max_model_len"], int)
    report.model = card["id"]
    version = httpx.get(f"{base_url}/version", timeout=10.0).json()
    assert isinstance(version["version"], str) and version["version"][:1].isdigit()
    text = httpx.get(f"{base_url}/metrics", timeout=10.0).text
    report.metric_names = metric_names(text)
    missing = [name for name in REQUIRED_METRICS if name not in report.metric_names]
    assert not missing, f"/metrics lacks {missing}"
    snapshot = vllm_metrics.parse_metrics(text, at=time.monotonic())
    assert snapshot.spec_decode, "no spec-decode counters on /metrics"
    labels = metric_labels(text)
    for name, wanted in SPEC_DECODE_LABELS.items():
        assert labels[name] == wanted, f"{name} labelled {labels[name]}, not {wanted}"
    sleep = {
        line.split('sleep_state="', 1)[1].split('"', 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:engine_sleep_state{") and 'sleep_state="' in line
    }
    assert sleep == {"awake": 1.0, "weights_offloaded": 0.0, "discard_all": 0.0}, sleep


def metric_names(text: str) -> set[str]:
    """The sample names on a /metrics page (`name{labels} value` lines)."""
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return names


def metric_labels(text: str) -> dict[str, set[str]]:
    """Per sample name, the label names its samples carry."""
    labels: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" in line:
            name, rest = line.split("{", 1)
            keys = {pair.split("=", 1)[0] for pair in rest.rsplit("}", 1)[0].split('",') if pair}
            labels.setdefault(name, set()).update(keys)
    return labels


def complete(
    base_url: str, model: str, prompt: str | list[int], max_tokens: int = 48
) -> dict[str, object]:
    """One greedy completion (of text, or of token ids); its response must have vLLM's
    OpenAI shape."""
    response = httpx.post(
        f"{base_url}/v1/completions",
        json={
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
        },
        timeout=120.0,
    )
    assert response.status_code == 200, response.text[:500]
    body: dict[str, object] = response.json()
    assert body["object"] == "text_completion"
    usage = body["usage"]
    assert isinstance(usage, dict) and usage["completion_tokens"] == max_tokens
    fingerprint = body["system_fingerprint"]  # vLLM's default: vllm-<version>[-tpN]-<hash8>
    assert isinstance(fingerprint, str) and fingerprint.startswith("vllm-"), fingerprint
    choice = body["choices"][0]  # type: ignore[index]
    assert {"text", "finish_reason", "token_ids", "prompt_token_ids"} <= set(choice)
    return body


def check_error_shapes(base_url: str, model: str) -> None:
    """vLLM's OpenAI errors: `{"error": {"message", "type", "param", "code"}}`; a validation
    error names its parameter in ``param`` and ends its message with ``(parameter=...)``."""
    unknown = httpx.post(
        f"{base_url}/v1/completions",
        json={"model": "no-such-model", "prompt": "x", "max_tokens": 1},
        timeout=30.0,
    )
    assert unknown.status_code == 404
    error = unknown.json()["error"]
    assert error["code"] == 404 and error["type"] == "NotFoundError"
    assert error["message"] == (
        f"The model `no-such-model` does not exist. Valid aliases: {model}."
    ), error
    assert error["param"] == "model"
    bad = post_error(base_url, {"model": model, "prompt": "x", "max_tokens": -1})
    assert bad["param"] == "max_tokens"
    assert bad["message"].endswith("(parameter=max_tokens, value=-1)"), bad
    too_many = post_error(base_url, {"model": model, "prompt": "x", "max_tokens": 10**6})
    assert too_many["param"] == "max_tokens"
    assert "cannot be greater than max_model_len" in too_many["message"], too_many
    no_prompt = post_error(base_url, {"model": model, "max_tokens": 1})
    assert no_prompt["param"] == "prompt"
    assert no_prompt["message"].startswith("Either prompt or prompt_embeds must be provided")
    route = httpx.get(f"{base_url}/no/such/route", timeout=10.0)
    assert route.status_code == 404 and route.json() == {"detail": "Not Found"}


def post_error(base_url: str, body: dict[str, object]) -> dict[str, object]:
    """The error object of a completion request that must fail with 400 BadRequestError."""
    response = httpx.post(f"{base_url}/v1/completions", json=body, timeout=30.0)
    assert response.status_code == 400, response.text[:500]
    error: dict[str, object] = response.json()["error"]
    assert error["code"] == 400 and error["type"] == "BadRequestError", error
    assert isinstance(error["message"], str) and error["message"]
    return error


def read_log_events(log_path: Path) -> tuple[list[Event], VLLMLogParser]:
    parser = VLLMLogParser()
    events = parser.feed(log_path.read_bytes()) + parser.flush()
    return events, parser


def wait_for_kinds(log_path: Path, kinds: Iterable[str], timeout: float) -> list[Event]:
    """The log's events once every kind in ``kinds`` is among them (stats lines come every
    VLLM_LOG_STATS_INTERVAL seconds, after requests)."""
    wanted = set(kinds)
    deadline = time.monotonic() + timeout
    while True:
        events, parser = read_log_events(log_path)
        seen = {event.kind for event in events}
        if wanted <= seen:
            assert parser.unparsed_decode_like == 0, "stats lines that did not read"
            return events
        if time.monotonic() > deadline:
            raise AssertionError(f"log has no {sorted(wanted - seen)} after {timeout} s")
        time.sleep(0.5)


def check_vllm_conformance(
    base_url: str,
    log_path: Path,
    *,
    ready_timeout: float = 600.0,
    spec_tokens: int = 3,
    alive: Callable[[], bool] | None = None,
) -> ConformanceReport:
    """The whole body, on a server just started (see the module docstring)."""
    report = ConformanceReport()
    wait_until_ready(base_url, ready_timeout, report, alive)
    check_ready_endpoints(base_url, report)
    for prompt in PROMPTS:
        complete(base_url, report.model, prompt)
        report.completions += 1
    check_error_shapes(base_url, report.model)
    events = wait_for_kinds(log_path, (*STARTUP_KINDS, "decode", "spec_decode"), timeout=60.0)
    report.events = events
    kinds = report.kinds()
    positions = [kinds.index(kind) for kind in STARTUP_KINDS]
    assert positions == sorted(positions), f"start-up events out of order: {kinds}"
    assert not [e for e in events if isinstance(e, ServerError)], "errors in a healthy log"
    decode = next(e for e in events if isinstance(e, Decode))
    assert decode.engine == 0 and 0.0 <= decode.token_usage <= 1.0
    spec = next(e for e in events if isinstance(e, SpecDecode) and e.drafted)
    assert spec.per_position is not None and len(spec.per_position) == spec_tokens
    assert spec.mean_accept_len is not None and spec.mean_accept_len >= 1.0
    return report

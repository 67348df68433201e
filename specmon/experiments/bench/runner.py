"""Run the fixed prompt set against a ready server's generation endpoint and measure it.

The runner only needs a base URL (plain localhost or the host session's SSH port forward), so
`specmon bench`, `specmon sweep` and tests share it. Per request it records output tok/s
(completion tokens over the client-side end-to-end latency), time to first token (streaming)
and the server's own accept length (the backend reads its replies); overall it records the aggregate tok/s
over the measured phase and the median / p10 / p90 of the per-request figures.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from specmon.model.errors import SpecmonError, UsageError
from specmon.model.events import ProbeTiming
from specmon.model.prompts import DEFAULT_PROMPT_SET, Prompt, load_prompt_set

if TYPE_CHECKING:
    from specmon.backends import HttpApi

MAX_REQUESTS = 100_000
MAX_CONCURRENCY = 1024
MAX_TOKENS = 65_536
ERROR_TEXT_LIMIT = 500


class BenchError(SpecmonError):
    """The benchmark could not produce a valid measurement (server gone, requests failing)."""


@dataclass(frozen=True, slots=True)
class BenchSettings:
    """What is measured. Only results with equal settings (and prompt set) are comparable."""

    requests: int = 8
    concurrency: int = 1
    max_tokens: int = 256
    warmup: int = 2
    prompt_set: str = DEFAULT_PROMPT_SET
    seed: int | None = None  # None: the prompt set's own fixed seed
    stream: bool = True
    request_timeout_s: float = 600.0

    def validate(self) -> None:
        """Raise UsageError naming the option at fault."""
        checks = (
            ("--requests", self.requests, 1, MAX_REQUESTS),
            ("--concurrency", self.concurrency, 1, MAX_CONCURRENCY),
            ("--max-tokens", self.max_tokens, 1, MAX_TOKENS),
            ("--warmup", self.warmup, 0, MAX_REQUESTS),
        )
        for name, value, low, high in checks:
            if not isinstance(value, int) or not low <= value <= high:
                raise UsageError(f"{name} must be an integer from {low} to {high}, got {value!r}")
        if not self.request_timeout_s > 0:
            raise UsageError(f"request timeout must be positive, got {self.request_timeout_s!r}")


@dataclass(frozen=True, slots=True)
class RequestResult:
    prompt_id: str
    ok: bool
    latency_s: float
    completion_tokens: int = 0
    prompt_tokens: int | None = None
    ttft_s: float | None = None
    spec_verify_ct: int | None = None
    accept_len: float | None = None  # the server's spec_accept_length for this request
    server_latency_s: float | None = None  # meta_info e2e_latency
    error: str | None = None
    # (client perf_counter s, completion tokens so far) per streamed chunk that carries a
    # running count (SGLang: every chunk; an OpenAI stream: its usage chunk only), what
    # steady_tok_s reads; left out of to_dict.
    stream_counts: tuple[tuple[float, int], ...] = field(default=(), repr=False)

    @property
    def tok_s(self) -> float:
        """Output tokens per second as the client saw them (0 for a failed request)."""
        if not self.ok or self.latency_s <= 0:
            return 0.0
        return self.completion_tokens / self.latency_s

    @property
    def itl_s(self) -> float | None:
        """Inter-token latency as the client saw it: the mean gap between output tokens after
        the first, ``(latency - TTFT) / (tokens - 1)`` (the servers' time per output token);
        None without a first-token time or with fewer than two tokens."""
        if not self.ok or self.ttft_s is None or self.completion_tokens < 2:
            return None
        return max(0.0, self.latency_s - self.ttft_s) / (self.completion_tokens - 1)


@dataclass(frozen=True, slots=True)
class PhaseTimes:
    """Mean per-cycle draft / verify / extend milliseconds over the measured window."""

    draft_ms: float
    verify_ms: float
    extend_ms: float
    cycles: int
    source: str  # "probe" or "step_time" (whole-step figures, not a split)


@dataclass(frozen=True, slots=True)
class BenchProgress:
    phase: Literal["warmup", "measure"]
    done: int
    total: int
    last: RequestResult | None = None


@dataclass(frozen=True)
class BenchResult:
    settings: BenchSettings
    base_url: str
    prompt_set_version: str
    prompt_set_digest: str
    started_at: float  # epoch seconds, start of the measured phase
    duration_s: float
    requests: tuple[RequestResult, ...]
    tok_s_overall: float
    tok_s_median: float
    tok_s_p10: float
    tok_s_p90: float
    ttft_median_ms: float | None
    ttft_p90_ms: float | None
    accept_len: float | None
    metrics_accept_len: float | None
    phase_times: PhaseTimes | None
    server_info: dict[str, Any] | None = field(default=None, repr=False)
    # Whether /metrics showed speculative-decoding counters, for a server whose info endpoint
    # does not say (vLLM); None: unknown.
    metrics_speculative: bool | None = None
    itl_median_ms: float | None = None
    itl_p90_ms: float | None = None
    # The aggregate tok/s of each repeat when the same load was measured more than once
    # (merge_repeats); empty for one measurement.
    repeat_tok_s: tuple[float, ...] = ()
    tok_s_steady: float | None = None  # see steady_tok_s
    # What each request asked the server to sample with (the backend's body, less the prompt
    # and streaming): two runs' benchmarks are compared by it (docs/run-diff.md).
    sampling: dict[str, Any] | None = None

    @property
    def server_version(self) -> str | None:
        value = (self.server_info or {}).get("version")
        return None if value is None else str(value)

    @property
    def model(self) -> str | None:
        value = (self.server_info or {}).get("model_path")
        return None if value is None else str(value)

    @property
    def speculative(self) -> bool | None:
        """Whether the server ran speculative decoding, from its own launch args, else from
        its /metrics (None: unknown)."""
        from_info = speculative_from_server_info(self.server_info)
        return self.metrics_speculative if from_info is None else from_info

    @property
    def completion_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.requests)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "base_url": self.base_url,
            "settings": asdict(self.settings),
            "prompt_set": self.prompt_set_version,
            "prompt_set_digest": self.prompt_set_digest,
            "started_at": self.started_at,
            "duration_s": self.duration_s,
            "tok_s": self.tok_s_overall,
            "tok_s_steady": self.tok_s_steady,
            "tok_s_median": self.tok_s_median,
            "tok_s_p10": self.tok_s_p10,
            "tok_s_p90": self.tok_s_p90,
            "ttft_median_ms": self.ttft_median_ms,
            "ttft_p90_ms": self.ttft_p90_ms,
            "accept_len": self.accept_len,
            "metrics_accept_len": self.metrics_accept_len,
            "phase_times": asdict(self.phase_times) if self.phase_times else None,
            "server_version": self.server_version,
            "model": self.model,
            "speculative": self.speculative,
            "sampling": self.sampling,
            "requests": [
                {**{k: v for k, v in asdict(r).items() if k != "stream_counts"}, "tok_s": r.tok_s}
                for r in self.requests
            ],
        }
        return out


# --- statistics -----------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = math.ceil(position)
    if low == high:
        return float(ordered[low])
    weight = position - low
    # low + (high - low) * w stays within [low, high] in floating point; the weighted sum
    # low * (1 - w) + high * w does not.
    return float(ordered[low] + (ordered[high] - ordered[low]) * weight)


def pooled_accept_length(results: Iterable[RequestResult]) -> float | None:
    """Tokens per verify cycle over all requests: sum(tokens) / sum(verify cycles).

    Pooling (rather than averaging per-request ratios) weights every cycle equally, which is
    what the decode throughput actually depends on.
    """
    tokens = cycles = 0
    for result in results:
        if result.ok and result.spec_verify_ct:
            tokens += result.completion_tokens
            cycles += result.spec_verify_ct
    if cycles == 0:
        return None
    return tokens / cycles


def steady_tok_s(results: Iterable[RequestResult]) -> float | None:
    """Aggregate output tok/s while every request was streaming, from the client's chunk times.

    The window runs from the last request's first counted chunk to the first request's last;
    each request contributes its tokens between its own first and last chunk in the window
    (whole decode iterations, so no partial one at either edge) over that time, summed. It
    leaves out what a short run under concurrency is largely made of, and what a busy client
    stretches: the ramp-up (connections opened, prompts sent and prefilled) and the tail (the
    last requests finishing alone). None without such a window: a request without running
    counts, requests that ran one after another, or fewer than two chunks of one in it.
    """
    streams = [r.stream_counts for r in results if r.ok]
    if not streams or any(len(counts) < 2 for counts in streams):
        return None
    start = max(counts[0][0] for counts in streams)
    end = min(counts[-1][0] for counts in streams)
    total = 0.0
    for counts in streams:
        inside = [(t, n) for t, n in counts if start <= t <= end]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return None
        total += (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
    return total


def phase_times_from_probe(
    records: Iterable[ProbeTiming], start: float, end: float
) -> PhaseTimes | None:
    """Mean draft/verify/extend ms of the probe records whose wall time lies in [start, end]."""
    return mean_phase_times([r for r in records if start <= r.wall <= end])


def mean_phase_times(records: Sequence[ProbeTiming]) -> PhaseTimes | None:
    """Mean draft/verify/extend ms of ``records``; None when there are none."""
    if not records:
        return None
    n = len(records)
    sources = {r.source for r in records}
    return PhaseTimes(
        draft_ms=sum(r.draft_ms for r in records) / n,
        verify_ms=sum(r.verify_ms for r in records) / n,
        extend_ms=sum(r.extend_ms for r in records) / n,
        cycles=n,
        source="probe" if sources == {"probe"} else "step_time",
    )


def speculative_from_server_info(info: dict[str, Any] | None) -> bool | None:
    """True/False from the server's ``speculative_algorithm`` launch arg; None if not reported."""
    if not info or "speculative_algorithm" not in info:
        return None
    value = info.get("speculative_algorithm")
    return value not in (None, "", "None", "NONE")


def metrics_accept_length(metrics_text: str, metric: str | None = None) -> float | None:
    """The backend's acceptance-length gauge (``metric``, the default backend's when None)
    from a Prometheus page (TP rank 0's sample if labelled)."""
    if metric is None:
        from specmon.backends import DEFAULT_BACKEND, get_backend

        metric = get_backend(DEFAULT_BACKEND).accept_length_metric
        if metric is None:
            return None
    from prometheus_client.parser import text_string_to_metric_families

    try:
        families = list(text_string_to_metric_families(metrics_text))
    except (ValueError, TypeError):
        return None
    candidates: list[tuple[bool, float]] = []
    for family in families:
        for sample in family.samples:
            if sample.name == metric:
                rank0 = sample.labels.get("tp_rank") in (None, "0")
                candidates.append((rank0, float(sample.value)))
    if not candidates:
        return None
    candidates.sort(key=lambda c: not c[0])
    value = candidates[0][1]
    return value if math.isfinite(value) and value > 0 else None


# --- the runner -----------------------------------------------------------------------------


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def _float_or_none(value: Any) -> float | None:
    try:
        result = None if value is None else float(value)
    except (TypeError, ValueError):
        return None
    return result if result is not None and math.isfinite(result) else None


def _result_from_meta(
    prompt: Prompt, meta: dict[str, Any], latency: float, ttft: float | None
) -> RequestResult:
    finish = meta.get("finish_reason")
    if isinstance(finish, dict) and finish.get("type") == "abort":
        return RequestResult(
            prompt_id=prompt.id,
            ok=False,
            latency_s=latency,
            error=f"server aborted the request: {finish.get('message')}"[:ERROR_TEXT_LIMIT],
        )
    completion = _int_or_none(meta.get("completion_tokens"))
    if completion is None:
        return RequestResult(
            prompt_id=prompt.id,
            ok=False,
            latency_s=latency,
            error="response has no completion token count",
        )
    return RequestResult(
        prompt_id=prompt.id,
        ok=True,
        latency_s=latency,
        completion_tokens=completion,
        prompt_tokens=_int_or_none(meta.get("prompt_tokens")),
        ttft_s=ttft,
        spec_verify_ct=_int_or_none(meta.get("spec_verify_ct")),
        accept_len=_float_or_none(meta.get("spec_accept_length")),
        server_latency_s=_float_or_none(meta.get("e2e_latency")),
    )


async def _one_request(
    client: Any, prompt: Prompt, settings: BenchSettings, server: HttpApi
) -> RequestResult:
    """Send one generation request in the backend's API; every failure becomes a failed
    RequestResult, never an exception."""
    import httpx

    from specmon.session.http_body import (
        IDENTITY,
        BodyTooLarge,
        capped_lines,
        head_text,
        request_capped,
    )

    body = server.generate_body(prompt.text, settings.max_tokens, settings.stream)
    path = server.generate_path
    sent = time.perf_counter()
    try:
        if not settings.stream:
            response = await request_capped(client, "POST", path, json=body)
            latency = time.perf_counter() - sent
            if response.status_code != 200:
                return _http_failure(prompt, latency, response.status_code, response.text)
            meta = server.generate_meta(response.json())
            return _result_from_meta(prompt, meta or {}, latency, None)
        ttft: float | None = None
        last_meta: dict[str, Any] | None = None
        counts: list[tuple[float, int]] = []
        async with client.stream("POST", path, json=body, headers=IDENTITY) as response:
            if response.status_code != 200:
                text = await head_text(response)
                return _http_failure(prompt, time.perf_counter() - sent, response.status_code, text)
            async for line in capped_lines(response, what=path):
                if not line.startswith("data:"):
                    continue
                payload = line[len("data:") :].strip()
                if payload == "[DONE]":
                    break
                try:
                    chunk = json.loads(payload)
                except ValueError:
                    continue
                meta = server.generate_meta(chunk)
                if meta is not None:
                    last_meta = meta
                    count = _int_or_none(meta.get("completion_tokens"))
                    if count:
                        counts.append((time.perf_counter(), count))
                if ttft is None and (server.generate_text(chunk) or _first_tokens(meta)):
                    ttft = time.perf_counter() - sent
        latency = time.perf_counter() - sent
        if last_meta is None:
            return RequestResult(
                prompt_id=prompt.id,
                ok=False,
                latency_s=latency,
                error="stream ended without any completion counts",
            )
        result = _result_from_meta(prompt, last_meta, latency, ttft)
        return replace(result, stream_counts=tuple(counts)) if result.ok else result
    except BodyTooLarge as exc:
        return RequestResult(
            prompt_id=prompt.id,
            ok=False,
            latency_s=time.perf_counter() - sent,
            error=str(exc)[:ERROR_TEXT_LIMIT],
        )
    except (httpx.HTTPError, OSError, ValueError) as exc:
        return RequestResult(
            prompt_id=prompt.id,
            ok=False,
            latency_s=time.perf_counter() - sent,
            error=f"{type(exc).__name__}: {exc}"[:ERROR_TEXT_LIMIT],
        )


def _first_tokens(meta: Any) -> bool:
    return isinstance(meta, dict) and (_int_or_none(meta.get("completion_tokens")) or 0) > 0


def _http_failure(prompt: Prompt, latency: float, status: int, text: str) -> RequestResult:
    return RequestResult(
        prompt_id=prompt.id,
        ok=False,
        latency_s=latency,
        error=f"HTTP {status}: {text.strip()[:200]}",
    )


async def _run_batch(
    client: Any,
    prompts: list[Prompt],
    settings: BenchSettings,
    phase: Literal["warmup", "measure"],
    on_progress: Callable[[BenchProgress], None] | None,
    server: HttpApi,
) -> list[RequestResult]:
    """Run ``prompts`` with at most ``settings.concurrency`` in flight; results in prompt order."""
    results: list[RequestResult | None] = [None] * len(prompts)
    next_index = 0
    done = 0

    async def worker() -> None:
        nonlocal next_index, done
        while next_index < len(prompts):
            index = next_index
            next_index += 1
            result = await _one_request(client, prompts[index], settings, server)
            results[index] = result
            done += 1
            if on_progress is not None:
                on_progress(BenchProgress(phase, done, len(prompts), result))

    workers = min(settings.concurrency, len(prompts))
    await asyncio.gather(*(worker() for _ in range(workers)))
    return [r for r in results if r is not None]


async def fetch_server_info(client: Any, backend: HttpApi) -> dict[str, Any] | None:
    """The backend's server-info endpoints, tried in order; None if the server has none.
    A backend whose info is spread over several endpoints (``info_merged``) has every
    answering endpoint's fields (``bench_info``) merged, the first answer winning per key."""
    import httpx

    from specmon.session.http_body import request_capped

    merged: dict[str, Any] = {}
    for path in backend.info_paths:
        try:
            response = await request_capped(client, "GET", path)
        except (httpx.HTTPError, SpecmonError):  # a body past its cap too
            return merged or None
        if response.status_code == 200:
            try:
                data = response.json()
            except ValueError:
                return merged or None
            fields = backend.bench_info(data)
            if not backend.info_merged:
                return fields
            merged = {**fields, **merged}
    return merged or None
    return None


async def fetch_metrics_text(client: Any, backend: HttpApi) -> str | None:
    import httpx

    from specmon.session.http_body import METRICS_BODY_LIMIT, request_capped

    try:
        path = backend.metrics_path
        response = await request_capped(client, "GET", path, limit=METRICS_BODY_LIMIT)
    except (httpx.HTTPError, SpecmonError):  # a body past its cap too
        return None
    return response.text if response.status_code == 200 else None


async def fetch_metrics_accept_length(client: Any, backend: HttpApi) -> float | None:
    if backend.accept_length_metric is None:
        return None
    text = await fetch_metrics_text(client, backend)
    return None if text is None else metrics_accept_length(text, backend.accept_length_metric)


async def run_benchmark(
    base_url: str,
    settings: BenchSettings,
    *,
    on_progress: Callable[[BenchProgress], None] | None = None,
    phase_timing: Callable[[float, float], PhaseTimes | None] | None = None,
    backend: str | None = None,
) -> BenchResult:
    """Warm up, then measure ``settings.requests`` requests against ``base_url``.

    ``phase_timing(start, end)`` (epoch seconds) supplies probe timings for the measured
    window when the caller has them (the host session's store). Raises BenchError if any
    measured request failed: a partial benchmark is not a measurement.
    """
    import httpx

    from specmon.backends import DEFAULT_BACKEND, get_backend

    server = get_backend(backend or DEFAULT_BACKEND)
    if not server.generate_path:
        raise BenchError(f"{server.display_name} has no generation endpoint specmon can benchmark")
    settings.validate()
    prompt_set = load_prompt_set(settings.prompt_set)
    schedule = prompt_set.schedule(settings.warmup + settings.requests, settings.seed)
    warmup_prompts = schedule[: settings.warmup]
    measured_prompts = schedule[settings.warmup :]
    timeout = httpx.Timeout(settings.request_timeout_s, connect=10.0)
    limits = httpx.Limits(max_connections=settings.concurrency + 2)
    async with httpx.AsyncClient(
        base_url=base_url, timeout=timeout, limits=limits, trust_env=False
    ) as client:
        server_info = await fetch_server_info(client, server)
        if warmup_prompts:
            warm = await _run_batch(client, warmup_prompts, settings, "warmup", on_progress, server)
            failed = [r for r in warm if not r.ok]
            if failed:
                raise BenchError(
                    f"warm-up failed ({len(failed)} of {len(warm)} requests): {failed[0].error}"
                )
        # A server without an acceptance gauge (vLLM: counters) is read before and after
        # the measured requests; the backend computes the length from the rise.
        counters_before = (
            await fetch_metrics_text(client, server)
            if server.accept_length_metric is None
            else None
        )
        started_at = time.time()
        started = time.perf_counter()
        measured = await _run_batch(
            client, measured_prompts, settings, "measure", on_progress, server
        )
        duration = time.perf_counter() - started
        ended_at = time.time()
        failed = [r for r in measured if not r.ok]
        if failed:
            raise BenchError(
                f"{len(failed)} of {len(measured)} requests failed; first: {failed[0].error}"
            )
        metrics_accept = await fetch_metrics_accept_length(client, server)
        metrics_speculative = None
        if server.accept_length_metric is None or speculative_from_server_info(server_info) is None:
            text = await fetch_metrics_text(client, server)
            if text is not None:
                if speculative_from_server_info(server_info) is None:
                    metrics_speculative = server.speculation_in_metrics(text)
                if server.accept_length_metric is None and counters_before is not None:
                    metrics_accept = server.accept_length_between(counters_before, text)
    result = summarize(
        settings=settings,
        base_url=base_url,
        prompt_set_version=prompt_set.version,
        prompt_set_digest=prompt_set.digest,
        started_at=started_at,
        duration_s=duration,
        results=measured,
        metrics_accept_len=metrics_accept,
        phase_times=phase_timing(started_at, ended_at) if phase_timing else None,
        server_info=server_info,
    )
    sampling = sampling_params(server.generate_body("", settings.max_tokens, settings.stream))
    return replace(result, metrics_speculative=metrics_speculative, sampling=sampling)


# The parts of a backend's request body that are not sampling: the prompt and how it streams.
NOT_SAMPLING = frozenset(("text", "prompt", "messages", "stream", "stream_options", "model"))


def sampling_params(body: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling a request body asks for: SGLang's ``sampling_params`` object, else the
    OpenAI-style body's own fields less the prompt and streaming."""
    nested = body.get("sampling_params")
    if isinstance(nested, Mapping):
        return dict(nested)
    return {k: v for k, v in body.items() if k not in NOT_SAMPLING}


def summarize(
    *,
    settings: BenchSettings,
    base_url: str,
    prompt_set_version: str,
    prompt_set_digest: str,
    started_at: float,
    duration_s: float,
    results: Sequence[RequestResult],
    metrics_accept_len: float | None = None,
    phase_times: PhaseTimes | None = None,
    server_info: dict[str, Any] | None = None,
) -> BenchResult:
    """The figures of a measured phase: aggregate tok/s and per-request percentiles."""
    ok = [r for r in results if r.ok]
    if not ok:
        raise BenchError("no successful request to measure")
    per_request = [r.tok_s for r in ok]
    ttfts = [r.ttft_s * 1000 for r in ok if r.ttft_s is not None]
    itls = [r.itl_s * 1000 for r in ok if r.itl_s is not None]
    total_tokens = sum(r.completion_tokens for r in ok)
    return BenchResult(
        settings=settings,
        base_url=base_url,
        prompt_set_version=prompt_set_version,
        prompt_set_digest=prompt_set_digest,
        started_at=started_at,
        duration_s=duration_s,
        requests=tuple(results),
        tok_s_overall=total_tokens / duration_s if duration_s > 0 else 0.0,
        tok_s_median=percentile(per_request, 50),
        tok_s_p10=percentile(per_request, 10),
        tok_s_p90=percentile(per_request, 90),
        ttft_median_ms=percentile(ttfts, 50) if ttfts else None,
        ttft_p90_ms=percentile(ttfts, 90) if ttfts else None,
        accept_len=pooled_accept_length(ok),
        tok_s_steady=steady_tok_s(ok),
        metrics_accept_len=metrics_accept_len,
        phase_times=phase_times,
        server_info=server_info,
        itl_median_ms=percentile(itls, 50) if itls else None,
        itl_p90_ms=percentile(itls, 90) if itls else None,
    )


def merge_repeats(results: Sequence[BenchResult]) -> BenchResult:
    """Repeated measurements of one load as one result: the requests pooled (their
    percentiles over all of them), the aggregate tok/s the mean of the repeats' (each kept in
    ``repeat_tok_s``) and so is the steady tok/s (when every repeat has one), the probe's
    phase times of the first repeat that has them."""
    if not results:
        raise ValueError("no results to merge")
    if len(results) == 1:
        return results[0]
    first = results[0]
    merged = summarize(
        settings=first.settings,
        base_url=first.base_url,
        prompt_set_version=first.prompt_set_version,
        prompt_set_digest=first.prompt_set_digest,
        started_at=first.started_at,
        duration_s=sum(r.duration_s for r in results),
        results=[request for r in results for request in r.requests],
        metrics_accept_len=first.metrics_accept_len,
        phase_times=next((r.phase_times for r in results if r.phase_times), None),
        server_info=first.server_info,
    )
    each = tuple(r.tok_s_overall for r in results)
    steady = [r.tok_s_steady for r in results if r.tok_s_steady is not None]
    return replace(
        merged,
        tok_s_overall=sum(each) / len(each),
        tok_s_steady=sum(steady) / len(steady) if len(steady) == len(results) else None,
        repeat_tok_s=each,
        metrics_speculative=first.metrics_speculative,
        sampling=first.sampling,
    )

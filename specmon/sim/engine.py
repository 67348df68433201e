"""The simulated scheduler: prefill, speculative decode cycles at the modelled real speed,
SGLang's periodic ``Prefill batch`` / ``Decode batch`` lines and the probe's timing records.

Decode is never time-scaled: one draft+verify cycle takes what the performance model says
(~26-36 ms), so tok/s, accept length and cycle times are those of the real host.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from specmon.sim import perf
from specmon.sim.logwriter import LogWriter

_TEXT = (
    "Paris is the capital and largest city of France , on the Seine river in the north of "
    "the country . It is a centre of finance , diplomacy , commerce , culture , fashion and "
    "gastronomy , and one of the most visited cities in the world . The city has been a "
    "major hub of science and the arts since the seventeenth century ."
)
_WORDS = tuple(_TEXT.split(" "))
PREFILL_TOKENS_PER_SECOND = 9000.0  # rough prefill speed of the measured host, batch of one
PREFILL_FIXED_S = 0.02
PROBE_FLUSH_RECORDS = 16
# A stall of the simulator's own process (a loaded test machine) up to this long is caught
# up: the modelled host never stalled, so its tok/s must not depend on ours. A longer one
# (SIGSTOP, a suspended laptop) is not replayed as a burst of cycles.
CATCH_UP_LIMIT_S = 1.0


@dataclass
class SimRequest:
    """One generation in flight. ``updates`` carries (new token ids, finished) to streamers.

    The timestamps (wall clock) are what servers' per-request histograms are made of:
    ``created`` (arrival), ``scheduled_at`` (its prefill starts: the queue time ends),
    ``first_token_at``, ``last_token_at``, ``finished_at``. ``finish_reason``,
    ``max_tokens_param`` and ``streaming`` are the HTTP layer's (an answer that ends itself
    is ``stop``); ``cached_tokens`` and ``preemptions`` stay 0: the simulated prefix cache
    never hits and the KV cache is never short enough to preempt."""

    rid: str
    prompt_tokens: int
    max_new_tokens: int
    created: float = field(default_factory=time.time)
    output_ids: list[int] = field(default_factory=list)
    verify_ct: int = 0
    accepted_drafts: int = 0
    scheduled_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_at: float | None = None
    queue_time: float = 0.0
    finish_reason: str = "length"
    max_tokens_param: int | None = None
    streaming: bool = False
    cached_tokens: int = 0
    preemptions: int = 0
    updates: asyncio.Queue[bool] = field(default_factory=asyncio.Queue)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    count_in_metrics: bool = True

    @property
    def completion_tokens(self) -> int:
        return len(self.output_ids)

    @property
    def remaining(self) -> int:
        return max(0, self.max_new_tokens - len(self.output_ids))

    async def cycles(self) -> AsyncIterator[bool]:
        """One item per verify cycle that touched the request: True on the last (what every
        streaming endpoint of either personality follows)."""
        while True:
            finished = await self.updates.get()
            finished = finished or self.done.is_set()
            yield finished
            if finished:
                return

    def text(self) -> str:
        return "".join(
            (" " if i and _WORDS[t % len(_WORDS)] not in ",." else "") + _WORDS[t % len(_WORDS)]
            for i, t in enumerate(self.output_ids)
        )


@dataclass(frozen=True, slots=True)
class EngineEvent:
    """One thing a server's ``/metrics`` observes, when the engine does it.

    ``scheduled``: a request's prefill starts (its queue time is known); ``ttft``: its first
    token, ``seconds`` since arrival; ``itl``: ``tokens`` more tokens, ``seconds`` after its
    previous ones (one verify cycle); ``finished``: it is done (the request carries its
    timestamps and counts); ``iteration``: one engine step computed ``prompt_tokens`` prompt
    tokens and emitted ``tokens`` tokens (``request`` None). Request events are only sent for
    requests counted in metrics (not the warm-up's)."""

    kind: str
    request: SimRequest | None = None
    seconds: float = 0.0
    tokens: int = 0
    prompt_tokens: int = 0


@dataclass
class EngineStats:
    """What ``/server_info`` and ``/metrics`` report about decoding."""

    last_gen_throughput: float = 0.0
    last_accept_length: float = 0.0
    last_accept_rate: float = 0.0
    verify_total: int = 0
    tokens_accepted_total: int = 0  # tokens per request per verify, summed
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    requests_total: int = 0
    cuda_graph_passes: int = 0
    # Counted as vLLM counts them (all requests, from the first forward pass on).
    prefill_tokens_total: int = 0
    emitted_tokens_total: int = 0
    drafts_total: int = 0  # one per request per verify
    draft_tokens_total: int = 0  # draft positions proposed
    accepted_drafts_total: int = 0
    accepted_per_position: list[int] = field(default_factory=list)

    @property
    def avg_accept_length(self) -> float:
        return self.tokens_accepted_total / self.verify_total if self.verify_total else 0.0


class Engine:
    """Runs the batches. ``on_decode_iteration`` lets faults fire at a chosen iteration."""

    def __init__(
        self,
        settings: perf.SpecSettings,
        writer: LogWriter,
        *,
        log_rank: int | None,
        decode_log_interval: int,
        max_running_requests: int,
        max_total_tokens: int,
        seed: int,
        probe_path: Path | None = None,
        on_decode_iteration: Callable[[int], None] | None = None,
        on_busy: Callable[[float], None] | None = None,
        on_event: Callable[[EngineEvent], None] | None = None,
        log_batches: bool = True,
        vllm_probe_records: bool = False,
    ) -> None:
        """``log_batches`` False: no SGLang ``Prefill batch`` / ``Decode batch`` lines (the
        vLLM personality logs its own periodic stats from ``stats`` instead).
        ``vllm_probe_records``: probe records as the vLLM probe writes them
        (specmon/probe/records.py): ``extend_ms`` 0.0 with the draft extend inside
        ``verify_ms``, ``draft_tokens`` the batch's scheduled draft tokens, and per-position
        ``accepted_per_position`` / ``drafted_per_position`` request counts."""
        self.settings = settings
        self.log_batches = log_batches
        self.vllm_probe_records = vllm_probe_records
        self.writer = writer
        self.log_rank = log_rank
        self.decode_log_interval = decode_log_interval
        self.max_running_requests = max_running_requests
        self.max_total_tokens = max(1, max_total_tokens)
        self.rng = random.Random(seed)
        self.waiting: list[SimRequest] = []
        self.running: list[SimRequest] = []
        self.stats = EngineStats()
        self.forward_ct_decode = 0
        self.user_decode_iterations = 0
        self.hung = False
        self._wakeup = asyncio.Event()
        self._probe_path = probe_path
        self._probe_file: TextIO | None = None
        self._probe_buffer: list[str] = []
        self._window_tokens = 0
        self._window_accepted = 0
        self._window_verifies = 0
        self._window_started = time.monotonic()
        self._on_decode_iteration = on_decode_iteration
        self._on_busy = on_busy
        self._on_event = on_event
        self._busy_s = 0.0
        self._busy_window_start = time.monotonic()

    # --- requests -------------------------------------------------------------------------

    def submit(self, request: SimRequest) -> None:
        self.waiting.append(request)
        self._wakeup.set()

    def abort_all(self) -> None:
        for request in [*self.waiting, *self.running]:
            request.finished_at = time.time()
            request.done.set()
            request.updates.put_nowait(True)
        self.waiting.clear()
        self.running.clear()

    @property
    def used_tokens(self) -> int:
        return sum(r.prompt_tokens + r.completion_tokens for r in self.running)

    @property
    def token_usage(self) -> float:
        return self.used_tokens / self.max_total_tokens

    # --- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve batches until cancelled; a hung engine just sleeps (the process lives on)."""
        next_deadline = time.monotonic()
        try:
            while True:
                if self.hung:
                    await asyncio.sleep(3600)
                    continue
                if self.waiting and len(self.running) < self.max_running_requests:
                    await self._prefill()
                    next_deadline = time.monotonic()
                elif self.running:
                    next_deadline = await self._decode_cycle(next_deadline)
                else:
                    self._report_busy(force=True)
                    self._wakeup.clear()
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._wakeup.wait(), timeout=0.5)
                    next_deadline = time.monotonic()
                    self._reset_window()
        finally:
            self.flush_probe()

    async def _prefill(self) -> None:
        room = self.max_running_requests - len(self.running)
        batch, self.waiting = self.waiting[:room], self.waiting[room:]
        new_tokens = sum(r.prompt_tokens for r in batch)
        seconds = PREFILL_FIXED_S + new_tokens / PREFILL_TOKENS_PER_SECOND
        scheduled_at = time.time()
        for request in batch:
            request.scheduled_at = scheduled_at
            request.queue_time = max(0.0, scheduled_at - request.created)
            self._observe(request, EngineEvent("scheduled", request, request.queue_time))
        started = time.monotonic()
        await asyncio.sleep(seconds)
        self._busy_s += time.monotonic() - started
        self.stats.prefill_tokens_total += new_tokens
        first_tokens = 0
        for request in batch:
            if request.remaining > 0:  # prefill yields the first token
                self._emit(request, 1)
                first_tokens += 1
        self._iteration(new_tokens, first_tokens)
        if self.log_batches:
            self._log_prefill(batch, new_tokens, seconds)
        self.running.extend(r for r in batch if r.remaining > 0)
        for request in batch:
            if request.remaining == 0:
                self._finish(request)

    def _log_prefill(self, batch: list[SimRequest], new_tokens: int, seconds: float) -> None:
        self.writer.rank(
            self.log_rank,
            f"Prefill batch, #new-seq: {len(batch)}, #new-token: {new_tokens}, "
            f"#cached-token: 0, token usage: {self.token_usage:.2f}, "
            f"#running-req: {len(self.running)}, #queue-req: {len(self.waiting)}, "
            f"input throughput (token/s): {new_tokens / seconds:.2f}, cuda graph: False",
        )

    async def _decode_cycle(self, deadline: float) -> float:
        settings = self.settings
        batch = list(self.running)
        cost = perf.cycle_cost(settings, len(batch))
        draft_ms = perf.jittered(cost.draft_ms, self.rng) if cost.draft_ms else 0.0
        verify_ms = perf.jittered(cost.verify_ms, self.rng)
        extend_ms = perf.jittered(cost.extend_ms, self.rng) if cost.extend_ms else 0.0
        cycle_ms = draft_ms + verify_ms + extend_ms
        deadline += cycle_ms / 1000.0
        now = time.monotonic()
        if deadline < now - CATCH_UP_LIMIT_S:  # stopped for long: do not burst to catch up
            deadline = now + cycle_ms / 1000.0
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))
        if self.hung:
            return deadline
        self._busy_s += cycle_ms / 1000.0
        depth = perf.draft_depth(settings) if settings.speculative else 0
        stats = self.stats
        if len(stats.accepted_per_position) < depth:
            stats.accepted_per_position.extend([0] * (depth - len(stats.accepted_per_position)))
        cycle_positions = [0] * depth
        accepted_per_request: list[int] = []
        for request in batch:
            accepted = perf.sample_accepted(settings, self.rng) if settings.speculative else 0
            tokens = min(accepted + 1, request.remaining)
            request.verify_ct += 1
            request.accepted_drafts += max(0, tokens - 1)
            accepted_per_request.append(max(0, tokens - 1))
            if depth:
                stats.drafts_total += 1
                stats.draft_tokens_total += depth
                stats.accepted_drafts_total += max(0, tokens - 1)
                for position in range(tokens - 1):
                    stats.accepted_per_position[position] += 1
                    cycle_positions[position] += 1
            self._window_tokens += tokens
            self._window_accepted += tokens
            self._window_verifies += 1
            self.stats.verify_total += 1
            self.stats.tokens_accepted_total += tokens
            self._emit(request, tokens)
            if request.remaining == 0:
                self._finish(request)
        self._iteration(0, sum(accepted_per_request) + len(batch))  # every request's tokens
        self.stats.cuda_graph_passes += 1
        if settings.speculative:
            self._probe_record(
                draft_ms, verify_ms, extend_ms, cycle_ms, accepted_per_request, cycle_positions
            )
        self.forward_ct_decode += 1
        if any(r.count_in_metrics for r in batch):
            self.user_decode_iterations += 1
        if self.forward_ct_decode % self.decode_log_interval == 0:
            self._log_decode()
        self._report_busy()
        if self._on_decode_iteration is not None and any(r.count_in_metrics for r in batch):
            self._on_decode_iteration(self.user_decode_iterations)
        return deadline

    def _emit(self, request: SimRequest, tokens: int) -> None:
        now = time.time()
        self.stats.emitted_tokens_total += tokens
        for _ in range(tokens):
            request.output_ids.append(self.rng.randrange(len(_WORDS) * 1000))
        if request.first_token_at is None:
            request.first_token_at = now
            self._observe(request, EngineEvent("ttft", request, now - request.created, tokens))
        elif request.last_token_at is not None:
            self._observe(request, EngineEvent("itl", request, now - request.last_token_at, tokens))
        request.last_token_at = now
        request.updates.put_nowait(False)

    def _observe(self, request: SimRequest, event: EngineEvent) -> None:
        if request.count_in_metrics and self._on_event is not None:
            self._on_event(event)

    def _iteration(self, prompt_tokens: int, tokens: int) -> None:
        """One engine step's token counts (every step, the warm-up's included)."""
        if self._on_event is not None:
            self._on_event(EngineEvent("iteration", None, 0.0, tokens, prompt_tokens))

    def _finish(self, request: SimRequest) -> None:
        request.finished_at = time.time()
        if request in self.running:
            self.running.remove(request)
        if request.count_in_metrics:
            self.stats.requests_total += 1
            self.stats.prompt_tokens_total += request.prompt_tokens
            self.stats.generation_tokens_total += request.completion_tokens
            self._observe(
                request, EngineEvent("finished", request, request.finished_at - request.created)
            )
        request.done.set()
        request.updates.put_nowait(True)

    def _log_decode(self) -> None:
        now = time.monotonic()
        gap = max(1e-6, now - self._window_started)
        self.stats.last_gen_throughput = self._window_tokens / gap
        message = (
            f"Decode batch, #running-req: {len(self.running)}, #token: {self.used_tokens}, "
            f"token usage: {self.token_usage:.2f}, "
        )
        if self.settings.speculative and self._window_verifies:
            accept_len = self._window_accepted / self._window_verifies
            self.stats.last_accept_length = accept_len
            self.stats.last_accept_rate = accept_len / self.settings.num_draft_tokens
            message += (
                f"accept len: {accept_len:.2f}, accept rate: {self.stats.last_accept_rate:.2f}, "
            )
        message += (
            f"cuda graph: True, gen throughput (token/s): {self.stats.last_gen_throughput:.2f}, "
            f"#queue-req: {len(self.waiting)}"
        )
        if self.log_batches:
            self.writer.rank(self.log_rank, message)
        self._reset_window()

    def _reset_window(self) -> None:
        """Throughput is measured over decoding time only: an idle gap starts a new window."""
        self._window_tokens = self._window_accepted = self._window_verifies = 0
        self._window_started = time.monotonic()

    def _report_busy(self, force: bool = False) -> None:
        """Tell the GPU model how busy the last ~0.5 s were (utilisation follows)."""
        now = time.monotonic()
        span = now - self._busy_window_start
        if self._on_busy is None or (span < 0.5 and not force):
            return
        fraction = min(1.0, self._busy_s / span) if span > 0 else 0.0
        self._on_busy(fraction)
        self._busy_s = 0.0
        self._busy_window_start = now

    # --- probe records ---------------------------------------------------------------------

    def _probe_record(
        self,
        draft_ms: float,
        verify_ms: float,
        extend_ms: float,
        cycle_ms: float,
        accepted_per_request: list[int],
        accepted_per_position: list[int],
    ) -> None:
        if self._probe_path is None:
            return
        batch_size = len(accepted_per_request)
        record: dict[str, object] = {
            "wall": round(time.time(), 6),
            "draft_ms": round(draft_ms, 4),
            "verify_ms": round(verify_ms, 4),
            "extend_ms": round(extend_ms, 4),
            "cycle_ms": round(cycle_ms, 4),
            "batch_size": batch_size,
            # as the probe counts them: every request's draft tokens, root included
            "draft_tokens": batch_size * self.settings.num_draft_tokens,
            "accepted_tokens": sum(accepted_per_request),
            "accepted_per_request": accepted_per_request,
        }
        if self.vllm_probe_records:
            record.update(
                verify_ms=round(verify_ms + extend_ms, 4),
                extend_ms=0.0,
                draft_tokens=perf.draft_depth(self.settings) * batch_size,
                accepted_per_position=accepted_per_position,
                drafted_per_position=[batch_size] * len(accepted_per_position),
            )
        self._probe_buffer.append(json.dumps(record))
        if len(self._probe_buffer) >= PROBE_FLUSH_RECORDS:
            self.flush_probe()

    def flush_probe(self) -> None:
        if self._probe_path is None or not self._probe_buffer:
            return
        try:
            if self._probe_file is None:
                self._probe_file = self._probe_path.open("a", encoding="utf-8")
            self._probe_file.write("\n".join(self._probe_buffer) + "\n")
            self._probe_file.flush()
        except OSError:
            self._probe_path = None
        self._probe_buffer.clear()

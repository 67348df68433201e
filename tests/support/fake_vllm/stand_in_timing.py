"""Phase bodies that sleep for known times and keep their own perf_counter truth."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

PHASE_SECONDS = {"forward": 0.010, "reject": 0.002, "bookkeeping": 0.001, "draft": 0.003}
TRUTH_MS: list[tuple[str, float, float]] = []  # (phase, start, end) in perf_counter ms


def work(phase: str) -> None:
    started = time.perf_counter()
    time.sleep(PHASE_SECONDS[phase])
    TRUTH_MS.append((phase, started * 1000.0, time.perf_counter() * 1000.0))


@dataclass
class SchedulerOutput:
    """vLLM's field names; ``accept`` (the stand-in's plan) says how many drafts each request
    accepts."""

    num_scheduled_tokens: dict[str, int]
    scheduled_spec_decode_tokens: dict[str, list[int]]
    accept: dict[str, int] = field(default_factory=dict)


@dataclass
class ModelRunnerOutput:
    req_ids: list[str]
    sampled_token_ids: list[list[int]]


class AsyncModelRunnerOutput:
    """Like vLLM's async output: the token ids are still being copied, get_output() waits."""

    def __init__(self, output: ModelRunnerOutput) -> None:
        self._output = output

    def get_output(self) -> ModelRunnerOutput:
        return self._output


def sampled_tokens(scheduler_output: SchedulerOutput) -> ModelRunnerOutput:
    req_ids = list(scheduler_output.num_scheduled_tokens)
    sampled = [[7] * (scheduler_output.accept.get(r, 0) + 1) for r in req_ids]
    return ModelRunnerOutput(req_ids, sampled)

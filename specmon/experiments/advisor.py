"""The tuning advisor's model: predict tok/s for other draft step counts from one live run.

Restarting a 10-15 minute load for every ``num_steps`` is what cost operators hours. The
numbers that decide the best step count are all observable in one run: how often each draft
position is accepted, what one draft step costs, what a verify costs (and how that grows with
the tokens it checks). This module turns them into a prediction per step count. It is pure
arithmetic: no clock, no I/O, no server names; the inputs come from the store (probe records,
per-position acceptance) and the ledger (verify times measured at other token counts).

For a chain draft (topk = 1), with ``P(>=i)`` the chance a request gets at least ``i`` draft
tokens accepted in one verify:

    E(k) = 1 + sum_{i=1..k} P(>=i)                          tokens per request per cycle
    T(k) = k * draft_ms_per_step + verify_ms(k + 1) + extend_ms      cycle time
    tok/s(k) = E(k) / T(k) * 1000 * requests_per_cycle

Positions beyond the measured depth continue with the last measured *conditional*
acceptance ``P(>=k)/P(>=k-1)`` (flagged ``extrapolated``); verify time at other token counts
is a straight line through the ledger's measurements of this host and model when it has two
or more token counts, else the current verify plus a stated default slope (flagged
``estimated``). A prediction is always labelled as one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# Default growth of a verify per extra token checked, as a fraction of the measured verify.
# Decode verifies are dominated by fixed costs (weights read once, graph replay, all-reduce
# latency), so a token adds little: on the one host with two measured points (figures.md:
# 25.6 ms at 3 tokens, 28.7 ms at 6) it was 1.03 ms per token, 3.6% of the 6-token verify.
# Used only when the ledger has no two token counts for this host and model, and flagged.
DEFAULT_VERIFY_SLOPE_FRACTION = 0.036

MIN_CYCLES = 50  # fewer measured cycles than this and the acceptance shape is noise
MAX_CONDITIONAL = 0.999  # an extrapolated chain never reaches certainty


class AdvisorError(ValueError):
    """The inputs cannot support a prediction (the message says why, in one line)."""


@dataclass(frozen=True, slots=True)
class AdvisorInputs:
    """What one live run measured, plus what the ledger knows about verify times."""

    num_steps: int  # the running server's step count k
    topk: int
    accept_at_least: tuple[float, ...]  # P(accepted >= i) for i = 1..(measured depth)
    draft_ms_per_step: float
    verify_ms: float  # mean verify at the current num_draft_tokens
    extend_ms: float
    requests_per_cycle: float  # mean running requests per verify
    cycles: int  # how many cycles the means come from
    num_draft_tokens: int | None = None  # tokens the current verify checks (k + 1 for a chain)
    verify_by_tokens: Mapping[int, float] = field(default_factory=dict)  # ledger: tokens -> ms

    @property
    def current_tokens(self) -> int:
        return self.num_draft_tokens or self.num_steps + 1


@dataclass(frozen=True, slots=True)
class Prediction:
    num_steps: int
    num_draft_tokens: int
    accept_len: float
    cycle_ms: float
    tok_s: float
    extrapolated: bool  # acceptance beyond the measured depth
    estimated: bool  # verify time from the default slope, not from measurements

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Advice:
    current: Prediction  # the model's reading of the running setting (a check on the inputs)
    predictions: tuple[Prediction, ...]
    recommended: Prediction
    inputs: AdvisorInputs
    verify_slope_ms_per_token: float
    verify_slope_source: str  # "ledger" or "default"

    def to_dict(self) -> dict[str, Any]:
        inputs = asdict(self.inputs)
        inputs["accept_at_least"] = list(self.inputs.accept_at_least)
        inputs["verify_by_tokens"] = {str(k): v for k, v in self.inputs.verify_by_tokens.items()}
        inputs["verify_slope_ms_per_token"] = self.verify_slope_ms_per_token
        inputs["verify_slope_source"] = self.verify_slope_source
        return {
            "current": self.current.to_dict(),
            "predictions": [p.to_dict() for p in self.predictions],
            "recommended": {
                "num_steps": self.recommended.num_steps,
                "num_draft_tokens": self.recommended.num_draft_tokens,
            },
            "inputs": inputs,
        }


def accept_at_least_from_lengths(accepted: Sequence[int], depth: int) -> tuple[float, ...]:
    """P(accepted >= i), i = 1..depth, from per-request accepted draft counts (bonus excluded)."""
    if not accepted:
        return ()
    n = len(accepted)
    return tuple(sum(1 for a in accepted if a >= i) / n for i in range(1, depth + 1))


def accept_at_least_from_position_rates(rates: Sequence[float]) -> tuple[float, ...]:
    """vLLM's per-position acceptance (accepted at position i / drafts) is already P(>=i)."""
    return tuple(max(0.0, min(1.0, float(r))) for r in rates)


def verify_line(inputs: AdvisorInputs) -> tuple[float, float, str]:
    """(intercept, slope) of verify ms against tokens checked, and where the slope came from.

    A least-squares line through the ledger's points when they cover two or more token
    counts; otherwise through the current measurement with the default slope. The line is
    then shifted to pass through the current measurement, which is the freshest and was
    taken under the current NCCL settings and load.
    """
    points = {int(t): float(ms) for t, ms in inputs.verify_by_tokens.items() if ms > 0}
    if len(points) >= 2:
        xs, ys = list(points), list(points.values())
        mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mean_x) ** 2 for x in xs)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sxx
        slope = max(0.0, slope)
        source = "ledger"
    else:
        slope = DEFAULT_VERIFY_SLOPE_FRACTION * inputs.verify_ms
        source = "default"
    intercept = inputs.verify_ms - slope * inputs.current_tokens
    return intercept, slope, source


def _check(inputs: AdvisorInputs) -> None:
    if inputs.topk != 1:
        raise AdvisorError(
            f"topk is {inputs.topk}: the advisor predicts chain drafts (topk 1) only; a tree "
            "draft's acceptance depends on its branching, which one run does not reveal"
        )
    if inputs.num_steps < 1:
        raise AdvisorError("the server is not speculating (num steps 0): nothing to tune")
    if inputs.cycles < MIN_CYCLES:
        raise AdvisorError(
            f"only {inputs.cycles} timed cycles so far; the advisor needs at least {MIN_CYCLES} "
            "(let the server decode a little longer)"
        )
    if not inputs.accept_at_least:
        raise AdvisorError("no acceptance by position measured yet")
    if inputs.verify_ms <= 0 or inputs.requests_per_cycle <= 0:
        raise AdvisorError("no verify time measured yet")


def _chain(accept_at_least: Sequence[float], k: int) -> tuple[list[float], bool]:
    """P(>=i) for i = 1..k, continuing past the measured depth with the last conditional."""
    measured = [max(0.0, min(1.0, p)) for p in accept_at_least]
    if k <= len(measured):
        return measured[:k], False
    last = measured[-1]
    before = measured[-2] if len(measured) >= 2 else 1.0
    conditional = min(MAX_CONDITIONAL, last / before) if before > 0 else 0.0
    chain = list(measured)
    while len(chain) < k:
        chain.append(chain[-1] * conditional)
    return chain, True


def predict(inputs: AdvisorInputs, k: int, line: tuple[float, float, str]) -> Prediction:
    intercept, slope, source = line
    chain, extrapolated = _chain(inputs.accept_at_least, k)
    accept_len = 1.0 + sum(chain)
    tokens = k + 1
    verify = max(0.0, intercept + slope * tokens)
    cycle = k * inputs.draft_ms_per_step + verify + inputs.extend_ms
    tok_s = accept_len / cycle * 1000.0 * inputs.requests_per_cycle if cycle > 0 else 0.0
    estimated = source == "default" and tokens != inputs.current_tokens
    return Prediction(
        num_steps=k,
        num_draft_tokens=tokens,
        accept_len=accept_len,
        cycle_ms=cycle,
        tok_s=tok_s,
        extrapolated=extrapolated,
        estimated=estimated,
    )


def advise(inputs: AdvisorInputs, max_steps: int | None = None) -> Advice:
    """Predictions for k = 1..max(10, 2 x current) and the k with the highest tok/s."""
    _check(inputs)
    top = max_steps or max(10, 2 * inputs.num_steps)
    line = verify_line(inputs)
    predictions = tuple(predict(inputs, k, line) for k in range(1, top + 1))
    best = max(predictions, key=lambda p: p.tok_s)
    current = predict(inputs, inputs.num_steps, line)
    return Advice(
        current=current,
        predictions=predictions,
        recommended=best,
        inputs=inputs,
        verify_slope_ms_per_token=line[1],
        verify_slope_source=line[2],
    )


def sweep_steps(advice: Advice) -> list[int]:
    """The step counts that check a recommendation: it, its neighbours and the current one."""
    k = advice.recommended.num_steps
    candidates = {k - 1, k, k + 1, advice.inputs.num_steps}
    return sorted(step for step in candidates if step >= 1)


def prediction_flags(prediction: Prediction, advice: Advice) -> list[str]:
    """What to say beside a prediction: the running setting, the pick, and how it was made."""
    return [
        name
        for name, on in (
            ("current", prediction.num_steps == advice.inputs.num_steps),
            ("recommended", prediction.num_steps == advice.recommended.num_steps),
            ("extrapolated", prediction.extrapolated),
            ("estimated", prediction.estimated),
        )
        if on
    ]

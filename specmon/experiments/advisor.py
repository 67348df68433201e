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

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

# Default growth of a verify per extra token checked, as a fraction of the measured verify.
# Decode verifies are dominated by fixed costs (weights read once, graph replay, all-reduce
# latency), so a token adds little: on the one host with two measured points (figures.md:
# 25.6 ms at 3 tokens, 28.7 ms at 6) it was 1.03 ms per token, 3.6% of the 6-token verify.
# Used only when the ledger has no two token counts for this host and model, and flagged.
DEFAULT_VERIFY_SLOPE_FRACTION = 0.036

MIN_CYCLES = 50  # fewer measured cycles than this and the acceptance shape is noise
MAX_CONDITIONAL = 0.999  # an extrapolated chain never reaches certainty

# --- other loads (docs/advisor.md, "At other loads") ---
# A forward's time grows with the tokens it processes once it stops being memory-bound:
# time(N) = t_mem * (1 + N / KNEE), N = requests x tokens per request. KNEE is where the compute
# term equals the memory-bound time. Default from the H200 measurement of a Llama-3.1-8B-shaped
# verify (docs/verify-load-h200/verify_load.json, dense: 771 us at 1 x 1 token, 4,521 us at
# 128 x 8; 1 + 1024/K = 5.86 (1 + 1/K) gives K = 208); used, and flagged, when the ledger has
# no verify times of this host and model at two or more loads.
DEFAULT_KNEE_TOKENS = 200.0
KNEE_RANGE = {"default": 2.0, "ledger": 1.5}  # the knee's uncertainty: K / r .. K x r
SLOPE_RANGE = {"default": 0.5, "ledger": 0.2}  # the per-token verify slope's: s x (1 -/+ f)
ACCEPT_Z = 2.0  # acceptance by position: +- 2 standard errors of each P(>=i)


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
class LoadStep:
    """One step count predicted at one load: aggregate and per-request tok/s, and the mean
    inter-token latency of a request (cycle time / tokens per cycle), each with the range it
    takes over the uncertain inputs."""

    num_steps: int
    tok_s: float
    tok_s_low: float
    tok_s_high: float
    tok_s_per_request: float
    itl_ms: float
    itl_ms_low: float
    itl_ms_high: float


@dataclass(frozen=True, slots=True)
class LoadPrediction:
    """The best step count predicted at one load (concurrent requests), with its uncertainty:
    ``steps_low``..``steps_high`` is the range of the best step count over every corner of
    the uncertain inputs (acceptance, the load model's knee, the verify slope)."""

    concurrency: int
    steps: tuple[LoadStep, ...]
    recommended_steps: int
    steps_low: int
    steps_high: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "prediction": True,
            "recommended_steps": self.recommended_steps,
            "steps_low": self.steps_low,
            "steps_high": self.steps_high,
            "steps": [asdict(step) for step in self.steps],
        }


@dataclass(frozen=True, slots=True)
class LoadModel:
    """How a forward's time grows with the tokens it processes (see DEFAULT_KNEE_TOKENS)."""

    knee_tokens: float
    source: str  # "default" or "ledger"


@dataclass(frozen=True, slots=True)
class Advice:
    current: Prediction  # the model's reading of the running setting (a check on the inputs)
    predictions: tuple[Prediction, ...]
    recommended: Prediction
    inputs: AdvisorInputs
    verify_slope_ms_per_token: float
    verify_slope_source: str  # "ledger" or "default"
    by_load: tuple[LoadPrediction, ...] = ()  # predictions at other loads, when asked for
    load_model: LoadModel | None = None

    def to_dict(self) -> dict[str, Any]:
        inputs = asdict(self.inputs)
        inputs["accept_at_least"] = list(self.inputs.accept_at_least)
        inputs["verify_by_tokens"] = {str(k): v for k, v in self.inputs.verify_by_tokens.items()}
        inputs["verify_slope_ms_per_token"] = self.verify_slope_ms_per_token
        inputs["verify_slope_source"] = self.verify_slope_source
        out = {
            "current": self.current.to_dict(),
            "predictions": [p.to_dict() for p in self.predictions],
            "recommended": {
                "num_steps": self.recommended.num_steps,
                "num_draft_tokens": self.recommended.num_draft_tokens,
            },
            "inputs": inputs,
        }
        if self.by_load and self.load_model is not None:
            out["by_load"] = [p.to_dict() for p in self.by_load]
            out["load_model"] = asdict(self.load_model)
        return out


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


def load_factor(tokens: float, tokens_now: float, knee: float) -> float:
    """How much longer a forward of ``tokens`` takes than one of ``tokens_now``."""
    return (1 + tokens / knee) / (1 + tokens_now / knee)


def _shifted(accept_at_least: Sequence[float], samples: int, sign: int) -> tuple[float, ...]:
    """P(>=i) moved by ``sign`` x ACCEPT_Z standard errors, kept a falling chain in [0, 1]."""
    out: list[float] = []
    for p in accept_at_least:
        se = math.sqrt(max(0.0, p * (1 - p)) / max(1, samples))
        moved = max(0.0, min(1.0, p + sign * ACCEPT_Z * se))
        out.append(min(moved, out[-1]) if out else moved)
    return tuple(out)


def _at_load(
    inputs: AdvisorInputs,
    k: int,
    load: int,
    accept: Sequence[float],
    intercept: float,
    slope: float,
    knee: float,
) -> tuple[float, float]:
    """(tokens per request per cycle, cycle ms) of k steps with ``load`` requests decoding."""
    chain, _ = _chain(accept, k)
    accept_len = 1.0 + sum(chain)
    now = max(inputs.requests_per_cycle, 1e-9)
    tokens = k + 1
    verify = max(0.0, intercept + slope * tokens) * load_factor(load * tokens, now * tokens, knee)
    per_request = load_factor(load, now, knee)
    cycle = (k * inputs.draft_ms_per_step + inputs.extend_ms) * per_request + verify
    return accept_len, cycle


def predict_loads(advice: Advice, loads: Sequence[int], model: LoadModel | None = None) -> Advice:
    """``advice`` with a prediction at each of ``loads`` (concurrent requests, each assumed to
    decode in every cycle): for every step count its tok/s and inter-token latency, the best
    step count, and the range of the best over the corners of the uncertain inputs."""
    model = model or LoadModel(DEFAULT_KNEE_TOKENS, "default")
    inputs = advice.inputs
    intercept, slope, _source = verify_line(inputs)
    top = max(p.num_steps for p in advice.predictions)
    samples = int(inputs.cycles * max(1.0, inputs.requests_per_cycle))
    ratio = KNEE_RANGE.get(model.source, 2.0)
    spread = SLOPE_RANGE.get(advice.verify_slope_source, 0.5)
    corners = [
        (_shifted(inputs.accept_at_least, samples, sign), knee, s)
        for sign in (-1, 0, 1)
        for knee in (model.knee_tokens / ratio, model.knee_tokens, model.knee_tokens * ratio)
        for s in (slope * (1 - spread), slope, slope * (1 + spread))
    ]
    by_load: list[LoadPrediction] = []
    for load in loads:
        table: dict[int, list[tuple[float, float]]] = {k: [] for k in range(1, top + 1)}
        best_by_corner: list[int] = []
        for accept, knee, s in corners:
            line_intercept = inputs.verify_ms - s * inputs.current_tokens
            scores = {}
            for k in table:
                accept_len, cycle = _at_load(inputs, k, load, accept, line_intercept, s, knee)
                table[k].append((accept_len, cycle))
                scores[k] = accept_len / cycle if cycle > 0 else 0.0
            best_by_corner.append(max(scores, key=lambda k: scores[k]))
        steps = []
        for k, rows in table.items():
            accept_len, cycle = _at_load(
                inputs, k, load, inputs.accept_at_least, intercept, slope, model.knee_tokens
            )
            rates = [a / c * 1000.0 for a, c in rows if c > 0]
            itls = [c / a for a, c in rows if a > 0]
            per_request = accept_len / cycle * 1000.0 if cycle > 0 else 0.0
            steps.append(
                LoadStep(
                    num_steps=k,
                    tok_s=per_request * load,
                    tok_s_low=min(rates) * load,
                    tok_s_high=max(rates) * load,
                    tok_s_per_request=per_request,
                    itl_ms=cycle / accept_len,
                    itl_ms_low=min(itls),
                    itl_ms_high=max(itls),
                )
            )
        best = max(steps, key=lambda step: step.tok_s)
        by_load.append(
            LoadPrediction(
                concurrency=load,
                steps=tuple(steps),
                recommended_steps=best.num_steps,
                steps_low=min(best_by_corner),
                steps_high=max(best_by_corner),
            )
        )
    return replace(advice, by_load=tuple(by_load), load_model=model)


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

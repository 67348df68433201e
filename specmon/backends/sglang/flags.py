"""SGLang's launch rules (sglang.md §6, §8), checked before a restart that costs minutes.

specmon is stricter than SGLang in one place on purpose: where SGLang silently adjusts
``--speculative-num-draft-tokens`` to ``num_steps + 1`` for ``topk == 1``, specmon refuses,
so the run that is recorded is the run that was asked for. Unknown flags pass through
(SGLang has hundreds); only their grammar is checked.

Ranges chosen as sane for EAGLE-style decoding: num-steps 1..32, eagle-topk 1..64,
num-draft-tokens 1..1024, tp 1..64, mem-fraction-static in (0, 1], port 1..65535.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specmon.launch import (
    NCCL_ALGO_VALUES,
    NCCL_P2P_LEVEL_VALUES,
    NCCL_PROTO_VALUES,
    SPECULATIVE_ALGORITHM_VALUES,
    parse_flags,
)

NUM_STEPS_RANGE = (1, 32)
EAGLE_TOPK_RANGE = (1, 64)
NUM_DRAFT_TOKENS_RANGE = (1, 1024)
TP_RANGE = (1, 64)
PORT_RANGE = (1, 65535)

# Algorithms that read a separate draft model (NEXTN uses the target's own MTP layers,
# NGRAM needs no model).
NEEDS_DRAFT_MODEL = frozenset({"EAGLE", "EAGLE3", "STANDALONE"})

TP_FLAGS = ("tp", "tp-size", "tensor-parallel-size")
DRAFT_MODEL_FLAGS = ("speculative-draft-model-path", "speculative-draft-model")

# NCCL collective names accepted as "op:" prefixes in NCCL_PROTO / NCCL_ALGO (tuning.cc).
NCCL_OPERATIONS = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")

_BOOL_ENV_VALUES = ("0", "1", "true", "false", "True", "False", "TRUE", "FALSE")


@dataclass(frozen=True, slots=True)
class Problem:
    """One rule broken: ``subject`` is the flag (``--name``) or variable at fault."""

    subject: str
    message: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.message}"


def validate_sglang_launch(args: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """Problems with an SGLang launch; every string names its flag or variable."""
    return [str(problem) for problem in sglang_launch_problems(args, env)]


def sglang_launch_problems(args: Sequence[str], env: Mapping[str, str]) -> list[Problem]:
    """The structured form of validate_sglang_launch, for the relaunch form's inline messages."""
    items, grammar = parse_flags(args)
    problems = [Problem("arguments", text) for text in grammar]
    values: dict[str, str | None] = {}
    for item in items:
        if item.name in values:
            problems.append(Problem(f"--{item.name}", "given more than once; give it once"))
        values[item.name] = item.value
    problems.extend(_alias_problems(values))
    problems.extend(_speculative_problems(values))
    problems.extend(_server_problems(values))
    for name, value in env.items():
        problem = env_value_problem(name, value)
        if problem:
            problems.append(Problem(name, problem))
    return problems


def _alias_problems(values: Mapping[str, str | None]) -> list[Problem]:
    problems = []
    for group in (TP_FLAGS, DRAFT_MODEL_FLAGS):
        given = [name for name in group if name in values]
        if len(given) > 1:
            spelled = " and ".join(f"--{name}" for name in given)
            problems.append(Problem(f"--{given[1]}", f"{spelled} mean the same; give one"))
    return problems


def _int_in_range(
    values: Mapping[str, str | None], name: str, bounds: tuple[int, int]
) -> tuple[int | None, Problem | None]:
    if name not in values:
        return None, None
    raw = values[name]
    low, high = bounds
    wanted = f"a whole number from {low} to {high}"
    if raw is None:
        return None, Problem(f"--{name}", f"needs a value ({wanted})")
    text = raw.strip()
    if not re.fullmatch(r"[+-]?\d{1,9}", text):
        return None, Problem(f"--{name}", f"{raw[:40]!r} is not {wanted}")
    number = int(text)
    if not low <= number <= high:
        return None, Problem(f"--{name}", f"{number} is out of range; expected {wanted}")
    return number, None


def _speculative_problems(values: Mapping[str, str | None]) -> list[Problem]:
    problems: list[Problem] = []
    algorithm = values.get("speculative-algorithm")
    if "speculative-algorithm" in values:
        if algorithm is None:
            problems.append(Problem("--speculative-algorithm", "needs a value"))
        elif algorithm not in SPECULATIVE_ALGORITHM_VALUES:
            problems.append(
                Problem(
                    "--speculative-algorithm",
                    f"{algorithm[:40]!r} is not one of {', '.join(SPECULATIVE_ALGORITHM_VALUES)}"
                    + _hint(algorithm, SPECULATIVE_ALGORITHM_VALUES),
                )
            )
            algorithm = None
    steps, problem_steps = _int_in_range(values, "speculative-num-steps", NUM_STEPS_RANGE)
    topk, problem_topk = _int_in_range(values, "speculative-eagle-topk", EAGLE_TOPK_RANGE)
    drafts, problem_drafts = _int_in_range(
        values, "speculative-num-draft-tokens", NUM_DRAFT_TOKENS_RANGE
    )
    problems.extend(p for p in (problem_steps, problem_topk, problem_drafts) if p)
    draft_model = next((name for name in DRAFT_MODEL_FLAGS if name in values), None)
    if draft_model is not None and not values[draft_model]:
        problems.append(Problem(f"--{draft_model}", "needs a path"))

    speculative_given = sorted(
        name
        for name in values
        if name.startswith("speculative-") and name != "speculative-algorithm"
    )
    if "speculative-algorithm" not in values:
        for name in speculative_given:
            problems.append(
                Problem(f"--{name}", "has no effect without --speculative-algorithm; add it")
            )
        return problems
    if algorithm in NEEDS_DRAFT_MODEL and draft_model is None:
        problems.append(
            Problem(
                "--speculative-draft-model-path",
                f"is required with --speculative-algorithm {algorithm}",
            )
        )
    steps_given = "speculative-num-steps" in values
    for name in ("speculative-eagle-topk", "speculative-num-draft-tokens"):
        if name in values and not steps_given:
            problems.append(
                Problem(
                    f"--{name}",
                    "needs --speculative-num-steps too (without it SGLang picks steps, topk "
                    "and draft tokens itself); give all three or none",
                )
            )
    if steps_given:
        for name in ("speculative-eagle-topk", "speculative-num-draft-tokens"):
            if name not in values:
                problems.append(
                    Problem(f"--{name}", "is missing; with --speculative-num-steps give all three")
                )
    if steps is not None and topk == 1 and drafts is not None and drafts != steps + 1:
        problems.append(
            Problem(
                "--speculative-num-draft-tokens",
                f"must be --speculative-num-steps + 1 = {steps + 1} when "
                f"--speculative-eagle-topk is 1 (got {drafts}); SGLang would silently change "
                f"it to {steps + 1}, specmon asks you to say so",
            )
        )
    return problems


def _server_problems(values: Mapping[str, str | None]) -> list[Problem]:
    problems: list[Problem] = []
    for name in TP_FLAGS:
        problem = _int_in_range(values, name, TP_RANGE)[1]
        if problem:
            problems.append(problem)
    problem = _int_in_range(values, "port", PORT_RANGE)[1]
    if problem:
        problems.append(problem)
    if "mem-fraction-static" in values:
        raw = values["mem-fraction-static"]
        wanted = "a fraction greater than 0 and at most 1 (e.g. 0.88)"
        try:
            fraction = float(raw) if raw is not None else None
        except ValueError:
            fraction = None
        if fraction is None or not 0.0 < fraction <= 1.0:
            shown = "nothing" if raw is None else repr(raw[:40])
            problems.append(Problem("--mem-fraction-static", f"{shown} is not {wanted}"))
    if "model-path" in values and not values["model-path"]:
        problems.append(Problem("--model-path", "needs a path or a model name"))
    return problems


def _hint(value: str, choices: Sequence[str]) -> str:
    upper = {choice.upper(): choice for choice in choices}
    if value.strip().upper() in upper:
        return f"; did you mean {upper[value.strip().upper()]!r}?"
    close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def nccl_list_problem(
    value: str, choices: Sequence[str], *, case_sensitive: bool, what: str
) -> str | None:
    """Check an NCCL_PROTO/NCCL_ALGO value: a comma list, optionally '^'-negated, optionally
    in ';'-separated 'op:' sections (e.g. "^LL128;allreduce:LL128"); None when valid."""
    if not value.strip():
        return f"is empty; use one of {', '.join(choices)}"

    def known(name: str) -> bool:
        if case_sensitive:
            return name in choices
        return name.lower() in {choice.lower() for choice in choices}

    for section in value.split(";"):
        body = section
        operation, has_colon, rest = section.partition(":")
        if has_colon:
            if operation.strip().lower() not in NCCL_OPERATIONS:
                return (
                    f"{operation[:30]!r} is not an NCCL collective; use one of "
                    f"{', '.join(NCCL_OPERATIONS)} before ':'"
                )
            body = rest
        body = body.strip()
        if body.startswith("^"):
            body = body[1:]
        names = [name.strip() for name in body.split(",")]
        for name in names:
            if not name:
                return f"{value[:60]!r} has an empty entry; write e.g. {choices[0]},{choices[1]}"
            if not known(name):
                return f"{name[:30]!r} is not a {what}; use one of {', '.join(choices)}" + _hint(
                    name, choices
                )
    return None


def env_value_problem(name: str, value: str) -> str | None:
    """Why a value is wrong for a variable specmon knows (NCCL knobs, simulator settings)."""
    if name == "NCCL_PROTO":
        return nccl_list_problem(value, NCCL_PROTO_VALUES, case_sensitive=True, what="protocol")
    if name == "NCCL_ALGO":
        return nccl_list_problem(value, NCCL_ALGO_VALUES, case_sensitive=False, what="algorithm")
    if name == "NCCL_P2P_LEVEL":
        if value.strip().upper() in NCCL_P2P_LEVEL_VALUES:
            return None
        return (
            f"{value[:30]!r} is not a P2P level; use one of {', '.join(NCCL_P2P_LEVEL_VALUES)}"
            " (the legacy numbers are not accepted)"
        )
    if name in ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS"):
        if re.fullmatch(r"\d{1,4}", value.strip()) and int(value) >= 1:
            return None
        return f"{value[:30]!r} is not a positive whole number"
    if name == "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN":
        if value in _BOOL_ENV_VALUES:
            return None
        return f"{value[:30]!r} is not 1/0/true/false"
    if name == "SPECMON_SIM_TIME_SCALE":
        try:
            scale = float(value)
        except ValueError:
            scale = 0.0
        if 0.0 < scale <= 1000.0:
            return None
        return f"{value[:30]!r} is not a positive number (1 = real time, 0.02 = 50x faster)"
    if name in ("SPECMON_SIM_SHARDS", "SPECMON_SIM_GPUS"):
        bounds = (1, 100000) if name == "SPECMON_SIM_SHARDS" else (1, 64)
        text = value.strip()
        if re.fullmatch(r"\d{1,6}", text) and bounds[0] <= int(text) <= bounds[1]:
            return None
        return f"{value[:30]!r} is not a whole number from {bounds[0]} to {bounds[1]}"
    return None

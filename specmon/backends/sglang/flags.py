"""SGLang's launch rules (sglang.md §6, §8), checked before a restart that costs minutes.

specmon is stricter than SGLang in one place on purpose: where SGLang silently adjusts
``--speculative-num-draft-tokens`` to ``num_steps + 1`` for ``topk == 1``, specmon refuses,
so the run that is recorded is the run that was asked for. Flags are checked against SGLang's
own schema (flag_schema.py): a switch takes no value, a valued flag needs one, and a name
SGLang does not have is refused with the nearest names (argparse's unambiguous prefixes, such
as ``--tp`` for ``--tp-size``, are accepted as SGLang accepts them).

Ranges chosen as sane for EAGLE-style decoding: num-steps 1..32, eagle-topk 1..64,
num-draft-tokens 1..1024, tp 1..64, mem-fraction-static in (0, 1], port 1..65535.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence

from specmon.backends import FlagKind, Problem
from specmon.backends.flag_grammar import AUTO_PORT, parse_flags
from specmon.backends.nccl import did_you_mean, nccl_env_problem
from specmon.backends.sglang.flag_schema import BOOLEAN_FLAGS, VALUED_FLAGS

SPECULATIVE_ALGORITHM_VALUES: tuple[str, ...] = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")

NUM_STEPS_RANGE = (1, 32)
EAGLE_TOPK_RANGE = (1, 64)
NUM_DRAFT_TOKENS_RANGE = (1, 1024)
TP_RANGE = (1, 64)
PORT_RANGE = (1, 65535)

# Algorithms that read a separate draft model (NEXTN uses the target's own MTP layers,
# NGRAM needs no model).
NEEDS_DRAFT_MODEL = frozenset({"EAGLE", "EAGLE3", "STANDALONE"})

TP_FLAGS = ("tp", "tp-size", "tensor-parallel-size")
# What a server spanning several nodes is started with (rendered from a profile's nodes).
MULTINODE_FLAGS = frozenset({"nnodes", "node-rank", "dist-init-addr"})
NNODES_RANGE = (1, 64)
DRAFT_MODEL_FLAGS = ("speculative-draft-model-path", "speculative-draft-model")

_BOOL_ENV_VALUES = ("0", "1", "true", "false", "True", "False", "TRUE", "FALSE")


def validate_sglang_launch(args: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """Problems with an SGLang launch; every string names its flag or variable."""
    return [str(problem) for problem in sglang_launch_problems(args, env)]


def sglang_launch_problems(args: Sequence[str], env: Mapping[str, str]) -> list[Problem]:
    """The structured form of validate_sglang_launch, for the relaunch form's inline messages."""
    items, grammar = parse_flags(args)
    problems = [Problem("arguments", text) for text in grammar]
    values: dict[str, str | None] = {}
    for item in items:
        name = flag_name_as_read(item.name)
        if name in values:
            problems.append(Problem(f"--{item.name}", "given more than once; give it once"))
        values[name] = item.value
    problems.extend(_schema_problems([(item.name, item.value) for item in items]))
    problems.extend(_alias_problems(values))
    problems.extend(_speculative_problems(values))
    problems.extend(_server_problems(values))
    problems.extend(_node_problems(values))
    for name, value in env.items():
        problem = env_value_problem(name, value)
        if problem:
            problems.append(Problem(name, problem))
    return problems


def flag_name_as_read(name: str) -> str:
    """The name SGLang reads a flag by: an argparse prefix (``speculative-algo``) as the flag
    it stands for, so a launch is checked, and a ``--set`` applied, as it will run. The
    spellings of TP and of the draft model stay as given, for _alias_problems to name both."""
    if name in TP_FLAGS or name in DRAFT_MODEL_FLAGS:
        return name
    return resolve_flag_name(name) or name


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
    problem = (
        None if values.get("port") == AUTO_PORT else _int_in_range(values, "port", PORT_RANGE)[1]
    )
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


def _node_problems(values: Mapping[str, str | None]) -> list[Problem]:
    """--nnodes/--node-rank/--dist-init-addr agree: a rank below the node count, node 0's
    HOST:PORT given when there is more than one node, TP ranks split evenly."""
    nnodes, problem = _int_in_range(values, "nnodes", NNODES_RANGE)
    problems = [problem] if problem else []
    rank, problem = _int_in_range(values, "node-rank", (0, NNODES_RANGE[1] - 1))
    if problem:
        problems.append(problem)
    count = nnodes or 1
    if rank is not None and rank >= count:
        problems.append(
            Problem("--node-rank", f"{rank} is not below --nnodes {count} (ranks start at 0)")
        )
    if "dist-init-addr" in values:
        address = values["dist-init-addr"] or ""
        host, sep, port = address.rpartition(":")
        if not sep or not host.strip("[]") or not re.fullmatch(r"\d{1,5}", port):
            problems.append(Problem("--dist-init-addr", f"{address[:60]!r} is not HOST:PORT"))
        elif not PORT_RANGE[0] <= int(port) <= PORT_RANGE[1]:
            problems.append(Problem("--dist-init-addr", f"port {port} is not in 1..65535"))
    elif count > 1:
        problems.append(
            Problem("--dist-init-addr", f"is required with --nnodes {count} (node 0's HOST:PORT)")
        )
    tp_name = next((name for name in TP_FLAGS if name in values), None)
    tp = _int_in_range(values, tp_name, TP_RANGE)[0] if tp_name else None
    if tp is not None and count > 1 and tp % count:
        problems.append(
            Problem(f"--{tp_name}", f"{tp} TP ranks do not split evenly over {count} nodes")
        )
    return problems


def _hint(value: str, choices: Sequence[str]) -> str:
    return did_you_mean(value, choices)


def flag_kind(name: str) -> FlagKind | None:
    """``switch``, ``value`` or None, for a name or an unambiguous prefix (as argparse reads)."""
    full = resolve_flag_name(name)
    if full is None:
        return None
    return "switch" if full in BOOLEAN_FLAGS and full not in VALUED_FLAGS else "value"


def resolve_flag_name(name: str) -> str | None:
    """The SGLang flag ``name`` stands for: itself, or the one flag it is a prefix of."""
    if name in BOOLEAN_FLAGS or name in VALUED_FLAGS:
        return name
    matches = [flag for flag in (*BOOLEAN_FLAGS, *VALUED_FLAGS) if flag.startswith(name)]
    return matches[0] if len(set(matches)) == 1 else None


# Flags whose own rules below say what value they need.
_RULED_FLAGS = frozenset(
    {
        *TP_FLAGS,
        *DRAFT_MODEL_FLAGS,
        "speculative-algorithm",
        "speculative-num-steps",
        "speculative-eagle-topk",
        "speculative-num-draft-tokens",
        "port",
        "mem-fraction-static",
        "model-path",
        *MULTINODE_FLAGS,
    }
)


def _schema_problems(items: Sequence[tuple[str, str | None]]) -> list[Problem]:
    problems: list[Problem] = []
    known = sorted({*BOOLEAN_FLAGS, *VALUED_FLAGS})
    for name, value in items:
        full = resolve_flag_name(name)
        if full is None:
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join('--' + c for c in close)}?" if close else ""
            problems.append(Problem(f"--{name}", f"is not an SGLang flag{hint}"))
            continue
        switch = full in BOOLEAN_FLAGS
        valued = full in VALUED_FLAGS
        if switch and not valued and value is not None:
            problems.append(
                Problem(
                    f"--{name}",
                    f"is a switch and takes no value (got {value[:40]!r}); give it bare, "
                    "or leave it out to turn it off",
                )
            )
        elif valued and not switch and value is None and full not in _RULED_FLAGS:
            problems.append(Problem(f"--{name}", "needs a value"))
    return problems


def env_value_problem(name: str, value: str) -> str | None:
    """Why a value is wrong for a variable SGLang reads (NCCL's included), or None."""
    if name == "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN":
        if value in _BOOL_ENV_VALUES:
            return None
        return f"{value[:30]!r} is not 1/0/true/false"
    return nccl_env_problem(name, value)

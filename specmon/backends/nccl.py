"""NCCL's tuning variables: their values and checks, shared by every backend's launch rules
and by the relaunch form's select widgets (NVIDIA NCCL docs: environment variables)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

NCCL_PROTO_VALUES: tuple[str, ...] = ("LL", "LL128", "Simple")
NCCL_ALGO_VALUES: tuple[str, ...] = (
    "Ring",
    "Tree",
    "CollnetDirect",
    "CollnetChain",
    "NVLS",
    "NVLSTree",
    "PAT",
)
NCCL_P2P_LEVEL_VALUES: tuple[str, ...] = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")

# The variables the console's header and relaunch form show, with their select values.
NCCL_FORM_CHOICES: dict[str, tuple[str, ...]] = {
    "NCCL_PROTO": NCCL_PROTO_VALUES,
    "NCCL_ALGO": NCCL_ALGO_VALUES,
    "NCCL_P2P_LEVEL": NCCL_P2P_LEVEL_VALUES,
}

# NCCL collective names accepted as "op:" prefixes in NCCL_PROTO / NCCL_ALGO (tuning.cc).
NCCL_OPERATIONS = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")


def did_you_mean(value: str, choices: Sequence[str]) -> str:
    """ "; did you mean 'X'?" for a near miss (case first), else ""."""
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
                return f"{name[:30]!r} is not a {what}; use one of {', '.join(choices)}" + (
                    did_you_mean(name, choices)
                )
    return None


def nccl_env_problem(name: str, value: str) -> str | None:
    """Why a value is wrong for an NCCL variable specmon knows, or None."""
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
    return None

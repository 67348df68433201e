"""vLLM's launch rules, checked before a restart that costs minutes, and its speculative
config: the ``--speculative-config`` JSON (docs/vllm.md, reference vllm.md §6).

The rules are vLLM's own, with vLLM's own words where it has them: ``draft_tensor_parallel_size``
is 1 or the target's TP; eagle, eagle3 and draft_model read a draft ``model``;
``tensor_parallel_size`` inside the JSON is refused; the 0.33 shortcuts (``--spec-method``,
``--spec-model``, ``--spec-tokens``) may not set a key the JSON also sets; the removed V0 flags
are refused with their replacement named. Flags outside the schema pass through unchecked.

Settings: the JSON's keys are also addressable by name, as if they were flags, so a sweep grid
(``num_speculative_tokens=1,2,3``) or a form field edits one key of the JSON: ``method``,
``draft_model`` (the JSON's ``model``), ``num_speculative_tokens``,
``draft_tensor_parallel_size`` and the other keys vLLM reads.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from specmon.backends import FlagKind, Problem
from specmon.backends.flag_grammar import AUTO_PORT, FlagValue, parse_flags
from specmon.backends.nccl import did_you_mean, nccl_env_problem
from specmon.backends.vllm.flag_schema import BOOLEAN_FLAGS, REMOVED_FLAGS, VALUED_FLAGS

SPEC_CONFIG_FLAG = "speculative-config"

# vLLM's speculative methods (config/speculative.py, 0.33); any "*_mtp" is an MTP type too.
METHODS: tuple[str, ...] = (
    "eagle3",
    "eagle",
    "mtp",
    "deepseek_mtp",
    "qwen3_next_mtp",
    "ngram",
    "ngram_gpu",
    "draft_model",
    "suffix",
    "medusa",
    "mlp_speculator",
    "dflash",
    "dspark",
    "custom_class",
    "extract_hidden_states",
)
_MTP_METHOD = re.compile(r"^[a-z0-9_]+_mtp$")
NEEDS_DRAFT_MODEL = frozenset({"eagle", "eagle3", "draft_model", "medusa", "mlp_speculator"})

# The 0.33 shortcut flags and the JSON key each one sets.
SHORTCUTS: dict[str, str] = {
    "spec-method": "method",
    "spec-model": "model",
    "spec-tokens": "num_speculative_tokens",
}

# Setting names (a grid's or a form's) -> the JSON key they edit.
SETTINGS: dict[str, str] = {
    "method": "method",
    "draft_model": "model",
    "num_speculative_tokens": "num_speculative_tokens",
    "draft_tensor_parallel_size": "draft_tensor_parallel_size",
    "prompt_lookup_max": "prompt_lookup_max",
    "prompt_lookup_min": "prompt_lookup_min",
    "disable_by_batch_size": "disable_by_batch_size",
    "max_model_len": "max_model_len",
}
_INT_KEYS = frozenset(
    {
        "num_speculative_tokens",
        "draft_tensor_parallel_size",
        "prompt_lookup_max",
        "prompt_lookup_min",
        "disable_by_batch_size",
        "max_model_len",
    }
)
_SETTING_OF_KEY = {key: name for name, key in SETTINGS.items()}

TP_RANGE = (1, 64)
PORT_RANGE = (1, 65535)
_TP_REASON = (
    "'tensor_parallel_size' is not a valid argument in the speculative_config. "
    "Please pass 'draft_tensor_parallel_size' instead."
)


def normal_name(name: str) -> str:
    """A flag name as vLLM's argparse reads it: underscores are dashes."""
    return name.lstrip("-").replace("_", "-")


def flag_kind(name: str) -> FlagKind | None:
    full = normal_name(name)
    if full in BOOLEAN_FLAGS:
        return "switch"
    if full in VALUED_FLAGS or name in SETTINGS:
        return "value"
    return None


# --- the speculative config ---------------------------------------------------------------


def spec_config_json(config: Mapping[str, Any]) -> str:
    """The ``--speculative-config`` value: compact JSON, keys in vLLM's documented order."""
    order = {key: i for i, key in enumerate(SETTINGS.values())}
    items = sorted(config.items(), key=lambda kv: order.get(kv[0], len(order)))
    return json.dumps(dict(items), separators=(",", ":"))


def read_spec_config(text: str | None) -> tuple[dict[str, Any], str | None]:
    """(the JSON object, None) or ({}, why it is not one)."""
    if text is None:
        return {}, 'needs a JSON object, e.g. \'{"method":"eagle3","model":"/draft"}\''
    try:
        value = json.loads(text)
    except ValueError as exc:
        return {}, f"is not valid JSON ({exc.msg} at character {exc.pos})"
    if not isinstance(value, dict):
        return {}, "must be a JSON object ({...}), got " + type(value).__name__
    return value, None


def _last_values(args: Sequence[str]) -> dict[str, str | None]:
    values: dict[str, str | None] = {}
    for item in parse_flags(args)[0]:
        values[normal_name(item.name)] = item.value
    return values


def setting_value(args: Sequence[str], name: str) -> str | None:
    """The value of a speculative setting (``num_speculative_tokens``...) in a launch's args,
    or None when it is not a setting name or not set."""
    key = SETTINGS.get(name)
    if key is None:
        return None
    config, _ = read_spec_config(_last_values(args).get(SPEC_CONFIG_FLAG))
    value = config.get(key)
    return None if value is None else str(value)


def token_tree(args: Sequence[str]) -> tuple[int, int] | None:
    """(widest branching, nodes) of the ``speculative_token_tree`` in a launch's config (a list
    of paths such as ``[(0,), (1,), (0, 0)]``), or None when it drafts a chain or the tree
    cannot be read."""
    config, _ = read_spec_config(_last_values(args).get(SPEC_CONFIG_FLAG))
    text = config.get("speculative_token_tree")
    if not isinstance(text, str):
        return None
    try:
        paths = ast.literal_eval(text[:10_000])
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(paths, (list, tuple)) or not all(isinstance(p, tuple) for p in paths):
        return None
    children: dict[tuple[object, ...], int] = {}
    for path in paths:
        children[path[:-1]] = children.get(path[:-1], 0) + 1
    return (max(children.values(), default=1), len(paths))


def setting_flags(args: Sequence[str], changes: Mapping[str, FlagValue]) -> dict[str, FlagValue]:
    """Flag changes with setting names folded into one ``--speculative-config`` change."""
    settings = {name: value for name, value in changes.items() if name in SETTINGS}
    if not settings:
        return dict(changes)
    out = {name: value for name, value in changes.items() if name not in SETTINGS}
    raw = out.get(SPEC_CONFIG_FLAG, _last_values(args).get(SPEC_CONFIG_FLAG))
    config, _ = read_spec_config(raw if isinstance(raw, str) else None)
    for name, value in settings.items():
        key = SETTINGS[name]
        if value is None or value is False or value == "":
            config.pop(key, None)
        elif isinstance(value, str) and key in _INT_KEYS and re.fullmatch(r"\d{1,9}", value):
            config[key] = int(value)
        else:
            config[key] = value
    out[SPEC_CONFIG_FLAG] = spec_config_json(config) if config else None
    return out


# --- the rules ----------------------------------------------------------------------------


def vllm_launch_problems(args: Sequence[str], env: Mapping[str, str]) -> list[Problem]:
    """Everything wrong with a vLLM launch's flags and variables (empty when it may run)."""
    items, grammar = parse_flags(args)
    problems = [Problem("arguments", text) for text in grammar]
    values: dict[str, str | None] = {}
    for item in items:
        name = normal_name(item.name)
        if name in values:
            problems.append(Problem(f"--{item.name}", "given more than once; give it once"))
        values[name] = item.value
        if name in REMOVED_FLAGS:
            problems.append(
                Problem(
                    f"--{item.name}",
                    f"was removed from vLLM with the V0 engine; use {REMOVED_FLAGS[name]}",
                )
            )
        elif name in BOOLEAN_FLAGS and item.value is not None:
            problems.append(
                Problem(
                    f"--{item.name}",
                    f"is a switch and takes no value (got {item.value[:40]!r}); give it bare, "
                    "or leave it out to turn it off",
                )
            )
        elif name in VALUED_FLAGS and item.value is None:
            problems.append(Problem(f"--{item.name}", "needs a value"))
    tp, tp_problem = _int_in_range(values, "tensor-parallel-size", TP_RANGE)
    port_problem = (
        None if values.get("port") == AUTO_PORT else _int_in_range(values, "port", PORT_RANGE)[1]
    )
    problems += [p for p in (tp_problem, port_problem) if p]
    if values.get("gpu-memory-utilization") is not None:
        raw = values["gpu-memory-utilization"] or ""
        try:
            fraction: float | None = float(raw)
        except ValueError:
            fraction = None
        if fraction is None or not 0.0 < fraction <= 1.0:
            problems.append(
                Problem(
                    "--gpu-memory-utilization",
                    f"{raw[:40]!r} is not a fraction greater than 0 and at most 1 (e.g. 0.9)",
                )
            )
    problems += _speculative_problems(values, tp or 1)
    for name, value in env.items():
        problem = env_value_problem(name, value)
        if problem:
            problems.append(Problem(name, problem))
    return problems


def _int_in_range(
    values: Mapping[str, str | None], name: str, bounds: tuple[int, int]
) -> tuple[int | None, Problem | None]:
    if name not in values or values[name] is None:
        return None, None
    raw = values[name] or ""
    low, high = bounds
    if not re.fullmatch(r"\d{1,9}", raw.strip()) or not low <= int(raw) <= high:
        return None, Problem(
            f"--{name}", f"{raw[:40]!r} is not a whole number from {low} to {high}"
        )
    return int(raw), None


def _speculative_problems(values: Mapping[str, str | None], target_tp: int) -> list[Problem]:
    problems: list[Problem] = []
    config: dict[str, Any] = {}
    if SPEC_CONFIG_FLAG in values:
        config, why = read_spec_config(values[SPEC_CONFIG_FLAG])
        if why:
            return [Problem(f"--{SPEC_CONFIG_FLAG}", why)]
    for flag, key in SHORTCUTS.items():
        if flag not in values:
            continue
        if key in config:
            problems.append(
                Problem(
                    f"--{flag}",
                    f'sets "{key}", which --{SPEC_CONFIG_FLAG} also sets; vLLM refuses both: '
                    "give it in one place",
                )
            )
        elif values[flag] is not None:
            value: Any = values[flag]
            if key == "num_speculative_tokens" and re.fullmatch(r"\d{1,9}", value):
                value = int(value)
            config[key] = value
    if not config:
        return problems
    if "tensor_parallel_size" in config:
        problems.append(Problem("draft_tensor_parallel_size", _TP_REASON))
    method = config.get("method")
    model = config.get("model")
    if method is not None:
        if not isinstance(method, str) or not (method in METHODS or _MTP_METHOD.match(method)):
            shown = str(method)[:40]
            problems.append(
                Problem(
                    "method",
                    f"{shown!r} is not a vLLM speculative method; one of "
                    f"{', '.join(METHODS)}" + did_you_mean(shown, METHODS),
                )
            )
        elif method in NEEDS_DRAFT_MODEL and not model:
            problems.append(
                Problem(
                    "draft_model",
                    f'method {method} reads a draft model: set "model" in --{SPEC_CONFIG_FLAG}',
                )
            )
    elif not model:
        problems.append(
            Problem(
                "method",
                'is missing: vLLM needs "method" or a draft "model" in '
                f"--{SPEC_CONFIG_FLAG} (num_speculative_tokens was provided but without "
                "speculative model)",
            )
        )
    for key in ("num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min"):
        if key in config and not _positive_int(config[key]):
            problems.append(
                Problem(
                    _SETTING_OF_KEY.get(key, key),
                    f"{config[key]!r:.40} is not a positive whole number",
                )
            )
    if "draft_tensor_parallel_size" in config:
        draft_tp = config["draft_tensor_parallel_size"]
        if not _positive_int(draft_tp):
            problems.append(
                Problem(
                    "draft_tensor_parallel_size", f"{draft_tp!r:.40} is not a positive whole number"
                )
            )
        elif draft_tp not in (1, target_tp):
            problems.append(
                Problem(
                    "draft_tensor_parallel_size",
                    f"speculative_draft_tensor_parallel_size={draft_tp} cannot be other value "
                    f"than 1 or target model tensor_parallel_size={target_tp}",
                )
            )
    return problems


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


_BOOL_ENV_VALUES = ("0", "1", "true", "false", "True", "False", "TRUE", "FALSE")
_BOOL_ENV = frozenset({"VLLM_SKIP_P2P_CHECK", "VLLM_DISABLE_PYNCCL", "VLLM_USE_NCCL_SYMM_MEM"})


def env_value_problem(name: str, value: str) -> str | None:
    """Why a value is wrong for a variable vLLM reads (NCCL's included), or None."""
    if name in _BOOL_ENV and value not in _BOOL_ENV_VALUES:
        return f"{value[:30]!r} is not 1/0/true/false"
    if name == "VLLM_LOGGING_LEVEL" and value.upper() not in (
        "DEBUG",
        "INFO",
        "WARNING",
        "ERROR",
        "CRITICAL",
    ):
        return f"{value[:30]!r} is not DEBUG, INFO, WARNING, ERROR or CRITICAL"
    return nccl_env_problem(name, value)

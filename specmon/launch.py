"""A launch spec: the exact argv and environment of one server launch, checked before it runs.

A restart of a large model costs minutes, so every launch is validated here first (the
backend's flag rules plus the generic rules below), and the command a remote shell will run
is rendered so that no value, however hostile, can change its meaning: every token is
quoted and only whitelisted environment names may be set.

Flags are kept as a flat argv tail (``("--model-path", "/m", "--tp", "8", ...)``). A flag
is ``--name`` followed by its value, ``--name=value`` (used for values that start with
``-``), or a bare ``--name`` (a boolean flag).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specmon.errors import LaunchSpecError

# Environment names a launch may set. The families are the knobs of the GPU stack and the
# server (NCCL, CUDA, PyTorch, SGLang, vLLM, Hugging Face, ...), plus a few exact names:
# PYTHONPATH (the timing probe is injected through it; it only affects the Python server the
# profile already names), LD_LIBRARY_PATH (CUDA/NCCL library locations), TMPDIR and the
# XDG cache dirs (model caches). Everything else is refused, in particular names that change
# how a shell parses or what it runs before the server starts (IFS, PS4, ENV, BASH_ENV,
# SHELLOPTS, BASHOPTS, PROMPT_COMMAND), which program a name resolves to (PATH), or what the
# dynamic loader injects into every process (LD_PRELOAD, LD_AUDIT), and PYTHONHOME,
# PYTHONSTARTUP, PYTHONINSPECT, which swap or hijack the interpreter itself.
ENV_NAME_PATTERN = re.compile(
    r"^(?:(?:NCCL|SGLANG|CUDA|CUDNN|CUBLAS|CUBLASLT|NVTE|NVSHMEM|TORCH|TORCHINDUCTOR|PYTORCH"
    r"|NVIDIA|HF|HUGGINGFACE|TRANSFORMERS|OMP|MKL|SPECMON|TOKENIZERS|VLLM|FLASHINFER|TRITON"
    r"|GLOO|UCX|MC)_[A-Z0-9_]+"
    r"|PYTHONPATH|PYTHONUNBUFFERED|PYTHONFAULTHANDLER|LD_LIBRARY_PATH|TMPDIR"
    r"|XDG_CACHE_HOME|XDG_DATA_HOME)$"
)

# Enumerations for the relaunch form's select widgets (NVIDIA NCCL docs; sglang.md §6, §8).
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
SPECULATIVE_ALGORITHM_VALUES: tuple[str, ...] = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")

# Fields of the relaunch form, in display order; validate_form reports by these names.
FORM_FLAG_FIELDS: tuple[str, ...] = (
    "speculative-num-steps",
    "speculative-eagle-topk",
    "speculative-num-draft-tokens",
    "mem-fraction-static",
)
FORM_ENV_FIELDS: tuple[str, ...] = ("NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL")
FORM_EXTRA_ARGS = "extra-args"
FORM_EXTRA_ENV = "extra-env"
FORM_FIELDS: tuple[str, ...] = (
    *FORM_FLAG_FIELDS,
    *FORM_ENV_FIELDS,
    FORM_EXTRA_ARGS,
    FORM_EXTRA_ENV,
)

_FLAG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_NEGATIVE_NUMBER = re.compile(r"^-\d+(?:\.\d*)?(?:[eE][-+]?\d+)?$|^-\.\d+$")

# Words a POSIX shell (or bash) reads as syntax when they stand where a command name goes.
_SHELL_RESERVED = frozenset(
    [
        "!",
        "{",
        "}",
        "[[",
        "]]",
        "case",
        "coproc",
        "do",
        "done",
        "elif",
        "else",
        "esac",
        "fi",
        "for",
        "function",
        "if",
        "in",
        "select",
        "then",
        "time",
        "until",
        "while",
    ]
)

FlagValue = str | bool | None


@dataclass(frozen=True, slots=True)
class FlagItem:
    """One parsed flag: its name without dashes and its value (None for a boolean flag)."""

    name: str
    value: str | None
    index: int  # position of the flag token in the args tuple


def _is_value_token(token: str) -> bool:
    return not token.startswith("-") or bool(_NEGATIVE_NUMBER.match(token))


def parse_flags(args: Sequence[str]) -> tuple[list[FlagItem], list[str]]:
    """Split a flat argv tail into flags; also returns problems with its grammar."""
    items: list[FlagItem] = []
    problems: list[str] = []
    index = 0
    while index < len(args):
        token = args[index]
        if not token.startswith("--"):
            problems.append(f"{token!r}: not a flag; flags look like --name or --name=value")
            index += 1
            continue
        name, has_inline, inline_value = token[2:].partition("=")
        if not _FLAG_NAME.match(name):
            problems.append(f"{token[:60]!r}: not a valid flag name")
            index += 1
            continue
        if has_inline:
            items.append(FlagItem(name, inline_value, index))
            index += 1
        elif index + 1 < len(args) and _is_value_token(args[index + 1]):
            items.append(FlagItem(name, args[index + 1], index))
            index += 2
        else:
            items.append(FlagItem(name, None, index))
            index += 1
    return items, problems


def render_flag(name: str, value: str | bool) -> tuple[str, ...]:
    """The argv tokens of one flag; values starting with '-' use the unambiguous --name=value."""
    name = name.lstrip("-")
    if value is True:
        return (f"--{name}",)
    if isinstance(value, bool):
        raise ValueError("False removes a flag; it has no tokens")
    if value.startswith("-") and not _NEGATIVE_NUMBER.match(value):
        return (f"--{name}={value}",)
    return (f"--{name}", value)


def text_problem(subject: str, value: str) -> str | None:
    """Why a value cannot travel in argv or env at all (NUL, unencodable text), or None."""
    if "\x00" in value:
        return f"{subject}: contains a NUL character, which no command line can carry"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return f"{subject}: is not valid text (unpaired surrogate characters)"
    return None


def env_name_problem(name: str) -> str | None:
    """Why an environment name may not be set by a launch, or None when it may."""
    if ENV_NAME_PATTERN.match(name):
        return None
    shown = name if len(name) <= 60 else name[:57] + "..."
    return (
        f"{shown!r}: this environment variable may not be set by a launch; allowed are "
        "NCCL_*, SGLANG_*, CUDA_*, TORCH_*, PYTORCH_*, HF_*, SPECMON_*, VLLM_* and similar "
        "GPU-stack families, plus PYTHONPATH, LD_LIBRARY_PATH, TMPDIR (see docs/config.md)"
    )


def _quote_command_word(word: str) -> str:
    """Quote the command name so a shell can never read it as syntax or as an assignment."""
    quoted = shlex.quote(word)
    if quoted == word and ("=" in word or word in _SHELL_RESERVED):
        return f"'{word}'"
    return quoted


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """What to run: ``command`` (e.g. python3 -m sglang.launch_server), ``args`` and ``env``.

    ``env`` may be given as a mapping; it is stored as a tuple of pairs so a spec stays
    immutable and comparable.
    """

    backend: str
    command: tuple[str, ...]
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        env: Any = self.env
        pairs = tuple(env.items()) if isinstance(env, Mapping) else tuple(tuple(p) for p in env)
        object.__setattr__(self, "env", pairs)
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "args", tuple(self.args))

    # --- reading -----------------------------------------------------------------------

    @property
    def argv(self) -> tuple[str, ...]:
        return self.command + self.args

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def flag_items(self) -> list[FlagItem]:
        return parse_flags(self.args)[0]

    def flag(self, name: str) -> str | None:
        """The value of ``--name`` (last one wins, like argparse); '' for a boolean flag."""
        name = name.lstrip("-")
        found: str | None = None
        for item in self.flag_items():
            if item.name == name:
                found = "" if item.value is None else item.value
        return found

    def has_flag(self, name: str) -> bool:
        name = name.lstrip("-")
        return any(item.name == name for item in self.flag_items())

    def key_flags(self) -> dict[str, str]:
        """The settings an operator compares runs by, for the console header.

        Keys (only those set): algorithm ("off" without speculation), steps, topk,
        draft_tokens, tp, mem_fraction, NCCL_PROTO, NCCL_ALGO, NCCL_P2P_LEVEL.
        """
        out: dict[str, str] = {"algorithm": self.flag("speculative-algorithm") or "off"}
        for key, names in (
            ("steps", ("speculative-num-steps",)),
            ("topk", ("speculative-eagle-topk",)),
            ("draft_tokens", ("speculative-num-draft-tokens",)),
            ("tp", ("tp", "tp-size", "tensor-parallel-size")),
            ("mem_fraction", ("mem-fraction-static",)),
        ):
            for name in names:
                value = self.flag(name)
                if value:
                    out[key] = value
                    break
        env = self.env_dict()
        for name in FORM_ENV_FIELDS:
            if name in env:
                out[name] = env[name]
        return out

    # --- changing (every change returns a new spec) ------------------------------------

    def with_flags(self, changes: Mapping[str, FlagValue]) -> LaunchSpec:
        """Set, replace or remove flags: a str sets the value, True makes a boolean flag,
        None or False removes every occurrence. Names may be given with or without '--'.
        A replaced flag keeps its position; a new one is appended."""
        args = list(self.args)
        for raw_name, value in changes.items():
            name = raw_name.lstrip("-")
            if not _FLAG_NAME.match(name):
                raise LaunchSpecError([f"{raw_name[:60]!r}: not a valid flag name"])
            items = [item for item in parse_flags(args)[0] if item.name == name]
            spans = [(item.index, _flag_width(args, item)) for item in items]
            new_tokens = () if value is None or value is False else render_flag(name, value)
            insert_at = spans[0][0] if spans else len(args)
            for start, width in reversed(spans):
                del args[start : start + width]
            args[insert_at:insert_at] = new_tokens
        return LaunchSpec(self.backend, self.command, tuple(args), self.env)

    def with_env(self, changes: Mapping[str, str | None]) -> LaunchSpec:
        """Set or replace variables; None removes one."""
        env = self.env_dict()
        for name, value in changes.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return LaunchSpec(self.backend, self.command, self.args, env)

    def with_command(self, command: Sequence[str]) -> LaunchSpec:
        return LaunchSpec(self.backend, tuple(command), self.args, self.env)

    def without_speculation(self) -> LaunchSpec:
        """The same launch with every --speculative-* flag removed (the measured baseline)."""
        names = {item.name for item in self.flag_items() if item.name.startswith("speculative-")}
        return self.with_flags(dict.fromkeys(names))

    # --- checking ----------------------------------------------------------------------

    def _text_problems(self) -> list[str]:
        """What no command line can carry: an empty command, NUL or unpaired surrogates in any
        word, env names outside the whitelist. Both checking and rendering refuse these."""
        problems: list[str] = []
        if not self.command:
            problems.append("command: is empty; name the server program to run")
        for position, token in enumerate(self.command):
            problem = text_problem(f"command word {position + 1}", token)
            if problem:
                problems.append(problem)
        for token in self.args:
            problem = text_problem(f"argument {token[:40]!r}", token)
            if problem:
                problems.append(problem)
        for name, value in self.env:
            problem = env_name_problem(name) or text_problem(name, value)
            if problem:
                problems.append(problem)
        return problems

    def problems(self) -> list[str]:
        """Everything wrong with this launch; empty when it may run."""
        problems = self._text_problems()
        seen: set[str] = set()
        for name, _ in self.env:
            if name in seen:
                problems.append(f"{name}: set twice")
            seen.add(name)
        if any("\x00" in t for t in self.args):
            return problems  # the backend's rules cannot say more about unusable text
        from specmon.backends import get_backend
        from specmon.errors import UsageError

        try:
            backend = get_backend(self.backend)
        except UsageError as exc:
            problems.append(f"backend: {exc}")
            return problems
        problems.extend(backend.validate_launch(self.args, self.env_dict()))
        return problems

    def validate(self) -> None:
        """Raise LaunchSpecError listing every problem, or return when the launch may run."""
        problems = self.problems()
        if problems:
            raise LaunchSpecError(problems)

    # --- rendering ---------------------------------------------------------------------

    def shell_command(self) -> str:
        """One POSIX shell command line: ``NAME='value' ... 'cmd' 'arg' ...``.

        Every token is quoted with shlex.quote (newlines stay inside quotes); the command
        name is quoted even where shlex would not, so it is never read as a keyword or an
        assignment. Names outside the whitelist and values a command line cannot carry
        (NUL) raise LaunchSpecError instead of being rendered. Run it with a POSIX shell
        (e.g. pass it to ``sh -c``) when the login shell might be csh or fish.
        """
        problems = self._text_problems()
        if problems:
            raise LaunchSpecError(problems)
        words = [f"{name}={shlex.quote(value)}" for name, value in self.env]
        words.append(_quote_command_word(self.command[0]))
        words.extend(shlex.quote(token) for token in self.argv[1:])
        return " ".join(words)

    def to_json(self) -> str:
        return json.dumps(
            {
                "backend": self.backend,
                "command": list(self.command),
                "args": list(self.args),
                "env": dict(self.env),
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> LaunchSpec:
        """Read what to_json wrote; a wrong shape is a LaunchSpecError, never a KeyError."""
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise LaunchSpecError([f"launch spec JSON: {exc}"]) from None
        if not isinstance(data, dict):
            raise LaunchSpecError(["launch spec JSON: expected an object"])
        backend = data.get("backend")
        command = data.get("command")
        args = data.get("args", [])
        env = data.get("env", {})
        if not isinstance(backend, str):
            raise LaunchSpecError(["launch spec JSON: 'backend' must be a string"])
        for key, value in (("command", command), ("args", args)):
            if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
                raise LaunchSpecError([f"launch spec JSON: {key!r} must be a list of strings"])
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise LaunchSpecError(["launch spec JSON: 'env' must map names to strings"])
        return cls(backend, tuple(command), tuple(args), env)


def _flag_width(args: Sequence[str], item: FlagItem) -> int:
    token = args[item.index]
    if item.value is None or "=" in token:
        return 1
    return 2


def split_overrides(
    values: Mapping[str, str | None],
) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """Split mixed overrides (a sweep grid, ``--set``) into (flags, env): names starting
    with an uppercase letter are environment variables, the rest are flags (dashes optional)."""
    flags: dict[str, str | None] = {}
    env: dict[str, str | None] = {}
    for name, value in values.items():
        bare = name.lstrip("-")
        if bare[:1].isupper() and not name.startswith("-"):
            env[name] = value
        else:
            flags[bare] = value
    return flags, env


# --- the relaunch form -----------------------------------------------------------------


def parse_extra_args(text: str) -> list[str]:
    """Split the form's free "extra args" text like a shell would; LaunchSpecError if it can't."""
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise LaunchSpecError([f"{FORM_EXTRA_ARGS}: {exc} (unbalanced quotes?)"]) from None


def parse_extra_env(text: str) -> dict[str, str]:
    """Read the form's "NAME=VALUE NAME=VALUE" text (shell quoting allowed for values)."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise LaunchSpecError([f"{FORM_EXTRA_ENV}: {exc} (unbalanced quotes?)"]) from None
    env: dict[str, str] = {}
    for word in words:
        name, has_equals, value = word.partition("=")
        if not has_equals or not name:
            raise LaunchSpecError([f"{FORM_EXTRA_ENV}: {word[:40]!r} is not NAME=VALUE"])
        problem = env_name_problem(name)
        if problem:
            raise LaunchSpecError([f"{FORM_EXTRA_ENV}: {problem}"])
        env[name] = value
    return env


def validate_form(values: Mapping[str, str], *, base: LaunchSpec | None = None) -> dict[str, str]:
    """Inline validation for the (SGLang) relaunch form: field -> message, empty when valid.

    Fields are FORM_FIELDS; a blank field means "not set". ``base`` is the launch being
    edited: its speculative algorithm applies (EAGLE3 when no base is given). Only rules
    among the form's own fields are checked here; the whole launch is checked on submit.
    """
    from specmon.backends.sglang.flags import sglang_launch_problems

    messages: dict[str, str] = {}
    algorithm = base.flag("speculative-algorithm") if base is not None else "EAGLE3"
    args: list[str] = [*render_flag("speculative-algorithm", algorithm)] if algorithm else []
    env: dict[str, str] = {}
    for name in FORM_FLAG_FIELDS:
        value = values.get(name, "").strip()
        if value:
            args.extend(render_flag(name, value))
    for name in FORM_ENV_FIELDS:
        value = values.get(name, "").strip()
        if value:
            env[name] = value
    try:
        extra_args = parse_extra_args(values.get(FORM_EXTRA_ARGS, ""))
    except LaunchSpecError as exc:
        messages[FORM_EXTRA_ARGS] = exc.problems[0].partition(": ")[2]
        extra_args = []
    try:
        extra_env = parse_extra_env(values.get(FORM_EXTRA_ENV, ""))
    except LaunchSpecError as exc:
        messages[FORM_EXTRA_ENV] = exc.problems[0].partition(": ")[2]
        extra_env = {}
    form_flags = {name for name in FORM_FLAG_FIELDS if values.get(name, "").strip()}
    for item in parse_flags(extra_args)[0]:
        if item.name in form_flags:
            messages.setdefault(FORM_EXTRA_ARGS, f"--{item.name} has its own field; set it there")
    for name in extra_env:
        if name in env:
            messages.setdefault(FORM_EXTRA_ENV, f"{name} has its own field; set it there")
    for field_name in FORM_FIELDS:
        problem = text_problem("value", values.get(field_name, ""))
        if problem:
            messages.setdefault(field_name, problem.partition(": ")[2])
    for problem in sglang_launch_problems([*args, *extra_args], {**extra_env, **env}):
        field_name = _form_field_of(problem.subject, extra_env)
        if problem.subject in ("--speculative-algorithm", "--speculative-draft-model-path"):
            continue  # not editable in the form: the profile provides them
        messages.setdefault(field_name, problem.message)
    return messages


def _form_field_of(subject: str, extra_env: Mapping[str, str]) -> str:
    name = subject.lstrip("-")
    if name in FORM_FLAG_FIELDS or name in FORM_ENV_FIELDS:
        return name
    if subject in extra_env:
        return FORM_EXTRA_ENV
    return FORM_EXTRA_ARGS


def form_values(spec: LaunchSpec, profile_extra_args: Iterable[str] = ()) -> dict[str, str]:
    """Prefill the relaunch form from a spec: its fields, plus extra args/env as text.

    ``profile_extra_args`` are the flags shown in the extra-args field (those of the
    profile's ``extra_args``); environment variables without a field of their own go to
    the extra-env field.
    """
    values = {name: spec.flag(name) or "" for name in FORM_FLAG_FIELDS}
    env = spec.env_dict()
    for name in FORM_ENV_FIELDS:
        values[name] = env.get(name, "")
    values[FORM_EXTRA_ARGS] = shlex.join(list(profile_extra_args))
    values[FORM_EXTRA_ENV] = " ".join(
        f"{name}={shlex.quote(value)}" for name, value in env.items() if name not in FORM_ENV_FIELDS
    )
    return values


def form_overrides(
    values: Mapping[str, str], base: LaunchSpec, base_extra_args: Iterable[str] = ()
) -> tuple[dict[str, FlagValue], dict[str, str | None]]:
    """Turn submitted form values into (flags, env) overrides of ``base``.

    Blank fields remove their flag or variable; flags that were in ``base_extra_args`` and
    are no longer in the extra-args text are removed, likewise extra env variables.
    Raises LaunchSpecError when the free-text fields cannot be parsed.
    """
    flags: dict[str, FlagValue] = {}
    env: dict[str, str | None] = {}
    for name in FORM_FLAG_FIELDS:
        value = values.get(name, "").strip()
        flags[name] = value or None
    for name in FORM_ENV_FIELDS:
        value = values.get(name, "").strip()
        env[name] = value or None
    extra_items, problems = parse_flags(parse_extra_args(values.get(FORM_EXTRA_ARGS, "")))
    if problems:
        raise LaunchSpecError([f"{FORM_EXTRA_ARGS}: {problem}" for problem in problems])
    for item in parse_flags(list(base_extra_args))[0]:
        flags.setdefault(item.name, None)
    for item in extra_items:
        flags[item.name] = True if item.value is None else item.value
    extra_env = parse_extra_env(values.get(FORM_EXTRA_ENV, ""))
    for name in base.env_dict():
        if name not in FORM_ENV_FIELDS:
            env[name] = None
    env.update(extra_env)
    return flags, env

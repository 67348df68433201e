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
from typing import TYPE_CHECKING, Any

from specmon.backends.flag_grammar import (
    FLAG_NAME,
    FlagItem,
    FlagValue,
    parse_flags,
    render_flag,
)
from specmon.model.errors import LaunchSpecError, UsageError
from specmon.model.secrets import MASK, is_secret_env, is_secret_setting, redact_argv

if TYPE_CHECKING:
    from specmon.backends import Backend

__all__ = ["FlagItem", "FlagValue", "LaunchSpec", "parse_flags", "render_flag"]

# Environment names a launch may set. The families are the knobs of the GPU stack (NCCL,
# CUDA, PyTorch, Hugging Face, ...) plus each registered backend's own families (its
# ``env_prefixes``), plus a few exact names: PYTHONPATH (the timing probe is injected through
# it; it only affects the Python server the profile already names), LD_LIBRARY_PATH
# (CUDA/NCCL library locations), TMPDIR and the XDG cache dirs (model caches). Everything
# else is refused, in particular names that change how a shell parses or what it runs before
# the server starts (IFS, PS4, ENV, BASH_ENV, SHELLOPTS, BASHOPTS, PROMPT_COMMAND), which
# program a name resolves to (PATH), or what the dynamic loader injects into every process
# (LD_PRELOAD, LD_AUDIT), and PYTHONHOME, PYTHONSTARTUP, PYTHONINSPECT, which swap or hijack
# the interpreter itself.
ENV_FAMILIES = (
    "NCCL", "CUDA", "CUDNN", "CUBLAS", "CUBLASLT", "NVTE", "NVSHMEM", "TORCH", "TORCHINDUCTOR",
    "PYTORCH", "NVIDIA", "HF", "HUGGINGFACE", "TRANSFORMERS", "OMP", "MKL", "SPECMON",
    "TOKENIZERS", "FLASHINFER", "TRITON", "GLOO", "UCX", "MC",
)  # fmt: skip
ENV_EXACT_NAMES = (
    "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONFAULTHANDLER", "LD_LIBRARY_PATH", "TMPDIR",
    "XDG_CACHE_HOME", "XDG_DATA_HOME",
)  # fmt: skip
ENV_NAME_PATTERN = re.compile(
    rf"^(?:(?:{'|'.join(ENV_FAMILIES)})_[A-Z0-9_]+|{'|'.join(ENV_EXACT_NAMES)})$"
)
_ENV_FAMILY_NAME = re.compile(r"^[A-Z][A-Z0-9]*_[A-Z0-9_]+$")

# The relaunch form's free-text fields, after the backend's own fields.
FORM_EXTRA_ARGS = "extra-args"
FORM_EXTRA_ENV = "extra-env"

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
    from specmon.backends import env_prefixes

    if _ENV_FAMILY_NAME.match(name) and name.startswith(env_prefixes()):
        return None
    shown = name if len(name) <= 60 else name[:57] + "..."
    families = ", ".join(f"{prefix}*" for prefix in env_prefixes())
    return (
        f"{shown!r}: this environment variable may not be set by a launch; allowed are "
        f"NCCL_*, CUDA_*, TORCH_*, PYTORCH_*, HF_*, SPECMON_*, {families} and similar "
        "GPU-stack families, plus PYTHONPATH, LD_LIBRARY_PATH, TMPDIR (see docs/config.md)"
    )


def allowed_env_rules() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the exact names, the name prefixes) a launch may set, as ``env_name_problem`` allows
    them: what ``specmon adopt`` asks a host to read of a server's environment (each name
    read is then checked by ``env_name_problem`` too)."""
    from specmon.backends import env_prefixes

    return ENV_EXACT_NAMES, (*(f"{family}_" for family in ENV_FAMILIES), *env_prefixes())


def simulator_env_problem(name: str, value: str) -> str | None:
    """Why a value is wrong for one of the simulator's SPECMON_SIM_* settings, or None."""
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


def _backend(name: str) -> Backend:
    """The registered backend ``name``; an unknown name is a LaunchSpecError."""
    from specmon.backends import get_backend

    try:
        return get_backend(name)
    except UsageError as exc:
        raise LaunchSpecError([f"backend: {exc}"]) from None


def switch_value(name: str, value: str) -> bool:
    """Read "true"/"false" (and 1/0, yes/no, on/off) given for a switch flag."""
    text = value.strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise LaunchSpecError([f"--{name}: is a switch; set it to true or false (got {value[:40]!r})"])


def _quote_command_word(word: str) -> str:
    """Quote the command name so a shell can never read it as syntax or as an assignment."""
    quoted = shlex.quote(word)
    if quoted == word and ("=" in word or word in _SHELL_RESERVED):
        return f"'{word}'"
    return quoted


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """What to run: ``command`` (the server program), ``args`` and ``env``, for ``backend``.

    The spec holds its backend itself, so whoever reads or changes it asks that backend
    directly and no name is looked up again on the way to the host. ``backend`` may be
    given by name (JSON, tests): it is looked up once, here, and an unknown name is a
    LaunchSpecError. ``env`` may be given as a mapping; it is stored as a tuple of pairs so
    a spec stays immutable and comparable (backends are one instance per process, so two
    specs of one backend compare equal).
    """

    backend: Backend
    command: tuple[str, ...]
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        backend: Any = self.backend
        if isinstance(backend, str):
            object.__setattr__(self, "backend", _backend(backend))
        env: Any = self.env
        pairs = tuple(env.items()) if isinstance(env, Mapping) else tuple(tuple(p) for p in env)
        object.__setattr__(self, "env", pairs)
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "args", tuple(self.args))

    def __repr__(self) -> str:
        return (
            f"LaunchSpec(backend={self.backend.name!r}, command={self.command!r}, "
            f"args={self.args!r}, env={self.env!r})"
        )

    # --- reading -----------------------------------------------------------------------

    @property
    def argv(self) -> tuple[str, ...]:
        return self.command + self.args

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def shown(self) -> LaunchSpec:
        """The spec as specmon shows and records it (the sweep's launch line, the run's
        record): secret environment values and secret flag values as ``***``."""
        masked = {name: MASK for name, value in self.env if is_secret_env(name) and value}
        command, args = redact_argv(self.command), redact_argv(self.args)
        if not masked and (command, args) == (self.command, self.args):
            return self
        return LaunchSpec(self.backend, command, args, {**dict(self.env), **masked})

    def flag_items(self) -> list[FlagItem]:
        return parse_flags(self.args)[0]

    def flag(self, name: str) -> str | None:
        """The value of ``--name`` (last one wins, like argparse); '' for a boolean flag. A
        backend's named setting that is not a flag of its own (vLLM's
        ``num_speculative_tokens``, a key of its speculative config) reads the same way."""
        name = name.lstrip("-")
        setting = self.backend.setting_value(self.args, name)
        if setting is not None:
            return setting
        found: str | None = None
        for item in self.flag_items():
            if item.name == name:
                found = "" if item.value is None else item.value
        return found

    def has_flag(self, name: str) -> bool:
        name = name.lstrip("-")
        return any(item.name == name for item in self.flag_items())

    def key_flags(self) -> dict[str, str]:
        """The settings an operator compares runs by, for the console header (the backend
        says which: algorithm, steps, topk, draft_tokens, tp, mem_fraction, NCCL_*)."""
        return self.backend.key_flags(self.args, self.env_dict())

    # --- changing (every change returns a new spec) ------------------------------------

    def with_flags(self, changes: Mapping[str, FlagValue]) -> LaunchSpec:
        """Set, replace or remove flags: a str sets the value, True makes a boolean flag,
        None or False removes every occurrence. Names may be given with or without '--'.
        For a flag the backend's schema calls a switch, "true" sets it bare and "false"
        removes it. A replaced flag keeps its position; a new one is appended. The backend
        folds its named settings (``Backend.setting_flags``) into the flags that carry them."""
        args = list(self.args)
        changes = self.backend.setting_flags(self.args, changes)
        for raw_name, value in changes.items():
            name = raw_name.lstrip("-")
            if not FLAG_NAME.match(name):
                raise LaunchSpecError([f"{raw_name[:60]!r}: not a valid flag name"])
            if isinstance(value, str) and self.backend.flag_kind(name) == "switch":
                value = switch_value(name, value)
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
        """The same launch with speculative decoding off (the measured baseline)."""
        names = self.backend.speculation_flags(self.args)
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
        problems.extend(self.backend.validate_launch(self.args, self.env_dict()))
        for name, value in self.env:
            problem = simulator_env_problem(name, value)
            if problem:
                problems.append(f"{name}: {problem}")
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
                "backend": self.backend.name,
                "command": list(self.command),
                "args": list(self.args),
                "env": dict(self.env),
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> LaunchSpec:
        """Read what to_json wrote; a wrong shape or an unknown backend is a LaunchSpecError,
        never a KeyError."""
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


def form_fields(backend: Backend) -> tuple[str, ...]:
    """Every field of the relaunch form for ``backend``, in display order."""
    return (*(f.name for f in backend.form_fields()), FORM_EXTRA_ARGS, FORM_EXTRA_ENV)


def _flag_fields(backend: Backend) -> tuple[str, ...]:
    return tuple(f.name for f in backend.form_fields() if not f.is_env)


def _env_fields(backend: Backend) -> tuple[str, ...]:
    return tuple(f.name for f in backend.form_fields() if f.is_env)


def validate_form(
    values: Mapping[str, str], *, base: LaunchSpec | None = None, backend: Backend | None = None
) -> dict[str, str]:
    """Inline validation for the relaunch form: field -> message, empty when valid.

    Fields are ``form_fields(backend)``; a blank field means "not set". ``base`` is the
    launch being edited (its backend applies, and the flags the backend's rules need from
    it); without one, the default backend's form is checked. Only rules among the form's own
    fields are checked here; the whole launch is checked on submit.
    """
    if backend is None:
        from specmon.backends import DEFAULT_BACKEND

        backend = base.backend if base is not None else _backend(DEFAULT_BACKEND)
    flag_fields, env_fields = _flag_fields(backend), _env_fields(backend)
    messages: dict[str, str] = {}
    args: list[str] = backend.form_context_args(base.args if base is not None else None)
    env: dict[str, str] = {}
    changes: dict[str, FlagValue] = {
        name: values.get(name, "").strip() or None for name in flag_fields
    }
    args = list(LaunchSpec(backend, ("server",), tuple(args)).with_flags(changes).args)
    for name in env_fields:
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
    form_flags = {name for name in flag_fields if values.get(name, "").strip()}
    for item in parse_flags(extra_args)[0]:
        if item.name in form_flags:
            messages.setdefault(FORM_EXTRA_ARGS, f"--{item.name} has its own field; set it there")
    for name in extra_env:
        if name in env:
            messages.setdefault(FORM_EXTRA_ENV, f"{name} has its own field; set it there")
    for field_name in form_fields(backend):
        problem = text_problem("value", values.get(field_name, ""))
        if problem:
            messages.setdefault(field_name, problem.partition(": ")[2])
    fixed = backend.form_fixed_subjects()
    all_env = {**extra_env, **env}
    for problem in backend.launch_problems([*args, *extra_args], all_env):
        if problem.subject in fixed:
            continue  # not editable in the form: the profile provides them
        field_name = _form_field_of(problem.subject, extra_env, backend)
        messages.setdefault(field_name, problem.message)
    for name, value in extra_env.items():
        sim_problem = simulator_env_problem(name, value)
        if sim_problem:
            messages.setdefault(FORM_EXTRA_ENV, f"{name}: {sim_problem}")
    return messages


def _form_field_of(subject: str, extra_env: Mapping[str, str], backend: Backend) -> str:
    name = subject.lstrip("-")
    if name in _flag_fields(backend) or name in _env_fields(backend):
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
    backend = spec.backend
    env_fields = _env_fields(backend)
    values = {name: spec.flag(name) or "" for name in _flag_fields(backend)}
    env = spec.env_dict()
    for name in env_fields:
        values[name] = env.get(name, "")
    values[FORM_EXTRA_ARGS] = extra_args_text(profile_extra_args)
    values[FORM_EXTRA_ENV] = " ".join(
        f"{name}={MASK if is_secret_env(name) and value else shlex.quote(value)}"
        for name, value in env.items()
        if name not in env_fields
    )
    return values


def extra_args_text(args: Iterable[str]) -> str:
    """Flags as the form's extra-args field shows them: secret values as ``***`` (given back
    as ``***``, form_overrides puts the real value back)."""
    return shlex.join(redact_argv(args))


@dataclass(frozen=True)
class SecretValues:
    """The real values behind a form's ``***``: secret flags by name (no dashes) and secret
    environment variables, as the spec the form was filled from had them."""

    flags: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, *specs: LaunchSpec) -> SecretValues:
        """The secret values of ``specs``; a later spec's value wins."""
        flags: dict[str, str] = {}
        env: dict[str, str] = {}
        for spec in specs:
            for item in spec.flag_items():
                if item.value and is_secret_setting(item.name) and item.value != MASK:
                    flags[item.name] = item.value
            for name, value in spec.env:
                if value and is_secret_env(name) and value != MASK:
                    env[name] = value
        return cls(flags, env)


def restore_form_secrets(values: Mapping[str, str], secrets: SecretValues) -> dict[str, str]:
    """The form's values with every secret left as shown (``***``) in the extra-args and
    extra-env texts given its real value back from ``secrets``. A ``***`` whose value is known
    nowhere (the run was launched with it and its record keeps it masked) is refused
    (LaunchSpecError), never launched or saved as the value. A text that does not parse is
    left as it is: reading it reports the problem."""
    restored = dict(values)
    try:
        args = parse_extra_args(values.get(FORM_EXTRA_ARGS, ""))
        env = parse_extra_env(values.get(FORM_EXTRA_ENV, ""))
    except LaunchSpecError:
        return restored
    changed = False
    for item in parse_flags(args)[0]:
        if item.value != MASK or not is_secret_setting(item.name):
            continue
        if item.name not in secrets.flags:
            raise LaunchSpecError(
                [f"{FORM_EXTRA_ARGS}: --{item.name} shows *** and its value is not known "
                 "here; type it again"]
            )  # fmt: skip
        real = secrets.flags[item.name]
        if "=" in args[item.index]:
            args[item.index] = f"{args[item.index].partition('=')[0]}={real}"
        else:
            args[item.index + 1] = real
        changed = True
    for name, value in env.items():
        if value != MASK or not is_secret_env(name):
            continue
        if name not in secrets.env:
            raise LaunchSpecError(
                [f"{FORM_EXTRA_ENV}: {name} shows *** and its value is not known here; "
                 "type it again"]
            )  # fmt: skip
        env[name] = secrets.env[name]
        changed = True
    if changed:
        restored[FORM_EXTRA_ARGS] = shlex.join(args)
        restored[FORM_EXTRA_ENV] = " ".join(f"{n}={shlex.quote(v)}" for n, v in env.items())
    return restored


def form_overrides(
    values: Mapping[str, str],
    base: LaunchSpec,
    base_extra_args: Iterable[str] = (),
    secrets: SecretValues | None = None,
) -> tuple[dict[str, FlagValue], dict[str, str | None]]:
    """Turn submitted form values into (flags, env) overrides of ``base``.

    Blank fields remove their flag or variable; flags that were in ``base_extra_args`` and
    are no longer in the extra-args text are removed, likewise extra env variables. A secret
    flag or variable left as the form showed it (``***``) gets its real value back from
    ``secrets`` (default: ``base``'s). Raises LaunchSpecError when the free-text fields
    cannot be parsed.
    """
    values = restore_form_secrets(values, secrets if secrets is not None else SecretValues.of(base))
    backend = base.backend
    env_fields = _env_fields(backend)
    flags: dict[str, FlagValue] = {}
    env: dict[str, str | None] = {}
    for name in _flag_fields(backend):
        value = values.get(name, "").strip()
        flags[name] = value or None
    for name in env_fields:
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
        if name not in env_fields:
            env[name] = None
    env.update(extra_env)
    return flags, env

"""specmon.toml: hosts, launch profiles and console settings, checked when read.

The file is found in a documented order (``--config PATH``, ``./specmon.toml``, the user
config dir) and every mistake in it is reported as ``file:line: key: message`` before
anything connects or launches. A ./specmon.toml found implicitly is used only once its
content is trusted (``specmon trust``, specmon.launch.trust): a checkout must not get to run commands.
A built-in ``local`` host and ``demo`` profile are always available, so ``specmon demo`` works
from any directory; a file may redefine either.

Imports stay light (no tomllib, platformdirs or difflib at import time): ``specmon --help``
must stay fast.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from specmon.model.attach_target import parse_attach_target
from specmon.model.errors import ConfigError, UsageError
from specmon.model.user_dirs import (
    CONFIG_FILE_NAME,
    default_state_dir,
    make_private_dirs,
    user_config_path,
)

if TYPE_CHECKING:
    from specmon.launch.spec import LaunchSpec

SIM_TIME_SCALE_ENV = "SPECMON_SIM_TIME_SCALE"
PYTHON_PLACEHOLDER = "{python}"  # a command word replaced by the host's python
DEFAULT_REMOTE_STATE_DIR = "~/.local/state/specmon"
BUILTIN_SOURCE = "<built-in defaults>"

Transport = Literal["ssh", "local"]
GpuAgentKind = Literal["nvml", "sim", "none"]
TRANSPORTS: tuple[str, ...] = ("ssh", "local")
GPU_AGENT_KINDS: tuple[str, ...] = ("nvml", "sim", "none")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
THEME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")

# The demo host and profile, always present unless the file defines its own. Kept equal to
# the `demo` profile and `local` host of the shipped specmon.toml (a test checks it).
BUILTIN_CONFIG_TOML = """\
[hosts.local]
transport = "local"

[profiles.demo]
description = "The built-in simulator: EAGLE-3, TP8, 64 shards, 8 simulated GPUs"
command = ["{python}", "-m", "specmon.sim"]
model_path = "moonshotai/Kimi-K2.5"
draft_model_path = "/models/kimi-k2.5-eagle3"
tp = 8
port = "auto"
mem_fraction_static = 0.88
extra_args = ["--trust-remote-code", "--enable-metrics"]
probe = true
gpu_agent = "sim"
stop_grace_s = 10.0

[profiles.demo.speculative]
algorithm = "EAGLE3"
num_steps = 5
eagle_topk = 1
num_draft_tokens = 6

[profiles.demo.env]
SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN = "1"
SPECMON_SIM_TIME_SCALE = "0.02"
SPECMON_SIM_SHARDS = "64"
SPECMON_SIM_GPUS = "8"
"""


def builtin_config_toml() -> str:
    """The built-in host and profiles: ``local``, ``demo`` and each backend's own built-in
    profiles (e.g. a demo of its simulator personality)."""
    from specmon.backends import all_backends

    extra = [backend.builtin_profiles_toml for backend in all_backends()]
    return "\n".join([BUILTIN_CONFIG_TOML, *(text for text in extra if text)])


def _builtin_profile_tables() -> dict[str, Any]:
    """The built-in profiles as TOML tables, for a file's profile to extend."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib

    tables: dict[str, Any] = tomllib.loads(builtin_config_toml()).get("profiles", {})
    return tables


def _builtin_profile_names() -> set[str]:
    """The built-in profiles' names (a file's default_profile may name one)."""
    return set(re.findall(r"^\[profiles\.([A-Za-z0-9_-]+)\]$", builtin_config_toml(), re.M))


@dataclass(frozen=True)
class HostConfig:
    """A machine to run servers on. ``address`` may be an ~/.ssh/config alias."""

    name: str
    address: str
    user: str | None = None
    port: int | None = None
    transport: Transport = "ssh"
    identity_file: str | None = None
    known_hosts: str | None = None
    ssh_options: dict[str, str] = field(default_factory=dict)
    python: str = "python3"
    state_dir: str = DEFAULT_REMOTE_STATE_DIR
    # The server specmon did not launch that `connect`/`watch` follow on this host
    # (model/attach_target.py: "auto", a pid, "unit:NAME", "container:NAME"); None: specmon's runs.
    # A profile's `attach` and `--attach` win over it (attach_for).
    attach: str | None = None

    @property
    def label(self) -> str:
        """How the console names the host: "local" or "user@address:port"."""
        if self.transport == "local":
            return "local"
        text = f"{self.user}@{self.address}" if self.user else self.address
        return f"{text}:{self.port}" if self.port else text


@dataclass(frozen=True)
class SpeculativeSettings:
    """The speculative-decoding settings; a number left None lets the server choose.

    ``algorithm`` is the server's name for the method (SGLang's ``algorithm``, vLLM's
    ``method``); which of the numbers a profile may set is the backend's
    (``Backend.speculative_keys``): steps/topk/draft tokens for SGLang, num_speculative_tokens
    and draft_tensor_parallel_size for vLLM.
    """

    algorithm: str
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    num_speculative_tokens: int | None = None
    draft_tensor_parallel_size: int | None = None


@dataclass(frozen=True)
class Profile:
    """A named server launch. ``to_launch_spec`` turns it into the exact argv and env.

    ``backend`` names the server (inferred from ``command`` when not given, else the default
    backend); an empty ``command`` is the backend's default command.
    """

    name: str
    model_path: str
    backend: str = ""
    command: tuple[str, ...] = ()
    draft_model_path: str | None = None
    tp: int | None = None
    port: int | str | None = None  # a number, or "auto" (flag_grammar.AUTO_PORT)
    host_bind: str | None = None
    speculative: SpeculativeSettings | None = None
    mem_fraction_static: float | None = None
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    probe: bool = False
    gpu_agent: GpuAgentKind = "nvml"
    stop_grace_s: float = 30.0
    # How a take-over (`launch --take-over`) stops a server in a container or a systemd unit:
    # None refuses it, naming the command; "docker"/"systemd" runs `docker stop`/`systemctl stop`.
    take_over: str | None = None
    # The server this profile describes is usually already running, started outside specmon:
    # `connect HOST -p P` / `watch HOST -p P` follow it (model/attach_target.py's text: "auto",
    # a pid, "unit:NAME", "container:NAME"; attach_for gives the order). Launches ignore it.
    attach: str | None = None
    description: str = ""
    baseline_profile: str | None = None
    nodes: tuple[str, ...] = ()  # hosts of one server spanning nodes; node 0 serves HTTP
    node_grace_s: float = 60.0  # a node gone (dead or unreachable) this long fails the run
    # Secrets left as the "***" placeholder (``specmon adopt`` writes them so): (key, file,
    # line) of each; such a profile is refused at launch until the user fills them in.
    unfilled: tuple[tuple[str, str | None, int | None], ...] = field(
        default=(), compare=False, repr=False
    )

    def __post_init__(self) -> None:
        from specmon.backends import DEFAULT_BACKEND, backend_for_command, get_backend

        backend = self.backend or backend_for_command(self.command) or DEFAULT_BACKEND
        object.__setattr__(self, "backend", backend)
        if not self.command:
            object.__setattr__(self, "command", get_backend(backend).default_command)
        object.__setattr__(self, "command", tuple(self.command))

    def base_args(self) -> tuple[str, ...]:
        """The flags this profile's fields stand for (the backend maps them), followed by
        ``extra_args``."""
        from specmon.backends import get_backend

        return get_backend(self.backend).profile_args(self)

    def to_launch_spec(
        self,
        flags: Mapping[str, str | bool | None] | None = None,
        env: Mapping[str, str | None] | None = None,
        *,
        python: str = "python3",
    ) -> LaunchSpec:
        """The launch with overrides applied, e.g. ``{"speculative-num-steps": "2"}`` and
        ``{"NCCL_PROTO": "LL"}`` (None removes). ``python`` replaces the "{python}" command
        word: pass the host's ``HostConfig.python``. Not validated: call ``.validate()``."""
        from specmon.backends import get_backend
        from specmon.launch.spec import LaunchSpec

        backend = get_backend(self.backend)  # the spec holds it from here on
        words = backend.profile_command(self.command, self)
        command = tuple(python if word == PYTHON_PLACEHOLDER else word for word in words)
        spec = LaunchSpec(backend, command, backend.profile_args(self), dict(self.env))
        if flags:
            spec = spec.with_flags(flags)
        if env:
            spec = spec.with_env(env)
        return spec


@dataclass(frozen=True)
class UiConfig:
    """Console settings: theme name, how often to sample, poll and redraw, and the window
    of the request latency quantiles."""

    theme: str = "dark"
    gpu_sample_hz: float = 4.0
    http_poll_s: float = 2.0
    redraw_hz: float = 10.0
    log_lines: int = 2000
    latency_window_s: float = 60.0  # the rolling window of request latency quantiles


@dataclass(frozen=True)
class Config:
    """Everything read from specmon.toml (plus the built-in demo host and profile)."""

    source: Path | None
    hosts: dict[str, HostConfig]
    profiles: dict[str, Profile]
    ui: UiConfig = field(default_factory=UiConfig)
    state_dir: Path = field(default_factory=lambda: default_state_dir())
    default_host: str | None = None
    default_profile: str | None = None
    secret_env: tuple[str, ...] = ()  # [security] secret_env: more secret env name patterns
    searched: tuple[str, ...] = ()  # the config files looked for, each with what became of it

    def searched_text(self) -> str:
        """Which config files were searched, for a name found in none of them."""
        if not self.searched:
            return "the built-in config"
        return "the config files searched: " + ", ".join(self.searched)

    def host(self, name: str) -> HostConfig:
        """The named host, or a ConfigError with a "did you mean" hint."""
        if name in self.hosts:
            return self.hosts[name]
        raise ConfigError(
            f"unknown host {name!r}{_did_you_mean(name, self.hosts)}; "
            f"known: {', '.join(sorted(self.hosts)) or 'none'}",
            path=str(self.source) if self.source else None,
        )

    def profile(self, name: str) -> Profile:
        """The named profile, or a ConfigError (profile_named's message, with the file)."""
        try:
            return profile_named(self.profiles, name)
        except ConfigError:
            raise  # names its own file and key
        except UsageError as exc:
            raise ConfigError(str(exc), path=str(self.source) if self.source else None) from None


def attach_for(
    command_line: str | None, profile: Profile | None, host: HostConfig | None
) -> str | None:
    """Which server specmon did not launch ``connect``/``watch`` follow, in the one order
    (docs/attach.md): ``--attach`` on the command line, else the ``attach`` key of the profile
    named by ``-p``, else the host's ``attach`` key; None: this state dir's runs."""
    of_profile = profile.attach if profile is not None else None
    of_host = host.attach if host is not None else None
    return command_line or of_profile or of_host or None


PLACEHOLDER_REFUSAL = 'is the placeholder "***": fill in the secret before launching this profile'


def placeholder_keys(profile: Profile) -> list[tuple[str, ...]]:
    """The keys of ``profile`` that hold a secret as the placeholder ``***`` (what ``specmon
    adopt`` writes for a secret it never reads): a secret variable's value, or a secret
    flag's (``--api-key ***``) in extra_args."""
    from specmon.backends.flag_grammar import parse_flags
    from specmon.model.secrets import MASK, is_secret_env, is_secret_setting

    keys: list[tuple[str, ...]] = [
        ("env", name)
        for name, value in profile.env.items()
        if value == MASK and is_secret_env(name)
    ]
    for item in parse_flags(profile.extra_args)[0]:
        if item.value == MASK and is_secret_setting(item.name):
            keys.append(("extra_args",))
            break
    return keys


def secrets_as_placeholders(profile: Profile, source: Profile) -> tuple[Profile, list[str]]:
    """``profile`` as "Save as profile" may write it, and the names it masked: a secret value
    stays only where ``source`` (the profile it was made from, already in the user's file)
    holds the same one; any other (the running server's, typed into the form) becomes the
    placeholder ``***``, as `specmon adopt` writes a secret it never reads. specmon does not
    store a secret in clear that it was not given in clear in that file."""
    from specmon.backends.flag_grammar import parse_flags
    from specmon.model.secrets import MASK, is_secret_env, is_secret_setting, redact_argv

    masked: list[str] = []
    env = dict(profile.env)
    for name, value in env.items():
        if is_secret_env(name) and value != MASK and source.env.get(name) != value:
            env[name] = MASK
            masked.append(name)

    def secret_flags(args: Sequence[str]) -> dict[str, str | None]:
        return {
            item.name: item.value
            for item in parse_flags(args)[0]
            if item.value and is_secret_setting(item.name)
        }

    before = secret_flags(source.extra_args)
    new_flags = [
        name
        for name, value in secret_flags(profile.extra_args).items()
        if value != MASK and before.get(name) != value
    ]
    extra_args = redact_argv(profile.extra_args, only=set(new_flags))
    masked += [f"--{name}" for name in new_flags]
    if not masked:
        return profile, []
    return dataclasses.replace(profile, env=env, extra_args=extra_args), masked


def profile_named(profiles: Mapping[str, Profile], name: str) -> Profile:
    """The named profile of a host session's own table, or a UsageError naming the known ones
    (with a "did you mean" hint): one lookup for the single-host and multi-node launch. A
    profile holding a secret placeholder (``***``) is refused here, naming the key."""
    if name in profiles:
        chosen = profiles[name]
        if chosen.unfilled:
            key, path, line = chosen.unfilled[0]
            raise ConfigError(PLACEHOLDER_REFUSAL, path=path, key=key, line=line)
        return chosen
    known = ", ".join(sorted(profiles)) or "none"
    raise UsageError(f"unknown profile {name!r}{_did_you_mean(name, profiles)}; known: {known}")


# --- finding and loading ----------------------------------------------------------------


@dataclass(frozen=True)
class FoundConfig:
    """A config file and how it was found: ``in_working_dir`` means ./specmon.toml found
    implicitly, which is used only once trusted (specmon.launch.trust); ``--config`` and the user
    config dir's file are the user's own choice."""

    path: Path
    in_working_dir: bool = False


def find_config(
    path: str | os.PathLike[str] | None = None,
    *,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
    skip_working_dir: bool = False,
) -> FoundConfig | None:
    """``path`` (must exist), else ./specmon.toml (unless ``skip_working_dir``), else the
    user config dir's specmon.toml, else None (only the built-in defaults apply)."""
    if path is not None:
        explicit = Path(path).expanduser()
        if not explicit.is_file():
            reason = "is a directory" if explicit.is_dir() else "does not exist"
            raise ConfigError(f"config file {reason}", path=str(explicit))
        return FoundConfig(explicit)
    user = user_config_path(environ)
    local = (cwd if cwd is not None else Path.cwd()) / CONFIG_FILE_NAME
    if not skip_working_dir and local.is_file():
        # The user config dir's own file, reached through the working directory, is the user's.
        is_users = user.is_file() and local.resolve() == user.resolve()
        return FoundConfig(local, in_working_dir=not is_users)
    if user.is_file():
        return FoundConfig(user)
    return None


def find_config_path(
    path: str | os.PathLike[str] | None = None,
    *,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Path | None:
    """``path`` (must exist), else ./specmon.toml, else the user config dir's specmon.toml,
    else None (only the built-in defaults apply)."""
    found = find_config(path, cwd=cwd, environ=environ)
    return found.path if found is not None else None


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
    skip_untrusted: bool = False,
) -> Config:
    """Find, read and check the config; ConfigError (file:line: key: message) on any mistake.

    A ./specmon.toml found implicitly is used only if its content is trusted (``specmon
    trust``); otherwise UntrustedConfigError, or with ``skip_untrusted`` the search goes on
    past it (the user config dir, then the built-in defaults). ``environ`` (default
    os.environ) supplies $SPECMON_SIM_TIME_SCALE, which overrides the time scale of every
    profile that sets one (the simulator profiles), and the user config dir.
    """
    environ = os.environ if environ is None else environ
    found = find_config(path, cwd=cwd, environ=environ)
    data = _read_config_bytes(found.path) if found is not None else b""
    local = (cwd if cwd is not None else Path.cwd()) / CONFIG_FILE_NAME
    candidates = (
        [Path(path).expanduser()] if path is not None else [local, user_config_path(environ)]
    )
    skipped = None
    if found is not None and found.in_working_dir:
        from specmon.launch.trust import UntrustedConfigError, trust_state

        state = trust_state(found.path, data, environ)
        if state != "trusted":
            if not skip_untrusted:
                shown = f"./{CONFIG_FILE_NAME}" if cwd is None else str(found.path)
                raise UntrustedConfigError(_printable(shown), state)
            skipped = found.path
            found = find_config(path, cwd=cwd, environ=environ, skip_working_dir=True)
            data = _read_config_bytes(found.path) if found is not None else b""
    builtin = parse_config_text(builtin_config_toml(), None, environ=environ)
    if found is None:
        config = builtin
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"not UTF-8 text ({exc.reason})", path=str(found.path)) from None
        text = text.replace("\r\n", "\n").replace("\r", "\n")  # as read_text() reads it
        config = parse_config_text(text, found.path, environ=environ)
        hosts = {**config.hosts, **_missing_from(builtin.hosts, config.hosts)}
        profiles = {**config.profiles, **_missing_from(builtin.profiles, config.profiles)}
        config = dataclasses.replace(config, hosts=hosts, profiles=profiles)
    config = dataclasses.replace(config, searched=_searched(candidates, found, skipped))
    from specmon.model.secrets import set_configured_patterns

    set_configured_patterns(config.secret_env)
    return _apply_environment(config, environ)


def _searched(
    candidates: list[Path], found: FoundConfig | None, skipped: Path | None
) -> tuple[str, ...]:
    """Each config file looked for and what became of it: read, not trusted, or absent."""
    shown = []
    for candidate in candidates:
        if found is not None and candidate == found.path:
            what = "read"
        elif candidate == skipped:
            what = "not trusted, skipped"
        elif candidate.is_file():
            what = "not read"
        else:
            what = "absent"
        shown.append(f"{_printable(str(candidate))} ({what})")
    return tuple(shown)


def _read_config_bytes(path: Path) -> bytes:
    """The file's bytes, read once: what is trusted (hashed) is exactly what is parsed."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path=str(path)) from None


def _printable(text: str) -> str:
    """A path fit for a one-line message: no control characters."""
    from specmon.model.terminal_text import safe_text

    return safe_text(text).replace("\n", " ").replace("\t", " ")


def _missing_from(builtin: Mapping[str, Any], defined: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in builtin.items() if name not in defined}


def _apply_environment(config: Config, environ: Mapping[str, str]) -> Config:
    scale = environ.get(SIM_TIME_SCALE_ENV)
    if scale is None:
        return config
    from specmon.launch.spec import simulator_env_problem

    problem = simulator_env_problem(SIM_TIME_SCALE_ENV, scale)
    if problem:
        raise ConfigError(problem, path="environment", key=SIM_TIME_SCALE_ENV)
    profiles = {
        name: dataclasses.replace(profile, env={**profile.env, SIM_TIME_SCALE_ENV: scale})
        if SIM_TIME_SCALE_ENV in profile.env
        else profile
        for name, profile in config.profiles.items()
    }
    return dataclasses.replace(config, profiles=profiles)


def parse_config_text(
    text: str, source: Path | None, *, environ: Mapping[str, str] | None = None
) -> Config:
    """Check and build a Config from TOML text; ``source`` names the file in errors."""
    label = str(source) if source is not None else BUILTIN_SOURCE
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python 3.10 only
        import tomli as tomllib
    text = text.removeprefix("\ufeff")  # a UTF-8 byte order mark (some editors write one)
    try:
        data = tomllib.loads(text)
        reader = _Reader(label, _TomlPositions(text))
        return reader.read_config(data, source, environ if environ is not None else os.environ)
    except tomllib.TOMLDecodeError as exc:
        line_match = re.search(r"line (\d+)", str(exc))
        line = int(line_match.group(1)) if line_match else None
        raise ConfigError(f"TOML syntax error: {exc}", path=label, line=line) from None
    except RecursionError:
        # tomllib parses nested arrays and inline tables recursively.
        raise ConfigError(
            "TOML syntax error: arrays or inline tables nested too deeply", path=label
        ) from None


# --- where keys are (tomllib has no positions) -------------------------------------------

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _split_key(text: str) -> tuple[list[str], str] | None:
    """Read a dotted TOML key from the start of ``text``: (parts, rest) or None."""
    parts: list[str] = []
    rest = text.lstrip()
    while True:
        if rest.startswith('"'):
            end = 1
            while end < len(rest) and rest[end] != '"':
                end += 2 if rest[end] == "\\" else 1
            if end >= len(rest):
                return None
            raw = rest[1:end]
            try:
                parts.append(raw.encode("utf-8").decode("unicode_escape") if "\\" in raw else raw)
            except UnicodeDecodeError:
                parts.append(raw)
            rest = rest[end + 1 :]
        elif rest.startswith("'"):
            end = rest.find("'", 1)
            if end < 0:
                return None
            parts.append(rest[1:end])
            rest = rest[end + 1 :]
        else:
            match = _BARE_KEY.match(rest)
            if not match:
                return None
            parts.append(match.group(0))
            rest = rest[match.end() :]
        rest = rest.lstrip()
        if rest.startswith("."):
            rest = rest[1:].lstrip()
            continue
        return parts, rest


class _TomlPositions:
    """Line numbers of table headers and keys, found by scanning the text."""

    def __init__(self, text: str) -> None:
        self.lines: dict[tuple[str, ...], int] = {}
        table: tuple[str, ...] = ()
        in_multiline: str | None = None
        for number, line in enumerate(text.splitlines(), start=1):
            if in_multiline is not None:
                if line.count(in_multiline) % 2 == 1:
                    in_multiline = None
                continue
            stripped = line.strip()
            if stripped.startswith("["):
                inner = stripped[2:] if stripped.startswith("[[") else stripped[1:]
                parsed = _split_key(inner)
                if parsed and parsed[1].lstrip().startswith("]"):
                    table = tuple(parsed[0])
                    self.lines.setdefault(table, number)
                continue
            parsed = _split_key(stripped)
            if parsed and parsed[1].startswith("="):
                path = table + tuple(parsed[0])
                self.lines.setdefault(path, number)
                for opener in ('"""', "'''"):
                    if parsed[1].count(opener) % 2 == 1:
                        in_multiline = opener

    def line_of(self, path: Sequence[str]) -> int | None:
        """The line of ``path`` or of its nearest enclosing table/key that has one."""
        key = tuple(path)
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key[:-1]
        return None


# --- checking -----------------------------------------------------------------------------

_MISSING = object()


def _did_you_mean(name: str, known: Sequence[str] | Mapping[str, Any]) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _type_name(value: object) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    for kind, text in names.items():
        if type(value) is kind:
            return text
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__


HOST_KEYS = (
    "address",
    "user",
    "port",
    "transport",
    "identity_file",
    "known_hosts",
    "ssh_options",
    "python",
    "state_dir",
    "attach",
)
PROFILE_KEYS = (
    "description",
    "extends",
    "backend",
    "command",
    "model_path",
    "draft_model_path",
    "tp",
    "port",
    "host_bind",
    "speculative",
    "mem_fraction_static",
    "extra_args",
    "env",
    "probe",
    "gpu_agent",
    "stop_grace_s",
    "take_over",
    "attach",
    "baseline_profile",
    "nodes",
    "node_grace_s",
)
TAKE_OVER_KINDS = ("docker", "systemd")  # a profile's take_over: whose stop command to run
SPECULATIVE_KEYS = ("algorithm", "num_steps", "eagle_topk", "num_draft_tokens")
# Bounds of every numeric [speculative] key any backend reads (the backend says which it reads).
SPECULATIVE_RANGES: dict[str, tuple[int, int]] = {
    "num_steps": (1, 32),
    "eagle_topk": (1, 64),
    "num_draft_tokens": (1, 1024),
    "num_speculative_tokens": (1, 64),
    "draft_tensor_parallel_size": (1, 64),
}
UI_KEYS = ("theme", "gpu_sample_hz", "http_poll_s", "redraw_hz", "log_lines", "latency_window_s")
TOP_KEYS = (
    "state_dir",
    "default_host",
    "default_profile",
    "ui",
    "hosts",
    "profiles",
    "security",
)
SECURITY_KEYS = ("secret_env",)


class _Reader:
    """Reads the parsed TOML into dataclasses, raising ConfigError at the first mistake."""

    def __init__(self, label: str, positions: _TomlPositions) -> None:
        self.label = label
        self.positions = positions

    def error(self, path: Sequence[str], message: str) -> ConfigError:
        return ConfigError(
            message,
            path=self.label,
            key=".".join(path) if path else None,
            line=self.positions.line_of(path),
        )

    def check_keys(self, table: Mapping[str, Any], path: Sequence[str], allowed: Sequence[str]):
        for key in table:
            if key not in allowed:
                where = f"[{'.'.join(path)}]" if path else "the top level"
                raise self.error(
                    [*path, key],
                    f"unknown key in {where}{_did_you_mean(key, allowed)} "
                    f"(known: {', '.join(allowed)})",
                )

    def value(
        self,
        table: Mapping[str, Any],
        path: Sequence[str],
        key: str,
        kind: type | tuple[type, ...],
        default: Any = _MISSING,
    ) -> Any:
        if key not in table:
            if default is _MISSING:
                raise self.error([*path, key], "missing required key")
            return default
        value = table[key]
        declared = kind if isinstance(kind, tuple) else (kind,)
        expected = " or ".join(_type_name(k()) for k in declared)
        kinds = (*declared, int) if float in declared else declared  # 10 is a number too
        wrong = isinstance(value, bool) and bool not in kinds
        if wrong or not isinstance(value, kinds):
            raise self.error(
                [*path, key], f"expected {expected}, got {_type_name(value)} {value!r:.60}"
            )
        if isinstance(value, str):
            from specmon.launch.spec import text_problem

            problem = text_problem("value", value)
            if problem:
                raise self.error([*path, key], problem.partition(": ")[2])
        if isinstance(value, float) and not math.isfinite(value):
            # TOML allows nan and inf; no setting means either (nan compares false with
            # every bound, so a range check alone lets it through).
            raise self.error([*path, key], f"{value!r} is not a finite number")
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value

    def profile_port(self, table: Mapping[str, Any], path: Sequence[str]) -> int | str | None:
        """A profile's port: 1-65535, or "auto" (a port free on the host, chosen at launch)."""
        from specmon.backends.flag_grammar import AUTO_PORT

        if table.get("port") == AUTO_PORT:
            return AUTO_PORT
        if isinstance(table.get("port"), str):
            raise self.error([*path, "port"], f'expected a number or "{AUTO_PORT}"')
        port: int | None = self.number(table, path, "port", int, 1, 65535, None)
        return port

    def number(
        self,
        table: Mapping[str, Any],
        path: Sequence[str],
        key: str,
        kind: type,
        low: float,
        high: float,
        default: Any = _MISSING,
        low_inclusive: bool = True,
    ) -> Any:
        value = self.value(table, path, key, kind, default)
        if value is None or (value is default and key not in table):
            return value
        too_low = value < low if low_inclusive else value <= low
        if too_low or value > high:
            bracket = "[" if low_inclusive else "("
            raise self.error([*path, key], f"{value!r} is out of range {bracket}{low}, {high}]")
        return value

    def choice(
        self,
        table: Mapping[str, Any],
        path: Sequence[str],
        key: str,
        choices: Sequence[str],
        default: Any = _MISSING,
    ) -> Any:
        value = self.value(table, path, key, str, default)
        if key in table and value not in choices:
            raise self.error(
                [*path, key],
                f"{value!r} is not one of {', '.join(choices)}{_did_you_mean(value, choices)}",
            )
        return value

    def string_list(self, table: Mapping[str, Any], path: Sequence[str], key: str) -> tuple:
        items = self.value(table, path, key, list, [])
        for position, item in enumerate(items):
            if not isinstance(item, str):
                raise self.error(
                    [*path, key],
                    f"item {position + 1} should be a string, got {_type_name(item)} {item!r:.40}",
                )
            from specmon.launch.spec import text_problem

            problem = text_problem(f"item {position + 1}", item)
            if problem:
                raise self.error([*path, key], problem)
        return tuple(items)

    def string_table(
        self, table: Mapping[str, Any], path: Sequence[str], key: str, *, scalars: bool
    ) -> dict[str, str]:
        raw = self.value(table, path, key, dict, {})
        out: dict[str, str] = {}
        for name, value in raw.items():
            if isinstance(value, str):
                out[name] = value
            elif scalars and isinstance(value, bool):
                out[name] = "yes" if value else "no"
            elif scalars and isinstance(value, int | float):
                if isinstance(value, float) and not math.isfinite(value):
                    raise self.error([*path, key, name], f"{value!r} is not a finite number")
                out[name] = str(value)
            else:
                expected = "a string, number or boolean" if scalars else "a string"
                raise self.error(
                    [*path, key, name], f"expected {expected}, got {_type_name(value)}"
                )
            from specmon.launch.spec import text_problem

            problem = text_problem("value", out[name])
            if problem:
                raise self.error([*path, key, name], problem.partition(": ")[2])
        return out

    def name_check(self, path: Sequence[str], name: str, what: str) -> None:
        if not NAME_PATTERN.match(name):
            raise self.error(
                path,
                f"{what} name {name!r:.40} should be letters, digits, '-' and '_' "
                "(starting with a letter or digit, at most 64)",
            )

    # --- sections ---

    def read_config(
        self, data: Mapping[str, Any], source: Path | None, environ: Mapping[str, str]
    ) -> Config:
        self.check_keys(data, [], TOP_KEYS)
        hosts_table = self.value(data, [], "hosts", dict, {})
        hosts = {}
        for name, table in hosts_table.items():
            self.name_check(["hosts", name], name, "host")
            if not isinstance(table, dict):
                raise self.error(["hosts", name], f"expected a table, got {_type_name(table)}")
            hosts[name] = self.read_host(name, table, environ)
        profiles_table = self.value(data, [], "profiles", dict, {})
        # A file's profile may extend a built-in one (`extends = "demo"`) that it does not
        # redefine; the built-in text itself (no source) extends only its own.
        extendable = {**_builtin_profile_tables(), **profiles_table} if source else profiles_table
        profiles = {}
        for name in profiles_table:
            self.name_check(["profiles", name], name, "profile")
            profiles[name] = self.read_profile(name, extendable)
        for name, profile in profiles.items():
            if profile.baseline_profile is not None and profile.baseline_profile not in profiles:
                raise self.error(
                    ["profiles", name, "baseline_profile"],
                    f"no profile named {profile.baseline_profile!r}"
                    f"{_did_you_mean(profile.baseline_profile, profiles)}",
                )
        ui = self.read_ui(self.value(data, [], "ui", dict, {}))
        state_dir_text = self.value(data, [], "state_dir", str, None)
        state_dir = (
            Path(state_dir_text).expanduser() if state_dir_text else default_state_dir(environ)
        )
        default_host = self.value(data, [], "default_host", str, None)
        if default_host is not None and default_host not in hosts and default_host != "local":
            raise self.error(
                ["default_host"],
                f"no host named {default_host!r}{_did_you_mean(default_host, hosts)}",
            )
        default_profile = self.value(data, [], "default_profile", str, None)
        if default_profile is not None and default_profile not in {
            *profiles,
            *_builtin_profile_names(),
        }:
            raise self.error(
                ["default_profile"],
                f"no profile named {default_profile!r}{_did_you_mean(default_profile, profiles)}",
            )
        security = self.value(data, [], "security", dict, {})
        self.check_keys(security, ["security"], SECURITY_KEYS)
        secret_env = self.string_list(security, ["security"], "secret_env")
        for pattern in secret_env:
            if not pattern.strip():
                raise self.error(["security", "secret_env"], "an empty pattern matches nothing")
        return Config(
            source=source,
            hosts=hosts,
            profiles=profiles,
            ui=ui,
            state_dir=state_dir,
            default_host=default_host,
            default_profile=default_profile,
            secret_env=secret_env,
        )

    def read_host(
        self, name: str, table: Mapping[str, Any], environ: Mapping[str, str]
    ) -> HostConfig:
        path = ["hosts", name]
        self.check_keys(table, path, HOST_KEYS)
        transport = self.choice(table, path, "transport", TRANSPORTS, "ssh")
        address = self.value(table, path, "address", str, name if transport == "ssh" else "")
        address = address or "localhost"
        if transport == "ssh" and (address.startswith("-") or any(c.isspace() for c in address)):
            raise self.error([*path, "address"], f"{address!r:.40} is not a host name or address")
        user = self.value(table, path, "user", str, None)
        if user is not None and (not user or user.startswith("-") or "@" in user):
            raise self.error([*path, "user"], f"{user!r:.40} is not a user name")
        port = self.number(table, path, "port", int, 1, 65535, None)
        default_python = sys.executable if transport == "local" else "python3"
        # This machine's runs go where its user's state goes ($SPECMON_STATE_DIR, else
        # $XDG_STATE_HOME/specmon); a remote host's, to its own ~/.local/state/specmon.
        default_state = (
            str(default_state_dir(environ)) if transport == "local" else DEFAULT_REMOTE_STATE_DIR
        )
        python = self.value(table, path, "python", str, default_python) or default_python
        return HostConfig(
            name=name,
            address=address,
            user=user,
            port=port,
            transport=transport,
            identity_file=self.value(table, path, "identity_file", str, None),
            known_hosts=self.value(table, path, "known_hosts", str, None),
            ssh_options=self.string_table(table, path, "ssh_options", scalars=True),
            python=python,
            state_dir=self.value(table, path, "state_dir", str, default_state),
            attach=self.attach_target(table, path),
        )

    def attach_target(self, table: Mapping[str, Any], path: Sequence[str]) -> str | None:
        """A host's or a profile's ``attach`` key, checked against the one grammar
        ``--attach`` uses."""
        if "attach" not in table:
            return None
        try:
            return parse_attach_target(table["attach"]).text()
        except ValueError as exc:
            raise self.error([*path, "attach"], str(exc)) from None

    def resolve_extends(
        self, name: str, profiles: Mapping[str, Any], chain: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """A profile's table with its ``extends`` parent merged under it (env and
        speculative tables merge key by key; the child wins)."""
        path = ["profiles", name]
        table = profiles[name]
        if not isinstance(table, dict):
            raise self.error(path, f"expected a table, got {_type_name(table)}")
        parent_name = table.get("extends")
        if parent_name is None:
            return dict(table)
        if not isinstance(parent_name, str):
            raise self.error(
                [*path, "extends"], f"expected a string, got {_type_name(parent_name)}"
            )
        if parent_name not in profiles:
            raise self.error(
                [*path, "extends"],
                f"no profile named {parent_name!r}{_did_you_mean(parent_name, profiles)}",
            )
        if parent_name in (*chain, name):
            cycle = " -> ".join([*chain, name, parent_name])
            raise self.error([*path, "extends"], f"profiles extend each other in a loop: {cycle}")
        parent = self.resolve_extends(parent_name, profiles, (*chain, name))
        merged = {**parent, **table}
        for key in ("env", "speculative"):
            if isinstance(parent.get(key), dict) and isinstance(table.get(key), dict):
                merged[key] = {**parent[key], **table[key]}
        merged.pop("extends", None)
        return merged

    def read_profile(self, name: str, profiles: Mapping[str, Any]) -> Profile:
        path = ["profiles", name]
        raw = profiles[name]
        if isinstance(raw, dict):
            self.check_keys(raw, path, PROFILE_KEYS)
        table = self.resolve_extends(name, profiles)
        self.check_keys(table, path, PROFILE_KEYS)
        from specmon.backends import BACKENDS, DEFAULT_BACKEND, backend_for_command, get_backend
        from specmon.launch.spec import env_name_problem

        command = self.string_list(table, path, "command")
        if "command" in table and not table["command"]:
            raise self.error([*path, "command"], "is empty; name the server program to run")
        if "backend" in table:
            backend = self.choice(table, path, "backend", tuple(BACKENDS))
        else:
            try:
                backend = backend_for_command(command) or DEFAULT_BACKEND
            except UsageError as exc:
                raise self.error([*path, "command"], str(exc)) from None
        server = get_backend(backend)
        command = command or server.default_command
        speculative = None
        if "speculative" in table:
            spec_table = self.value(table, path, "speculative", dict)
            spec_path = [*path, "speculative"]
            keys = server.speculative_keys
            self.check_keys(spec_table, spec_path, tuple(key for key, _ in keys))
            (algorithm_key, _), numbers = keys[0], keys[1:]
            values: dict[str, Any] = {
                "algorithm": self.choice(
                    spec_table, spec_path, algorithm_key, server.speculative_algorithms()
                )
            }
            for key, attribute in numbers:
                low, high = SPECULATIVE_RANGES[attribute]
                values[attribute] = self.number(spec_table, spec_path, key, int, low, high, None)
            speculative = SpeculativeSettings(**values)
        env = self.string_table(table, path, "env", scalars=False)
        for env_name in env:
            problem = env_name_problem(env_name)
            if problem:
                raise self.error([*path, "env", env_name], problem.partition(": ")[2])
        profile = Profile(
            name=name,
            model_path=self.value(table, path, "model_path", str),
            backend=backend,
            command=command,
            draft_model_path=self.value(table, path, "draft_model_path", str, None),
            tp=self.number(table, path, "tp", int, 1, 64, None),
            port=self.profile_port(table, path),
            host_bind=self.value(table, path, "host_bind", str, None),
            speculative=speculative,
            mem_fraction_static=self.number(
                table, path, "mem_fraction_static", float, 0.0, 1.0, None, low_inclusive=False
            ),
            extra_args=self.string_list(table, path, "extra_args"),
            env=env,
            probe=self.value(table, path, "probe", bool, False),
            gpu_agent=self.choice(table, path, "gpu_agent", GPU_AGENT_KINDS, "nvml"),
            stop_grace_s=self.number(table, path, "stop_grace_s", float, 0.0, 3600.0, 30.0),
            take_over=self.choice(table, path, "take_over", TAKE_OVER_KINDS, None),
            attach=self.attach_target(table, path),
            description=self.value(table, path, "description", str, ""),
            baseline_profile=self.value(table, path, "baseline_profile", str, None),
            nodes=self.read_nodes(table, path, server),
            node_grace_s=self.number(table, path, "node_grace_s", float, 0.0, 86400.0, 60.0),
        )
        self.check_no_node_flags(profile, path, server)
        if profile.nodes and profile.attach is not None:
            raise self.error(
                [*path, "attach"],
                "a profile with nodes cannot attach: attaching follows one server on one host "
                "(remove attach, or nodes)",
            )
        for problem in profile.to_launch_spec().problems():
            subject = problem.partition(": ")[0]
            profile_key = server.profile_key_of(subject)
            if profile_key is not None:
                key_path = [*path, *profile_key]
            elif subject in env:
                key_path = [*path, "env", subject]
            else:
                key_path = [*path, "extra_args"]
            raise self.error(key_path, problem)
        unfilled = tuple(
            (".".join([*path, *key]), self.label, self.positions.line_of([*path, *key]))
            for key in placeholder_keys(profile)
        )
        return dataclasses.replace(profile, unfilled=unfilled) if unfilled else profile

    def read_nodes(self, table: Mapping[str, Any], path: Sequence[str], server: Any) -> tuple:
        """``nodes``: two or more distinct hosts (config names or [user@]host[:port] / ssh
        aliases), for a backend that can span nodes."""
        nodes = self.string_list(table, path, "nodes")
        if "nodes" not in table:
            return ()
        key = [*path, "nodes"]
        if len(nodes) < 2:
            raise self.error(key, "name two or more hosts (a one-node server needs no nodes)")
        seen: set[str] = set()
        for node in nodes:
            from specmon.model.hostname import parse_host

            if node in seen:
                raise self.error(key, f"{node!r:.40} is named twice")
            seen.add(node)
            try:
                parse_host(node)
            except UsageError as exc:
                raise self.error(key, str(exc)) from None
        from specmon.backends import NodePlacement

        if server.multinode_args(NodePlacement(0, len(nodes), "127.0.0.1", 1)) is None:
            raise self.error(
                key,
                f"{server.display_name} servers cannot span nodes in specmon (its multi-node "
                "mode needs a cluster manager such as Ray); run one server per host instead",
            )
        return nodes

    def check_no_node_flags(self, profile: Profile, path: Sequence[str], server: Any) -> None:
        """The multi-node flags are rendered from ``nodes``, never typed by hand."""
        from specmon.backends.flag_grammar import parse_flags

        given = {item.name for item in parse_flags(profile.extra_args)[0]}
        typed = sorted(given & server.multinode_flags())
        if typed:
            raise self.error(
                [*path, "extra_args"],
                f"--{typed[0]} is set by specmon from the profile's nodes; remove it "
                '(e.g. nodes = ["gpu-a", "gpu-b"])',
            )

    def read_ui(self, table: Mapping[str, Any]) -> UiConfig:
        path = ["ui"]
        self.check_keys(table, path, UI_KEYS)
        defaults = UiConfig()
        theme = self.value(table, path, "theme", str, defaults.theme)
        if not THEME_PATTERN.match(theme):
            raise self.error(
                [*path, "theme"], f"{theme!r:.40} is not a theme name (e.g. dark, light)"
            )
        return UiConfig(
            theme=theme,
            gpu_sample_hz=self.number(
                table, path, "gpu_sample_hz", float, 0.1, 50.0, defaults.gpu_sample_hz
            ),
            http_poll_s=self.number(
                table, path, "http_poll_s", float, 0.1, 600.0, defaults.http_poll_s
            ),
            redraw_hz=self.number(table, path, "redraw_hz", float, 0.5, 60.0, defaults.redraw_hz),
            log_lines=self.number(
                table, path, "log_lines", int, 100, 1_000_000, defaults.log_lines
            ),
            latency_window_s=self.number(
                table, path, "latency_window_s", float, 5.0, 3600.0, defaults.latency_window_s
            ),
        )


# --- writing a profile back ("save as new profile") ----------------------------------------


def _toml_string(value: str) -> str:
    escapes = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f"}
    escapes["\r"] = "\\r"
    out = []
    for char in value:
        if char in escapes:
            out.append(escapes[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _toml_string(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def render_profile_toml(profile: Profile) -> str:
    """The TOML tables that ``load_config`` reads back as this same profile."""
    table = _toml_key(profile.name)
    lines = [f"[profiles.{table}]"]
    fields: list[tuple[str, Any]] = [
        ("description", profile.description or None),
        ("backend", profile.backend),
        ("command", list(profile.command)),
        ("model_path", profile.model_path),
        ("draft_model_path", profile.draft_model_path),
        ("tp", profile.tp),
        ("port", profile.port),
        ("host_bind", profile.host_bind),
        ("mem_fraction_static", profile.mem_fraction_static),
        ("extra_args", list(profile.extra_args)),
        ("probe", profile.probe),
        ("gpu_agent", profile.gpu_agent),
        ("stop_grace_s", profile.stop_grace_s),
        ("take_over", profile.take_over),
        ("attach", profile.attach),
        ("baseline_profile", profile.baseline_profile),
        ("nodes", list(profile.nodes) if profile.nodes else None),
        ("node_grace_s", profile.node_grace_s if profile.nodes else None),
    ]
    masked_flag = ("extra_args",) in placeholder_keys(profile)
    lines += [
        f"{key} = {_toml_value(value)}"
        + (
            "  # fill in the secret (a flag's value is ***)"
            if key == "extra_args" and masked_flag
            else ""
        )
        for key, value in fields
        if value is not None
    ]
    if profile.speculative is not None:
        from specmon.backends import get_backend

        lines += ["", f"[profiles.{table}.speculative]"]
        for key, attribute in get_backend(profile.backend).speculative_keys:
            value = getattr(profile.speculative, attribute)
            if value is not None:
                lines.append(f"{key} = {_toml_value(value)}")
    if profile.env:
        lines += ["", f"[profiles.{table}.env]"]
        lines += [
            f"{_toml_key(k)} = {_toml_string(v)}" + _fill_in(k, v) for k, v in profile.env.items()
        ]
    return "\n".join(lines) + "\n"


def _fill_in(name: str, value: str) -> str:
    """The comment a secret placeholder carries, as `specmon adopt` writes it."""
    from specmon.model.secrets import MASK, is_secret_env

    return "  # fill in the secret" if value == MASK and is_secret_env(name) else ""


def save_profile(config_path: str | os.PathLike[str], profile: Profile) -> Profile:
    """Append ``profile`` to a config file (created if missing), keeping its text intact, and
    give it back as the file now reads (a secret placeholder there is ``unfilled``: refused at
    launch, as every profile read from a file).

    The result is checked as a whole before it replaces the file (atomically); a name that
    is already taken or a profile that would not load is a ConfigError and nothing changes.
    """
    path = Path(config_path).expanduser()
    try:
        existing_bytes = path.read_bytes() if path.exists() else b""
        existing = existing_bytes.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", path=str(path)) from None
    from specmon.launch.trust import trust, trust_state

    # A trusted file specmon itself appends to at the user's request stays trusted; one that
    # was not trusted (or changed behind specmon's back) is not made trusted by a save.
    was_trusted = bool(existing_bytes) and trust_state(path, existing_bytes) == "trusted"
    if existing.strip():
        current = parse_config_text(existing, path)
        if profile.name in current.profiles:
            raise ConfigError(
                "a profile of this name already exists; choose another name",
                path=str(path),
                key=f"profiles.{profile.name}",
                line=_TomlPositions(existing).line_of(["profiles", profile.name]),
            )
    separator = "" if not existing or existing.endswith("\n\n") else "\n"
    if existing and not existing.endswith("\n"):
        separator = "\n\n"
    combined = existing + separator + render_profile_toml(profile)
    saved = parse_config_text(combined, path).profiles[profile.name]
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        make_private_dirs(path.parent)
        temporary.write_text(combined, encoding="utf-8")
        if path.exists():
            os.chmod(temporary, path.stat().st_mode & 0o7777)
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise ConfigError(f"cannot write: {exc.strerror}", path=str(path)) from None
    if was_trusted:
        trust(path, combined.encode("utf-8"))
    return saved

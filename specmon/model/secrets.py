"""Which environment values are secrets, and how specmon shows them: ``***``.

A value whose environment name looks secret (``*TOKEN*``, ``*KEY*``, ``*SECRET*``,
``*PASSWORD*``, any case) or matches a pattern of ``[security] secret_env`` in specmon.toml
still reaches the server, but everything specmon displays or stores (status, events, the
sweep's launch line, the ledger, the run record on the host) carries ``***`` instead.

The configured patterns are those of the config loaded last (``load_config`` registers them),
so every command honours them without passing them through each call.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable, Mapping
from fnmatch import fnmatchcase
from typing import Any

MASK = "***"
BUILTIN_SECRET_ENV = ("*TOKEN*", "*KEY*", "*SECRET*", "*PASSWORD*")
_SECRET_WORDS = frozenset({"token", "key", "secret", "password", "passwd", "apikey"})

_configured: tuple[str, ...] = ()
# Per configured pattern, its longest run of literal characters, lower case: a name matching
# the pattern holds it, so a log line without any of them (nor a built-in word) hides none.
_configured_words: tuple[str, ...] = ()
_GLOB_SPECIAL = re.compile(r"[*?]|\[[^\]]*\]")


def set_configured_patterns(patterns: Iterable[str]) -> None:
    """The config's ``[security] secret_env`` (glob patterns, matched case-insensitively)."""
    global _configured, _configured_words
    _configured = tuple(p.upper() for p in patterns)
    _configured_words = tuple(
        max(_GLOB_SPECIAL.split(pattern), key=len).lower() for pattern in _configured
    )


def secret_env_patterns() -> tuple[str, ...]:
    """Every pattern a secret environment name matches: the built-in ones and the config's."""
    return (*BUILTIN_SECRET_ENV, *_configured)


def is_secret_env(name: str) -> bool:
    upper = name.upper()
    return any(fnmatchcase(upper, p) for p in (*BUILTIN_SECRET_ENV, *_configured))


def is_secret_setting(name: str) -> bool:
    """A server setting (``api_key``, ``hf-token``) whose value is a secret: by whole word, so
    ``max_total_tokens`` or ``tokenizer_path`` stay visible."""
    words = re.split(r"[^a-z0-9]+", name.lower())
    upper = name.upper()
    return bool(_SECRET_WORDS.intersection(words)) or any(
        fnmatchcase(upper, p) for p in _configured
    )


def redact_env(env: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """``env`` with every secret value replaced by ``***`` (order kept)."""
    pairs = env.items() if isinstance(env, Mapping) else env
    return {name: MASK if is_secret_env(name) and value else value for name, value in pairs}


def redact_settings(settings: Any) -> Any:
    """A server's reported settings (a JSON object) with secret values as ``***``."""
    if not isinstance(settings, Mapping):
        return settings
    return {
        key: MASK if is_secret_setting(str(key)) and value not in (None, "") else value
        for key, value in settings.items()
    }


_ENV_WORD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.+)", re.DOTALL)


def redact_argv(argv: Iterable[str], only: Container[str] | None = None) -> tuple[str, ...]:
    """``argv`` as specmon shows and records it: the value of every secret flag
    (``--api-key X``, ``--hf-token=X``, by whole word as ``is_secret_setting``) and of every
    secret ``NAME=value`` word before the command (``env HF_TOKEN=x python ...``) as ``***``.
    The process itself gets the real values; a relaunch takes them from where they came.
    ``only``: mask just the flags and names it holds (secrets still)."""

    def is_secret_setting_here(name: str) -> bool:
        return is_secret_setting(name) and (only is None or name in only)

    def is_secret_env_here(name: str) -> bool:
        return is_secret_env(name) and (only is None or name in only)

    words = list(argv)
    shown: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if word.startswith("--") and len(word) > 2:
            name, equals, value = word[2:].partition("=")
            if not is_secret_setting_here(name):
                shown.append(word)
            elif equals:
                shown.append(f"--{name}={MASK}" if value else word)
            else:
                shown.append(word)
                if index < len(words) and not words[index].startswith("-"):
                    shown.append(MASK)
                    index += 1
            continue
        assignment = _ENV_WORD.fullmatch(word) if not word.startswith("-") else None
        if assignment is not None and is_secret_env_here(assignment.group(1)):
            shown.append(f"{assignment.group(1)}={MASK}")
        else:
            shown.append(word)
    return tuple(shown)


_SECRET_IN_TEXT = re.compile(
    # name='value' (a Python repr: ServerArgs(api_key='...')), 'name': 'value' (a dict's)
    r"""(?P<q>['"]?)(?P<name>[A-Za-z_][\w.-]*)(?P=q)(?P<sep>\s*[=:]\s*)(?P<value>'[^']*'|"[^"]*")"""
    # --name value, --name=value (a command line echoed)
    r"""|--(?P<flag>[A-Za-z][\w-]*)(?P<flag_sep>=|\s+)(?!-)(?P<flag_value>[^\s'",]+)"""
    # NAME=value (an environment echoed)
    r"""|\b(?P<env>[A-Z][A-Z0-9_]*)=(?P<env_value>[^\s'",]+)"""
)


def _masked_match(match: re.Match[str]) -> str:
    name, flag, env = match.group("name"), match.group("flag"), match.group("env")
    if name is not None and is_secret_setting(name):
        value = match.group("value")
        return f"{match.group('q')}{name}{match.group('q')}{match.group('sep')}{value[0]}{MASK}{value[0]}"
    if flag is not None and is_secret_setting(flag):
        return f"--{flag}{match.group('flag_sep')}{MASK}"
    if env is not None and is_secret_env(env):
        return f"{env}={MASK}"
    return match.group()


def mask_secrets_in_text(text: str) -> str:
    """A line a server wrote, with the values of secret settings it echoes as ``***``:
    SGLang's ``server_args=ServerArgs(..., api_key='...')``, vLLM's ``non-default args:
    {'api_key': '...'}``, a command line (``--api-key X``) or an environment (``HF_TOKEN=x``)
    printed back, also under a name ``[security] secret_env`` adds. Lines that name no
    secret word nor a configured pattern's letters (a decode line) are returned as they
    are after one quick look."""
    if not ("'" in text or '"' in text or "=" in text or "--" in text):
        return text  # no value to hide can be written without one of these
    lower = text.lower()
    if not (
        "key" in lower
        or "token" in lower
        or "secret" in lower
        or "passw" in lower
        or any(word in lower for word in _configured_words)
    ):
        return text
    return _SECRET_IN_TEXT.sub(_masked_match, text)


_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


def is_secret_name(name: str) -> bool:
    """A sweep axis whose values are secret: an environment variable (upper case, by the
    environment's patterns) or a flag or setting (``api-key``, ``api_key``: by whole word,
    so ``num_speculative_tokens`` is no secret though ``*TOKEN*`` would match its capitals)."""
    if _ENV_NAME.fullmatch(name):
        return is_secret_env(name)
    return is_secret_setting(name.lstrip("-"))


def redact_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A sweep's grid values (one point's, or each axis's list) with secret ones as ``***``."""
    return {
        name: (MASK if not isinstance(value, list) else [MASK] * len(value))
        if is_secret_name(name) and value
        else value
        for name, value in params.items()
    }

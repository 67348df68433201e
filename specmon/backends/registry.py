"""The registry of backends: which servers this build knows, and finding the one a command,
a log or a profile names. A new server is one line of ``BACKENDS`` and one folder."""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence

from specmon.backends.base import LogReading
from specmon.backends.facets import Backend

# The registry: name -> "module:Class". A new server is one entry and one folder.
BACKENDS: dict[str, str] = {
    "sglang": "specmon.backends.sglang:SGLangBackend",
    "vllm": "specmon.backends.vllm:VLLMBackend",
}
DEFAULT_BACKEND = "sglang"
NEUTRAL_LOG_READING = "specmon.backends.neutral"
"""The module of the reader for logs no backend recognises (not a backend, not registered)."""

# Servers specmon recognises in a command without having their backend in this build, so a
# profile for one is refused with a clear message rather than launched with the wrong rules.
KNOWN_SERVER_COMMANDS: dict[str, re.Pattern[str]] = {
    "vllm": re.compile(r"(^|\s|/)vllm\s+serve(\s|$)|vllm\.entrypoints"),
}

_instances: dict[str, Backend] = {}


def get_backend(name: str) -> Backend:
    """The registered backend ``name`` (one instance per process); UsageError if unknown."""
    if name in _instances:
        return _instances[name]
    try:
        target = BACKENDS[name]
    except KeyError:
        from specmon.model.errors import UsageError

        raise UsageError(
            f"unknown backend {name!r}; known: {', '.join(sorted(BACKENDS))}"
        ) from None
    module_name, _, class_name = target.partition(":")
    backend: Backend = getattr(importlib.import_module(module_name), class_name)()
    _instances[name] = backend
    return backend


def all_backends() -> list[Backend]:
    return [get_backend(name) for name in sorted(BACKENDS)]


def backend_for_command(command: Sequence[str]) -> str | None:
    """The backend a command runs: a registered backend that claims it, or the backend whose
    simulator personality it runs; None when no backend recognises it. A known server that
    this build has no backend for is a UsageError."""
    for backend in all_backends():
        if backend.command_matches(command):
            return backend.name
    words = " ".join(command)
    for backend in all_backends():
        if backend.sim_module and re.search(rf"(^|\s){re.escape(backend.sim_module)}(\s|$)", words):
            return backend.name
    for name, pattern in KNOWN_SERVER_COMMANDS.items():
        if name not in BACKENDS and pattern.search(words):
            from specmon.model.errors import UsageError

            raise UsageError(f"backend {name} is not installed in this specmon")
    return None


def process_words() -> tuple[str, ...]:
    """The words that mark a process as maybe a server of some backend (its ``process_words``
    and its simulator's module): what ``specmon attach`` asks the host's helper to look for."""
    words: list[str] = []
    for backend in all_backends():
        for word in (*backend.process_words, backend.sim_module):
            if word and word not in words:
                words.append(word)
    return tuple(words)


def detect_backend(sample: str) -> str | None:
    """The backend most sure that a log sample is its server's (None when none is)."""
    best, best_score = None, 0.0
    for backend in all_backends():
        score = backend.detect_log(sample)
        if score > best_score:
            best, best_score = backend.name, score
    return best


def neutral_log_reading() -> LogReading:
    """The reader for a log no backend recognised: errors (PyTorch, NCCL, tracebacks) and no
    server's events (specmon/backends/neutral.py). Not a backend: nothing launches with it."""
    reading: LogReading = importlib.import_module(NEUTRAL_LOG_READING).NeutralLog()
    return reading


def env_prefixes() -> tuple[str, ...]:
    """Every registered backend's environment families (a launch may set these)."""
    return tuple(prefix for backend in all_backends() for prefix in backend.env_prefixes)

"""Server backends (SGLang now, vLLM next) behind one small interface.

Adding a backend is a new module registered in ``BACKENDS``, never an ``if backend ==`` branch.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from specmon.events import Event


class LogParser(ABC):
    """Turns a server's output, in arbitrary chunks, into events. Never raises on input."""

    unparsed_decode_like: int = 0
    """Lines that look like the server's decode stat line but did not parse: format drift."""

    @abstractmethod
    def feed(self, chunk: str | bytes) -> list[Event]:
        """Consume a chunk; complete lines (and complete tqdm redraws) become events."""

    @abstractmethod
    def flush(self) -> list[Event]:
        """Parse whatever partial line is held back (end of stream)."""

    def parse_lines(self, lines: Iterable[str]) -> list[Event]:
        events: list[Event] = []
        for line in lines:
            events.extend(self.feed(line if line.endswith("\n") else line + "\n"))
        events.extend(self.flush())
        return events


class LogSummary(ABC):
    """Running totals over one log's events, for `specmon parse --summary`; per backend,
    because what a summary says (readiness, load time, means) depends on the server."""

    @abstractmethod
    def add(self, event: Event) -> None:
        """Take one event into the totals."""

    @abstractmethod
    def finish(self, parser: LogParser) -> dict[str, Any]:
        """The summary record (``"kind": "summary"``), with what ``parser`` counted."""


class Backend(ABC):
    """What specmon needs to know about one kind of server."""

    name: str
    launch_module: str  # e.g. "sglang.launch_server", run as `python -m`
    health_path: str = "/health"
    info_path: str = "/get_server_info"

    @abstractmethod
    def new_log_parser(self) -> LogParser: ...

    @abstractmethod
    def new_log_summary(self) -> LogSummary: ...

    @abstractmethod
    def detect_log(self, sample: str) -> float:
        """How sure (0 to 1) this server wrote a log that begins with ``sample``."""

    @abstractmethod
    def validate_launch(self, args: Sequence[str], env: Mapping[str, str]) -> list[str]:
        """Problems with a launch (flag names and values), empty when it may run."""


BACKENDS: dict[str, str] = {
    "sglang": "specmon.backends.sglang:SGLangBackend",
}


def get_backend(name: str) -> Backend:
    try:
        target = BACKENDS[name]
    except KeyError:
        from specmon.errors import UsageError

        raise UsageError(
            f"unknown backend {name!r}; known: {', '.join(sorted(BACKENDS))}"
        ) from None
    module_name, _, class_name = target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)()


def detect_backend(sample: str) -> str | None:
    """The registered backend most sure it wrote ``sample`` (a log's first lines), None when
    none recognises it. A tie goes to the backend registered first."""
    best_name, best = None, 0.0
    for name in BACKENDS:
        confidence = get_backend(name).detect_log(sample)
        if confidence > best:
            best_name, best = name, confidence
    return best_name

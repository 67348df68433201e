"""Server backends (SGLang now, vLLM next) behind one small interface.

Adding a backend is a new module registered in ``BACKENDS``, never an ``if backend ==`` branch.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence

from specmon.events import Event


class LogParser(ABC):
    """Turns a server's output, in arbitrary chunks, into events. Never raises on input."""

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


class Backend(ABC):
    """What specmon needs to know about one kind of server."""

    name: str
    launch_module: str  # e.g. "sglang.launch_server", run as `python -m`
    health_path: str = "/health"
    info_path: str = "/get_server_info"

    @abstractmethod
    def new_log_parser(self) -> LogParser: ...

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

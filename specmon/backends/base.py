"""The words the backend facets speak: launch problems, form fields, draft shapes, probe
targets, and the log and metrics readers a backend hands out.

Kept apart from the facets themselves (specmon/backends/facets.py) so that the code that only
reads a server's log or metrics needs these types and nothing of the launch rules.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from specmon.backends.nccl import NCCL_FORM_CHOICES

if TYPE_CHECKING:  # events load ~45 ms of dataclasses: not on every simulator start
    from specmon.model.events import Event

FlagKind = Literal["switch", "value"]


class SpeculativeFields(Protocol):
    """A profile's speculative settings, as a backend reads them."""

    @property
    def algorithm(self) -> str: ...
    @property
    def num_steps(self) -> int | None: ...
    @property
    def eagle_topk(self) -> int | None: ...
    @property
    def num_draft_tokens(self) -> int | None: ...
    @property
    def num_speculative_tokens(self) -> int | None: ...
    @property
    def draft_tensor_parallel_size(self) -> int | None: ...


class ProfileFields(Protocol):
    """The fields of a launch profile a backend maps to its flags (config.Profile has them)."""

    @property
    def command(self) -> tuple[str, ...]: ...
    @property
    def model_path(self) -> str: ...
    @property
    def draft_model_path(self) -> str | None: ...
    @property
    def tp(self) -> int | None: ...
    @property
    def port(self) -> int | None: ...
    @property
    def host_bind(self) -> str | None: ...
    @property
    def speculative(self) -> SpeculativeFields | None: ...
    @property
    def mem_fraction_static(self) -> float | None: ...
    @property
    def extra_args(self) -> tuple[str, ...]: ...


class LogParser(ABC):
    """Turns a server's output, in arbitrary chunks, into events. Never raises on input."""

    unparsed_decode_like: int = 0  # lines that look like decode lines but did not parse

    @abstractmethod
    def feed(self, chunk: str | bytes) -> list[Event]:
        """Consume a chunk; complete lines (and complete tqdm redraws) become events."""

    @abstractmethod
    def flush(self) -> list[Event]:
        """Parse whatever partial line is held back (end of stream)."""

    def summarize(self, chunk: str | bytes, summary: LogSummary) -> int:
        """Take a chunk into ``summary`` alone (`specmon parse --no-events`); an empty chunk
        ends the stream (flush). Returns how many events it held. A backend may skip making
        the events its summary only counts."""
        events = self.feed(chunk) if chunk else self.flush()
        summary.add_all(events)
        return len(events)

    def line_state(self) -> Hashable | None:
        """What this parser carries from one complete line to the next that can change how the
        lines after it read, or None where it cannot say. Two parsers at a line boundary with
        equal states read what follows alike, which lets `specmon parse` read the parts of one
        file at once (specmon/logs/parts.py) and check each part began as it should have. A
        cache that changes only speed (learned line shapes) is not state. None: the log is
        read start to end in one piece."""
        return None

    def parse_lines(self, lines: Iterable[str]) -> list[Event]:
        events: list[Event] = []
        for line in lines:
            events.extend(self.feed(line if line.endswith("\n") else line + "\n"))
        events.extend(self.flush())
        return events


class LogSummary(ABC):
    """Running totals over a parsed log, for ``specmon parse --summary``."""

    @abstractmethod
    def add(self, event: Event) -> None:
        """Count one event."""

    def add_all(self, events: list[Event]) -> None:
        """Take a chunk's events, in order; a backend may read runs of decodes in bulk."""
        for event in events:
            self.add(event)

    @abstractmethod
    def merge(self, later: LogSummary) -> None:
        """Fold in the totals of the part of the log that follows the part this one read,
        so that the result is the summary of both read in order (specmon/logs/parts.py)."""

    @abstractmethod
    def finish(self, parser: LogParser) -> dict[str, Any]:
        """The summary record (the parser supplies counters such as unparsed_decode_like)."""


class LogReading(Protocol):
    """What reads one log: a backend, or the neutral reader `specmon parse` falls back to
    when no backend recognises the log (specmon/backends/neutral.py)."""

    @property
    def name(self) -> str: ...
    def new_log_parser(self) -> LogParser: ...
    def new_log_summary(self) -> LogSummary: ...


class MetricsReader(ABC):
    """Turns successive ``/metrics`` pages of one run into events (rates between polls), for
    a server whose log may say nothing while it serves. Never raises on input."""

    @abstractmethod
    def read(self, text: str, at: float) -> list[Event]:
        """Events from one page polled at ``at`` (monotonic seconds); [] when none yet."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One launch rule broken: ``subject`` is the flag (``--name``) or variable at fault."""

    subject: str
    message: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.message}"


@dataclass(frozen=True, slots=True)
class FormField:
    """One field of the console's relaunch form: a flag (``--name``) or an env variable."""

    name: str  # the flag name without dashes, or the variable name
    is_env: bool = False
    choices: tuple[str, ...] = ()  # a select widget's values; empty for free text
    label: str = ""  # how the form names it (the name itself when empty)

    @property
    def shown_as(self) -> str:
        return self.label or self.name


NCCL_FORM_FIELDS: tuple[FormField, ...] = tuple(
    FormField(name, is_env=True, choices=values) for name, values in NCCL_FORM_CHOICES.items()
)
"""The NCCL variables every backend's relaunch form ends with: NCCL reads them, whatever the
server."""


def nccl_key_flags(env: Mapping[str, str]) -> dict[str, str]:
    """The NCCL variables of ``NCCL_FORM_CHOICES`` that ``env`` sets, for a backend's
    key_flags (the console header compares runs by them, whatever the server)."""
    return {name: env[name] for name in NCCL_FORM_CHOICES if name in env}


@dataclass(frozen=True, slots=True)
class ProbeTargets:
    """The timing probe injected into the server: files copied to ``<run dir>/probe/`` (the
    in-server hook modules) and the environment that makes the server load them."""

    files: Mapping[str, bytes]
    pythonpath: bool = True  # prepend the probe dir to PYTHONPATH


@dataclass(frozen=True, slots=True)
class NodePlacement:
    """Where one process of a server spanning several nodes stands."""

    rank: int  # 0 serves HTTP
    nnodes: int
    init_host: str  # node 0's address, as the other nodes reach it
    init_port: int  # a port free on node 0 for the distributed rendezvous


@dataclass(frozen=True, slots=True)
class DraftShape:
    """The draft a server runs each cycle, as the tuning advisor models it; None where neither
    the server nor its launch says. A server not speculating has 0 steps."""

    steps: int | None  # draft forwards per cycle: the chain's length k when topk is 1
    topk: int | None  # candidates per step (1: a chain; more: a tree)
    verify_tokens: int | None  # tokens one request's verify checks (k + 1 for a chain)


# The labels of the exporter's run-info series that a launch's command line decides, the same
# for every server (``Backend.run_info_labels`` fills them; "" where the launch does not say).
RUN_INFO_LABELS: tuple[str, ...] = (
    "model",
    "draft_model",
    "spec_algorithm",
    "spec_steps",
    "spec_topk",
    "spec_draft_tokens",
    "tp",
)

"""Server backends behind one interface: everything specmon knows about one kind of server.

A backend is one folder, ``specmon/backends/<name>/``, registered in ``BACKENDS``; code outside
``specmon/backends/`` asks the backend (``get_backend(name)``) and never names a server
(tests/backends/test_server_boundary.py checks it). docs/backends.md describes every member.
"""

from __future__ import annotations

import importlib
import re
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Mapping, Sequence
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


class Backend(ABC):
    """What specmon needs to know about one kind of server (see docs/backends.md)."""

    name: str  # the registry key, e.g. the value of a profile's ``backend``
    display_name: str  # how messages name the server
    default_command: tuple[str, ...]  # a profile's command when it names none
    env_prefixes: tuple[str, ...] = ()  # environment families a launch may set, e.g. "FOO_"
    default_speculative_algorithm: str | None = None  # when a form adds speculation
    sim_module: str | None = None  # the simulator personality run for demos and tests
    default_port: int = 30000
    # A profile's [speculative] keys: (TOML key, SpeculativeFields attribute), the first being
    # the algorithm (required). Ranges are the config's (docs/config.md).
    speculative_keys: tuple[tuple[str, str], ...] = (
        ("algorithm", "algorithm"),
        ("num_steps", "num_steps"),
        ("eagle_topk", "eagle_topk"),
        ("num_draft_tokens", "num_draft_tokens"),
    )
    # The loading panel's phases, in order (the store maps start-up events onto them).
    loading_phases: tuple[str, ...] = (
        "target weights",
        "KV cache",
        "target CUDA graphs",
        "draft weights",
        "draft CUDA graphs",
        "HTTP server",
        "ready",
    )
    # Built-in profiles (TOML) that run this server's simulator personality, available from
    # any directory like the ``demo`` profile (config.builtin_config_toml adds them).
    builtin_profiles_toml: str = ""
    # The setting (a flag without dashes, or a named setting, as a sweep grid and ``--set``
    # take it) that sets the draft step count: the axis the tuning advisor predicts.
    steps_setting: str | None = None
    # Whether a speculative cycle has an extend phase after the verify (SGLang's draft-extend);
    # a server without one (vLLM) shows no extend figures.
    has_extend_phase: bool = True

    # --- HTTP --------------------------------------------------------------------------
    health_path: str = "/health"
    info_paths: tuple[str, ...] = ()  # server-info endpoints, tried in order
    info_merged: bool = False  # True: every info endpoint answers part (merged), not the first
    metrics_path: str = "/metrics"
    metric_prefix: str = ""  # Prometheus samples kept for the console (e.g. "foo:")
    accept_length_metric: str | None = None  # the mean acceptance length gauge
    generate_path: str = ""  # the generation endpoint the benchmark sends prompts to
    # The deepest draft specmon reads acceptance for (positions 1..64): past what either
    # server launches (SGLang's num-steps <= 32), so a larger position is a hostile or broken
    # server's, and a list sized by it would be sized by the server.
    max_draft_positions: int = 64

    # --- logs (parser, summary, detection) ---------------------------------------------

    @abstractmethod
    def new_log_parser(self) -> LogParser: ...

    @abstractmethod
    def new_log_summary(self) -> LogSummary: ...

    @abstractmethod
    def detect_log(self, sample: str) -> float:
        """0..1: how sure it is that ``sample`` (a log's first lines) came from this server."""

    # --- launch ------------------------------------------------------------------------

    @abstractmethod
    def command_matches(self, command: Sequence[str]) -> bool:
        """Whether a profile's command runs this server (used to infer ``backend``)."""

    def profile_command(self, command: Sequence[str], profile: ProfileFields) -> tuple[str, ...]:
        """The command words a profile runs (its ``command``; a server whose command takes the
        model as a positional argument adds it here)."""
        return tuple(command)

    @abstractmethod
    def profile_args(self, profile: ProfileFields) -> tuple[str, ...]:
        """The flags a profile's fields (model_path, tp, speculative...) stand for, followed
        by its extra_args."""

    @abstractmethod
    def profile_key_of(self, subject: str) -> tuple[str, ...] | None:
        """Which profile key a launch problem's subject (``--flag``) comes from."""

    @abstractmethod
    def flag_kind(self, name: str) -> FlagKind | None:
        """``switch`` (bare), ``value``, or None for a flag this server does not have."""

    def setting_flags(
        self, args: Sequence[str], changes: Mapping[str, str | bool | None]
    ) -> dict[str, str | bool | None]:
        """Flag changes (a sweep grid's, a form's) with the server's named settings that are
        not flags of their own (e.g. a key inside a JSON flag) folded into the flag that
        carries them, given the launch's current ``args``. Default: the changes as given."""
        return dict(changes)

    def setting_value(self, args: Sequence[str], name: str) -> str | None:
        """The value of a named setting that is not a flag of its own (see setting_flags), or
        None; a flag's own value is read by the caller."""
        return None

    @abstractmethod
    def launch_problems(self, args: Sequence[str], env: Mapping[str, str]) -> list[Problem]:
        """Everything wrong with a launch's flags and variables, empty when it may run."""

    def validate_launch(self, args: Sequence[str], env: Mapping[str, str]) -> list[str]:
        return [str(problem) for problem in self.launch_problems(args, env)]

    @abstractmethod
    def env_value_problem(self, name: str, value: str) -> str | None:
        """Why a value is wrong for a variable the server reads, or None."""

    @abstractmethod
    def speculative_algorithms(self) -> tuple[str, ...]:
        """The values a profile's ``speculative.algorithm`` may take."""

    @abstractmethod
    def speculation_flags(self, args: Sequence[str]) -> frozenset[str]:
        """The flags among ``args`` to remove to run without speculative decoding (the
        measured baseline)."""

    @abstractmethod
    def key_flags(self, args: Sequence[str], env: Mapping[str, str]) -> dict[str, str]:
        """The settings runs are compared by, for the console header: algorithm, steps, topk,
        draft_tokens, tp, mem_fraction and NCCL variables, those that are set."""

    @abstractmethod
    def run_info_labels(self, argv: Sequence[str]) -> dict[str, str]:
        """A run's command line (the whole argv, program words included) as the exporter's
        run-info labels: every name of RUN_INFO_LABELS, "" where the launch does not say.
        The same meaning for every server: ``spec_steps`` draft steps per cycle,
        ``spec_topk`` candidates per step, ``spec_draft_tokens`` tokens one request's verify
        checks, ``tp`` the target's tensor parallel size."""

    @abstractmethod
    def draft_shape(
        self, args: Sequence[str], env: Mapping[str, str], server_info: Mapping[str, str]
    ) -> DraftShape:
        """The draft a launch runs: its steps, topk and tokens per verify, from the server's
        own report (``server_info``: the fields ``server_info_values`` gave) over its flags."""

    def steps_follow_ups(
        self, args: Sequence[str], given: Iterable[str]
    ) -> dict[str, tuple[str, str]]:
        """Settings that a new step count (``steps_setting``, already set in ``args``) decides,
        as ``name -> (value, why)``, leaving out those the same change sets (``given``): a
        sweep over step counts applies them and says so. Default: none."""
        return {}

    def probe_draft_positions(self, draft_tokens: int, batch_size: int) -> int:
        """Draft positions per request that a probe record stands for, from its
        ``draft_tokens`` and ``batch_size``. Default: the probe counts each request's verified
        root token with its drafts (``batch_size x num_draft_tokens``)."""
        return draft_tokens // batch_size - 1

    # --- the relaunch form -------------------------------------------------------------

    @abstractmethod
    def form_fields(self) -> tuple[FormField, ...]:
        """The relaunch form's own fields, in display order."""

    @abstractmethod
    def form_context_args(self, base_args: Sequence[str] | None) -> list[str]:
        """Flags of the launch being edited (its args; None: a new launch) that the form's
        rules depend on but the form does not edit (e.g. the speculative algorithm)."""

    @abstractmethod
    def form_fixed_subjects(self) -> frozenset[str]:
        """Problem subjects that the form cannot fix (the profile provides them)."""

    # --- running -----------------------------------------------------------------------

    def ready_on_health(self, status: int | None) -> bool:
        """Whether an answer of the health endpoint means the server is ready to serve."""
        return status == 200

    def bench_info(self, data: Any) -> dict[str, Any]:
        """A server-info answer as the benchmark records it: ``version``, ``model_path`` and
        the server's launch arguments by name (``speculative_algorithm`` says whether it
        speculates). Default: the answer as it is."""
        return dict(data) if isinstance(data, dict) else {}

    @abstractmethod
    def server_info_values(self, data: Any) -> tuple[tuple[str, str], ...]:
        """The fields of the server-info answer the console shows."""

    @abstractmethod
    def generate_body(self, text: str, max_tokens: int, stream: bool) -> dict[str, Any]:
        """A benchmark request: greedy, exactly ``max_tokens`` generated (EOS ignored), so
        runs are comparable."""

    @abstractmethod
    def generate_meta(self, reply: Any) -> dict[str, Any] | None:
        """A reply (or a streamed chunk) as counts, in these keys when known:
        completion_tokens, prompt_tokens, spec_verify_ct, spec_accept_length, e2e_latency,
        finish_reason (``{"type": "abort", "message": ...}`` for an aborted request)."""

    @abstractmethod
    def generate_text(self, reply: Any) -> str:
        """The text a reply or chunk carries ("" when none): its first marks the first token."""

    def metric_sample_kept(self, name: str) -> bool:
        """Whether a Prometheus sample belongs on the console (histogram buckets left out)."""
        return name.startswith(self.metric_prefix) and not name.endswith("_bucket")

    def new_metrics_reader(self) -> MetricsReader | None:
        """A reader of the server's ``/metrics`` into events, or None when its log says all
        (the poller publishes its events only while the log's own stats lines are quiet)."""
        return None

    def accept_length_between(self, before: str, after: str) -> float | None:
        """The mean acceptance length over an interval from two ``/metrics`` pages, for a
        server without an ``accept_length_metric`` gauge; None: unknown."""
        return None

    def speculation_in_metrics(self, text: str) -> bool | None:
        """Whether a ``/metrics`` page shows speculative decoding running, for a server whose
        info endpoint does not say (the sweep confirms a baseline by it); None: unknown."""
        return None

    def probe_targets(self) -> ProbeTargets | None:
        """The in-server timing probe, or None for a server without one."""
        return None

    # --- several nodes -----------------------------------------------------------------

    def multinode_args(self, node: NodePlacement) -> tuple[str, ...] | None:
        """The flags that make one server process node ``node.rank`` of ``node.nnodes``,
        meeting the others at ``node.init_host:node.init_port`` (node 0's address and a port
        free there); None when this server cannot span nodes without a cluster manager of
        its own (specmon then refuses a profile with ``nodes``). The flags are appended to
        each node's launch and validated with the others by ``launch_problems``."""
        return None

    def multinode_flags(self) -> frozenset[str]:
        """The flags ``multinode_args`` writes (without dashes): a launch that sets one by
        hand is refused, since specmon renders them from the profile's ``nodes``."""
        return frozenset()


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

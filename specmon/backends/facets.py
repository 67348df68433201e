"""The facets of a backend: what specmon needs to know about one kind of server, in seven
small parts that each answer one question.

| facet            | answers                                                        |
| ---------------- | -------------------------------------------------------------- |
| ``ServerLogs``   | how the server's log reads (parser, summary, detection, phases) |
| ``LaunchRules``  | how a profile becomes flags, and which launches may run          |
| ``RelaunchForm`` | which fields the console's relaunch form edits                   |
| ``HttpApi``      | the server's endpoints: health, info, metrics, generation        |
| ``Tuning``       | the draft's shape and the settings a step count decides          |
| ``ProbeHook``    | the in-server timing probe, and whether a source tree can take it |
| ``Simulator``    | the simulator personality that stands in for the server          |

A backend folder implements each facet (specmon/backends/sglang/__init__.py, vllm/) and
``Backend`` is their sum: code that needs one part of a server types its argument with that
facet (``specmon parse`` takes a ``LogReading``, the benchmark an ``HttpApi``), so a new server
is built facet by facet (docs/backends.md walks through one).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specmon.backends.base import (
    DraftShape,
    FlagKind,
    FormField,
    LogParser,
    LogSummary,
    MetricsReader,
    NodePlacement,
    ProbeTargets,
    Problem,
    ProfileFields,
)
from specmon.model.quantiles import DEFAULT_WINDOW_S

if TYPE_CHECKING:
    from specmon.backends.latency import LatencyReader


class Named(ABC):
    """Every facet knows which server it speaks for."""

    name: str  # the registry key, e.g. the value of a profile's ``backend``
    display_name: str  # how messages name the server


class ServerLogs(Named):
    """How the server's log reads."""

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

    @abstractmethod
    def new_log_parser(self) -> LogParser: ...

    @abstractmethod
    def new_log_summary(self) -> LogSummary: ...

    @abstractmethod
    def detect_log(self, sample: str) -> float:
        """0..1: how sure it is that ``sample`` (a log's first lines) came from this server."""


class LaunchRules(Named):
    """How a profile becomes a command line, and which command lines may run."""

    default_command: tuple[str, ...]  # a profile's command when it names none
    env_prefixes: tuple[str, ...] = ()  # environment families a launch may set, e.g. "FOO_"
    default_speculative_algorithm: str | None = None  # when a form adds speculation
    default_port: int = 30000
    # Words (case-insensitive) whose presence in a process's command line makes it worth a
    # look as this server (``specmon attach`` finds servers specmon did not launch); the
    # command line then decides, through ``command_matches``. The simulator's module is added
    # by the registry.
    process_words: tuple[str, ...] = ()
    # A profile's [speculative] keys: (TOML key, SpeculativeFields attribute), the first being
    # the algorithm (required). Ranges are the config's (docs/config.md).
    speculative_keys: tuple[tuple[str, str], ...] = (
        ("algorithm", "algorithm"),
        ("num_steps", "num_steps"),
        ("eagle_topk", "eagle_topk"),
        ("num_draft_tokens", "num_draft_tokens"),
    )

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

    def profile_from_argv(self, argv: Sequence[str]) -> dict[str, Any]:
        """A running server's command line (program words included) as a profile's keys, the
        inverse of ``profile_command`` + ``profile_args`` (``specmon adopt``): ``command``,
        ``model_path`` and each flag the profile renders (tp, port, host_bind,
        mem_fraction_static, draft_model_path, ``speculative`` as a table of its TOML keys),
        the rest in ``extra_args`` in its order; a profile of these keys launches the same
        argv, its own flags first. A UsageError when the command line names no model.
        Default: this server cannot be adopted."""
        from specmon.model.errors import UsageError

        raise UsageError(f"specmon cannot read a {self.display_name} command line as a profile")

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

    def model_paths(self, argv: Sequence[str]) -> tuple[str | None, str | None]:
        """(target, draft) model paths a command line names (a directory or a model id),
        None where it names none: the files the draft's wiring is read from. Default: the
        ``model`` and ``draft_model`` run-info labels."""
        labels = self.run_info_labels(argv)
        return labels.get("model") or None, labels.get("draft_model") or None

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


class RelaunchForm(Named):
    """The console's relaunch form: which settings it edits, and what it leaves alone."""

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


class HttpApi(Named):
    """The server's HTTP endpoints: readiness, info, metrics and the benchmark's requests."""

    health_path: str = "/health"
    info_paths: tuple[str, ...] = ()  # server-info endpoints, tried in order
    info_merged: bool = False  # True: every info endpoint answers part (merged), not the first
    metrics_path: str = "/metrics"
    metric_prefix: str = ""  # Prometheus samples kept for the console (e.g. "foo:")
    accept_length_metric: str | None = None  # the mean acceptance length gauge
    generate_path: str = ""  # the generation endpoint the benchmark sends prompts to
    # How the server is made to serve ``metrics_path`` when it answers 404 ("" : it always does).
    metrics_hint: str = ""
    # GET paths whose answers tell this server from others (`specmon watch http://...`).
    probe_paths: tuple[str, ...] = ()

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

    def new_http_only_metrics_reader(self) -> MetricsReader | None:
        """The reader for a server watched by its URL alone (no log at all): every figure
        the console shows must then come from ``/metrics``. Default: ``new_metrics_reader``."""
        return self.new_metrics_reader()

    def new_latency_reader(
        self, argv: Sequence[str] = (), window_s: float = DEFAULT_WINDOW_S
    ) -> LatencyReader | None:
        """A reader of the server's ``/metrics`` into ``latency`` events (request latency
        quantiles over a ``window_s`` rolling window, rates, capacity and saturation), for a
        run launched with ``argv`` (empty: not known); None when the server serves no such
        families. The poller publishes its events at every scrape, log or not."""
        return None

    def http_likeness(self, answers: Mapping[str, Any]) -> float:
        """How sure (0..1) that the answers to ``probe_paths`` (every registered backend's,
        path -> the parsed JSON, None where no 200 JSON answer came) are this server's. The
        answers are untrusted: read them with isinstance checks, never raise. Default: 0."""
        return 0.0

    def accept_length_between(self, before: str, after: str) -> float | None:
        """The mean acceptance length over an interval from two ``/metrics`` pages, for a
        server without an ``accept_length_metric`` gauge; None: unknown."""
        return None

    def speculation_in_metrics(self, text: str) -> bool | None:
        """Whether a ``/metrics`` page shows speculative decoding running, for a server whose
        info endpoint does not say (the sweep confirms a baseline by it); None: unknown."""
        return None


class Tuning(Named):
    """The draft a launch runs, as the advisor and the sweeps model it."""

    # The setting (a flag without dashes, or a named setting, as a sweep grid and ``--set``
    # take it) that sets the draft step count: the axis the tuning advisor predicts.
    steps_setting: str | None = None
    # Whether a speculative cycle has an extend phase after the verify (SGLang's draft-extend);
    # a server without one (vLLM) shows no extend figures.
    has_extend_phase: bool = True
    # The deepest draft specmon reads acceptance for (positions 1..64): past what either
    # server launches (SGLang's num-steps <= 32), so a larger position is a hostile or broken
    # server's, and a list sized by it would be sized by the server.
    max_draft_positions: int = 64

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


class ProbeHook(Named):
    """The timing probe specmon injects into the server (draft, verify, extend per cycle)."""

    def probe_targets(self) -> ProbeTargets | None:
        """The in-server timing probe, or None for a server without one."""
        return None

    def probe_draft_positions(self, draft_tokens: int, batch_size: int) -> int:
        """Draft positions per request that a probe record stands for, from its
        ``draft_tokens`` and ``batch_size``. Default: the probe counts each request's verified
        root token with its drafts (``batch_size x num_draft_tokens``)."""
        return draft_tokens // batch_size - 1

    def probe_source_report(self, path: Path) -> tuple[str, bool] | None:
        """Would the probe work on this server's source tree at ``path`` (``python -m
        specmon.probe --check-source``)? The report's text and whether every target was found;
        None when ``path`` holds no tree of this server. A UsageError says why it is not one.
        Default: None (no probe)."""
        return None


class Simulator(Named):
    """The simulated server that stands in for this one in demos and tests."""

    sim_module: str | None = None  # ``python -m <sim_module>`` runs the personality
    # Built-in profiles (TOML) that run this server's simulator personality, available from
    # any directory like the ``demo`` profile (config.builtin_config_toml adds them).
    builtin_profiles_toml: str = ""


class Backend(ServerLogs, LaunchRules, RelaunchForm, HttpApi, Tuning, ProbeHook, Simulator):
    """Everything specmon knows about one kind of server: the sum of its facets, implemented
    by one folder under specmon/backends/ and named by one line of the registry."""

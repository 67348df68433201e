"""Typed events: the one vocabulary shared by parsers, the host session, the store and the UI.

Every event is a frozen, keyword-only dataclass with a class-level ``kind`` tag, so the JSON
form (``to_json``) is stable for `specmon parse --json` and `specmon watch --json`.
Events never hold references to live objects: they can be logged, replayed and compared.
"""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, partial
from itertools import repeat
from operator import attrgetter
from typing import Any, ClassVar, Literal

from specmon.model.diagnosis import Diagnosis
from specmon.model.quantiles import WindowQuantiles
from specmon.model.run_end import RunEnd
from specmon.remote.agent import (
    GpuReading,  # the GPU schema lives with the agent, which ships alone
)

ErrorCategory = Literal["oom", "nccl", "other", "unknown"]
"""unknown: the log holds no cause (a traceback cut before its exception line)."""
ModelRole = Literal["target", "draft"]
GraphRole = Literal["target", "draft", "draft_extend"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of all events. ``ts`` is the log's own timestamp text where the source has one."""

    kind: ClassVar[str] = "event"
    _texts: ClassVar[tuple[str, ...] | None] = None  # Decode's slot shadows it (text_rows)
    ts: str | None = None
    rank: int | None = None

    def to_dict(self) -> dict[str, Any]:
        names = _field_names(type(self))
        values = list(map(getattr, repeat(self), names))
        out: dict[str, Any] = {"kind": self.kind}
        if all(map(_PLAIN_TYPES.__contains__, map(type, values))):  # no tuple, no nested event
            out.update(zip(names, values, strict=True))
            return out
        for name, value in zip(names, values, strict=True):
            if isinstance(value, tuple):
                value = [v.to_dict() if hasattr(v, "to_dict") else v for v in value]
            elif hasattr(value, "to_dict"):
                value = value.to_dict()
            out[name] = value
        return out

    def to_json(self) -> str:
        return _encode_json(self.to_dict())


_TEXTS = attrgetter("_texts")
_PLAIN_TYPES = frozenset((str, int, float, bool, type(None)))


@cache
def _field_names(cls: type[Event]) -> tuple[str, ...]:
    """A dataclass's field names, looked up once per class (``fields()`` is slow per call)."""
    return tuple(f.name for f in dataclasses.fields(cls))


# One encoder for all: json.dumps with non-default options builds a new one on every call.
_encode_json = json.JSONEncoder(separators=(", ", ": "), default=str).encode


# --- events read from the server log (parser output) ----------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadBegin(Event):
    kind: ClassVar[str] = "load_begin"
    avail_mem_gb: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardProgress(Event):
    kind: ClassVar[str] = "shard_progress"
    done: int
    total: int
    elapsed_s: float | None = None
    remaining_s: float | None = None
    seconds_per_shard: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadEnd(Event):
    kind: ClassVar[str] = "load_end"
    mem_usage_gb: float | None = None
    avail_mem_gb: float | None = None
    elapsed_s: float | None = None
    model_type: str | None = None
    role: ModelRole | None = None  # "draft" when the model type names an EAGLE/draft class


@dataclass(frozen=True, slots=True, kw_only=True)
class KvCache(Event):
    kind: ClassVar[str] = "kv_cache"
    tokens: int | None = None
    size_gb: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GraphBegin(Event):
    kind: ClassVar[str] = "graph_begin"
    role: GraphRole | None = None
    avail_mem_gb: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GraphEnd(Event):
    kind: ClassVar[str] = "graph_end"
    role: GraphRole | None = None
    seconds: float | None = None
    mem_usage_gb: float | None = None
    avail_mem_gb: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpUp(Event):
    """The HTTP server listens (uvicorn start-up lines); warm-up follows."""

    kind: ClassVar[str] = "http_up"
    port: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Ready(Event):
    """The server's ready line. The host session adds the load time from the run record
    (``load_seconds``, None when unknown) and marks a line read from a reattach's replay
    (``replayed``: it arrived long after the server became ready)."""

    kind: ClassVar[str] = "ready"
    load_seconds: float | None = None
    replayed: bool = False


@dataclass(frozen=True, kw_only=True, init=False, repr=False, eq=False)
class Decode(Event):
    """One `Decode batch` log line: the event a serving log is almost made of.

    It behaves like the other events (keyword construction, value equality, the dataclass
    repr, ``to_dict``, frozen, ``dataclasses.fields``) but keeps its values in one tuple, and
    a log parser may hand over a line's number texts instead (``from_texts``): they are
    converted, all at once, on first read. Building one is then a single slot write instead
    of eight conversions and ten writes, which was most of what a log parser spent per line;
    a reader pays about the same again on first read, and nothing when it never reads.

    ``tokens`` is None where the server does not log it (vLLM's stats line); ``engine`` is
    vLLM's engine index (`Engine 001:`) and is left out of ``to_dict`` and the repr when None,
    so an SGLang decode reads exactly as before it existed.
    """

    __slots__ = ("_texts", "_values")
    kind: ClassVar[str] = "decode"
    running_req: int
    tokens: int | None
    token_usage: float
    accept_len: float | None = None
    accept_rate: float | None = None
    gen_throughput: float
    queue_req: int
    cuda_graph: bool | None = None
    engine: int | None = None

    def __init__(
        self,
        *,
        ts: str | None = None,
        rank: int | None = None,
        running_req: int,
        tokens: int | None,
        token_usage: float,
        accept_len: float | None = None,
        accept_rate: float | None = None,
        gen_throughput: float,
        queue_req: int,
        cuda_graph: bool | None = None,
        engine: int | None = None,
    ) -> None:
        values = (ts, rank, running_req, tokens, token_usage, accept_len, accept_rate)
        object.__setattr__(
            self, "_values", (*values, gen_throughput, queue_req, cuda_graph, engine)
        )
        object.__setattr__(self, "_texts", None)

    @classmethod
    def from_texts(cls, rows: list[tuple[str, ...]]) -> list[Decode]:
        r"""One event per row of texts, unconverted until read. A row's first ten items are
        the timestamp, the rank, #running-req, #token, token usage, accept len, accept rate,
        cuda graph, gen throughput and #queue-req, as a log prints them; "" where absent.
        An eleventh item, where present, is the engine index ("" for none); further items
        are ignored. The caller guarantees that the numbers read: ASCII digits (ints under 20
        digits, floats with a dot between digits), so reading them never raises, and that the
        timestamp is printable ASCII without `"` or `\`: the texts can then be written out
        as they are (``text_rows``, specmon.logs.event_lines)."""
        decodes = list(map(object.__new__, repeat(cls, len(rows))))
        deque(map(_set_texts, decodes, rows), maxlen=0)
        return decodes

    def _field_values(self) -> tuple[Any, ...]:
        """The values in field order, converted from the texts on first use."""
        texts = self._texts  # type: ignore[attr-defined]
        if texts is None:
            return self._values  # type: ignore[attr-defined, no-any-return]
        ts, rank, running, tokens, usage, accept_len, accept_rate, graph, gen, queue = texts[:10]
        ints, floats = _decode_ints, _decode_floats  # few distinct texts: a lookup, mostly
        values = (
            ts or None,
            ints[rank],
            ints[running],
            int(tokens) if tokens else None,
            floats[usage],
            floats[accept_len],
            floats[accept_rate],
            float(gen),
            ints[queue],
            graph == "True" if graph else None,
            ints[texts[10]] if len(texts) > 10 else None,
        )
        _set_values(self, values)
        _set_texts(self, None)
        return values

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._field_values() == other._field_values()  # type: ignore[attr-defined, no-any-return]

    def __hash__(self) -> int:
        return hash(self._field_values())

    def _shown_pairs(self) -> list[tuple[str, Any]]:
        """Field names and values as shown: ``engine`` only where there is one."""
        pairs = list(zip(_DECODE_FIELD_NAMES, self._field_values(), strict=True))
        if pairs[-1][1] is None:
            pairs.pop()
        return pairs

    def __repr__(self) -> str:
        pairs = self._shown_pairs()
        return f"Decode({', '.join(f'{name}={value!r}' for name, value in pairs)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            partial(Decode, **dict(zip(_DECODE_FIELD_NAMES, self._field_values(), strict=True))),
            (),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        out.update(self._shown_pairs())
        return out


def text_rows(events: list[Event]) -> list[tuple[str, ...] | None]:
    """Per event, the texts a Decode was made from (``Decode.from_texts``) while it has not
    been read, else None: what a bulk writer formats without converting the numbers."""
    return list(map(_TEXTS, events))  # no event raises: the class attribute is None


class _DecodeNumbers(dict[str, Any]):
    """Number text -> value ("" -> None) for Decode's fields with few distinct values, which
    a lookup reads about three times faster than int()/float() do."""

    def __init__(self, convert: Callable[[str], Any]) -> None:
        super().__init__()
        self.convert = convert

    def __missing__(self, text: str) -> Any:
        value = self.convert(text) if text else None
        if len(self) >= 4096:
            self.clear()
        self[text] = value
        return value


_decode_ints = _DecodeNumbers(int)
_decode_floats = _DecodeNumbers(float)
_DECODE_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(Decode))
_set_texts = Decode._texts.__set__  # type: ignore[attr-defined]  # the slots, past __setattr__
_set_values = Decode._values.__set__  # type: ignore[attr-defined]


def _decode_field(position: int) -> property:
    def read(self: Decode) -> Any:
        if self._texts is None:  # type: ignore[attr-defined]
            return self._values[position]  # type: ignore[attr-defined]
        return self._field_values()[position]

    return property(read)


for _position, _name in enumerate(_DECODE_FIELD_NAMES):
    setattr(Decode, _name, _decode_field(_position))
del _position, _name


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecDecode(Event):
    """One periodic speculative-decoding summary (vLLM's `SpecDecoding metrics:` line).

    Rates are fractions (0..1) whatever the log printed; a field the line's shape lacks is
    None. ``mean_accept_len`` counts the bonus token, as vLLM prints it (1 + accepted/drafts).
    """

    kind: ClassVar[str] = "spec_decode"
    engine: int | None = None
    mean_accept_len: float | None = None
    accepted: int | None = None
    drafted: int | None = None
    per_position: tuple[float, ...] | None = None
    draft_acceptance_rate: float | None = None
    accepted_throughput: float | None = None
    drafted_throughput: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightsLoaded(Event):
    """One model's weights are read (vLLM's `Loading weights took N seconds`): the target's
    first, then the draft's. ``load_end`` follows once for both (vLLM's `Model loading took`)."""

    kind: ClassVar[str] = "weights_loaded"
    role: ModelRole | None = None
    seconds: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CompileBegin(Event):
    """torch.compile starts for one part of the model (vLLM: `[backbone]`, `[eagle_head]`)."""

    kind: ClassVar[str] = "compile_begin"
    part: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CompileEnd(Event):
    """torch.compile finished for one part (`torch.compile took N s in total`)."""

    kind: ClassVar[str] = "compile"
    part: str | None = None
    seconds: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Prefill(Event):
    kind: ClassVar[str] = "prefill"
    new_seq: int | None = None
    new_token: int | None = None
    cached_token: int | None = None
    running_req: int | None = None
    queue_req: int | None = None
    input_throughput: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerError(Event):
    """A fatal or alarming line. ``message`` is the root-cause line, not the traceback frame."""

    kind: ClassVar[str] = "error"
    category: ErrorCategory
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecParams(Event):
    """Adaptive speculation (SGLang 0.5.11+ `--speculative-adaptive`) changed the number of
    draft steps per verify; ``steps`` is the count now in force."""

    kind: ClassVar[str] = "spec_params"
    steps_before: int
    steps: int
    ema_accept_len: float | None = None


# --- events made by the host session ---------------------------------------------------------

ConnectionStateName = Literal["connecting", "connected", "reconnecting", "disconnected", "closed"]
RunStateName = Literal["loading", "ready", "failed", "hung", "stopping", "stopped"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionState(Event):
    kind: ClassVar[str] = "connection"
    host: str
    state: ConnectionStateName
    attempt: int = 0
    detail: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunInfo(Event):
    """A run was launched or reattached (``reattached``), or a server specmon did not launch
    was attached to (``foreign``)."""

    kind: ClassVar[str] = "run"
    run_id: str
    profile: str | None = None
    backend: str | None = None  # the server kind (a registered backend's name)
    argv: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    pid: int | None = None
    pgid: int | None = None
    started_at: float | None = None  # epoch seconds
    reattached: bool = False
    owner: str | None = None  # who launched it (user@host pid N), as its record says
    replaces: str | None = None  # the run it replaced, when this session saw that one end
    # A server specmon did not launch, watched (`--attach`): never stopped or relaunched from
    # here, no probe; ``log_source`` says where its log is read ("file: PATH", "journal: UNIT",
    # "docker: NAME", "none: why").
    foreign: bool = False
    log_source: str | None = None
    # A take-over's launch: the server specmon did not launch that it replaced ("pid 4242").
    took_over: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """As every event's, with secret flag values as ``***`` (`specmon watch --json`):
        the event itself keeps the command line a relaunch rebuilds."""
        from specmon.model.secrets import redact_argv

        out = Event.to_dict(self)
        out["argv"] = list(redact_argv(self.argv))
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class RunState(Event):
    """The run's state; a ``stopped`` or ``failed`` one says how it ended (``end``)."""

    kind: ClassVar[str] = "run_state"
    run_id: str
    state: RunStateName
    detail: str | None = None
    end: RunEnd | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerFailed(Event):
    """The server died or reported a fatal error: one event carrying the root cause."""

    kind: ClassVar[str] = "server_failed"
    run_id: str | None = None
    category: ErrorCategory = "other"
    exit_code: int | None = None
    signal: int | None = None
    root_cause: tuple[str, ...] = ()
    command: str | None = None
    hung: bool = False
    last_phase: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadTimes(Event):
    """What the host's run record knows of load times: a reattached run's real start and
    ready times (its replayed log arrived all at once), or how long the profile's last load
    took (for the ETA of the next)."""

    kind: ClassVar[str] = "load_times"
    run_id: str | None = None
    started_at: float | None = None  # epoch seconds
    ready_at: float | None = None
    previous_load_seconds: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StopProgress(Event):
    """One step of a stop: sigterm, sigkill, group_gone, gpu_released, with its duration."""

    kind: ClassVar[str] = "stop_progress"
    run_id: str
    step: str
    seconds: float
    detail: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LogLine(Event):
    """A raw server log line, for the log pane; ``offset`` is its byte offset in the log file."""

    kind: ClassVar[str] = "log"
    text: str
    offset: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Dropped(Event):
    """``count`` events (log lines, samples: never a state change) that a lossy subscriber, the
    console's live view, did not receive because it fell behind; it arrives where they were.
    The store still applied them all. Also the older lines and samples of a reattach's replay
    read as a summary while only lossy subscribers listen (specmon/session/log_follower.py):
    the store keeps no more of those than the summary gives it."""

    kind: ClassVar[str] = "dropped"
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthStatus(Event):
    kind: ClassVar[str] = "health"
    status: int | None  # HTTP status, None when the port refused or timed out
    latency_ms: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricsSnapshot(Event):
    """Selected Prometheus samples, flattened to ``name{labels}`` -> value."""

    kind: ClassVar[str] = "metrics"
    values: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class LatencyGroup:
    """One data-parallel rank's or engine's share of a ``latency`` event (``name`` is the
    value of the server's label for it); None where its series do not carry the label (e.g.
    a server whose latency histograms are counted before the ranks split)."""

    name: str
    running: int | None = None
    waiting: int | None = None
    kv_usage: float | None = None
    ttft_s: WindowQuantiles | None = None
    itl_s: WindowQuantiles | None = None
    e2e_s: WindowQuantiles | None = None
    queue_s: WindowQuantiles | None = None
    requests_per_s: float | None = None
    preemptions: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            out[item.name] = value.to_dict() if isinstance(value, WindowQuantiles) else value
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Latency(Event):
    """Request latency and capacity over the last ``window_s`` seconds, from the server's own
    ``/metrics`` (specmon/model/quantiles.py: the window and Prometheus's quantile rules):
    per-request latency in seconds, lengths in tokens, each as {count, mean, p50, p90, p99};
    rates and counts over the window; the gauges as last read; saturation flags with their
    numbers. A field is None where the server (or its version) does not serve the family it
    comes from, never 0; ``span_s`` is what the window's samples cover (less while it
    fills)."""

    kind: ClassVar[str] = "latency"
    window_s: float
    span_s: float | None = None
    ttft_s: WindowQuantiles | None = None  # time to first token
    itl_s: WindowQuantiles | None = None  # inter-token latency (one per decoded token)
    tpot_s: WindowQuantiles | None = None  # a request's mean time per output token
    e2e_s: WindowQuantiles | None = None
    queue_s: WindowQuantiles | None = None
    prompt_tokens: WindowQuantiles | None = None  # per request
    generation_tokens: WindowQuantiles | None = None
    requests_per_s: float | None = None
    finished: tuple[tuple[str, float], ...] | None = None  # (reason, requests in the window)
    prefix_cache_hit_rate: float | None = None  # 0..1
    preemptions: float | None = None  # in the window (SGLang: retractions)
    running: int | None = None
    waiting: int | None = None
    max_running: int | None = None
    kv_used_tokens: int | None = None
    kv_total_tokens: int | None = None
    kv_usage: float | None = None  # 0..1
    waiting_change: float | None = None  # waiting now minus at the window's start
    kv_threshold: float = 0.9
    queue_growing: bool = False
    kv_near_full: bool = False
    preempting: bool = False
    group_label: str | None = None  # the label that splits the server (``dp_rank``, ...)
    groups: tuple[LatencyGroup, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for name in _field_names(type(self)):
            value = getattr(self, name)
            if isinstance(value, WindowQuantiles):
                value = value.to_dict()
            elif name == "finished" and value is not None:
                value = dict(value)
            elif name == "groups":
                value = [group.to_dict() for group in value]
            out[name] = value
        return out

    @property
    def saturated(self) -> bool:
        """Whether any saturation flag is up (queue growing, KV near full, preempting)."""
        return self.queue_growing or self.kv_near_full or self.preempting


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerInfo(Event):
    """Selected fields of the server's ``/get_server_info`` (launch args, version, speeds)."""

    kind: ClassVar[str] = "server_info"
    values: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DraftInfo(Event):
    """The draft's wiring, read on the host from the draft's and target's ``config.json`` at
    launch and reattach: what the server will feed the draft, so a draft trained on other
    layers or for another target shows before its acceptance collapses (docs/console.md).
    ``problems``: wirings that cannot work (also refused before a launch); ``errors``: files
    that could not be read (one line each)."""

    kind: ClassVar[str] = "draft_info"
    run_id: str
    draft_path: str | None = None
    target_path: str | None = None
    draft_architecture: str | None = None
    draft_hidden_size: int | None = None
    draft_fc_hidden_size: int | None = None  # the target hidden size its input layer takes
    target_hidden_size: int | None = None
    draft_vocab_size: int | None = None  # the draft's own vocabulary (embedding rows)
    draft_mapped_vocab_size: int | None = None  # draft_vocab_size: the d2t mapping's length
    target_vocab_size: int | None = None
    target_layers: int | None = None
    aux_layer_ids: tuple[int, ...] = ()  # in the checkpoint's numbering, as config.json says
    aux_source: str | None = None  # "checkpoint" or "default"
    aux_rule: str | None = None  # where: the config key, or the default's formula (versions)
    draft_dtype: str | None = None
    target_dtype: str | None = None
    draft_config_sha256: str | None = None
    target_config_sha256: str | None = None
    chat_template_sha256: str | None = None  # the target tokenizer's
    draft_revision: str | None = None  # the Hugging Face cache's refs/main, for a model id
    target_revision: str | None = None
    problems: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptanceCollapse(Event):
    """A run's acceptance stays more than the threshold below the best earlier run on the
    same host with the same draft checkpoint (docs/run-diff.md): the value, the reference and
    what changed since, most likely cause first. ``cleared``: it recovered (or the run
    ended), and the banner goes. ``measure``: "position_1" (the share of drafts whose first
    token was accepted) or "accept_len" (mean accepted length, compared at equal steps)."""

    kind: ClassVar[str] = "acceptance_collapse"
    run_id: str
    measure: str
    value: float
    reference_value: float
    reference_run: str
    cycles: int  # what the run's value comes from: drafts (position 1) or windows (accept len)
    message: str
    diagnoses: tuple[Diagnosis, ...] = ()
    cleared: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Notice(Event):
    """Something a server sent that specmon left out, said once per source (not at every
    scrape): draft positions past the backend's maximum, an HTTP answer past its cap, more
    metric samples than a snapshot keeps. ``source`` names where (``/metrics``, ``log``)."""

    kind: ClassVar[str] = "notice"
    source: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeTiming(Event):
    """One speculative cycle from the draft/verify probe (or the simulator writing its schema)."""

    kind: ClassVar[str] = "probe"
    wall: float
    draft_ms: float
    verify_ms: float
    extend_ms: float
    cycle_ms: float
    batch_size: int | None = None
    draft_tokens: int | None = None
    accepted_tokens: int | None = None
    # Each request's accepted draft tokens in this verify (bonus excluded), in batch order.
    accepted_per_request: tuple[int, ...] | None = None
    source: Literal["probe", "step_time"] = "probe"


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSample(Event):
    kind: ClassVar[str] = "gpu"
    wall: float
    gpus: tuple[GpuReading, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeStatus(Event):
    """One node of a server spanning several nodes, as its own host sees it: connection,
    run state, loading phase and shards (a node that lags shows here), and the console's
    ids of its GPUs (node-major: node i's GPU g is ``i * stride + g``)."""

    kind: ClassVar[str] = "node"
    node_rank: int
    host: str
    connection: str | None = None  # ConnectionStateName of the node's own link
    state: str | None = None  # its run's state: loading, ready (node 0), running, stopped...
    phase: str | None = None
    shards_done: int = 0
    shards_total: int | None = None
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentStatus(Event):
    """The GPU agent's life: started (with driver versions), error (no driver...), restarting."""

    kind: ClassVar[str] = "agent"
    state: Literal["started", "error", "restarting", "stopped"]
    detail: str | None = None


LOG_EVENT_KINDS: tuple[type[Event], ...] = (
    LoadBegin,
    ShardProgress,
    LoadEnd,
    KvCache,
    GraphBegin,
    GraphEnd,
    HttpUp,
    Ready,
    Decode,
    Prefill,
    ServerError,
    WeightsLoaded,
    CompileBegin,
    CompileEnd,
    SpecDecode,
    SpecParams,
    Notice,
)
"""The events a server log's parser gives (every backend's, and the neutral reader's): what
`specmon parse --kind` offers; the session's, the agent's and the probe's are never in a log."""

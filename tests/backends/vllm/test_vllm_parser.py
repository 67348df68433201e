"""The vLLM log parser and summary: real logs, every version's shapes, wrappers and chunking."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support.paths import REPO, TESTS

from specmon.backends.vllm.detect import vllm_log_score
from specmon.backends.vllm.parser import VLLMLogParser, error_category
from specmon.backends.vllm.summary import VLLMLogSummary, log_time
from specmon.model.events import (
    CompileBegin,
    CompileEnd,
    Decode,
    Event,
    GraphBegin,
    GraphEnd,
    HttpUp,
    KvCache,
    LoadBegin,
    LoadEnd,
    Ready,
    ServerError,
    ShardProgress,
    SpecDecode,
    WeightsLoaded,
)

LOGS = TESTS / "logs"


def transcript(name: str) -> Path:
    """A reference transcript: in the checkout's shared/, beside the checkout, or /work."""
    for base in (REPO, REPO.parent):
        path = base / "shared/reference/transcripts" / name
        if path.exists():
            return path
    return Path("/work/shared/reference/transcripts") / name


TP8 = transcript("vllm-0.33-eagle3-tp8.log")
CPU_EAGLE3 = transcript("real-vllm-0.32-cpu-eagle3.log")
CPU_NGRAM = transcript("real-vllm-0.32-cpu-ngram.log")
CPU_CRASH = transcript("real-vllm-0.32-cpu-eagle3-crash.log")
SGLANG = transcript("sglang-0.5.9-eagle3-tp8.log")


def needs(path: Path) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not path.exists(), reason=f"reference transcript {path.name} absent")


def parse_bytes(data: bytes, chunk_sizes: list[int] | None = None) -> list[Event]:
    parser = VLLMLogParser()
    events: list[Event] = []
    if chunk_sizes is None:
        events += parser.feed(data)
    else:
        position = 0
        for size in chunk_sizes:
            events += parser.feed(data[position : position + size])
            position += size
        events += parser.feed(data[position:])
    return events + parser.flush()


def parse_file(path: Path) -> list[Event]:
    return parse_bytes(path.read_bytes())


def summary_of(data: bytes) -> dict[str, object]:
    parser = VLLMLogParser()
    summary = VLLMLogSummary()
    for event in parser.feed(data) + parser.flush():
        summary.add(event)
    return summary.finish(parser)


def of_kind(events: list[Event], kind: type[Event]) -> list[Event]:
    return [event for event in events if isinstance(event, kind)]


def kinds(events: list[Event]) -> list[str]:
    return [event.kind for event in events]


# --- the reference transcripts ---------------------------------------------------------------


@needs(TP8)
def test_tp8_transcript_gives_every_phase_in_order() -> None:
    events = parse_file(TP8)
    assert kinds(events) == [
        "load_begin",
        "shard_progress",
        "shard_progress",
        "shard_progress",
        "weights_loaded",
        "weights_loaded",
        "load_end",
        "load_end",
        "compile_begin",
        "compile",
        "compile",
        "kv_cache",
        "graph_begin",
        "graph_end",
        "http_up",
        "ready",
        "decode",
        "spec_decode",
        "decode",
        "spec_decode",
    ]
    shards = of_kind(events, ShardProgress)
    assert [(s.done, s.total) for s in shards] == [(0, 30), (15, 30), (30, 30)]  # type: ignore[attr-defined]
    assert shards[1] == ShardProgress(
        done=15, total=30, elapsed_s=21.0, remaining_s=21.0, seconds_per_shard=1.41
    )
    weights = of_kind(events, WeightsLoaded)
    assert [(w.role, w.seconds) for w in weights] == [("target", 43.52), ("draft", 0.61)]  # type: ignore[attr-defined]
    assert of_kind(events, LoadEnd)[0] == LoadEnd(
        ts="11-30 06:01:16", rank=0, mem_usage_gb=17.57, elapsed_s=45.912034
    )
    assert of_kind(events, LoadEnd)[1].rank == 3
    assert of_kind(events, CompileBegin) == [
        CompileBegin(ts="11-30 06:01:27", rank=0, part="backbone")
    ]
    assert of_kind(events, CompileEnd) == [
        CompileEnd(ts="11-30 06:02:04", rank=0, part="backbone", seconds=36.88),
        CompileEnd(ts="11-30 06:02:19", rank=0, part="eagle_head", seconds=9.73),
    ]
    assert of_kind(events, KvCache) == [KvCache(ts="11-30 06:02:25", tokens=2496128, size_gb=96.41)]
    assert of_kind(events, GraphEnd) == [
        GraphEnd(ts="11-30 06:02:44", rank=0, seconds=18.0, mem_usage_gb=1.12)
    ]
    assert of_kind(events, HttpUp) == [HttpUp(ts="11-30 06:02:49", port=8000)]
    assert of_kind(events, Ready) == [Ready(ts="11-30 06:02:49")]  # the last timestamp seen
    assert of_kind(events, Decode)[0] == Decode(
        ts="11-30 06:03:10",
        running_req=16,
        tokens=None,
        token_usage=0.019,
        gen_throughput=612.5,
        queue_req=0,
        engine=0,
    )
    assert of_kind(events, SpecDecode)[1] == SpecDecode(
        ts="11-30 06:03:20",
        engine=0,
        mean_accept_len=2.93,
        accepted=4622,
        drafted=7203,
        per_position=(0.829, 0.622, 0.474),
        draft_acceptance_rate=0.642,
        accepted_throughput=462.2,
        drafted_throughput=720.3,
    )


@needs(TP8)
def test_tp8_transcript_summary() -> None:
    assert summary_of(TP8.read_bytes()) == {
        "kind": "summary",
        "ready": True,
        "load_seconds": 139.0,  # 06:00:30 load_begin to 06:02:49 `Starting vLLM server on`
        "shards_total": 30,
        "decode_lines": 2,
        "mean_gen_throughput": 657.4,
        "mean_accept_len": 2.9,
        "accept_rate_per_position": [0.8205, 0.6115, 0.4655],
        "errors": 0,
        "prefill_lines": None,
        "first_error": None,
        "unparsed_decode_like": 0,
    }


@needs(CPU_EAGLE3)
def test_real_cpu_eagle3_log() -> None:
    events = parse_file(CPU_EAGLE3)
    assert kinds(events)[:4] == ["load_begin", "shard_progress", "shard_progress", "weights_loaded"]
    # The draft's `1/1` bar after the target's weights is not the target's progress.
    assert [(s.done, s.total) for s in of_kind(events, ShardProgress)] == [(0, 1), (1, 1)]  # type: ignore[attr-defined]
    # The CPU build prints no `Model loading took`: the load ends as the warm-up (the CPU
    # build's compile) begins; each part's AOT artifact ends its compile, with no time.
    assert kinds(events)[4:12] == [
        "weights_loaded",
        "load_end",
        "compile_begin",
        "compile",
        "compile",
        "kv_cache",
        "http_up",
        "ready",
    ]
    assert of_kind(events, LoadEnd) == [LoadEnd(ts="12-01 13:36:19")]
    assert of_kind(events, CompileBegin) == [CompileBegin(ts="12-01 13:36:19", part=None)]
    assert of_kind(events, CompileEnd) == [
        CompileEnd(ts="12-01 13:36:50", part="backbone"),
        CompileEnd(ts="12-01 13:36:55", part="eagle_head"),
    ]
    # `CPU KV cache size`, its GiB from `Explicitly set (1.0/14.71) GiB for KV cache`.
    assert of_kind(events, KvCache) == [KvCache(ts="12-01 13:36:55", tokens=232960, size_gb=1.0)]
    decodes = of_kind(events, Decode)
    assert [(d.gen_throughput, d.engine) for d in decodes] == [(95.9, 0), (0.0, 0)]  # type: ignore[attr-defined]
    spec = of_kind(events, SpecDecode)[0]
    assert spec.drafted == 567 and spec.per_position == (0.0, 0.0, 0.0)  # type: ignore[attr-defined]
    # A stop by SIGTERM ends in EngineDeadError; that is the stop, not a fault.
    assert of_kind(events, ServerError) == []
    summary = summary_of(CPU_EAGLE3.read_bytes())
    assert summary["load_seconds"] == 40.0 and summary["ready"] is True
    assert summary["mean_accept_len"] == 1.0 and summary["decode_lines"] == 2


@needs(CPU_NGRAM)
def test_real_cpu_ngram_log() -> None:
    events = parse_file(CPU_NGRAM)
    assert kinds(events) == [
        "load_begin",
        "shard_progress",
        "shard_progress",
        "weights_loaded",
        "load_end",
        "compile_begin",
        "compile",
        "kv_cache",
        "http_up",
        "ready",
    ]
    summary = summary_of(CPU_NGRAM.read_bytes())
    assert summary["mean_accept_len"] is None and summary["accept_rate_per_position"] is None
    assert summary["mean_gen_throughput"] is None and summary["load_seconds"] == 11.0


@needs(CPU_CRASH)
def test_real_crash_reports_the_workers_exception_once() -> None:
    """The worker's exception, not the engine core's or the API server's pointers to it."""
    errors = of_kind(parse_file(CPU_CRASH), ServerError)
    assert errors == [
        ServerError(
            ts="12-01 13:35:44",
            category="other",
            message="RuntimeError: CHECK_EQ(mat1.size(ndim - 1), K) failed. 256 vs 384",
        )
    ]


@needs(CPU_CRASH)
def test_real_logs_read_the_same_in_any_chunking() -> None:
    data = CPU_CRASH.read_bytes() + (TP8.read_bytes() if TP8.exists() else b"")
    whole = parse_bytes(data)
    rng = random.Random(7)
    for _ in range(5):
        sizes = [rng.randint(1, 300) for _ in range(len(data) // 100)]
        assert parse_bytes(data, sizes) == whole
    assert parse_bytes(data, [1] * len(data)) == whole


# --- composed logs per version and wrapper ----------------------------------------------------


def test_0_10_ansi_prefixed_log() -> None:
    events = parse_file(LOGS / "vllm-0.10-ansi-prefixed.log")
    shards = of_kind(events, ShardProgress)
    # Redraws of one n/N give one event; the draft's 1/1 after `Loading drafter` is not reported.
    assert [(s.done, s.total, s.rank) for s in shards] == [(0, 4, 0), (1, 4, 0), (4, 4, 0)]  # type: ignore[attr-defined]
    assert of_kind(events, LoadEnd) == [
        LoadEnd(ts="07-14 10:02:33", rank=0, mem_usage_gb=16.0451, elapsed_s=7.512338)
    ]
    assert of_kind(events, CompileEnd) == [
        CompileEnd(ts="07-14 10:02:58", rank=0, part=None, seconds=20.43)
    ]
    # The two-line form: tokens on the first line.
    assert of_kind(events, KvCache) == [KvCache(ts="07-14 10:03:01", tokens=426912, size_gb=52.13)]
    assert len(of_kind(events, GraphBegin)) == 1  # one capture, three bar redraws
    assert of_kind(events, HttpUp) == [HttpUp(ts="07-14 10:03:13", port=8000)]
    assert of_kind(events, Ready) == [Ready(ts="07-14 10:03:13")]
    spec = of_kind(events, SpecDecode)[0]
    assert spec == SpecDecode(  # the rate-first shape of ~Apr-Sep 2025
        ts="07-14 10:03:24",
        engine=0,
        mean_accept_len=2.75,
        accepted=1191,
        drafted=2039,
        per_position=(0.771, 0.583, 0.398),
        draft_acceptance_rate=0.584,
        accepted_throughput=119.1,
        drafted_throughput=203.9,
    )
    assert of_kind(events, Decode)[0].queue_req == 1  # type: ignore[attr-defined]


def test_v0_and_early_v1_shapes() -> None:
    events = parse_file(LOGS / "vllm-0.6-v0-and-early-v1.log")
    decodes = of_kind(events, Decode)
    assert decodes[0] == Decode(  # V0: Pending is the queue; GPU usage, not CPU's
        ts="02-11 08:16:00",
        running_req=3,
        tokens=None,
        token_usage=0.05,
        gen_throughput=96.4,
        queue_req=2,
    )
    specs = of_kind(events, SpecDecode)
    assert specs == [
        SpecDecode(ts="02-11 08:16:00", accepted=1234, drafted=2033, draft_acceptance_rate=0.607),
        SpecDecode(
            ts="04-20 12:01:10", engine=0, accepted=100, drafted=163, draft_acceptance_rate=0.612
        ),
    ]
    assert of_kind(events, LoadEnd) == [LoadEnd(ts="02-11 08:15:18", mem_usage_gb=14.9888)]
    assert [e.kind for e in events if isinstance(e, (GraphBegin, GraphEnd))] == [
        "graph_begin",
        "graph_end",
    ]
    summary = summary_of((LOGS / "vllm-0.6-v0-and-early-v1.log").read_bytes())
    assert summary["mean_accept_len"] is None  # no shape here has it
    assert summary["ready"] is True and summary["load_seconds"] == 27.0


def test_docker_ray_nested_prefixes_and_several_engines() -> None:
    data = (LOGS / "vllm-0.33-dp-docker-ray.log").read_bytes()
    events = parse_bytes(data)
    assert len(of_kind(events, LoadBegin)) == 2  # one per data-parallel engine
    # `\r`-joined tqdm redraws and the draft bar after the target's weights.
    shards = of_kind(events, ShardProgress)
    assert [(s.done, s.total) for s in shards] == [(0, 17), (8, 17), (17, 17)]  # type: ignore[attr-defined]
    assert of_kind(events, WeightsLoaded)[0].rank == 0  # (EngineCore_DP0) (Worker_TP0)
    decodes = of_kind(events, Decode)
    assert [(d.engine, d.running_req, d.queue_req, d.token_usage) for d in decodes] == [  # type: ignore[attr-defined]
        (0, 8, 2, 0.105),
        (1, 6, 0, 0.08),  # the `\r\n`-joined record with `Preemptions:`
        (None, 14, 0, 0.09),  # `2 Engines Aggregated:`
    ]
    specs = of_kind(events, SpecDecode)
    assert [(s.engine, s.mean_accept_len) for s in specs] == [(0, 3.0), (1, 2.0)]  # type: ignore[attr-defined]
    summary = summary_of(data)
    assert summary["decode_lines"] == 3
    assert summary["mean_accept_len"] == 2.5
    assert summary["accept_rate_per_position"] == [0.75, 0.5, 0.25]
    assert summary["unparsed_decode_like"] == 1  # `Avg generation throughput: 40x`
    assert summary["load_seconds"] == 95.0


def test_kv_cache_too_small_names_the_engine_cores_value_error() -> None:
    errors = of_kind(parse_file(LOGS / "vllm-0.33-kv-cache-too-small.log"), ServerError)
    assert len(errors) == 1
    assert errors[0].category == "oom"  # type: ignore[attr-defined]
    assert errors[0].message.startswith(  # type: ignore[attr-defined]
        "ValueError: To serve at least one request with the model's max seq len (131072)"
    )
    assert errors[0].ts == "11-30 06:01:44"


def test_nccl_failure_once_per_message_plus_the_watchdog() -> None:
    errors = of_kind(parse_file(LOGS / "vllm-0.33-nccl-failure.log"), ServerError)
    assert [(e.category, e.rank, e.message[:40]) for e in errors] == [  # type: ignore[attr-defined]
        ("nccl", 0, "RuntimeError: NCCL error: unhandled syst"),
        ("nccl", 1, "[Rank 1] Watchdog caught collective oper"),
    ]


def test_oom_while_loading_reports_the_first_link_of_the_chain() -> None:
    errors = of_kind(parse_file(LOGS / "vllm-0.33-oom-load.log"), ServerError)
    assert [(e.category, e.rank, e.message.split(":")[0]) for e in errors] == [  # type: ignore[attr-defined]
        ("oom", 0, "torch.OutOfMemoryError"),
        ("oom", 1, "ValueError"),  # Free memory on device ... less than desired
    ]


def test_a_pointer_alone_is_still_an_error() -> None:
    """With no cause above it, `Engine core initialization failed` is all there is."""
    line = b"RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    errors = of_kind(parse_bytes(line), ServerError)
    assert len(errors) == 1 and errors[0].category == "other"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "category"),
    [
        ("ValueError: No available memory for the cache blocks. Try increasing", "oom"),
        ("ValueError: Free memory on device cuda:0 (1.0/80.0 GiB) on startup is less", "oom"),
        ("ValueError: Failed to load model - not enough GPU memory. Try lowering", "oom"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "oom"),
        ("torch.distributed.DistBackendError: NCCL error in: ../nccl.cpp:1", "nccl"),
        ("RuntimeError: pynccl: ncclCommInitRank failed", "nccl"),
        ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)", "nccl"),
        ("TimeoutError: RPC call to sample_tokens timed out.", "other"),
        # vLLM 0.32's CPU worker, VLLM_CPU_KVCACHE_SPACE beyond the node's free memory
        (
            "ValueError: Available memory on node 0 (10.9/11.0 GiB) on kv cache allocation is "
            "less than requested memory for kv (64.0 GiB). Decrease --kv-cache-memory-bytes",
            "oom",
        ),
    ],
)
def test_error_categories(text: str, category: str) -> None:
    assert error_category(text) == category


def test_warnings_and_access_lines_are_not_errors() -> None:
    lines = (
        "(APIServer pid=1) WARNING 11-30 06:00:05 [system_utils.py:255] This can cause fd limit "
        "errors like `OSError: [Errno 24] Too many open files`.\n"
        'INFO:     10.0.0.1:5000 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error\n'
        "(Worker pid=2) INFO 11-30 06:00:27 [pynccl.py:148] vLLM is using nccl==2.28.9\n"
    )
    assert parse_bytes(lines.encode()) == []


# --- properties ------------------------------------------------------------------------------

STATS = (
    "Engine 003: Avg prompt throughput: 12.5 tokens/s, Avg generation throughput: 345.6 tokens/s, "
    "Running: 7 reqs, Waiting: 2 reqs, GPU KV cache usage: 12.3%, Prefix cache hit rate: 4.0%"
)
SPEC = (
    "SpecDecoding metrics: Mean acceptance length: 2.50, Accepted throughput: 10.00 tokens/s, "
    "Drafted throughput: 20.00 tokens/s, Accepted: 150 tokens, Drafted: 300 tokens, "
    "Per-position acceptance rate: 0.700, 0.500, 0.300, Avg Draft acceptance rate: 50.0%"
)
_TAG = st.sampled_from(
    [
        "(APIServer pid=1) ",
        "\x1b[1;36m(APIServer pid=4120)\x1b[0m ",
        "(EngineCore_DP0 pid=559) (Worker_TP0 pid=566) ",
        "(ServeReplica:default:LLMServer:x pid=9) ",
        "(RayWorkerProc pid=12) ",
        "2026-11-30T06:03:10.123456789Z ",
        "app-1  | ",
    ]
)
_HEADER = st.sampled_from(
    [
        "INFO 11-30 06:03:10 [loggers.py:335] ",
        "INFO 11-30 06:03:10 [v1/metrics/loggers.py:335] ",
        "INFO 11-30 06:03:10 loggers.py:335] ",
        "\x1b[32mINFO\x1b[0m 11-30 06:03:10 [loggers.py:335] ",
        "",
    ]
)


@settings(max_examples=150, deadline=None)
@given(tags=st.lists(_TAG, max_size=3), header=_HEADER, crlf=st.booleans())
def test_any_prefix_keeps_the_numbers(tags: list[str], header: str, crlf: bool) -> None:
    prefix = "".join(tags) + header
    end = "\r\n" if crlf else "\n"
    parser = VLLMLogParser()
    events = parser.feed(f"{prefix}{STATS}{end}{prefix}{SPEC}{end}".encode()) + parser.flush()
    decode, spec = events
    assert isinstance(decode, Decode) and isinstance(spec, SpecDecode)
    assert (decode.engine, decode.running_req, decode.queue_req) == (3, 7, 2)
    assert (decode.gen_throughput, decode.token_usage) == (345.6, 0.123)
    assert decode.ts == ("11-30 06:03:10" if header else None)
    assert (spec.engine, spec.mean_accept_len, spec.accepted, spec.drafted) == (3, 2.5, 150, 300)
    assert spec.per_position == (0.7, 0.5, 0.3) and spec.draft_acceptance_rate == 0.5
    assert parser.unparsed_decode_like == 0


# Markers that choose a branch of the parser (`metrics: `, `Engine N: `, Python's `Exception
# ignored in`, the lines that only set state): written before an event's own message (an
# operator's prefix, a cut line), the branch finds nothing there and must fall through.
BRANCH_MARKERS = [
    "SpecDecoding metrics: ",
    "Speculative metrics: ",
    "Avg prompt throughput: ",
    "Engine 0: ",
    "2 Engines Aggregated: ",
    "Exception ignored in ",
    "Loading drafter model ",
    "Available KV cache memory: 2.00 GiB ",
    "Capturing CUDA graph ",
]
WEIGHTS = "Loading weights took 3.20 s"
_MARKER_TEXT = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ :", max_size=20
)


def feed_events(text: str) -> tuple[list[Event], VLLMLogParser]:
    parser = VLLMLogParser()
    return parser.feed(text.encode()) + parser.flush(), parser


@pytest.mark.parametrize("header", ["", "INFO 11-30 06:03:10 [loggers.py:335] "])
@pytest.mark.parametrize("marker", BRANCH_MARKERS)
def test_a_branch_marker_before_an_event_falls_through_to_it(marker: str, header: str) -> None:
    events, parser = feed_events(
        f"{header}{marker}{WEIGHTS}\n{header}{marker}{STATS}\n{header}{marker}{SPEC}\n"
    )
    weights, decode, spec = events
    assert isinstance(weights, WeightsLoaded) and weights.seconds == 3.2
    assert weights.role == "target"
    assert isinstance(decode, Decode) and (decode.engine, decode.running_req) == (3, 7)
    assert isinstance(spec, SpecDecode) and (spec.accepted, spec.drafted) == (150, 300)
    assert parser.unparsed_decode_like == 0


def test_two_markers_before_a_stats_line_give_its_decode() -> None:
    """The first `Avg prompt throughput: ` is not the stats line's (its one-match read
    misses) and a `metrics: ` branch finds nothing: the stats branch still reads it."""
    events, parser = feed_events(f"Avg prompt throughput: ? SpecDecoding metrics: ? {STATS}\n")
    assert [type(event) for event in events] == [Decode]
    assert parser.unparsed_decode_like == 0


def test_a_marker_before_the_kv_cache_size_gives_the_kv_cache() -> None:
    events, _ = feed_events(
        "INFO 11-30 06:03:10 [gpu_worker.py:1] Available KV cache memory: 2.00 GiB "
        "GPU KV cache size: 1,000 tokens\n"
    )
    assert events == [KvCache(ts="11-30 06:03:10", rank=None, tokens=1000, size_gb=2.0)]


def test_a_redrawn_bar_before_an_event_gives_the_event() -> None:
    """A bar that gives no event (a capture bar's redraw, a shard bar after the target's
    weights) does not hide the event after it on the line."""
    bar = "Capturing CUDA graph shapes: 50%|#####     | 5/10 "
    events, _ = feed_events(f"{bar}\n{bar}Graph capturing finished in 5 secs, took 0.50 GiB\n")
    assert [type(event) for event in events] == [GraphBegin, GraphEnd]
    shards = "Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00, 3.0it/s] "
    events, _ = feed_events(f"{WEIGHTS}\n{shards}Loading weights took 1.00 s\n")
    assert [(type(e), getattr(e, "role", None)) for e in events] == [
        (WeightsLoaded, "target"),
        (WeightsLoaded, "draft"),
    ]


def test_a_garbled_stats_line_still_counts_as_unparsed() -> None:
    events, parser = feed_events("INFO 11-30 06:03:10 [loggers.py:335] Engine 000: ?\n")
    assert events == [] and parser.unparsed_decode_like == 1
    events, parser = feed_events("SpecDecoding metrics: nothing here\n")
    assert events == [] and parser.unparsed_decode_like == 1


# Counterexamples found so far (by hand, the day the SGLang property found its own): pinned.
@example(["Engine 0: "])
@example(["SpecDecoding metrics: "])
@example(["Avg prompt throughput: ", "SpecDecoding metrics: "])
@example(["Exception ignored in "])
@example(["Loading drafter model "])
@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(BRANCH_MARKERS), _MARKER_TEXT), max_size=6))
def test_property_any_markers_before_the_messages_keep_their_events(pieces: list[str]) -> None:
    prefix = "".join(pieces)
    events, parser = feed_events(f"{prefix}{WEIGHTS}\n{prefix}{STATS}\n{prefix}{SPEC}\n")
    assert [type(event) for event in events] == [WeightsLoaded, Decode, SpecDecode], prefix
    assert parser.unparsed_decode_like == 0


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000) | st.text(max_size=600).map(str.encode))
def test_garbage_never_raises(data: bytes) -> None:
    parser = VLLMLogParser()
    for event in parser.feed(data) + parser.feed(data[:7]) + parser.flush():
        assert isinstance(event, Event)


def test_overlong_lines_are_cut() -> None:
    line = b"(APIServer pid=1) INFO 11-30 06:03:10 [x.py:1] " + b"Engine 000: " + b"9" * 2_000_000
    parser = VLLMLogParser()
    assert parser.feed(line) == [] and parser.feed(b"\n") == [] and parser.flush() == []
    assert parser.unparsed_decode_like == 1


def test_vllm_timestamps() -> None:
    assert log_time("11-30 06:00:01") is not None and log_time("02-29 00:00:00") is not None
    assert log_time("2026-02-10 09:14:02.123") is not None
    assert log_time("13-45 99:00:00") is None and log_time(None) is None


# --- detection --------------------------------------------------------------------------------


@needs(SGLANG)
def test_detection_tells_the_servers_apart() -> None:
    vllm_logs = [path for path in (TP8, CPU_EAGLE3, CPU_NGRAM, CPU_CRASH) if path.exists()]
    vllm_logs += sorted(LOGS.glob("vllm-*.log"))
    for path in vllm_logs:
        assert vllm_log_score(path.read_text(errors="replace")) > 0.8, path.name
    for path in [SGLANG, *sorted(LOGS.glob("sglang-*.log"))]:
        assert vllm_log_score(path.read_text(errors="replace")) < 0.2, path.name
    assert vllm_log_score("") == 0.5  # no evidence either way


def test_interleaved_tracebacks_of_two_workers() -> None:
    """Each worker's traceback is followed apart; `\r\n`-joined records are lines."""

    def head(rank: int) -> str:
        return (
            f"(Worker_TP{rank} pid={100 + rank}) ERROR 11-30 06:00:44 [multiproc_executor.py:702] "
        )

    frames = [
        "WorkerProc failed to start.",
        "Traceback (most recent call last):",
        '  File "/vllm/v1/worker/gpu_worker.py", line 301, in init_device',
        "    torch.cuda.set_device(self.device)",
    ]
    lines = []
    for frame in frames:
        lines += [head(0) + frame, head(1) + frame]
    lines += [
        head(1) + "RuntimeError: CUDA error: invalid device ordinal",
        "(APIServer pid=1) INFO 11-30 06:00:44 [loggers.py:335] " + STATS,
        head(0) + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ]
    events = parse_bytes("\r\n".join(lines).encode())
    assert [(type(e).__name__, e.rank) for e in events] == [
        ("ServerError", 1),
        ("Decode", None),
        ("ServerError", 0),
    ]
    assert [e.category for e in events if isinstance(e, ServerError)] == ["other", "oom"]


def test_a_vllm_decode_shows_its_engine_and_an_sglang_one_does_not() -> None:
    decode = Decode(running_req=1, tokens=None, token_usage=0.5, gen_throughput=9.0, queue_req=0)
    assert "engine" not in decode.to_dict() and "engine" not in repr(decode)
    with_engine = Decode(
        running_req=1, tokens=None, token_usage=0.5, gen_throughput=9.0, queue_req=0, engine=2
    )
    assert with_engine.to_dict()["engine"] == 2 and "engine=2" in repr(with_engine)
    assert with_engine != decode


def test_an_exception_ignored_in_del_is_not_an_error() -> None:
    """A real vLLM 0.32 CPU start on a cold compile cache (tests/logs, its 1,650 repeated
    frames cut): Python reports a RecursionError raised in a GEMM handle's ``__del__``
    (`Exception ignored in: ...`) and the server carries on to serve. Not a failure."""
    events = parse_file(LOGS / "vllm-0.32-cpu-exception-ignored.log")
    assert of_kind(events, ServerError) == []
    assert kinds(events) == [
        "load_begin",
        "shard_progress",
        "shard_progress",
        "weights_loaded",
        "weights_loaded",
        "load_end",
        "compile_begin",
        "compile",
        "compile",
        "kv_cache",
        "http_up",
        "ready",
    ]
    # The same traceback without Python's `Exception ignored in` line is an error.
    text = (LOGS / "vllm-0.32-cpu-exception-ignored.log").read_text()
    unignored = "\n".join(
        line for line in text.splitlines() if not line.startswith("Exception ignored in")
    )
    errors = of_kind(parse_bytes(unignored.encode()), ServerError)
    assert [e.message for e in errors] == [  # type: ignore[attr-defined]
        "RecursionError: maximum recursion depth exceeded while calling a Python object"
    ]


def test_cpu_load_without_compilation_ends_at_the_kv_cache() -> None:
    """--enforce-eager on the CPU build: no warm-up line; the load ends when the KV cache is
    sized (vLLM sizes it only after the model is loaded)."""
    log = (
        "(Worker pid=7) INFO 12-01 14:00:01 [cpu_model_runner.py:68] Starting to load model m...\n"
        "(Worker pid=7) INFO 12-01 14:00:02 [default_loader.py:501] Loading weights took 0.04 seconds\n"
        "(Worker pid=7) INFO 12-01 14:00:03 [cpu_worker.py:260] Explicitly set (2.0/10.96) GiB "
        "for KV cache on node 0.\n"
        "(EngineCore pid=6) INFO 12-01 14:00:03 [kv_cache_utils.py:2327] CPU KV cache size: "
        "931,840 tokens, Maximum concurrency for 1,024 tokens per request: 910.00x\n"
    )
    events = parse_bytes(log.encode())
    assert kinds(events) == ["load_begin", "weights_loaded", "load_end", "kv_cache"]
    assert events[2] == LoadEnd(ts="12-01 14:00:03")
    assert events[3] == KvCache(ts="12-01 14:00:03", tokens=931840, size_gb=2.0)


def test_an_ignored_exception_does_not_hide_a_later_failure() -> None:
    """Python may print the ignored exception without a traceback; a real traceback later in
    the same (unprefixed) stream is still the failure."""
    log = (
        "Exception ignored in: <function Handle.__del__ at 0x7f>\n"
        "BrokenPipeError: [Errno 32] Broken pipe\n"
        "(Worker pid=7) INFO 12-01 14:00:01 [cpu_model_runner.py:68] Starting to load model m...\n"
        "(Worker pid=7) INFO 12-01 14:00:02 [default_loader.py:501] Loading weights took 0.04 s\n"
        "(Worker pid=7) INFO 12-01 14:00:03 [default_loader.py:501] Loading weights took 0.01 s\n"
        "(Worker pid=7) INFO 12-01 14:00:04 [default_loader.py:501] Loading weights took 0.01 s\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "RuntimeError: the real failure\n"
    )
    errors = of_kind(parse_bytes(log.encode()), ServerError)
    assert [e.message for e in errors] == ["RuntimeError: the real failure"]  # type: ignore[attr-defined]


def test_an_error_text_in_an_exception_continuation_is_still_reported_when_it_happens() -> None:
    """A line after an exception's own line continues its message and is no error of its own;
    reading it must not mark its text as reported, or the same error, when it later happens
    for real, is swallowed as a repeat."""
    head = "(EngineCore_DP0 pid=7) ERROR 11-30 06:00:44 [core.py:708] "
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    lines = [
        head + "Traceback (most recent call last):",
        head + '  File "/vllm/v1/engine/core.py", line 699, in run_engine_core',
        head + "    engine_core.run_busy_loop()",
        head + "ValueError: the engine could not schedule the request; earlier it said:",
        head + oom,
        "(APIServer pid=1) INFO 11-30 06:01:00 [loggers.py:335] " + STATS,
        "(Worker_TP1 pid=9) ERROR 11-30 06:01:02 [gpu_worker.py:90] " + oom,
    ]
    events = parse_bytes("\n".join(lines).encode())
    errors = of_kind(events, ServerError)
    assert [(e.category, e.message) for e in errors] == [
        ("other", "ValueError: the engine could not schedule the request; earlier it said:"),
        ("oom", oom),
    ]

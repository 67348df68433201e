"""The SGLang log parser: every format in the reference, chunking, garbage, and its fast path."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import random
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.paths import REPO, TESTS

from specmon.backends import get_backend
from specmon.backends.sglang import parser as parser_module
from specmon.backends.sglang.parser import (
    MAX_LINE_CHARS,
    SGLangLogParser,
    decode_template,
    error_category,
    parse_line,
)
from specmon.backends.sglang.summary import summarize
from specmon.model.events import (
    Decode,
    Event,
    GraphBegin,
    GraphEnd,
    HttpUp,
    KvCache,
    LoadBegin,
    LoadEnd,
    Prefill,
    Ready,
    ServerError,
    ShardProgress,
)

LOGS = TESTS / "logs"
TRANSCRIPT_NAME = "sglang-0.5.9-eagle3-tp8.log"
# The reference transcript: in the checkout's shared/, or beside the checkout.
TRANSCRIPT = next(
    (
        base / "shared/reference/transcripts" / TRANSCRIPT_NAME
        for base in (REPO, REPO.parent)
        if (base / "shared/reference/transcripts" / TRANSCRIPT_NAME).exists()
    ),
    Path("/work/shared/reference/transcripts") / TRANSCRIPT_NAME,
)


def parse_bytes(data: bytes, chunk_sizes: list[int] | None = None) -> list[Event]:
    parser = SGLangLogParser()
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


def parse_file(name: str) -> list[Event]:
    return parse_bytes((LOGS / name).read_bytes())


def of_kind(events: list[Event], kind: type[Event]) -> list:
    return [event for event in events if isinstance(event, kind)]


# --- the reference transcript ---------------------------------------------------------------


@pytest.mark.skipif(not TRANSCRIPT.exists(), reason="reference transcript not present")
def test_transcript_gives_every_phase_in_order() -> None:
    events = parse_bytes(TRANSCRIPT.read_bytes())
    kinds = [event.kind for event in events]
    assert kinds[:2] == ["load_begin", "load_begin"]
    assert kinds.index("load_end") < kinds.index("kv_cache") < kinds.index("graph_begin")
    assert kinds.index("http_up") < kinds.index("ready") < kinds.index("decode")
    assert kinds.count("decode") == 5 and kinds.count("prefill") == 3
    assert "error" not in kinds

    shards = of_kind(events, ShardProgress)
    assert [(s.done, s.total) for s in shards] == [(0, 64), (29, 64), (64, 64), (0, 1), (1, 1)]
    assert shards[1] == ShardProgress(
        done=29, total=64, elapsed_s=87.0, remaining_s=105.0, seconds_per_shard=3.01
    )
    loads = of_kind(events, LoadEnd)
    assert [(e.rank, e.role) for e in loads] == [(0, "target"), (6, "target"), (0, "draft")]
    assert loads[0].model_type == "KimiK25ForConditionalGeneration"
    assert loads[0].mem_usage_gb == 73.71 and loads[0].avail_mem_gb == 64.50
    assert loads[2].model_type == "LlamaForCausalLMEagle3" and loads[2].elapsed_s == 2.10
    kv = of_kind(events, KvCache)
    assert kv[0] == KvCache(ts="2026-02-10 09:17:42", rank=0, tokens=560138, size_gb=36.66)
    assert kv[2].size_gb == pytest.approx(0.26)  # K + V
    graph_ends = of_kind(events, GraphEnd)
    assert [(e.role, e.seconds) for e in graph_ends] == [
        ("target", 21.37),
        ("target", 21.41),
        ("draft", 6.02),
        ("draft_extend", 4.87),
        ("draft_extend", 4.92),
    ]
    assert [e.role for e in of_kind(events, GraphBegin)] == [
        "target",
        "target",
        "draft",
        "draft_extend",
    ]
    assert of_kind(events, HttpUp) == [HttpUp(ts="2026-02-10 09:18:24", port=30000)]
    assert of_kind(events, Ready) == [Ready(ts="2026-02-10 09:18:27")]
    assert of_kind(events, Decode)[0] == Decode(
        ts="2026-02-10 09:19:12",
        rank=0,
        running_req=6,
        tokens=12188,
        token_usage=0.02,
        accept_len=3.12,
        accept_rate=0.78,
        gen_throughput=412.55,
        queue_req=0,
        cuda_graph=True,
    )
    assert of_kind(events, Prefill)[2] == Prefill(
        ts="2026-02-10 09:19:11",
        rank=0,
        new_seq=2,
        new_token=3310,
        cached_token=512,
        running_req=4,
        queue_req=0,
        input_throughput=9843.22,
    )


@pytest.mark.skipif(not TRANSCRIPT.exists(), reason="reference transcript not present")
def test_transcript_summary() -> None:
    summary = summarize(parse_bytes(TRANSCRIPT.read_bytes()))
    assert summary["ready"] is True
    assert summary["load_seconds"] == 246.0  # 09:14:21 load begin -> 09:18:27 ready
    assert summary["shards_total"] == 64
    assert summary["decode_lines"] == 5
    assert summary["mean_gen_throughput"] == pytest.approx(600.178)
    assert summary["mean_accept_len"] == pytest.approx(3.062)
    assert summary["errors"] == 0


# --- composed logs, one per version family ---------------------------------------------------


def test_046_dot_style_without_rank_or_accept_rate() -> None:
    events = parse_file("sglang-0.4.6-eagle.log")
    decodes = of_kind(events, Decode)
    assert [(d.running_req, d.tokens, d.accept_len, d.accept_rate) for d in decodes] == [
        (1, 201, 3.42, None),
        (2, 420, 3.18, None),
    ]
    assert all(d.rank is None and d.cuda_graph is True for d in decodes)
    loads = of_kind(events, LoadEnd)
    assert [(e.elapsed_s, e.role) for e in loads] == [(None, "target"), (None, "draft")]
    assert [k.size_gb for k in of_kind(events, KvCache)] == [pytest.approx(50.44), 1.58]
    assert of_kind(events, Prefill)[0].new_token == 7
    assert of_kind(events, HttpUp)[0].port == 30000
    shards = of_kind(events, ShardProgress)
    assert shards[1].seconds_per_shard == pytest.approx(1 / 1.10)  # `it/s` form
    assert summarize(events)["load_seconds"] == 24.0


def test_052_dot_style_with_trailing_comma() -> None:
    decodes = of_kind(parse_file("sglang-0.5.2-eagle3.log"), Decode)
    assert [(d.accept_len, d.gen_throughput, d.queue_req, d.cuda_graph) for d in decodes] == [
        (2.61, 311.25, 0, True),
        (2.47, 296.80, 0, True),
        (1.00, 0.0, 0, False),
    ]


def test_055_trailing_comma_and_a_line_without_accept_len() -> None:
    decodes = of_kind(parse_file("sglang-0.5.5-trailing-comma.log"), Decode)
    assert [(d.accept_len, d.accept_rate) for d in decodes] == [
        (3.40, 0.85),
        (3.20, 0.80),
        (3.60, 0.90),
        (None, None),
    ]
    assert decodes[3].gen_throughput == 70.10


def test_059_milliseconds_rank_tags_iterations_and_colour() -> None:
    events = parse_file("sglang-0.5.9-ms-ranks-ansi.log")
    begins = of_kind(events, LoadBegin)
    assert [(b.ts, b.rank) for b in begins] == [
        ("2026-02-10 09:14:21.512", 3),  # `TP3 EP3`
        ("2026-02-10 09:14:21.498", 0),
        ("2026-02-10 09:14:21.530", 1),  # `DP1 TP1`
    ]
    decodes = of_kind(events, Decode)
    assert [(d.ts, d.rank, d.running_req) for d in decodes] == [
        ("2026-02-10 09:15:12.123", 0, 4),  # `Decode batch [40],`
        ("2026-02-10 09:15:13.456", 0, 4),
        ("2026-02-10 09:15:14.001", 1, 2),
        ("2026-02-10 09:15:14.500", 0, 5),  # wrapped in ANSI colour codes
    ]
    assert of_kind(events, Ready) == [Ready(ts="2026-02-10 09:15:09.750")]
    assert of_kind(events, Prefill)[0].new_token == 92  # `Prefill batch [1],`
    # the repeated 2/8 redraw gives one event
    assert [(s.done, s.total) for s in of_kind(events, ShardProgress)] == [(0, 8), (2, 8), (8, 8)]
    assert [e.role for e in of_kind(events, LoadEnd)] == ["target", "target", "draft"]  # NextN
    assert [(g.role, g.seconds) for g in of_kind(events, GraphEnd)] == [
        ("target", 10.41),
        ("draft", 3.10),
        ("draft_extend", 2.00),
    ]
    assert summarize(events)["load_seconds"] == pytest.approx(48.238)


def test_0523_graphs_kv_tqdm_carriage_returns_and_hybrid_decode() -> None:
    events = parse_file("sglang-0.5.23-startup.log")
    shards = of_kind(events, ShardProgress)
    assert [(s.done, s.total) for s in shards] == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]
    assert shards[-1].elapsed_s == 3723.0  # 1:02:03
    assert shards[0].remaining_s is None and shards[0].seconds_per_shard is None
    loads = of_kind(events, LoadEnd)
    assert [(e.model_type, e.role, e.mem_usage_gb) for e in loads] == [
        ("Qwen3NextForCausalLM", "target", 39.30),  # quantization string instead of dtype
        ("Qwen3NextForCausalLM", "target", 39.29),
        ("LlamaForCausalLMEagle3", "draft", 0.90),
    ]
    kv = of_kind(events, KvCache)
    assert [(k.tokens, k.size_gb) for k in kv] == [(880000, pytest.approx(40.28)), (880000, 0.42)]
    assert [(g.role, g.avail_mem_gb) for g in of_kind(events, GraphBegin)] == [
        ("target", 59.50),
        ("draft", 56.20),
        ("draft_extend", 55.90),
    ]
    assert [(g.role, g.seconds, g.mem_usage_gb) for g in of_kind(events, GraphEnd)] == [
        ("target", 10.25, 1.90),
        ("draft", 3.05, 0.30),
        ("draft_extend", 2.10, 0.20),
    ]
    prefill = of_kind(events, Prefill)[0]
    assert (prefill.new_token, prefill.input_throughput) == (6, 0.0)
    decodes = of_kind(events, Decode)
    assert [(d.tokens, d.token_usage, d.accept_len, d.queue_req) for d in decodes] == [
        (16000, 0.02, 3.21, 0),  # cap len / block accept len
        (16400, 0.02, 3.35, 2),
        (12000, 0.01, 2.95, 0),  # `#full token:` hybrid
        (12500, 0.01, 3.05, 0),
    ]


def test_oom_traceback_gives_one_error_per_rank_with_the_root_cause() -> None:
    errors = of_kind(parse_file("sglang-oom-traceback.log"), ServerError)
    assert [(e.rank, e.category) for e in errors] == [(0, "oom"), (5, "oom"), (None, "other")]
    assert errors[0].message.startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert errors[0].ts == "2026-02-10 10:05:31"
    assert errors[2].message.startswith("Received sigquit from a child process")


def test_nccl_failures_and_continuation_lines() -> None:
    errors = of_kind(parse_file("sglang-nccl-failure.log"), ServerError)
    assert [(e.rank, e.category) for e in errors] == [(3, "nccl"), (6, "nccl"), (None, "other")]
    assert "Watchdog caught collective operation timeout" in errors[0].message
    assert errors[1].message.startswith("torch.distributed.DistBackendError: NCCL error")
    # `ncclUnhandledCudaError: ...` continues the DistBackendError message: not a new error
    assert not any(e.message.startswith("ncclUnhandledCudaError") for e in errors)


def test_other_failures_categories_and_chained_traceback() -> None:
    errors = of_kind(parse_file("sglang-other-failures.log"), ServerError)
    assert [(e.category, e.message.split(".")[0][:40]) for e in errors] == [
        ("other", "The memory capacity is unbalanced"),
        ("oom", "RuntimeError: Not enough memory"),
        ("other", "ValueError: Warning: Target model's cont"),
        ("oom", "torch"),  # the chain's first link; `Capture cuda graph failed` continues it
        ("other", "requests"),
        ("oom", "Decode out of memory"),
        ("oom", "Prefill out of memory"),
        ("other", "Scheduler watchdog timeout (self"),
        ("other", "SIGQUIT received"),
        ("other", "Health check failed"),
    ]
    assert errors[3].rank == 0 and errors[3].ts == "2026-02-11 08:03:00"
    assert errors[4].ts == "2026-02-11 08:04:00"  # warm-up failure: the traceback's last line


@pytest.mark.parametrize(
    ("line", "category"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "oom"),
        ("RuntimeError: CUDA error: out of memory", "oom"),
        ("Capture cuda graph failed: CUDA out of memory. Tried to allocate 20 MiB", "oom"),
        ("Capture cuda graph failed: an illegal memory access was encountered", "other"),
        ("[2026-02-10 09:14:15 TP1] Decode out of memory. Try to lower your batch size.", "oom"),
        ("RuntimeError: NCCL error: unhandled system error, NCCL version 2.21.5", "nccl"),
        (
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed",
            "nccl",
        ),
        ("RuntimeError: ncclInvalidUsage: This usually reflects invalid usage of NCCL", "nccl"),
        (
            "[2026-02-10 09:14:15] Rank 3 scheduler is dead. Please check if there are relevant logs.",
            "other",
        ),
        ("[2026-02-10 09:14:15] Initialization failed. warmup error: boom", "other"),
        ("KeyError: 'model.layers.0.mlp'", "other"),
    ],
)
def test_error_lines_alone(line: str, category: str) -> None:
    event = parse_line(line)
    assert isinstance(event, ServerError)
    assert event.category == category


@pytest.mark.parametrize(
    "line",
    [
        "[2026-02-10 09:18:06 TP0] Warning: Target model's context_length (262144) is greater "
        "than the derived context_length (8192).",
        '[2026-02-10 09:19:02] INFO:     10.0.0.7:40422 - "GET /health HTTP/1.1" 503 Service Unavailable',
        "[2026-02-10 09:14:02] server_args=ServerArgs(enable_nccl_nvls=False, watchdog_timeout=300)",
        '  File "/sglang/srt/distributed/parallel_state.py", line 120, in all_reduce_nccl_error',
        "[2026-02-10 09:17:44 TP0] Capture cuda graph bs [1, 2, 4, 8, 12, 16, 24, 32]",
        "Capturing batches (bs=1 avail_mem=24.02 GB): 100%|##########| 8/8 [00:19<00:00,  2.41s/it]",
        "UserWarning: something deprecated",
        "",
    ],
)
def test_lines_that_are_not_events(line: str) -> None:
    assert parse_line(line) is None


def test_error_category_of_plain_text() -> None:
    assert error_category("all good") is None
    assert error_category("DistBackendError: boom") == "nccl"


# --- chunking, tqdm and state ---------------------------------------------------------------


def all_log_bytes() -> bytes:
    parts = [path.read_bytes() for path in sorted(LOGS.glob("*.log"))]
    if TRANSCRIPT.exists():
        parts.append(TRANSCRIPT.read_bytes())
    return b"".join(parts)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=700), max_size=60))
def test_any_chunking_gives_the_same_events(chunk_sizes: list[int]) -> None:
    data = all_log_bytes()
    assert parse_bytes(data, chunk_sizes) == parse_bytes(data)


def test_byte_by_byte_feed_with_multibyte_characters_and_crlf() -> None:
    text = (LOGS / "sglang-0.5.9-ms-ranks-ansi.log").read_text(encoding="utf-8")
    data = text.replace("\n", "\r\n").encode("utf-8")  # also has the tqdm bar's `█` (3 bytes)
    assert parse_bytes(data, [1] * len(data)) == parse_bytes(text.encode("utf-8"))


def test_str_and_bytes_chunks_agree() -> None:
    data = (LOGS / "sglang-0.5.23-startup.log").read_bytes()
    parser = SGLangLogParser()
    from_str = parser.feed(data.decode("utf-8")) + parser.flush()
    assert from_str == parse_bytes(data)


def test_tqdm_bar_is_reported_before_its_carriage_return() -> None:
    parser = SGLangLogParser()
    bar = "Loading safetensors checkpoint shards:  75% Completed | 3/4 [00:06<00:02,  2.00s/it]"
    assert parser.feed("\r" + bar) == [
        ShardProgress(done=3, total=4, elapsed_s=6.0, remaining_s=2.0, seconds_per_shard=2.0)
    ]
    assert parser.feed("\r" + bar) == []  # the redraw of 3/4 is not news
    assert [e.done for e in parser.feed("\r" + bar.replace("3/4", "4/4") + "\n")] == [4]
    assert parser.flush() == []


def test_partial_line_waits_for_its_end() -> None:
    parser = SGLangLogParser()
    assert parser.feed("[2026-02-10 09:18:27] The server is fired ") == []
    assert parser.feed("up and ready to roll!\n[2026") == [Ready(ts="2026-02-10 09:18:27")]
    assert parser.flush() == []  # `[2026` alone is nothing


def test_flush_parses_the_last_line_without_newline() -> None:
    parser = SGLangLogParser()
    assert parser.feed(b"[2026-02-10 09:14:21 TP0] Load weight begin. avail mem=1.50 GB") == []
    assert parser.flush() == [LoadBegin(ts="2026-02-10 09:14:21", rank=0, avail_mem_gb=1.5)]


def test_interleaved_rank_tracebacks_keep_their_own_rank() -> None:
    log = (
        "[2026-02-10 10:00:00 TP2] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "scheduler.py", line 1, in run\n'
        "[2026-02-10 10:00:00 TP4] Load weight begin. avail mem=3.00 GB\n"
        "    raise RuntimeError(msg)\n"
        "RuntimeError: NCCL error: remote process exited or there was a network error\n"
    )
    events = SGLangLogParser().parse_lines(log.splitlines())
    assert [(e.kind, e.rank) for e in events] == [("load_begin", 4), ("error", 2)]
    assert isinstance(events[1], ServerError) and events[1].category == "nccl"


def test_backend_hands_out_this_parser() -> None:
    assert isinstance(get_backend("sglang").new_log_parser(), SGLangLogParser)


# --- the decode fast path ------------------------------------------------------------------


def test_fast_path_is_active() -> None:
    """The parser starts with the common shape's template: this says so loudly if not."""
    template = parser_module._DEFAULT_TEMPLATE
    assert template is not None and template.pattern.groups == 10


DECODE_FORMS = [
    # (head, fields with {placeholders}); one per version family
    (
        "Decode batch. ",
        "#running-req: {r}, #token: {t}, token usage: {u}, accept len: {a}, "
        "cuda graph: {g}, gen throughput (token/s): {x}, #queue-req: {q}",
    ),
    (
        "Decode batch. ",
        "#running-req: {r}, #token: {t}, token usage: {u}, accept len: {a}, "
        "cuda graph: {g}, gen throughput (token/s): {x}, #queue-req: {q}, ",
    ),
    (
        "Decode batch, ",
        "#running-req: {r}, #token: {t}, token usage: {u}, accept len: {a}, "
        "accept rate: {b}, cuda graph: {g}, gen throughput (token/s): {x}, #queue-req: {q}, ",
    ),
    (
        "Decode batch, ",
        "#running-req: {r}, #token: {t}, token usage: {u}, accept len: {a}, "
        "accept rate: {b}, cuda graph: {g}, gen throughput (token/s): {x}, #queue-req: {q}",
    ),
    (
        "Decode batch [{n}], ",
        "#running-req: {r}, #token: {t}, token usage: {u}, accept len: {a}, "
        "accept rate: {b}, cap len: 4.00, block accept len: {a}, cuda graph: {g}, "
        "gen throughput (token/s): {x}, #queue-req: {q}",
    ),
    (
        "Decode batch, ",
        "#running-req: {r}, #full token: {t}, full token usage: {u}, "
        "#swa token: {t}, swa token usage: {u}, accept len: {a}, accept rate: {b}, "
        "cuda graph: {g}, gen throughput (token/s): {x}, #queue-req: {q}",
    ),
    (
        "Decode batch, ",
        "#running-req: {r}, #token: {t}, token usage: {u}, cuda graph: {g}, "
        "gen throughput (token/s): {x}, #queue-req: {q}",
    ),
]


def random_decode_log(rng: random.Random, form: int, lines: int) -> list[str]:
    head, fields = DECODE_FORMS[form]
    out = []
    for index in range(lines):
        prefix = rng.choice(["", " TP0", " DP0 TP1", " TP3 EP3"])
        millis = f".{rng.randint(0, 999):03d}" if rng.random() < 0.5 else ""
        values = {
            "n": index,
            "r": rng.randint(0, 64),
            "t": rng.randint(0, 10**6),
            "u": f"{rng.random():.2f}",
            "a": f"{rng.uniform(1, 6):.2f}",
            "b": f"{rng.random():.2f}",
            "g": rng.choice(["True", "False"]),
            "x": f"{rng.uniform(0, 5000):.2f}",
            "q": rng.randint(0, 9),
        }
        out.append(
            f"[2026-02-10 09:{index // 60 % 60:02d}:{index % 60:02d}{millis}{prefix}] "
            + head.format(**values)
            + fields.format(**values)
        )
    return out


@pytest.mark.parametrize("form", range(len(DECODE_FORMS)))
def test_bulk_scan_agrees_with_the_line_by_line_reading(form: int) -> None:
    rng = random.Random(form)
    lines = random_decode_log(rng, form, 300)
    expected = [parse_line(line) for line in lines]
    assert all(isinstance(event, Decode) for event in expected)
    data = ("\n".join(lines) + "\n").encode()
    # small chunks first (the shape is learned), then the rest in one piece (the bulk scan)
    parser = SGLangLogParser()
    events = [
        event for start in range(0, 4000, 200) for event in parser.feed(data[start : start + 200])
    ]
    assert parser._templates[0].matches(lines[-1])  # the bulk scan knows this shape
    events += parser.feed(data[4000:]) + parser.flush()
    assert events == expected


def test_decode_templates_for_each_form() -> None:
    for head, fields in DECODE_FORMS:
        values = {"n": 1, "r": 1, "t": 1, "u": "0.1", "a": "1.5", "b": "0.5", "g": "True"}
        tail = fields.format(**values, x="1.0", q=0)
        template = decode_template(head.format(n=7), tail)
        assert template is not None and template.pattern.groups == 10
    assert decode_template("Decode batch, ", "#running-req: 1, token usage: 0.1") is None


def test_malformed_numbers_in_a_decode_line_fall_back_cleanly() -> None:
    head = "[2026-02-10 09:19:12 TP0] Decode batch, #running-req: 6, #token: 12188, "
    tail = "cuda graph: True, gen throughput (token/s): 412.55, #queue-req: 0"
    bad_optional = head + "token usage: 0.02, accept len: 3.1.2, accept rate: 0.78, " + tail
    bad_required = head + "token usage: 0.0.2, accept len: 3.12, accept rate: 0.78, " + tail
    expected = parse_line(bad_optional)
    assert isinstance(expected, Decode) and expected.accept_len is None
    assert parse_bytes((bad_optional + "\n").encode() * 3) == [expected] * 3
    assert parse_line(bad_required) is None
    assert parse_bytes((bad_required + "\n").encode() * 3) == []


DECODE_LINE_0_5_9 = (
    "[2026-02-10 09:19:12.345 DP0 TP3 EP3] Decode batch, #running-req: 6, #token: 12188, "
    "token usage: 0.02, accept len: 3.12, accept rate: 0.78, cuda graph: True, "
    "gen throughput (token/s): 412.55, #queue-req: 0"
)


def test_a_decode_read_in_bulk_behaves_like_one_built_by_keywords() -> None:
    """Bulk decodes keep their number texts until read; nothing outside may tell."""
    bulk = parse_bytes((DECODE_LINE_0_5_9 + "\n").encode() * 3)[1]
    built = Decode(
        ts="2026-02-10 09:19:12.345",
        rank=3,
        running_req=6,
        tokens=12188,
        token_usage=0.02,
        accept_len=3.12,
        accept_rate=0.78,
        gen_throughput=412.55,
        queue_req=0,
        cuda_graph=True,
    )
    assert bulk == built and built == bulk and hash(bulk) == hash(built)
    assert (
        repr(bulk)
        == repr(built)
        == (
            "Decode(ts='2026-02-10 09:19:12.345', rank=3, running_req=6, tokens=12188, "
            "token_usage=0.02, accept_len=3.12, accept_rate=0.78, gen_throughput=412.55, "
            "queue_req=0, cuda_graph=True)"
        )
    )
    assert (
        bulk.to_json()
        == built.to_json()
        == (
            '{"kind": "decode", "ts": "2026-02-10 09:19:12.345", "rank": 3, "running_req": 6, '
            '"tokens": 12188, "token_usage": 0.02, "accept_len": 3.12, "accept_rate": 0.78, '
            '"gen_throughput": 412.55, "queue_req": 0, "cuda_graph": true}'
        )
    )
    assert type(bulk.tokens) is int and type(bulk.gen_throughput) is float
    assert isinstance(bulk, Event) and bulk.kind == "decode"
    assert [f.name for f in dataclasses.fields(bulk)] == [*list(bulk.to_dict())[1:], "engine"]
    assert pickle.loads(pickle.dumps(bulk)) == built and copy.copy(bulk) == built
    assert bulk != dataclasses.replace(built, queue_req=1) and bulk != ("decode",)
    fresh = parse_bytes((DECODE_LINE_0_5_9 + "\n").encode())[0]  # not read yet
    with pytest.raises(dataclasses.FrozenInstanceError):
        fresh.tokens = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del fresh.ts  # type: ignore[misc]
    with pytest.raises(TypeError):
        Decode(running_req=1)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "tags",
    [
        "",
        " TP0",
        " DP0 TP3 EP3",
        " TP3 TP4",
        "TP5",
        " TP",
        " TPX",
        " TP3X",
        " X_1 TP7",
        " TP" + "9" * 19,
        " TP" + "9" * 20,
        " TP1 TP" + "9" * 20,
        " TP٣",
    ],
)
def test_bulk_and_line_by_line_read_the_same_rank(tags: str) -> None:
    line = DECODE_LINE_0_5_9.replace(" DP0 TP3 EP3]", tags + "]")
    expected = parse_line(line)
    assert isinstance(expected, Decode)
    parser = SGLangLogParser()
    events = parser.feed((line + "\n").encode() * 40)
    assert events == [expected] * 40 and events[-1].rank == expected.rank
    assert parser._templates[0].matches(line) is tags.isascii()  # the bulk path read them


_VALID_NUMBERS = ["6", "12188", "0.02", "3.12", "0.78", "412.55", "0"]
_ODD_NUMBERS = ["1.", "1", "1.5", "0.123", "1.2.3", ".5", "", "٣", "1e5", "+1", "1" * 20]


@settings(max_examples=120, deadline=None)
@given(
    field=st.integers(0, len(_VALID_NUMBERS) - 1),
    odd=st.one_of(st.sampled_from(_ODD_NUMBERS), st.integers(0, 10**25).map(str)),
    graph=st.sampled_from(["True", "False", "Trüe", "1"]),
    millis=st.sampled_from(["", ".123", ",5", ".1234567"]),
)
def test_bulk_and_line_by_line_agree_on_odd_numbers(
    field: int, odd: str, graph: str, millis: str
) -> None:
    """What a template takes converts without fail, and to what the careful path reads; what
    it does not take is read by the careful path."""
    numbers = list(_VALID_NUMBERS)
    numbers[field] = odd
    running, tokens, usage, accept_len, accept_rate, gen, queue = numbers
    line = (
        f"[2026-02-10 09:19:13{millis} TP0] Decode batch, #running-req: {running}, "
        f"#token: {tokens}, token usage: {usage}, accept len: {accept_len}, "
        f"accept rate: {accept_rate}, cuda graph: {graph}, "
        f"gen throughput (token/s): {gen}, #queue-req: {queue}"
    )
    lines = [DECODE_LINE_0_5_9, line] * 20 + [line] * 20  # its shape is learned: bulk read
    expected = [event for event in map(parse_line, lines) if event is not None]
    events = parse_bytes(("\n".join(lines) + "\n").encode())
    assert events == expected
    assert [event.to_json() for event in events] == [event.to_json() for event in expected]


def test_decode_shaped_lines_of_a_megabyte_are_read_in_linear_time() -> None:
    """The templates never backtrack more than once over a line (a regex of tags could)."""
    head = "[2026-02-10 09:19:12"
    lines = [
        head + " TP1" * 250_000 + "x] Decode batch, #running-req: 6",
        head + " TP1" * 250_000 + "] Decode batch, #running-req: " + "1" * 100_000,
        head + "] Decode batch, #running-req: 6, #token: 1, token usage: " + "9" * 1_000_000,
        DECODE_LINE_0_5_9,
    ]
    started = time.perf_counter()
    events = parse_bytes(("\n".join(lines) + "\n").encode())
    assert time.perf_counter() - started < 5.0  # seconds; about 0.05 s on a quiet core
    assert events == [parse_line(DECODE_LINE_0_5_9)]


# --- garbage in, no exception out -----------------------------------------------------------


def test_random_bytes_nul_bytes_and_broken_utf8_never_raise() -> None:
    rng = random.Random(1)
    garbage = bytes(rng.getrandbits(8) for _ in range(200_000))
    nul = b"\x00" * 5000 + b"\n" + b"[2026-02-10 09:14:21 TP0] Load weight\x00 begin.\n"
    truncated = "[2026-02-10 09:18:27] The server is fired up and ready to roll! ü€".encode()[:-1]
    for data in (garbage, nul, truncated, b"\r\r\r\n\n", b"\xff\xfe" * 1000):
        parse_bytes(data)
        parse_bytes(data, [rng.randint(1, 97) for _ in range(200)])
    ready = parse_bytes(truncated)
    assert ready == [Ready(ts="2026-02-10 09:18:27")]


def test_one_megabyte_lines_stay_fast_and_bounded() -> None:
    decode_head = "[2026-02-10 09:19:12 TP0] Decode batch, #running-req: 6, #token: 12188, token usage: 0.02, "
    lines = [
        "x" * (1 << 20),
        decode_head + "y" * (1 << 20),
        "Traceback (most recent call last):" + " frame" * 200_000,
        "[2026-02-10 09:19:12 TP0] " + "Capture " * 130_000,
        "Loading safetensors checkpoint shards: " + "9" * (1 << 20),
    ]
    data = "\n".join(lines) + "\n[2026-02-10 09:18:27] The server is fired up and ready to roll!\n"
    started = time.perf_counter()
    events = parse_bytes(data.encode())
    whole = time.perf_counter() - started
    assert events[-1] == Ready(ts="2026-02-10 09:18:27")
    assert whole < 5.0  # seconds; about 0.1 s on a quiet core

    parser = SGLangLogParser()
    for _ in range(256):  # a 1 MB line arriving 4 KB at a time is held back, but capped
        assert parser.feed(b"z" * 4096) == []
    assert len(parser._pending) <= MAX_LINE_CHARS
    assert parser.feed(b"\n[2026-02-10 09:18:27] The server is fired up and ready to roll!\n") == [
        Ready(ts="2026-02-10 09:18:27")
    ]


def test_non_chunk_input_is_ignored() -> None:
    parser = SGLangLogParser()
    assert parser.feed(None) == []  # type: ignore[arg-type]
    assert parser.feed(12) == []  # type: ignore[arg-type]


# --- summaries ------------------------------------------------------------------------------


def test_summary_of_nothing_and_of_a_failed_start() -> None:
    empty = summarize([])
    assert empty == {
        "kind": "summary",
        "ready": False,
        "load_seconds": None,
        "shards_total": None,
        "decode_lines": 0,
        "mean_gen_throughput": None,
        "mean_accept_len": None,
        "errors": 0,
        "prefill_lines": 0,
        "first_error": None,
        "unparsed_decode_like": 0,
        "spec_steps": None,
        "spec_steps_changes": 0,
    }
    failed = summarize(parse_file("sglang-oom-traceback.log"))
    assert failed["ready"] is False and failed["load_seconds"] is None
    assert failed["errors"] == 3 and failed["first_error"].startswith("torch.OutOfMemoryError")


def test_summary_shards_total_is_the_largest_counter_and_means_skip_missing_accept() -> None:
    events: list[Event] = [
        ShardProgress(done=1, total=1),
        ShardProgress(done=3, total=64),
        Decode(running_req=1, tokens=1, token_usage=0.1, gen_throughput=100.0, queue_req=0),
        Decode(
            running_req=1,
            tokens=1,
            token_usage=0.1,
            gen_throughput=200.0,
            queue_req=0,
            accept_len=3.0,
        ),
    ]
    summary = summarize(events)
    assert summary["shards_total"] == 64
    assert summary["mean_gen_throughput"] == 150.0
    assert summary["mean_accept_len"] == 3.0


def test_summary_is_json_ready() -> None:
    import json

    summary = summarize(parse_file("sglang-0.5.23-startup.log"))
    assert json.loads(json.dumps(summary)) == summary
    assert summary["load_seconds"] == 33.0


def test_lines_seen_counts_every_line_and_redraw() -> None:
    parser = SGLangLogParser()
    parser.feed(b"one\ntwo\rthree")
    parser.feed("\nfour")
    parser.flush()
    assert parser.lines_seen == 4


def test_shapes_changing_inside_one_chunk_are_all_read_in_bulk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A restarted server of another version appends another decode shape to the same log."""
    rng = random.Random(9)
    lines = [
        *random_decode_log(rng, 0, 60),  # 0.4.6
        '[2026-02-10 09:19:02] INFO:     10.0.0.7:40422 - "GET /health HTTP/1.1" 200 OK',
        *random_decode_log(rng, 4, 60),  # 0.5.23
        *random_decode_log(rng, 3, 60),  # 0.5.9
    ]
    expected = [event for event in map(parse_line, lines) if event is not None]
    parser = SGLangLogParser()
    line_by_line: list[str] = []
    original = SGLangLogParser._decode_line

    def spy(self: SGLangLogParser, raw: str) -> Event | None:
        line_by_line.append(raw)
        return original(self, raw)

    monkeypatch.setattr(SGLangLogParser, "_decode_line", spy)
    events = parser.feed("\n".join(lines) + "\n") + parser.flush()
    assert events == expected
    assert len(line_by_line) <= 2  # at most a shape's first line is read on its own

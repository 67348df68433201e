"""No number or size a server sends sizes what specmon holds (issue 24, item 3), piece by
piece: the position cap in the vLLM metrics reader, the log parser and the store, the
snapshot's sample cap, the exporter's series cap per host, and the HTTP body reader against
the hostile server as a real process. The attacks end to end: tests/reliability/test_hostile_http.py."""

from __future__ import annotations

import contextlib
import gzip
import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from support.hostile import HOSTILE_SERVER
from support.hosts import free_port

from specmon.backends import get_backend
from specmon.backends.vllm.metrics import VLLMMetricsReader, parse_metrics
from specmon.backends.vllm.parser import VLLMLogParser
from specmon.exporter.collector import MAX_SERIES_PER_HOST, SpecmonCollector, WatchedHost
from specmon.model.events import GpuSample, ProbeTiming, RunInfo, SpecDecode
from specmon.remote.agent import GpuReading
from specmon.session.http import MAX_SNAPSHOT_CHARS, MAX_SNAPSHOT_SAMPLES, metrics_values
from specmon.session.http_body import BodyTooLarge, capped_lines, request_capped
from specmon.state.store import EventBus, StateStore

PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


@contextlib.contextmanager
def traced_peak() -> Iterator[list[int]]:
    """The peak of Python's allocations inside the block (``[peak]`` once it ends)."""
    peak = [0]
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        yield peak
    finally:
        peak[0] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


def _page(drafts: int, positions: dict[str, int]) -> str:
    lines = [f'vllm:spec_decode_num_drafts_total{{engine="0"}} {drafts}']
    lines += [f'{PER_POSITION}{{engine="0",position="{p}"}} {v}' for p, v in positions.items()]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "position", ["64", "200000", "20000000", "9" * 5000], ids=["64", "2e5", "2e7", "5000-digits"]
)
def test_a_position_past_the_deepest_draft_is_dropped_and_counted(position: str) -> None:
    with traced_peak() as peak:
        snapshot = parse_metrics(_page(10, {"0": 8, "1": 5, position: 1}), at=1.0)
    assert snapshot.engines["0"].accepted_per_position == (8.0, 5.0)
    assert snapshot.dropped_positions == 1
    assert peak[0] < 1 << 20, f"{peak[0]} bytes for one sample"


def test_the_metrics_reader_says_so_once_not_at_every_scrape() -> None:
    reader = VLLMMetricsReader()
    kinds = []
    for scrape in range(4):
        page = _page(10 * (scrape + 1), {"0": 8 * (scrape + 1), "200000": 1})
        kinds += [event.kind for event in reader.read(page, at=float(scrape))]
    assert kinds.count("notice") == 1
    assert kinds.count("spec_decode") == 3


def test_a_log_line_listing_a_million_positions_is_cut_to_64_with_one_notice() -> None:
    rates = ", ".join(["0.5"] * 1_000_000)
    line = (
        "INFO 01-01 00:00:00 [metrics.py:1] SpecDecoding metrics: Mean acceptance length: "
        "2.50, Accepted: 100 tokens, Drafted: 200 tokens, Per-position acceptance rate: "
        f"{rates}, Avg Draft acceptance rate: 50.0%\n"
    )
    parser = VLLMLogParser()
    events = parser.feed(line) + parser.feed(line)
    assert [event.kind for event in events] == ["spec_decode", "notice", "spec_decode"]
    assert all(len(e.per_position or ()) == 64 for e in events if isinstance(e, SpecDecode))


def test_the_store_never_sizes_a_tally_by_the_server() -> None:
    store = StateStore()
    store.apply(RunInfo(run_id="r", backend="vllm"), at=0.0)
    store.apply(SpecDecode(per_position=(0.5,) * 100_000, drafted=10**6), at=1.0)
    assert len(store.accept_by_position.ratios()) == 64
    assert len(store.accept_by_position_history[-1][1]) == 64
    deep = ProbeTiming(
        wall=0.0,
        draft_ms=1.0,
        verify_ms=1.0,
        extend_ms=1.0,
        cycle_ms=3.0,
        batch_size=1,
        draft_tokens=2_000_000,
        accepted_tokens=1,
    )
    fresh = StateStore()
    fresh.apply(RunInfo(run_id="r", backend="vllm"), at=0.0)
    fresh.apply(deep, at=1.0)
    assert fresh.accept_by_position.probe.cycles == []  # a record no real draft can be


def test_a_snapshot_keeps_at_most_its_cap_of_samples() -> None:
    backend = get_backend("vllm")
    page = "".join(f'vllm:stuffed{{n="{n}"}} 1\n' for n in range(50_000))
    page += f'vllm:long{{note="{"x" * 10_000}"}} 1\n'
    left_out = [0]
    values = metrics_values(page, backend, left_out)
    assert len(values) == MAX_SNAPSHOT_SAMPLES
    assert left_out == [50_001 - MAX_SNAPSHOT_SAMPLES]
    wide = "".join(f'vllm:wide{{n="{n}",pad="{"p" * 400}"}} 1\n' for n in range(2000))
    kept = metrics_values(wide, backend)
    assert sum(len(key) for key, _ in kept) <= MAX_SNAPSHOT_CHARS < 2000 * 400


# vLLM 0.32's own config info metric, as the real CPU build serves it (tests/e2e/test_real_vllm.py):
# 37 labels, 1,053 characters of ``name{labels}``.
REAL_VLLM_CACHE_CONFIG_INFO = (
    "vllm:cache_config_info{"
    '_block_size_resolved="True",block_size="128",cache_dtype="auto",'
    'cache_hit_alignment_tokens="None",effective_attention_block_size="128",'
    'enable_mamba_shared_prefix_checkpoint="False",enable_prefix_caching="True",engine="0",'
    'gpu_memory_utilization="0.92",hash_block_size="None",is_attention_free="False",'
    'kv_cache_dtype_skip_layers="[]",kv_cache_layout="None",'
    'kv_cache_max_concurrency="455.0",kv_cache_memory_bytes="1073741824",'
    'kv_cache_size_tokens="465920",kv_offloading_backend="native",'
    'kv_offloading_size="None",kv_sharing_fast_prefill="False",mamba_block_size="None",'
    'mamba_cache_dtype="auto",mamba_cache_mode="none",mamba_page_size_padded="None",'
    'mamba_ssm_cache_dtype="auto",num_cpu_blocks="None",num_gpu_blocks="3640",'
    'num_gpu_blocks_override="None",prefix_cache_retention_interval="0",'
    'prefix_caching_hash_algo="sha256",prefix_match_unit="None",replayssm_buffer_len="16",'
    'skip_page_size_padded="None",sliding_window="None",swa_bounded_replay="True",'
    'use_kda_recoverssm="False",use_replayssm="False",user_specified_block_size="False"'
    "}"
)


def test_a_real_vllm_info_metric_is_kept_with_nothing_left_out() -> None:
    """A real vLLM's page is no label stuffing: its cache-config info gauge (1,053
    characters) is kept whole and nothing is counted as left out (every console on a real
    vLLM said "/metrics: 1 samples left out" at its first scrape)."""
    backend = get_backend("vllm")
    assert len(REAL_VLLM_CACHE_CONFIG_INFO) == 1053
    page = (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        "# TYPE vllm:cache_config_info gauge\n"
        f"{REAL_VLLM_CACHE_CONFIG_INFO} 1.0\n"
        'vllm:num_requests_running{engine="0",model_name="tiny-llama8"} 0.0\n'
    )
    left_out = [0]
    values = metrics_values(page, backend, left_out)
    assert left_out == [0]
    assert values == (
        (REAL_VLLM_CACHE_CONFIG_INFO, 1.0),
        ('vllm:num_requests_running{engine="0",model_name="tiny-llama8"}', 0.0),
    )


def test_a_label_value_cannot_pass_for_another_label_in_a_snapshot_key() -> None:
    """A value holding `",position="3` is quoted and escaped as Prometheus writes it, so the
    key names one label, not two; a newline stays escaped."""
    backend = get_backend("vllm")
    page = 'vllm:forged{note="a\\",position=\\"3"} 1\nvllm:honest{note="a",position="3"} 2\n'
    page += 'vllm:nl{note="x\\ny"} 3\n'
    keys = [key for key, _ in metrics_values(page, backend)]
    assert keys == [
        'vllm:forged{note="a\\",position=\\"3"}',
        'vllm:honest{note="a",position="3"}',
        'vllm:nl{note="x\\ny"}',
    ]


def test_the_exporter_bounds_the_series_of_one_host() -> None:
    bus = EventBus()
    gpus = tuple(GpuReading(index=i, util_gpu=50.0, mem_used_mb=1.0) for i in range(5_000))
    bus.store.apply(GpuSample(wall=time.time(), gpus=gpus))
    other = EventBus()
    other.store.apply(GpuSample(wall=time.time(), gpus=gpus[:2]))
    registry = CollectorRegistry()
    registry.register(
        SpecmonCollector(lambda: [WatchedHost("flood", bus), WatchedHost("calm", other)])
    )
    text = generate_latest(registry).decode()
    series = [line for line in text.splitlines() if line and not line.startswith("#")]
    flood = [line for line in series if 'host="flood"' in line]
    calm = [line for line in series if 'host="calm"' in line]
    assert len(flood) == MAX_SERIES_PER_HOST + 1  # and the gauge saying what was left out
    gpu_kept = sum(line.startswith("specmon_gpu_") for line in flood)
    dropped = next(line for line in flood if line.startswith("specmon_exporter_series_dropped"))
    assert float(dropped.split()[-1]) == 2 * 5_000 - gpu_kept
    assert 'specmon_server_errors_total{category="oom",host="flood"}' in text  # GPUs go last
    assert 'specmon_gpu_utilization_ratio{gpu="1",host="calm"}' in text  # the other host whole
    assert 'specmon_exporter_series_dropped{host="calm"} 0.0' in text
    assert len(calm) < 50


# --- the HTTP body reader against the hostile server ---------------------------------------


@pytest.fixture
def hostile_http(request: pytest.FixtureRequest) -> Iterator[str]:
    """The hostile server answering HTTP as ``request.param`` says; its base URL."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(HOSTILE_SERVER), "--port", str(port)],
        env={**os.environ, "SPECMON_HOSTILE_MODE": f"http:{request.param},serve"},
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()


@pytest.mark.parametrize("hostile_http", ["endless"], indirect=True)
async def test_an_endless_body_stops_at_the_cap(hostile_http: str) -> None:
    with traced_peak() as peak:
        async with httpx.AsyncClient() as client:
            with pytest.raises(BodyTooLarge, match="ran past the 1 MiB cap") as caught:
                await request_capped(client, "GET", hostile_http + "/metrics", what="/metrics")
    assert caught.value.status_code == 200
    assert peak[0] < 4 << 20, f"peak {peak[0]} bytes"


@pytest.mark.parametrize("hostile_http", ["drip"], indirect=True)
async def test_one_byte_chunks_cost_no_more_than_the_bytes(hostile_http: str) -> None:
    with traced_peak() as peak:
        async with httpx.AsyncClient() as client:
            with pytest.raises(BodyTooLarge, match="ran past the 64 KiB cap"):
                await request_capped(client, "GET", hostile_http + "/metrics", limit=64 << 10)
    assert peak[0] < 1 << 20, f"peak {peak[0]} bytes for a 64 KiB cap"


@pytest.mark.parametrize("hostile_http", ["drip"], indirect=True)
async def test_a_line_in_one_byte_chunks_is_read_in_linear_time(hostile_http: str) -> None:
    started = time.monotonic()
    async with (
        httpx.AsyncClient() as client,
        client.stream("GET", hostile_http + "/metrics") as response,
    ):
        with pytest.raises(BodyTooLarge, match="a line ran past the 256 KiB cap"):
            async for _line in capped_lines(response, limit=256 << 10, what="/metrics"):
                pass
    assert time.monotonic() - started < 20


@pytest.mark.parametrize("hostile_http", ["bigline"], indirect=True)
async def test_a_streamed_line_that_never_ends_stops_at_the_cap(hostile_http: str) -> None:
    async with (
        httpx.AsyncClient() as client,
        client.stream("GET", hostile_http + "/metrics") as response,
    ):
        with pytest.raises(BodyTooLarge, match="a line ran past the 1 MiB cap"):
            async for _line in capped_lines(response, what="/metrics"):
                pass


def _one_answer(port: int, head: bytes) -> subprocess.Popen[bytes]:
    """A one-shot server on ``port`` writing ``head`` (status line and headers) and a body
    of 1 KB, a plain socket (no framework to set headers for it)."""
    code = (
        "import socket,sys\n"
        "s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
        f"s.bind(('127.0.0.1',{port}));s.listen(1);c,_=s.accept();c.recv(65536)\n"
        f"c.sendall({head!r}+b'\\r\\n'+{gzip.compress(b'x' * 1024)!r});c.close()\n"
    )
    return subprocess.Popen([sys.executable, "-c", code])


@pytest.mark.parametrize(
    ("head", "said"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 9999999999\r\n", "over the 1 MiB cap; not read"),
        (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nConnection: close\r\n", "gzip-encoded"),
    ],
)
async def test_a_declared_size_or_an_encoding_is_refused_unread(head: bytes, said: str) -> None:
    port = free_port()
    server = _one_answer(port, head)
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(100):
                try:
                    with pytest.raises(BodyTooLarge, match=said):
                        await request_capped(client, "GET", f"http://127.0.0.1:{port}/")
                    break
                except httpx.ConnectError:
                    time.sleep(0.05)
    finally:
        server.kill()
        server.wait()

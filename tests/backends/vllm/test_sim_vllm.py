"""The simulator's vLLM personality end to end: a real process, real HTTP, vLLM 0.33's log
read back by specmon's own vLLM parser, /metrics read by specmon's vLLM metrics reader."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from support.paths import REPO
from support.vllm_conformance import PROMPTS, check_vllm_conformance

from specmon.backends.vllm.metrics import parse_metrics, spec_decode_rates
from specmon.backends.vllm.parser import VLLMLogParser
from specmon.backends.vllm.sim.stats import Totals, spec_decode_line
from specmon.backends.vllm.summary import VLLMLogSummary
from specmon.probe.records import ProbeTiming, parse_probe_line
from specmon.sim import perf

_SHARED = Path("/work/shared/reference/transcripts")
TRANSCRIPTS = (
    _SHARED if _SHARED.exists() else REPO / "shared/reference/transcripts"  # CI checkouts
)
REFERENCE = TRANSCRIPTS / "vllm-0.33-eagle3-tp8.log"  # reference-shaped 0.33
REAL = sorted(TRANSCRIPTS.glob("real-vllm-0.32-cpu-*.log"))  # real vLLM runs on a CPU
# vllm.md §1's parsing rule: every prefixed line must match it.
HEADER = re.compile(
    r"^(?:\((?P<proc>[^)]*?) pid=(?P<pid>\d+)\) )?(?P<lvl>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d) \[?(?P<file>[^:\]]+):(?P<line>\d+)\] (?P<msg>.*)$"
)
# Messages whose wording is fixed apart from numbers: the simulator's must be the real ones'.
MARKERS = (
    "Engine 000:",
    "SpecDecoding metrics:",
    "KV cache size:",
    "init engine (",
    "Loading weights took",
    "Model loading took",
    "torch.compile took",
    "Graph capturing finished",
    "Available KV cache memory",
    "Using max model len",
    "Chunked prefill is enabled",
    "Starting vLLM server on",
    "Loading model from scratch",
)
FAST = 0.01  # the ~3 min start-up in about 2 s
EAGLE3 = (
    '{"method":"eagle3","model":"yuhuili/EAGLE3-LLaMA3.3-Instruct-70B","num_speculative_tokens":3}'
)
MODEL = "meta-llama/Llama-3.3-70B-Instruct"


def message_templates(text: str) -> dict[str, set[str]]:
    """Per marker, the messages with numbers (and URLs, the CPU/GPU device) replaced."""
    found: dict[str, set[str]] = {}
    for line in text.replace("\r\n", "\n").splitlines():
        match = HEADER.match(line)
        if match is None:
            continue
        for marker in MARKERS:
            if marker in match["msg"]:
                template = re.sub(r"https?://\S+", "URL", match["msg"])
                template = re.sub(r"\b[CG]PU KV", "X KV", template)
                template = re.sub(r"\d[\d,]*(?:\.\d+)?", "N", template)
                found.setdefault(marker, set()).add(re.sub(r"N(?:, N)+", "N...", template))
    return found


def assert_conforms_to_real_vllm(text: str) -> None:
    """Prefixed lines follow vLLM's header rule, fixed messages read as real vLLM's do."""
    for line in text.replace("\r\n", "\n").splitlines():
        if line.startswith("("):
            assert HEADER.match(line), line
    real: dict[str, set[str]] = {}
    for path in [REFERENCE, *REAL]:
        for marker, templates in message_templates(path.read_text(errors="replace")).items():
            real.setdefault(marker, set()).update(templates)
    simulated = message_templates(text)
    assert set(simulated) == set(MARKERS), set(MARKERS) - set(simulated)
    for marker, templates in simulated.items():
        assert templates <= real[marker], (marker, templates - real[marker])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class VllmSim:
    """``python -m specmon.sim.vllm serve ...`` with stdout and stderr in one log file."""

    def __init__(
        self, tmp: Path, args: list[str], env: dict[str, str] | None = None, scale: float = FAST
    ) -> None:
        self.port = free_port()
        self.log = tmp / "vllm.log"
        environ = dict(os.environ)
        environ.update(
            SPECMON_SIM_TIME_SCALE=str(scale),
            SPECMON_SIM_GPU_STATE=str(tmp / "gpus.json"),
            VLLM_LOG_STATS_INTERVAL="1",
        )
        environ.update(env or {})
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "specmon.sim.vllm",
                    "serve",
                    *args,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=environ,
                cwd=tmp,
            )
        self.url = f"http://127.0.0.1:{self.port}"

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while "Application startup complete." not in self.text():
            assert self.proc.poll() is None, self.text()[-3000:]
            assert time.monotonic() < deadline, self.text()[-3000:]
            time.sleep(0.05)

    def wait_exit(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def events_of(text: str, parser: VLLMLogParser | None = None) -> list:
    parser = parser or VLLMLogParser()
    return parser.feed(text.encode()) + parser.flush()


def run(cwd: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    environ = dict(os.environ, SPECMON_SIM_TIME_SCALE="0.002")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "specmon.sim.vllm",
            "serve",
            MODEL,
            "--port",
            str(free_port()),
            "--host",
            "127.0.0.1",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
        cwd=cwd,
    )


def _refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except ConnectionRefusedError:
        return True


async def _load(url: str, requests: int, max_tokens: int) -> list[dict]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        answers = await asyncio.gather(
            *(
                client.post(
                    "/v1/completions",
                    json={
                        "model": MODEL,
                        "prompt": "The capital of France is",
                        "max_tokens": max_tokens,
                    },
                )
                for _ in range(requests)
            )
        )
    return [a.json() for a in answers]


def test_serves_like_vllm_and_its_log_reads_as_vllm(tmp_path):
    probe = tmp_path / "probe.jsonl"
    sim = VllmSim(
        tmp_path,
        [MODEL, "-tp", "2", "--speculative-config", EAGLE3],
        env={"SPECMON_PROBE_FILE": str(probe)},
        scale=0.03,
    )
    try:
        refused_while_loading = False
        deadline = time.monotonic() + 60
        while "Application startup complete." not in sim.text():
            assert sim.proc.poll() is None and time.monotonic() < deadline, sim.text()[-3000:]
            if "Loading safetensors" in sim.text():
                refused_while_loading = refused_while_loading or _refused(sim.port)
            time.sleep(0.05)
        assert refused_while_loading
        health = httpx.get(sim.url + "/health")
        assert (health.status_code, health.content) == (200, b"")
        assert httpx.post(sim.url + "/ping").status_code == 200
        assert httpx.get(sim.url + "/version").json() == {"version": "0.33.0"}
        assert httpx.get(sim.url + "/load").json() == {"server_load": 0}
        card = httpx.get(sim.url + "/v1/models").json()["data"][0]
        assert (card["id"], card["owned_by"], card["max_model_len"]) == (MODEL, "vllm", 131072)
        before = parse_metrics(httpx.get(sim.url + "/metrics").text, time.monotonic())
        assert before.spec_decode and before.engines["0"].drafts == 0
        answers = asyncio.run(_load(sim.url, 6, 250))
        assert all(a["usage"]["completion_tokens"] == 250 for a in answers)
        assert all(a["object"] == "text_completion" for a in answers)
        with httpx.stream(
            "POST",
            sim.url + "/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 20,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ) as stream:
            lines = [line for line in stream.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        assert json.loads(lines[-2][6:])["usage"]["completion_tokens"] == 20
        after = parse_metrics(httpx.get(sim.url + "/metrics").text, time.monotonic())
        rates = spec_decode_rates(before, after)
        assert rates is not None and rates.drafts and rates.drafts > 500
        settings = perf.SpecSettings.from_launch(3, 1, 4, False, {})
        chain, expected = 1.0, []
        for position in range(1, 4):
            chain *= perf.position_accept_probability(position)
            expected.append(chain)
        assert rates.per_position is not None
        for got, want in zip(rates.per_position, expected, strict=True):
            assert abs(got - want) < 0.07, (rates.per_position, expected)
        assert rates.mean_accept_len == pytest.approx(
            perf.expected_accept_length(settings), abs=0.15
        )
        assert after.engines["0"].generation_tokens == 6 * 250 + 20
        time.sleep(3.5)  # idle: one last line, then the stats lines go quiet
    finally:
        sim.stop()
    text = sim.text()
    assert sim.proc.returncode == 0, text[-2000:]
    parser = VLLMLogParser()
    events = events_of(text, parser)
    kinds = [e.kind for e in events]
    startup = [k for k in kinds if k not in ("decode", "spec_decode")]
    order = [
        "load_begin",
        "shard_progress",
        "weights_loaded",
        "load_end",
        "compile_begin",
        "compile",
        "kv_cache",
        "graph_begin",
        "graph_end",
        "http_up",
        "ready",
    ]
    positions = [startup.index(kind) for kind in order]
    assert positions == sorted(positions), startup
    shards = [e for e in events if e.kind == "shard_progress"]
    assert shards[-1].done == shards[-1].total == 30
    assert max(e.total for e in shards) == 30  # the draft's 1/1 bar does not reset it
    assert [e.role for e in events if e.kind == "weights_loaded"] == ["target", "draft"]
    kv = next(e for e in events if e.kind == "kv_cache")
    assert kv.tokens and kv.tokens > 131072
    decodes = [e for e in events if e.kind == "decode"]
    specs = [e for e in events if e.kind == "spec_decode"]
    assert decodes and specs
    busy = [e for e in decodes if e.gen_throughput > 0]
    assert busy and max(e.running_req for e in busy) >= 1
    # per request ~ expected_tokens_per_second; 6 in flight at most
    top = perf.expected_tokens_per_second(settings, 6) * 6
    assert max(e.gen_throughput for e in busy) < top * 1.3
    for spec in specs:
        assert spec.mean_accept_len == pytest.approx(
            1 + spec.accepted / (spec.drafted / 3), abs=0.01
        )
        assert len(spec.per_position) == 3
    tail = decodes[decodes.index(busy[-1]) + 1 :]
    assert len(tail) <= 1 and all(e.gen_throughput == 0 for e in tail)
    summary = VLLMLogSummary()
    for event in events:
        summary.add(event)
    record = summary.finish(parser)
    assert record["ready"] is True and record["shards_total"] == 30
    assert record["load_seconds"] and record["load_seconds"] > 0
    assert record["unparsed_decode_like"] == 0
    assert record["decode_lines"] == len(decodes) and record["errors"] == 0
    assert record["mean_accept_len"] == pytest.approx(
        perf.expected_accept_length(settings), abs=0.25
    )
    assert len(record["accept_rate_per_position"]) == 3
    assert_conforms_to_real_vllm(text)
    # conformance: every kind the parser reads from the reference 0.33 transcript
    reference_kinds = {e.kind for e in events_of(REFERENCE.read_text())}
    assert reference_kinds <= set(kinds), reference_kinds - set(kinds)
    records = [json.loads(line) for line in probe.read_text().splitlines()]
    assert len(records) > 100  # as the vLLM probe writes them (specmon/probe/records.py)
    for record in records:
        assert record["draft_ms"] > 0 and record["verify_ms"] > record["draft_ms"]
        assert record["extend_ms"] == 0.0 and record["draft_tokens"] == 3 * record["batch_size"]
        assert record["drafted_per_position"] == [record["batch_size"]] * 3
        assert sum(record["accepted_per_position"]) == record["accepted_tokens"]
    parsed = [parse_probe_line(line) for line in probe.read_text().splitlines()]
    assert all(isinstance(timing, ProbeTiming) for timing in parsed)
    probe_free = json.loads((tmp_path / "gpus.json").read_text())
    assert probe_free["phase"] == "stopped" and len(probe_free["gpus"]) == 2


def test_passes_the_real_vllm_conformance_body(tmp_path):
    """The body tests/e2e/test_real_vllm.py holds a real vLLM (the CPU build) to, on a server
    started as that one is (served name, --max-model-len 1024, EAGLE-3 with 3 tokens), so the
    simulator cannot drift from the real server unnoticed (docs/testing.md)."""
    sim = VllmSim(
        tmp_path,
        [
            "meta-llama/Llama-3.1-8B-Instruct",
            *("--served-model-name", "tiny-llama8", "--max-model-len", "1024"),
            *("--speculative-config", EAGLE3),
        ],
        scale=0.02,
    )
    try:
        report = check_vllm_conformance(
            sim.url, sim.log, ready_timeout=60, alive=lambda: sim.proc.poll() is None
        )
    finally:
        sim.stop()
    assert report.refused_while_loading >= 1
    assert report.model == "tiny-llama8"
    assert report.completions == len(PROMPTS)


@pytest.mark.parametrize(
    ("fault", "category", "root", "worker"),
    [
        ("oom:kv", "oom", "KV cache is needed, which is larger than the available KV cache", False),
        ("oom:load", "oom", "Failed to load model - not enough GPU memory.", True),
        ("nccl", "nccl", "RuntimeError: NCCL error: unhandled cuda error", True),
    ],
)
def test_start_up_faults_end_as_vllm_ends(tmp_path, fault, category, root, worker):
    sim = VllmSim(
        tmp_path, [MODEL, "-tp", "2", "-sc", EAGLE3], env={"SPECMON_SIM_FAULT": fault}, scale=0.002
    )
    try:
        code = sim.wait_exit(60)
    finally:
        sim.stop()
    text = sim.text()
    assert code == 1, text[-3000:]
    assert text.rstrip().endswith(
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {'EngineCore': 1}"
    )
    assert ("WorkerProc failed to start." in text) == worker
    assert "EngineCore failed to start." in text
    errors = [e for e in events_of(text) if e.kind == "error"]
    assert errors and errors[0].category == category and root in errors[0].message, errors
    assert "Application startup complete" not in text


def test_engine_death_mid_decode_answers_503_and_500(tmp_path):
    sim = VllmSim(
        tmp_path,
        [MODEL, "-tp", "2", "-sc", EAGLE3],
        env={"SPECMON_SIM_FAULT": "crash", "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH": "1"},
    )
    try:
        sim.wait_ready()
        answer = httpx.post(
            sim.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1000}, timeout=60
        )
        assert answer.status_code == 500 and answer.json()["error"]["code"] == 500
        assert httpx.get(sim.url + "/health").status_code == 503
    finally:
        sim.stop()
    errors = [e for e in events_of(sim.text()) if e.kind == "error"]
    assert errors and "illegal memory access" in errors[0].message


def test_engine_death_shuts_the_server_down(tmp_path):
    sim = VllmSim(
        tmp_path, [MODEL, "-tp", "2", "-sc", EAGLE3], env={"SPECMON_SIM_FAULT": "crash:segv"}
    )
    try:
        sim.wait_ready()
        with pytest.raises(httpx.HTTPError):
            answer = httpx.post(
                sim.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1000}, timeout=60
            )
            answer.raise_for_status()
        assert sim.wait_exit(30) == 1
    finally:
        sim.stop()
    assert "died unexpectedly (exit code: -11)" in sim.text()


def test_vllm_validation_errors(tmp_path):
    inside = run(
        tmp_path,
        [
            "-sc",
            '{"method":"eagle3","model":"d","num_speculative_tokens":3,"tensor_parallel_size":2}',
        ],
    )
    assert inside.returncode == 1
    assert inside.stderr.rstrip().endswith(
        "ValueError: 'tensor_parallel_size' is not a valid argument in the speculative_config. "
        "Please pass 'draft_tensor_parallel_size' instead."
    )
    assert "non-default args:" in inside.stdout
    draft_tp = run(
        tmp_path,
        [
            "-tp",
            "2",
            "-sc",
            '{"method":"eagle3","model":"d",'
            '"num_speculative_tokens":3,"draft_tensor_parallel_size":3}',
        ],
    )
    assert draft_tp.returncode == 1
    assert (
        "draft_tensor_parallel_size=3 cannot be other value than 1 or target model "
        "tensor_parallel_size=2" in draft_tp.stderr
    )
    no_draft = run(tmp_path, ["-sc", '{"method":"eagle3","num_speculative_tokens":3}'])
    assert no_draft.returncode == 1 and "needs a draft model" in no_draft.stderr
    removed = run(tmp_path, ["--speculative-model", "d", "--num-speculative-tokens", "3"])
    assert removed.returncode == 2
    assert "vllm serve: error: unrecognized arguments: --speculative-model" in removed.stderr
    both = run(
        tmp_path,
        ["-sc", '{"method":"eagle3","model":"d","num_speculative_tokens":3}', "--spec-tokens", "4"],
    )
    assert both.returncode == 2 and "--spec-tokens" in both.stderr
    bad_json = run(tmp_path, ["-sc", "{method: eagle3}"])
    assert bad_json.returncode == 2 and "argument --speculative-config/-sc" in bad_json.stderr
    for result in (inside, draft_tp, removed, both, bad_json):
        assert "Traceback" not in result.stderr.split("Traceback")[0]  # nothing before it


def test_shortcut_flags_make_the_speculative_config(tmp_path):
    sim = VllmSim(
        tmp_path,
        [
            MODEL,
            "-tp",
            "2",
            "--spec-method",
            "eagle3",
            "--spec-model",
            "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B",
            "--spec-tokens",
            "2",
        ],
        scale=0.002,
    )
    try:
        sim.wait_ready()
        metrics = httpx.get(sim.url + "/metrics").text
    finally:
        sim.stop()
    assert "num_spec_tokens=2)" in sim.text()
    assert 'position="1"' in metrics and 'position="2"' not in metrics


def test_a_taken_port_fails_before_loading(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "specmon.sim.vllm",
                "serve",
                MODEL,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=dict(os.environ, SPECMON_SIM_TIME_SCALE="0.002"),
        )
    assert result.returncode == 1
    assert result.stderr.rstrip().endswith("OSError: [Errno 98] Address already in use")
    assert "Loading model" not in result.stdout


def test_hang_at_load_keeps_refusing_connections(tmp_path):
    sim = VllmSim(
        tmp_path,
        [MODEL, "-tp", "2", "-sc", EAGLE3],
        env={"SPECMON_SIM_FAULT": "hang:load"},
        scale=0.002,
    )
    try:
        deadline = time.monotonic() + 30
        while "Loading safetensors" not in sim.text():
            assert time.monotonic() < deadline, sim.text()[-2000:]
            time.sleep(0.05)
        time.sleep(2.0)
        size = len(sim.text())
        time.sleep(1.0)
        assert sim.proc.poll() is None and _refused(sim.port)
        assert len(sim.text()) == size and "Loading weights took" not in sim.text()
    finally:
        sim.stop()


def test_a_70b_target_does_not_fit_one_gpu_and_an_8b_does(tmp_path):
    for name in ("big", "small"):
        (tmp_path / name).mkdir()
    big = VllmSim(tmp_path / "big", [MODEL], scale=0.002)
    small = VllmSim(tmp_path / "small", ["meta-llama/Llama-3.1-8B-Instruct"], scale=0.002)
    try:
        assert big.wait_exit(60) == 1
        small.wait_ready()
    finally:
        big.stop()
        small.stop()
    errors = [e for e in events_of(big.text()) if e.kind == "error"]
    assert errors[0].category == "oom" and "Failed to load model" in errors[0].message
    assert "Model loading took 15.84 GiB memory" in small.text()


def test_hang_in_decode_stalls_requests_but_health_stays_200(tmp_path):
    sim = VllmSim(
        tmp_path,
        [MODEL, "-tp", "2", "-sc", EAGLE3],
        env={"SPECMON_SIM_FAULT": "hang:decode"},
        scale=0.002,
    )
    try:
        sim.wait_ready()
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                sim.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1000}, timeout=6
            )
        assert httpx.get(sim.url + "/health").status_code == 200  # vLLM sees no dead engine
        assert httpx.get(sim.url + "/load").json() == {"server_load": 1}
        assert sim.proc.poll() is None
    finally:
        sim.stop()
    assert sim.proc.returncode == 0


def test_spec_decoding_line_holds_vllms_arithmetic():
    before = Totals(0, 0, 100, 300, 150, (70, 50, 30))
    after = Totals(10, 500, 2501, 7503, 4772, (2018, 1521, 1233))
    line = spec_decode_line(before, after, 10.0)
    assert line is not None and spec_decode_line(after, after, 10.0) is None
    (event,) = VLLMLogParser().feed(
        f"(APIServer pid=1) INFO 12-01 10:00:00 [metrics.py:120] {line}\n".encode()
    )
    drafts, accepted = 2401, 4622
    assert (event.accepted, event.drafted) == (accepted, 7203)
    assert event.mean_accept_len == pytest.approx(1 + accepted / drafts, abs=0.005)
    assert sum(event.per_position) == pytest.approx(accepted / drafts, abs=0.002)
    assert event.per_position[0] == pytest.approx(1948 / drafts, abs=0.0005)
    assert event.draft_acceptance_rate == pytest.approx(accepted / 7203, abs=0.0005)  # 0..1

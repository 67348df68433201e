"""`specmon parse`: the JSON Lines schema, the text form, stdin, and bad input without tracebacks."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO, TESTS

from specmon.cli import main

LOGS = TESTS / "logs"
TRANSCRIPT_NAME = "sglang-0.5.9-eagle3-tp8.log"
TRANSCRIPT = next(
    (
        base / "shared/reference/transcripts" / TRANSCRIPT_NAME
        for base in (REPO, REPO.parent)
        if (base / "shared/reference/transcripts" / TRANSCRIPT_NAME).exists()
    ),
    Path("/work/shared/reference/transcripts") / TRANSCRIPT_NAME,
)

VLLM_TRANSCRIPT = TRANSCRIPT.with_name("vllm-0.33-eagle3-tp8.log")
DETECTED = "specmon: detected backend sglang\n"
NUMBER = (int, float)
# kind -> {field: allowed types}; the schema of the issue, nulls where the line lacks a value.
SCHEMA: dict[str, dict[str, tuple[type, ...]]] = {
    "load_begin": {
        "ts": (str, type(None)),
        "rank": (int, type(None)),
        "avail_mem_gb": (float, type(None)),
    },
    "shard_progress": {"done": (int,), "total": (int,)},
    "load_end": {"mem_usage_gb": (float, type(None)), "avail_mem_gb": (float, type(None))},
    "kv_cache": {"tokens": (int, type(None))},
    "graph_begin": {},
    "graph_end": {"seconds": (float, type(None))},
    "http_up": {},
    "ready": {},
    "weights_loaded": {"role": (str, type(None)), "seconds": (float, type(None))},
    "compile_begin": {"part": (str, type(None))},
    "compile": {"part": (str, type(None)), "seconds": (float, type(None))},
    "spec_decode": {
        "mean_accept_len": (float, type(None)),
        "accepted": (int, type(None)),
        "drafted": (int, type(None)),
        "per_position": (list, type(None)),
        "draft_acceptance_rate": (float, type(None)),
    },
    "decode": {
        "running_req": (int,),
        "tokens": (int, type(None)),  # vLLM's stats line has no token count
        "token_usage": NUMBER,
        "accept_len": (float, type(None)),
        "gen_throughput": NUMBER,
        "queue_req": (int,),
        "cuda_graph": (bool, type(None)),
    },
    "prefill": {"new_seq": (int, type(None)), "new_token": (int, type(None))},
    "error": {"category": (str,), "message": (str,)},
    "summary": {
        "ready": (bool,),
        "load_seconds": (float, type(None)),
        "shards_total": (int, type(None)),
        "decode_lines": (int,),
        "mean_gen_throughput": (float, type(None)),
        "mean_accept_len": (float, type(None)),
        "errors": (int,),
    },
}
# What a vLLM log's summary adds.
VLLM_SUMMARY = {"accept_rate_per_position": (list, type(None))}


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["parse", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def check_schema(record: dict) -> None:
    kind = record["kind"]
    assert kind in SCHEMA, kind
    for name, types in SCHEMA[kind].items():
        assert name in record, (kind, name)
        value = record[name]
        assert isinstance(value, types), (kind, name, value)
        if bool not in types:
            assert not isinstance(value, bool), (kind, name, value)
    if kind == "error":
        assert record["category"] in ("oom", "nccl", "other", "unknown")


@pytest.mark.parametrize(
    "log",
    sorted(LOGS.glob("sglang-*.log"))
    + sorted(LOGS.glob("vllm-*.log"))
    + [path for path in (TRANSCRIPT, VLLM_TRANSCRIPT) if path.exists()],
    ids=str,
)
def test_json_lines_follow_the_schema(capsys: pytest.CaptureFixture[str], log: Path) -> None:
    code, out, err = run_main(capsys, str(log), "--json", "--summary", "--events")
    server = "vllm" if log.name.startswith("vllm-") else "sglang"
    assert code == 0 and err == f"specmon: detected backend {server}\n"
    records = [json.loads(line) for line in out.splitlines()]
    for record in records:
        check_schema(record)
    assert records[-1]["kind"] == "summary"
    if server == "vllm":
        for name, types in VLLM_SUMMARY.items():
            assert isinstance(records[-1][name], types), (name, records[-1][name])
    assert sum(r["kind"] == "decode" for r in records) == records[-1]["decode_lines"]
    assert sum(r["kind"] == "error" for r in records) == records[-1]["errors"]


@pytest.mark.skipif(not VLLM_TRANSCRIPT.exists(), reason="reference transcript not present")
def test_vllm_transcript_summary_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A vLLM log without --backend: detected, read by vLLM's parser, vLLM's summary."""
    code, out, err = run_main(capsys, str(VLLM_TRANSCRIPT), "--json", "--summary", "--events")
    summary = json.loads(out.splitlines()[-1])
    assert code == 0 and err == "specmon: detected backend vllm\n"
    assert {k: summary[k] for k in ("ready", "load_seconds", "shards_total", "decode_lines")} == {
        "ready": True,
        "load_seconds": 139.0,
        "shards_total": 30,
        "decode_lines": 2,
    }
    assert summary["mean_gen_throughput"] == pytest.approx(657.4)
    assert summary["mean_accept_len"] == pytest.approx(2.9)
    assert summary["accept_rate_per_position"] == pytest.approx([0.8205, 0.6115, 0.4655])
    assert summary["errors"] == 0


@pytest.mark.skipif(not TRANSCRIPT.exists(), reason="reference transcript not present")
def test_transcript_summary_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(capsys, str(TRANSCRIPT), "--json", "--summary", "--events")
    summary = json.loads(out.splitlines()[-1])
    assert code == 0
    assert {k: summary[k] for k in ("ready", "load_seconds", "shards_total", "decode_lines")} == {
        "ready": True,
        "load_seconds": 246.0,
        "shards_total": 64,
        "decode_lines": 5,
    }
    assert summary["mean_gen_throughput"] == pytest.approx(600.178)
    assert summary["mean_accept_len"] == pytest.approx(3.062)
    assert summary["errors"] == 0


def test_text_form_is_one_line_per_event(capsys: pytest.CaptureFixture[str]) -> None:
    log = LOGS / "sglang-oom-traceback.log"
    code, out, _ = run_main(capsys, str(log), "--summary", "--events")
    lines = out.splitlines()
    assert code == 0
    assert lines[0].split() == [
        "2026-02-10",
        "10:02:11",
        "TP0",
        "load_begin",
        "avail_mem_gb=138.21",
    ]
    assert lines[2].startswith("2026-02-10 10:05:31     TP0  error          category=oom message=")
    assert "summary:" in lines and "  ready:               no" in lines
    assert "  errors:              3" in lines
    _, json_out, _ = run_main(capsys, str(log), "--json")
    assert len(json_out.splitlines()) == lines.index("summary:")  # same events, one per line


def test_without_summary_no_summary_line(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run_main(capsys, str(LOGS / "sglang-0.5.2-eagle3.log"), "--json")
    assert all(json.loads(line)["kind"] != "summary" for line in out.splitlines())


@pytest.mark.parametrize(
    ("make_path", "message"),
    [
        (lambda tmp: tmp / "missing.log", "no such file"),
        (lambda tmp: tmp, "is a directory"),
    ],
)
def test_bad_paths_are_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, make_path, message: str
) -> None:
    code, out, err = run_main(capsys, str(make_path(tmp_path)))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err and err.startswith("specmon: parse: ")


def test_unreadable_file_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    if os.geteuid() == 0:
        # Root reads any file whatever its mode; /proc/self/mem opens but fails on read (EIO)
        # for every user, so the same "cannot read" path is exercised as root too.
        unreadable = Path("/proc/self/mem")
    else:
        unreadable = tmp_path / "secret.log"
        unreadable.write_text("x\n")
        unreadable.chmod(0)
    code, _, err = run_main(capsys, str(unreadable))
    assert code == 2 and err.count("\n") == 1 and "cannot read" in err


def garbage_files(tmp_path: Path) -> dict[str, Path]:
    rng = random.Random(3)
    files = {
        "random": bytes(rng.getrandbits(8) for _ in range(300_000)),
        "nul": b"\x00" * 100_000 + b"\n\x00\x00\n",
        "megabyte-line": b"A" * (1 << 20) + b"\n" + b"B" * (1 << 20),
        "truncated-utf8": "[2026-02-10 09:18:27] The server is fired up and ready to roll! €".encode()[
            :-2
        ],
        "empty": b"",
    }
    paths = {}
    for name, data in files.items():
        path = tmp_path / f"{name}.log"
        path.write_bytes(data)
        paths[name] = path
    return paths


def test_garbage_logs_give_a_clear_message_not_a_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    paths = garbage_files(tmp_path)
    for name in ("random", "nul", "megabyte-line"):
        code, out, err = run_main(capsys, str(paths[name]), "--json")
        assert code == 1 and out == ""  # nothing read: a script learns it from the exit code
        assert err.count("\n") == 1, name
        assert "no log lines of a known server recognised" in err, name
    code, _, err = run_main(capsys, str(paths["empty"]))
    assert code == 1 and "empty (0 bytes read)" in err
    code, out, err = run_main(
        capsys, str(paths["truncated-utf8"]), "--json", "--summary", "--events"
    )
    assert code == 0 and err == DETECTED
    assert [json.loads(line)["kind"] for line in out.splitlines()] == ["ready", "summary"]


def run_cli(*argv: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "specmon", "parse", *argv],
        input=stdin,
        capture_output=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )


def test_stdin_and_real_process(tmp_path: Path) -> None:
    data = (LOGS / "sglang-0.5.23-startup.log").read_bytes()
    done = run_cli("-", "--json", "--summary", "--events", stdin=data)
    assert done.returncode == 0 and done.stderr == DETECTED.encode()
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert records[-1]["kind"] == "summary" and records[-1]["ready"] is True
    assert records[-1]["decode_lines"] == 4

    garbage = garbage_files(tmp_path)["random"].read_bytes()
    done = run_cli("-", stdin=garbage)
    assert done.returncode == 1 and b"Traceback" not in done.stderr
    assert done.stderr.decode().strip() == (
        "specmon: parse: stdin: no log lines of a known server recognised "
        f"({len(garbage)} bytes read)"
    )
    done = run_cli(str(tmp_path / "nope.log"))
    assert (
        done.returncode == 2 and done.stderr.count(b"\n") == 1 and b"Traceback" not in done.stderr
    )


def test_reader_that_goes_away_is_not_an_error(tmp_path: Path) -> None:
    big = tmp_path / "big.log"
    line = (
        "[2026-02-10 09:19:12 TP0] Decode batch, #running-req: 6, #token: 12188, token usage: 0.02, "
        "accept len: 3.12, accept rate: 0.78, cuda graph: True, gen throughput (token/s): 412.55, "
        "#queue-req: 0\n"
    )
    big.write_text(line * 50_000)
    command = f"{sys.executable} -m specmon parse {big} --json | head -n 1"
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        capture_output=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == DETECTED.encode()
    assert json.loads(done.stdout)["kind"] == "decode"


def test_backend_named_is_not_detected_and_a_bad_name_is_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = str(LOGS / "sglang-0.5.2-eagle3.log")
    code, out, err = run_main(capsys, log, "--json", "--backend", "sglang")
    assert code == 0 and err == "" and out
    code, out, err = run_main(capsys, log, "--backend", "nope")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "unknown backend 'nope'" in err and "sglang" in err


def test_detection_reads_past_a_first_chunk_of_noise(tmp_path: Path) -> None:
    """A log that begins with other output is still detected from what follows."""
    noise = "".join(f"warming up {i}\n" for i in range(500)).encode()
    data = noise + (LOGS / "sglang-0.5.23-startup.log").read_bytes()
    done = run_cli("-", "--json", stdin=data)
    assert done.returncode == 0 and done.stderr == DETECTED.encode()
    assert b'"kind": "ready"' in done.stdout


def test_summary_reports_decode_lines_that_did_not_parse(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = tmp_path / "drift.log"
    log.write_text(
        "[2026-02-10 09:19:12 TP0] Decode batch, #running-req: 6, #token: 12188, token usage: "
        "0.02, cuda graph: True, gen throughput (token/s): 412.55, #queue-req: 0\n"
        "[2026-02-10 09:19:13 TP0] Decode batch, #running-req: 6, #tokens-in-flight: 3\n"
    )
    code, out, _ = run_main(capsys, str(log), "--json", "--summary", "--events")
    summary = json.loads(out.splitlines()[-1])
    assert code == 0 and summary["decode_lines"] == 1 and summary["unparsed_decode_like"] == 1


def test_undetected_log_with_events_says_how_it_was_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = tmp_path / "crash.log"
    log.write_text("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    code, out, err = run_main(capsys, str(log), "--json")
    assert code == 0 and json.loads(out)["kind"] == "error"
    assert err.count("\n") == 1 and "no backend detected" in err and "--backend" in err

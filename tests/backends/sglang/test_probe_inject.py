"""The probe injected into stand-in SGLang workers, in real subprocesses, the way the host session
injects it: ``injection_files()`` copied to a folder and ``launch_env()`` merged into the env."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import TESTS

from specmon.backends.sglang.probe import injection_files
from specmon.model.events import ProbeTiming
from specmon.probe import PROBE_FILE_ENV, launch_env
from specmon.probe.records import ProbeWarning, parse_probe_line

FAKE = TESTS / "support" / "fake_sglang"
PHASE_MS = {"draft": 2.0, "verify": 12.0, "extend": 1.0}  # stand_in_timing.PHASE_SECONDS
BATCH_SIZES = (1, 3, 8)
TOLERANCE_MS = 5.0  # probe vs in-body perf_counter; generous for a loaded 2-core CI box


@pytest.fixture
def probe_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "probe"
    for relative, content in injection_files().items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return folder


def drive(
    probe_dir: Path | None,
    tree: str,
    family: str,
    cycles: int,
    probe_file: Path,
    *flags: str,
    host_path: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> dict:
    """Run drive.py in a fresh interpreter; returns its JSON report."""
    base = os.pathsep.join(str(p) for p in (host_path, FAKE / tree, FAKE) if p is not None)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", PROBE_FILE_ENV)}
    env.pop("SGLANG_PLUGINS", None)
    if probe_dir is not None:
        env.update(launch_env(str(probe_dir), str(probe_file), base))
    else:
        env["PYTHONPATH"] = base
    env.update(extra_env or {})
    completed = subprocess.run(
        [sys.executable, str(FAKE / "drive.py"), family, str(cycles), *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    report["stderr"] = completed.stderr
    return report


def read_records(probe_file: Path) -> list[ProbeTiming | ProbeWarning]:
    if not probe_file.exists():
        return []
    parsed = [parse_probe_line(line) for line in probe_file.read_text().splitlines()]
    assert None not in parsed, probe_file.read_text()
    return parsed  # type: ignore[return-value]


def truth_by_cycle(truth_ms: list[list]) -> list[dict[str, float]]:
    cycles, current = [], {}
    for phase, ms in truth_ms:
        if phase == "prefill":
            continue
        current[phase] = ms
        if phase == "extend":
            cycles.append(current)
            current = {}
    return cycles


def assert_cycles_match(records: list[ProbeTiming], report: dict, accepted: bool) -> None:
    truth = truth_by_cycle(report["truth_ms"])
    assert len(records) == len(truth)
    for index, (record, phases) in enumerate(zip(records, truth, strict=True)):
        size = BATCH_SIZES[index % len(BATCH_SIZES)]
        assert record.batch_size == size
        assert record.draft_tokens == size * 4
        assert record.accepted_tokens == ((index % 4) * size if accepted else None)
        assert record.accepted_per_request == ((index % 4,) * size if accepted else None)
        for phase, field in (
            ("draft", "draft_ms"),
            ("verify", "verify_ms"),
            ("extend", "extend_ms"),
        ):
            measured = getattr(record, field)
            assert phases[phase] <= measured + 0.01  # the probe brackets the body
            assert measured - phases[phase] < TOLERANCE_MS
            assert measured >= PHASE_MS[phase] * 0.95  # the body slept at least that long
        phase_sum = record.draft_ms + record.verify_ms + record.extend_ms
        assert phase_sum <= record.cycle_ms + 0.01
        assert record.cycle_ms - phase_sum < TOLERANCE_MS


def test_v1_worker_gets_one_record_per_cycle_with_correct_fields(probe_dir, tmp_path):
    probe_file = tmp_path / "probe.jsonl"
    report = drive(probe_dir, "v1", "v1", 6, probe_file, "--prefill")
    assert report["wrapped"] == {"cycle": True, "draft": True, "verify": True, "extend": True}
    assert "via import hook" in report["stderr"]
    records = read_records(probe_file)
    assert all(isinstance(r, ProbeTiming) for r in records)
    assert_cycles_match(records, report, accepted=True)  # the prefill batch wrote nothing
    raw = [json.loads(line) for line in probe_file.read_text().splitlines()]
    assert {r["clock"] for r in raw} == {"perf_counter"}  # no torch here: labelled as such
    # the worker's own results are what they are without the probe
    plain = drive(None, "v1", "v1", 6, tmp_path / "unused.jsonl", "--prefill")
    assert report["results"] == plain["results"]
    assert not any(plain["wrapped"].values())


def test_v2_worker_is_hooked_through_sglang_plugin_registry(probe_dir, tmp_path):
    probe_file = tmp_path / "probe.jsonl"
    report = drive(probe_dir, "plugins", "v2", 4, probe_file, "--load-plugins")
    assert report["plugins_loaded"] == ["specmon_probe"]
    assert "via sglang plugin hooks" in report["stderr"]
    assert "via import hook" not in report["stderr"]
    records = read_records(probe_file)
    assert_cycles_match(records, report, accepted=False)  # v2 keeps them on the GPU: None


def test_v2_falls_back_to_import_hook_when_plugins_are_filtered_out(probe_dir, tmp_path):
    probe_file = tmp_path / "probe.jsonl"
    report = drive(
        probe_dir,
        "plugins",
        "v2",
        3,
        probe_file,
        "--load-plugins",
        extra_env={"SGLANG_PLUGINS": "someone_else"},
    )
    assert report["plugins_loaded"] == []
    assert "via import hook" in report["stderr"]
    assert len(read_records(probe_file)) == 3


def test_missing_target_writes_one_warning_and_leaves_the_worker_untouched(probe_dir, tmp_path):
    probe_file = tmp_path / "probe.jsonl"
    report = drive(probe_dir, "broken", "v1", 3, probe_file)
    assert not any(report["wrapped"].values())
    records = read_records(probe_file)
    assert len(records) == 1 and isinstance(records[0], ProbeWarning)
    assert "EAGLEWorker.verify not found" in records[0].message
    assert "9.9.9.fake" in records[0].message
    plain = drive(None, "broken", "v1", 3, tmp_path / "unused.jsonl")
    assert report["results"] == plain["results"]
    # a second process of the same run (another TP rank) adds no second warning
    drive(probe_dir, "broken", "v1", 1, probe_file)
    assert len(read_records(probe_file)) == 1


def test_host_sitecustomize_still_runs(probe_dir, tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    (host / "sitecustomize.py").write_text(
        "import os\nos.environ['HOST_SITECUSTOMIZE_RAN'] = 'yes'\n"
    )
    probe_file = tmp_path / "probe.jsonl"
    report = drive(probe_dir, "v1", "v1", 2, probe_file, host_path=host)
    assert report["host_sitecustomize"] == "yes"
    assert len(read_records(probe_file)) == 2


def test_without_probe_file_nothing_is_wrapped(probe_dir, tmp_path):
    report = drive(
        probe_dir, "v1", "v1", 2, tmp_path / "probe.jsonl", extra_env={PROBE_FILE_ENV: ""}
    )
    assert not any(report["wrapped"].values())
    assert not (tmp_path / "probe.jsonl").exists()


def test_injection_files_are_self_contained():
    files = injection_files()
    shipped = ("sitecustomize.py", "specmon_probe_hook.py", "specmon_probe_sglang.py")
    assert set(files) >= set(shipped)
    for name in shipped:
        assert b"import specmon." not in files[name] and b"from specmon" not in files[name]
    assert files["specmon_probe_tables.txt"] == b"specmon_probe_sglang\n"
    assert b"specmon_probe_vllm" not in files["specmon_probe_tables.txt"]
    entry_points = next(v for k, v in files.items() if k.endswith("entry_points.txt"))
    assert b"[sglang.srt.plugins]" in entry_points
    assert b"specmon_probe_sglang:register_sglang_plugin" in entry_points

"""The probe injected into stand-in vLLM model runners, in real subprocesses, the way the host
session injects it (the backend's ``probe_targets()`` files copied to a folder, ``launch_env()``
merged); and ``--check-source`` on the stand-in trees and on real vLLM release wheels
(downloaded once with pip, cached; skipped when the index is unreachable)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support.paths import REPO, TESTS

from specmon.backends import get_backend
from specmon.backends.vllm.check_source import check_vllm_source, format_vllm_report
from specmon.model.events import ProbeTiming
from specmon.probe import PROBE_FILE_ENV, launch_env
from specmon.probe.records import ProbeWarning, parse_probe_line

FAKE = TESTS / "support" / "fake_vllm"
BATCH_SIZES = (1, 3, 8)  # drive.py
NUM_SPEC_TOKENS = 3
TOLERANCE_MS = 5.0  # probe vs in-body perf_counter; generous for a loaded 2-core CI box
WHEEL_CACHE = (
    Path(os.environ.get("SPECMON_TEST_CACHE", Path.home() / ".cache" / "specmon-test"))
    / "vllm-wheels"
)
WANTED_PREFIXES = ("vllm/v1/", "vllm/version.py", "vllm/_version.py")
UNREACHABLE: list[str] = []


def injection_files() -> dict[str, bytes]:
    """What vLLM's backend ships to ``<run dir>/probe/``."""
    targets = get_backend("vllm").probe_targets()
    assert targets is not None
    return dict(targets.files)


@pytest.fixture
def probe_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "probe"
    for relative, content in injection_files().items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return folder


def drive(
    probe_dir: Path | None, tree: str, runner: str, steps: int, probe_file: Path, *flags: str
) -> dict:
    base = os.pathsep.join(str(p) for p in (FAKE / tree, FAKE))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", PROBE_FILE_ENV)}
    if probe_dir is not None:
        env.update(launch_env(str(probe_dir), str(probe_file), base))
    else:
        env["PYTHONPATH"] = base
    completed = subprocess.run(
        [sys.executable, str(FAKE / "drive.py"), runner, str(steps), *flags],
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


def read_lines(probe_file: Path) -> list[dict]:
    if not probe_file.exists():
        return []
    lines = probe_file.read_text().splitlines()
    assert None not in [parse_probe_line(line) for line in lines], lines
    return [json.loads(line) for line in lines]


def truth_steps(truth: list[list], prefill: bool) -> list[dict[str, tuple[float, float]]]:
    """Group drive.py's in-body truth (phase, start ms, end ms) by step. The phases after the
    forward come in a different order per runner, so a step is cut at each forward, which opens
    every step."""
    steps: list[dict[str, tuple[float, float]]] = []
    for phase, start, end in truth:
        if phase == "forward":
            steps.append({})
        steps[-1][phase] = (start, end)
    return steps[1:] if prefill else steps


def assert_records_match(lines: list[dict], report: dict, prefill: bool, accepted: bool) -> None:
    steps = truth_steps(report["truth_ms"], prefill)
    records = [parse_probe_line(json.dumps(line)) for line in lines]
    assert all(isinstance(r, ProbeTiming) for r in records)
    assert len(records) == len(steps)
    for index, (line, record, phases) in enumerate(zip(lines, records, steps, strict=True)):
        size = BATCH_SIZES[index % len(BATCH_SIZES)]
        assert record.batch_size == size
        assert record.draft_tokens == size * NUM_SPEC_TOKENS
        assert line["clock"] == "perf_counter"  # no torch here: labelled as such
        # verify: forward start to rejection-sampler end, as measured inside the bodies
        verify_truth = phases["reject"][1] - phases["forward"][0]
        draft_truth = phases["draft"][1] - phases["draft"][0]
        for measured, truth in ((record.verify_ms, verify_truth), (record.draft_ms, draft_truth)):
            assert truth <= measured + 0.01  # the probe brackets the bodies
            assert measured - truth < TOLERANCE_MS
        assert record.extend_ms == 0.0  # vLLM's EAGLE has no separate draft-extend call
        step_truth = max(end for _, end in phases.values()) - phases["forward"][0]
        assert step_truth <= record.cycle_ms + 0.01
        assert record.cycle_ms - step_truth < TOLERANCE_MS
        if accepted:
            plan = [(index + j) % (NUM_SPEC_TOKENS + 1) for j in range(size)]
            assert record.accepted_tokens == sum(plan)
            assert line["accepted_per_position"] == [
                sum(1 for a in plan if a > position) for position in range(NUM_SPEC_TOKENS)
            ]
            assert line["drafted_per_position"] == [size] * NUM_SPEC_TOKENS
        else:
            assert record.accepted_tokens is None
            assert "accepted_per_position" not in line


def test_v1_single_call_step_010(probe_dir, tmp_path):
    probe_file = tmp_path / "probe.jsonl"
    report = drive(probe_dir, "single", "v1", 6, probe_file, "--prefill")
    assert report["wrapped"] == {"cycle": True, "draft": True, "verify_end": True}
    assert "GPUModelRunner.execute_model, EagleProposer.propose" in report["stderr"]
    assert_records_match(read_lines(probe_file), report, prefill=True, accepted=True)
    plain = drive(None, "single", "v1", 6, tmp_path / "unused.jsonl", "--prefill")
    assert report["results"] == plain["results"]  # the runner's outputs are unchanged
    assert not any(plain["wrapped"].values())


def test_v1_split_step_with_inherited_propose_033(probe_dir, tmp_path):
    probe_file = tmp_path / "probe.jsonl"
    report = drive(probe_dir, "split", "v1", 6, probe_file, "--prefill")
    assert report["wrapped"] == {
        "cycle": True,
        "cycle_end": True,
        "draft": True,
        "verify_end": True,
    }
    assert_records_match(read_lines(probe_file), report, prefill=True, accepted=True)
    plain = drive(None, "split", "v1", 6, tmp_path / "unused.jsonl", "--prefill")
    assert report["results"] == plain["results"]


def test_v1_async_output_leaves_acceptance_null(probe_dir, tmp_path):
    probe_file = tmp_path / "probe.jsonl"
    report = drive(probe_dir, "split", "v1", 4, probe_file, "--async-output")
    assert_records_match(read_lines(probe_file), report, prefill=False, accepted=False)


def test_v2_model_runner_with_lazily_imported_speculator(probe_dir, tmp_path):
    probe_file = tmp_path / "probe.jsonl"
    report = drive(probe_dir, "split", "v2", 5, probe_file, "--prefill")
    assert report["wrapped"] == {
        "cycle": True,
        "cycle_end": True,
        "draft": True,
        "verify_end": True,
    }
    assert (
        "EagleSpeculator.propose, RejectionSampler.__call__ (V2 GPUModelRunner)"
        in (report["stderr"])
    )
    assert_records_match(read_lines(probe_file), report, prefill=True, accepted=False)


def test_missing_target_writes_one_warning_and_leaves_vllm_untouched(probe_dir, tmp_path):
    probe_file = tmp_path / "probe.jsonl"
    report = drive(probe_dir, "broken", "v1", 3, probe_file)
    assert not any(report["wrapped"].values())
    records = [parse_probe_line(json.dumps(line)) for line in read_lines(probe_file)]
    assert len(records) == 1 and isinstance(records[0], ProbeWarning)
    assert "RejectionSampler.forward" in records[0].message
    assert "vLLM 9.9.9.fake" in records[0].message
    drive(probe_dir, "broken", "v1", 1, probe_file)  # another worker of the same run
    assert len(read_lines(probe_file)) == 1


def test_injection_files_carry_the_vllm_table_self_contained():
    files = injection_files()
    table = files["specmon_probe_vllm.py"]
    assert b"import specmon" not in table and b"from specmon" not in table
    assert files["specmon_probe_tables.txt"] == b"specmon_probe_vllm\n"
    assert "specmon_probe_sglang.py" not in files  # each backend ships its own table only


# --- check-source ---------------------------------------------------------------------------


def run_check(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specmon.probe", "--check-source", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )


def test_check_source_on_stand_in_trees():
    split = run_check(FAKE / "split")  # the parent of vllm/ is accepted too
    assert split.returncode == 0, split.stdout
    assert "vLLM 0.33.0.fake" in split.stdout
    assert "V2 GPUModelRunner (vllm/v1/worker/gpu/model_runner.py): complete" in split.stdout
    assert "inherited from vllm/v1/spec_decode/llm_base_proposer.py" in split.stdout
    single = run_check(FAKE / "single" / "vllm")
    assert single.returncode == 0, single.stdout
    assert "absent  cycle_end  GPUModelRunner.sample_tokens" in single.stdout
    assert "V2 GPUModelRunner: not in this version" in single.stdout
    broken = run_check(FAKE / "broken")
    assert broken.returncode == 1
    assert "MISSING verify_end RejectionSampler.forward: no method forward" in broken.stdout


def test_check_source_reports_bad_signatures(tmp_path):
    worker = tmp_path / "vllm" / "v1" / "worker"
    worker.mkdir(parents=True)
    (worker / "gpu_model_runner.py").write_text(
        "class GPUModelRunner:\n    async def execute_model(self, scheduler_output): ...\n"
    )
    report = check_vllm_source(tmp_path)
    assert not report.fully_works
    text = format_vllm_report(report)
    assert "BAD SIG cycle      GPUModelRunner.execute_model: is async" in text
    assert "MISSING draft      EagleProposer.propose: vllm/v1/spec_decode/eagle.py absent" in text


def unpacked_release(version: str, tmp_path: Path) -> Path:
    """The release's vllm/ folder (v1/ and the version only), from the cached or downloaded
    wheel. Wheels, not sdists: pip cannot download vLLM's sdist without building it."""
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    wheels = sorted(WHEEL_CACHE.glob(f"vllm-{version}-*.whl"))
    if not wheels and UNREACHABLE:
        pytest.skip(f"package index unreachable; {UNREACHABLE[0]}")
    if not wheels:
        completed = subprocess.run(
            [
                sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                "--retries", "1", "--timeout", "15", "--only-binary=:all:",
                "--platform", "manylinux1_x86_64", "--platform", "manylinux_2_28_x86_64",
                "--python-version", "3.12", "-d", str(WHEEL_CACHE), f"vllm=={version}",
            ],
            capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        wheels = sorted(WHEEL_CACHE.glob(f"vllm-{version}-*.whl"))
        if completed.returncode != 0 or not wheels:
            last = (completed.stderr.strip().splitlines() or ["no output"])[-1]
            UNREACHABLE.append(f"pip download vllm=={version} failed: {last}")
            pytest.skip(f"package index unreachable or wheel unavailable; {UNREACHABLE[0]}")
    target = tmp_path / version
    with zipfile.ZipFile(wheels[0]) as wheel:
        for name in wheel.namelist():
            if name.startswith(WANTED_PREFIXES) and name.endswith(".py"):
                wheel.extract(name, target)
    return target / "vllm"


@pytest.mark.parametrize(
    ("version", "runners", "has_sample_tokens"),
    [
        ("0.10.1", {"V1 GPUModelRunner"}, False),  # execute_model runs the whole step
        ("0.22.0", {"V1 GPUModelRunner", "V2 GPUModelRunner"}, True),
        ("0.33.0", {"V1 GPUModelRunner", "V2 GPUModelRunner"}, True),  # V2 default for EAGLE-3
    ],
)
def test_real_release_wheels(version, runners, has_sample_tokens, tmp_path):
    package = unpacked_release(version, tmp_path)
    report = check_vllm_source(package)
    assert report.version == version
    present = {f.family.name: f for f in report.families if f.present}
    assert set(present) == runners
    for family in present.values():
        assert family.complete, format_vllm_report(report)
        sample_tokens = next(c for c in family.targets if c.target.role == "cycle_end")
        assert sample_tokens.ok is has_sample_tokens
    assert report.fully_works
    completed = run_check(package)
    assert completed.returncode == 0, completed.stdout

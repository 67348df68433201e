"""``python -m specmon.probe --check-source``: on the stand-in trees, and on real SGLang release
wheels from the package index (downloaded once with pip, cached; skipped when unreachable)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support.paths import REPO, TESTS

from specmon.backends.sglang.check_source import check_source, format_report

FAKE = TESTS / "support" / "fake_sglang"
WHEEL_CACHE = (
    Path(os.environ.get("SPECMON_TEST_CACHE", Path.home() / ".cache" / "specmon-test"))
    / "sglang-wheels"
)
# Only these parts of a wheel are unpacked: the worker modules, the plugin registry, the version.
WANTED_PREFIXES = (
    "sglang/srt/speculative/eagle_worker",
    "sglang/srt/plugins/",
    "sglang/version.py",
    "sglang/_version.py",
)
UNREACHABLE: list[str] = []  # the first download failure, so later versions skip at once


def run_check(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specmon.probe", "--check-source", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )


def test_stand_in_v1_tree_fully_works():
    completed = run_check(FAKE / "v1" / "sglang")
    assert completed.returncode == 0, completed.stdout
    assert "v1 EAGLEWorker (sglang/srt/speculative/eagle_worker.py): complete" in completed.stdout
    assert "ok      verify  EAGLEWorker.verify(self, batch, spec_info)" in completed.stdout
    assert "delivery: import hook" in completed.stdout


def test_stand_in_plugin_tree_uses_the_plugin_registry():
    completed = run_check(FAKE / "plugins")  # the parent of sglang/ is accepted too
    assert completed.returncode == 0, completed.stdout
    assert "delivery: sglang.srt.plugins entry point" in completed.stdout
    assert "v1 EAGLEWorker: not in this version" in completed.stdout


def test_missing_method_fails_and_names_it():
    completed = run_check(FAKE / "broken" / "sglang")
    assert completed.returncode == 1
    assert "MISSING verify  EAGLEWorker.verify: no method verify" in completed.stdout
    assert "would NOT fully work" in completed.stdout


def test_incompatible_signature_is_reported(tmp_path):
    speculative = tmp_path / "sglang" / "srt" / "speculative"
    speculative.mkdir(parents=True)
    (speculative / "eagle_worker.py").write_text(
        "class EAGLEWorker:\n"
        "    def forward_batch_generation(self, batch): ...\n"
        "    @staticmethod\n"
        "    def draft(batch): ...\n"
        "    def verify(self): ...\n"
        "    async def forward_draft_extend_after_decode(self, batch): ...\n"
    )
    report = check_source(tmp_path)
    assert not report.fully_works
    details = {c.role: (c.ok, c.detail) for c in report.families[0].targets}
    assert details == {
        "cycle": (True, "self, batch"),
        "draft": (False, "is a staticmethod"),
        "verify": (False, "takes no batch argument"),
        "extend": (False, "is async"),
    }
    assert "BAD SIG verify  EAGLEWorker.verify: takes no batch argument" in format_report(report)


def test_not_a_package_is_a_clear_one_line_error(tmp_path):
    completed = run_check(tmp_path)
    assert completed.returncode == 2
    assert "not an unpacked SGLang package" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_no_worker_module_means_no(tmp_path):
    (tmp_path / "srt").mkdir()
    completed = run_check(tmp_path)
    assert completed.returncode == 1
    assert "no EAGLE worker module found" in completed.stdout


def unpacked_release(version: str, tmp_path: Path) -> Path:
    """The release's sglang/ folder (worker modules only), from the cached or downloaded wheel."""
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    wheels = sorted(WHEEL_CACHE.glob(f"sglang-{version}-*.whl"))
    if not wheels and UNREACHABLE:  # one failed download is enough to know
        pytest.skip(f"package index unreachable; {UNREACHABLE[0]}")
    if not wheels:
        completed = subprocess.run(
            [
                sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                "--retries", "1", "--timeout", "15",
                "--only-binary=:all:", "--python-version", "3.12",
                "--platform", "manylinux_2_34_x86_64",
                "-d", str(WHEEL_CACHE), f"sglang=={version}",
            ],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        wheels = sorted(WHEEL_CACHE.glob(f"sglang-{version}-*.whl"))
        if completed.returncode != 0 or not wheels:
            last = (completed.stderr.strip().splitlines() or ["no output"])[-1]
            UNREACHABLE.append(f"pip download sglang=={version} failed: {last}")
            pytest.skip(f"package index unreachable or wheel unavailable; {UNREACHABLE[0]}")
    target = tmp_path / version
    with zipfile.ZipFile(wheels[0]) as wheel:
        for name in wheel.namelist():
            if name.startswith(WANTED_PREFIXES):
                wheel.extract(name, target)
    return target / "sglang"


@pytest.mark.parametrize(
    ("version", "families", "plugin_hook"),
    [
        # 2025, before the rename: the cycle is forward_batch_speculative_generation; v1 only.
        ("0.5.2", {"v1 EAGLEWorker": "forward_batch_speculative_generation"}, False),
        # v1 default, v2 behind SGLANG_ENABLE_SPEC_V2; no plugin registry yet.
        (
            "0.5.9",
            {
                "v1 EAGLEWorker": "forward_batch_generation",
                "v2 EAGLEWorkerV2": "forward_batch_generation",
            },
            False,
        ),
        # the newest release checked: eagle_worker.py is gone, only v2; plugin hooks exist.
        ("0.5.23", {"v2 EAGLEWorkerV2": "forward_batch_generation"}, True),
    ],
)
def test_real_release_wheels(version, families, plugin_hook, tmp_path):
    package = unpacked_release(version, tmp_path)
    report = check_source(package)
    assert report.version == version
    assert report.plugin_hook is plugin_hook
    present = {f.family.name: f for f in report.families if f.present}
    assert set(present) == set(families)
    for name, cycle_method in families.items():
        assert present[name].complete, format_report(report)
        cycle = next(t for t in present[name].targets if t.role == "cycle")
        assert cycle.method_name == cycle_method
    assert report.fully_works
    completed = run_check(package)
    assert completed.returncode == 0, completed.stdout


def test_missing_argument_is_a_usage_error_in_one_line():
    completed = subprocess.run(
        [sys.executable, "-m", "specmon.probe"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )
    assert completed.returncode == 2
    assert "--check-source" in completed.stderr
    assert "Traceback" not in completed.stderr
    assert len(completed.stderr.strip().splitlines()) == 1

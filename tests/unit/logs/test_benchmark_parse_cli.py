"""benchmarks/parse_cli.py runs to its figures on a small log: a case renamed in the
command's table once left its summary check reading a name that no longer existed
(KeyError after every timing had run)."""

from __future__ import annotations

import subprocess
import sys

from support.paths import REPO


def test_the_parse_cli_benchmark_prints_its_figures_on_a_small_log() -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/parse_cli.py", "--lines", "3000", "--repeat", "1", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "JSON lines loaded" in done.stdout
    assert "floor" in done.stdout and "lines/s" in done.stdout

"""The suite's file order under ``--dist loadfile`` (tests/support/file_order.py): unknown files
first, then the table's longest first; the checked-in table reads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.file_order import TABLE, longest_first, read_table, write_table
from support.paths import TESTS


def test_unknown_files_come_first_then_the_longest():
    table = {"a.py": 5.0, "b.py": 300.0, "c.py": 40.0}
    files = ["a.py", "new2.py", "b.py", "c.py", "new1.py"]
    assert longest_first(files, table) == ["new2.py", "new1.py", "b.py", "c.py", "a.py"]


def test_the_table_round_trips_and_skips_comments():
    text = write_table({"tests/x.py": 1.25, "tests/y.py": 30.0}) + "# note\n\n7 tests/z.py  # why\n"
    assert read_table(text) == {"tests/y.py": 30.0, "tests/x.py": 1.2, "tests/z.py": 7.0}
    assert text.index("tests/y.py") < text.index("tests/x.py")


@pytest.mark.parametrize("line", ["tests/x.py 3", "3", "three tests/x.py"])
def test_a_malformed_line_is_an_error_naming_it(line):
    with pytest.raises(ValueError, match="line 2"):
        read_table("1 tests/ok.py\n" + line + "\n")


def test_the_checked_in_table_reads_and_names_test_files():
    table = read_table(TABLE.read_text())
    assert len(table) > 100
    assert all(path.startswith("tests/") and path.endswith(".py") for path in table)
    assert table["tests/e2e/test_real_vllm.py"] == max(table.values())


def test_an_xdist_worker_gets_the_files_longest_first_and_the_unknown_before(tmp_path: Path):
    """A real run on one xdist worker: xdist alone would give the 5-test file first."""
    for name, count in (("test_many.py", 5), ("test_long.py", 1), ("test_new.py", 3)):
        body = "".join(
            f"def test_{i}():\n    open(LOG, 'a').write('{name}\\n')\n\n" for i in range(count)
        )
        (tmp_path / name).write_text(f"LOG = {str(tmp_path / 'order.log')!r}\n\n" + body)
    (tmp_path / "seconds.txt").write_text("1.0 test_many.py\n100.0 test_long.py\n")
    (tmp_path / "conftest.py").write_text(
        "from pathlib import Path\n"
        "import support.file_order as file_order\n"
        "from support.file_order import pytest_xdist_make_scheduler  # noqa: F401\n"
        f"file_order.TABLE = Path({str(tmp_path / 'seconds.txt')!r})\n"
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "1", "--dist", "loadfile",
         "-p", "no:cacheprovider", "-p", "no:randomly", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(TESTS), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    order = (tmp_path / "order.log").read_text().split()
    assert order == ["test_new.py"] * 3 + ["test_long.py"] + ["test_many.py"] * 5


def test_a_measuring_file_shares_the_heavy_files_worker_and_never_runs_beside_it(tmp_path: Path):
    """Two workers, the heavy file longest: xdist alone gives the measuring file to the other,
    idle worker, where it ran beside the heavy one (the CI failure of 40c7097)."""
    for name, count in (("test_heavy.py", 2), ("test_measure.py", 2), ("test_other.py", 4)):
        body = "".join(
            f"def test_{i}():\n"
            f"    import os, time\n"
            f"    start = time.time(); time.sleep(0.3)\n"
            f"    open(LOG, 'a').write(f\"{name} {{os.environ['PYTEST_XDIST_WORKER']}} "
            f'{{start}} {{time.time()}}\\n")\n\n'
            for i in range(count)
        )
        (tmp_path / name).write_text(f"LOG = {str(tmp_path / 'order.log')!r}\n\n" + body)
    (tmp_path / "seconds.txt").write_text(
        "100.0 test_heavy.py\n30.0 test_measure.py\n50.0 test_other.py\n"
    )
    (tmp_path / "conftest.py").write_text(
        "from pathlib import Path\n"
        "import support.file_order as file_order\n"
        "from support.file_order import pytest_xdist_make_scheduler  # noqa: F401\n"
        f"file_order.TABLE = Path({str(tmp_path / 'seconds.txt')!r})\n"
        "file_order.SAME_WORKER = {'test_measure.py': 'test_heavy.py'}\n"
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile",
         "-p", "no:cacheprovider", "-p", "no:randomly", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(TESTS), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in (tmp_path / "order.log").read_text().splitlines()]
    workers = {name: {worker for n, worker, *_ in rows if n == name} for name, *_ in rows}
    assert workers["test_measure.py"] == workers["test_heavy.py"] != workers["test_other.py"]
    heavy = [(float(s), float(e)) for n, _, s, e in rows if n == "test_heavy.py"]
    for name, _, start, end in rows:
        if name == "test_measure.py":
            assert all(float(end) <= s or float(start) >= e for s, e in heavy), rows


def test_a_shared_scope_is_ordered_by_the_seconds_of_all_its_files():
    from support.file_order import SAME_WORKER, group_seconds

    table = {path: 10.0 for path in SAME_WORKER} | {"tests/e2e/test_real_vllm.py": 300.0}
    assert group_seconds(table) == {"tests/e2e/test_real_vllm.py": 300.0 + 10.0 * len(SAME_WORKER)}

"""Longest file first under ``--dist loadfile``: the README's command hands whole test files to
the xdist workers, and xdist's own order (most tests first) can leave a long file with few tests,
such as the real vLLM's, to start last and run on alone while the other workers idle. Ordering
the files by their measured seconds (``tests/file_seconds.txt``) puts the long ones first; a file
the table does not know yet is given first of all, as a new e2e module usually is long and a
short one costs nothing there. ``--file-seconds-out PATH`` writes the table from a run.

Some files measure throughput against a tolerance and must not run beside the real vLLM build,
the suite's one CPU hog: while it starts, this 2-core machine stalls every process for up to
0.65 s at a time (an asyncio loop sleeping 20 ms woke 0.1-0.65 s late 17 times in 25 s, and
never otherwise), and one stall at a request's end cost a sweep point 10-28% (CI of 40c7097:
3 steps measured 67.4 tok/s where it measures 74.5 alone). ``SAME_WORKER`` makes such files one
scope with the vLLM module: one worker runs them one after the other."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

TABLE = Path(__file__).resolve().parents[1] / "file_seconds.txt"
HEADER = (
    "# Seconds each test file took in one whole run (setup, call and teardown summed): the\n"
    "# order xdist's workers get files in (tests/support/file_order.py; docs/testing.md).\n"
    "# Rewrite: .venv/bin/python -m pytest -q -n 3 --dist loadfile --file-seconds-out PATH\n"
)


HEAVY = "tests/e2e/test_real_vllm.py"
SAME_WORKER = {  # file -> the file whose worker runs it (never beside it)
    "tests/e2e/test_advisor_e2e.py": HEAVY,
    "tests/e2e/test_advisor_e2e_vllm.py": HEAVY,
}


def scope_of(nodeid: str) -> str:
    """The file a test belongs to, or the file it must share a worker with."""
    path = nodeid.split("::", 1)[0]
    return SAME_WORKER.get(path, path)


def group_seconds(table: Mapping[str, float]) -> dict[str, float]:
    """The table with each shared scope's seconds summed into it (what its worker runs)."""
    out = {path: value for path, value in table.items() if path not in SAME_WORKER}
    for path, scope in SAME_WORKER.items():
        if path in table and scope in out:
            out[scope] += table[path]
    return out


def read_table(text: str) -> dict[str, float]:
    """``SECONDS PATH`` a line; ``#`` starts a comment. A malformed line is an error, not a
    silent miss: a typo would quietly put a long file back among the unknown."""
    table: dict[str, float] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        seconds, _, path = line.partition(" ")
        try:
            table[path.strip()] = float(seconds)
        except ValueError:
            raise ValueError(f"file_seconds.txt line {number}: {line!r}") from None
        if not path.strip():
            raise ValueError(f"file_seconds.txt line {number}: no path in {line!r}")
    return table


def write_table(seconds: Mapping[str, float]) -> str:
    """The table's text, longest first."""
    rows = sorted(seconds.items(), key=lambda item: (-item[1], item[0]))
    return HEADER + "".join(f"{value:.1f} {path}\n" for path, value in rows)


def longest_first(files: Iterable[str], table: Mapping[str, float]) -> list[str]:
    """Unknown files first (in the order given), then known ones by seconds, longest first."""
    given = list(files)
    unknown = [f for f in given if f not in table]
    known = sorted((f for f in given if f in table), key=lambda f: -table[f])
    return unknown + known


def _scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadFileScheduling

    table = group_seconds(read_table(TABLE.read_text()) if TABLE.exists() else {})

    class LongestFileFirst(LoadFileScheduling):
        """xdist's file scheduling with its queue put longest first before the first hand-out,
        and the ``SAME_WORKER`` files in their heavy file's scope."""

        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _assign_work_unit(self, node: object) -> None:
            if not self.ordered:
                queue = self.workqueue
                order = longest_first(queue, table)
                self.workqueue = collections.OrderedDict((scope, queue[scope]) for scope in order)
                self.ordered = True
            super()._assign_work_unit(node)

    return LongestFileFirst(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Replace ``--dist loadfile``'s scheduler only; every other mode is xdist's own."""
    if config.getvalue("dist") != "loadfile":
        return None
    return _scheduler(config, log)


class Recorder:
    """Sums each file's report durations in the controlling process (or the only one)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.seconds: dict[str, float] = collections.defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid.split("::", 1)[0]] += report.duration

    def pytest_sessionfinish(self) -> None:
        self.out.write_text(write_table(self.seconds))


def add_option(parser: pytest.Parser) -> None:
    parser.addoption(
        "--file-seconds-out",
        metavar="PATH",
        help="write each test file's seconds to PATH (the format of tests/file_seconds.txt)",
    )


def register_recorder(config: pytest.Config) -> None:
    """The recorder, in the controller only (a worker's reports reach it there)."""
    out = config.getoption("--file-seconds-out", default=None)
    if out and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Recorder(Path(out)), "specmon-file-seconds")

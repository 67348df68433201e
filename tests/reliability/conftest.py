"""The reliability suite: every test here is marked ``reliability`` (``pytest -m reliability``
runs it alone). It runs in the normal test run with reduced counts; SPECMON_RELIABILITY_FULL=1
runs the full counts the promises in docs/reliability.md are stated with
(see tests/support/reliability.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests/support


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.reliability)

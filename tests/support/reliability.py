"""Counts for the reliability suite: full behind SPECMON_RELIABILITY_FULL=1, reduced else (the
reduced suite runs on every test run and must stay within its time budget)."""

from __future__ import annotations

import os

FULL = os.environ.get("SPECMON_RELIABILITY_FULL") == "1"


def count(full: int, reduced: int) -> int:
    """How many cycles a repeated test runs."""
    return full if FULL else reduced

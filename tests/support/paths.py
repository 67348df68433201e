"""Where things are, for tests at any depth under tests/: the repository and the tests folder
(its logs/, support/ and fake_pynvml/ fixtures)."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent

"""The suite's Hypothesis settings profiles: the same commit gives the same answer in CI.

``ci`` (the default) draws the same examples on every run (``derandomize``), keeps no example
database and prints the blob that reproduces a failure; ``random`` draws new examples each run,
five times as many, and is the one to run before a stop (docs/testing.md). The environment
variable SPECMON_HYPOTHESIS picks one; tests/conftest.py loads it before any test module is
imported (pytest_configure), so every test's own ``@settings(...)`` inherits what it does not set itself.
"""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import settings

PROFILE_VARIABLE = "SPECMON_HYPOTHESIS"
CI = "ci"
RANDOM = "random"
CI_EXAMPLES = 100
RANDOM_FACTOR = 5
# Where Hypothesis keeps a test's own settings (``@settings(...)`` on a ``@given`` test):
# tests/conftest.py scales the random profile's example count there, and
# tests/unit/meta/test_hypothesis_profiles.py fails if a Hypothesis release moves it.
SETTINGS_ATTRIBUTE = "_hypothesis_internal_use_settings"
"""How many times the examples of a test (its own ``max_examples`` too) the random profile draws."""

settings.register_profile(
    CI,
    derandomize=True,
    deadline=None,
    max_examples=CI_EXAMPLES,
    print_blob=True,
    database=None,
)
settings.register_profile(
    RANDOM,
    derandomize=False,
    deadline=None,
    max_examples=CI_EXAMPLES * RANDOM_FACTOR,
    print_blob=True,
    database=None,
)


_loaded = CI


def load(name: str) -> None:
    """Make profile ``name`` the default for every settings object made from now on."""
    global _loaded
    settings.load_profile(name)
    _loaded = name


def loaded() -> str:
    """The profile tests/conftest.py loaded for this run (``ci`` or ``random``)."""
    return _loaded


class ProfileError(ValueError):
    """SPECMON_HYPOTHESIS names no profile."""


def profile_name(environ: Mapping[str, str]) -> str:
    """The profile the environment asks for: ``ci`` when SPECMON_HYPOTHESIS is unset or empty."""
    name = environ.get(PROFILE_VARIABLE, "").strip() or CI
    if name not in (CI, RANDOM):
        raise ProfileError(
            f"{PROFILE_VARIABLE}={name!r} names no Hypothesis profile: use {CI!r} or {RANDOM!r}"
        )
    return name


def scaled(test_settings: settings, name: str) -> settings:
    """A test's own settings under profile ``name``: the random profile multiplies its
    ``max_examples`` (set by the test or inherited) by RANDOM_FACTOR."""
    if name != RANDOM:
        return test_settings
    return settings(test_settings, max_examples=test_settings.max_examples * RANDOM_FACTOR)

"""Suite-wide set-up: the Hypothesis profile (tests/support/hypothesis_profiles.py), loaded
before any test module is imported, so that every property test's own settings inherit it."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings
from support.hypothesis_profiles import (
    CI,
    SETTINGS_ATTRIBUTE,
    ProfileError,
    profile_name,
    scaled,
)

_profile = CI


def pytest_configure(config: pytest.Config) -> None:
    global _profile
    try:
        _profile = profile_name(os.environ)
    except ProfileError as error:
        raise pytest.UsageError(str(error)) from None
    settings.load_profile(_profile)


def pytest_report_header() -> str:
    return f"hypothesis profile: {_profile} (SPECMON_HYPOTHESIS; docs/testing.md)"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every property test under the profile: derandomized under ``ci`` (a test that set
    ``derandomize=False`` itself is a usage error), five times the examples under ``random``."""
    done: set[int] = set()  # a parametrized test's items share one function: scaled once
    for item in items:
        function = getattr(item, "obj", None)
        test_settings = getattr(function, SETTINGS_ATTRIBUTE, None)
        if not isinstance(test_settings, settings) or id(function) in done:
            continue
        done.add(id(function))
        if _profile == CI and not test_settings.derandomize:
            raise pytest.UsageError(
                f"{item.nodeid} sets derandomize=False: the ci Hypothesis profile runs every "
                "property test derandomized (docs/testing.md)"
            )
        setattr(function, SETTINGS_ATTRIBUTE, scaled(test_settings, _profile))

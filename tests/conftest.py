"""Suite-wide set-up: the Hypothesis profile (tests/support/hypothesis_profiles.py), loaded
before any test module is imported, so that every property test's own settings inherit it; and
the order test files reach the xdist workers in (tests/support/file_order.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings
from support import file_order

# Longest test file first under --dist loadfile (the README's command): tests/file_seconds.txt.
from support.file_order import pytest_xdist_make_scheduler  # noqa: F401
from support.hypothesis_profiles import (
    CI,
    PROFILE_VARIABLE,
    SETTINGS_ATTRIBUTE,
    ProfileError,
    load,
    loaded,
    profile_name,
    scaled,
)

# A fixture shared by the stop tests (the process groups a test starts, killed at its end).
from support.process_groups import started  # noqa: F401
from support.sshd import SshdServer, start_sshd, stop_sshd


@pytest.hookimpl(tryfirst=True)  # before Hypothesis's own: its options build on this profile
def pytest_configure(config: pytest.Config) -> None:
    """Load the profile SPECMON_HYPOTHESIS names (``--hypothesis-profile`` wins); record each
    file's seconds where ``--file-seconds-out`` asks."""
    chosen = config.getoption("--hypothesis-profile", default=None)
    try:
        name = profile_name({PROFILE_VARIABLE: chosen} if chosen else os.environ)
    except ProfileError as error:
        raise pytest.UsageError(str(error)) from None
    load(name)
    file_order.register_recorder(config)


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--file-seconds-out PATH``: the table tests/file_seconds.txt is rewritten from."""
    file_order.add_option(parser)


def pytest_report_header() -> str:
    return f"hypothesis profile: {loaded()} (SPECMON_HYPOTHESIS; docs/testing.md)"


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
        if loaded() == CI and not test_settings.derandomize:
            raise pytest.UsageError(
                f"{item.nodeid} sets derandomize=False: the ci Hypothesis profile runs every "
                "property test derandomized (docs/testing.md)"
            )
        setattr(function, SETTINGS_ATTRIBUTE, scaled(test_settings, loaded()))


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdServer]:
    """One test sshd per module (throw-away keys, on 127.0.0.1), its connections dropped and
    the daemon stopped when the module ends; a module that needs one per test defines its own."""
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    try:
        yield server
    finally:
        server.drop_connections()
        stop_sshd(server.proc)

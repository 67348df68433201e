"""The Hypothesis profiles (tests/support/hypothesis_profiles.py): ``ci``, the default, draws
the same examples on every run; ``random`` draws new ones, five times as many."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.hypothesis_profiles import (
    CI,
    CI_EXAMPLES,
    RANDOM,
    RANDOM_FACTOR,
    SETTINGS_ATTRIBUTE,
    ProfileError,
    loaded,
    profile_name,
    scaled,
)

PROFILE = loaded()  # SPECMON_HYPOTHESIS's, or --hypothesis-profile's


@pytest.mark.parametrize(
    ("environ", "name"),
    [
        ({}, CI),
        ({"SPECMON_HYPOTHESIS": ""}, CI),
        ({"SPECMON_HYPOTHESIS": "ci"}, CI),
        ({"SPECMON_HYPOTHESIS": " random "}, RANDOM),
    ],
)
def test_the_environment_picks_the_profile(environ: dict[str, str], name: str) -> None:
    assert profile_name(environ) == name


def test_an_unknown_profile_is_a_one_line_message() -> None:
    with pytest.raises(ProfileError) as error:
        profile_name({"SPECMON_HYPOTHESIS": "fast"})
    assert "\n" not in str(error.value) and "'fast'" in str(error.value)


def test_the_profiles_say_what_docs_testing_md_says() -> None:
    ci, randomized = settings.get_profile(CI), settings.get_profile(RANDOM)
    assert (ci.derandomize, ci.deadline, ci.database, ci.print_blob) == (True, None, None, True)
    assert ci.max_examples == CI_EXAMPLES
    assert (randomized.derandomize, randomized.database) == (False, None)
    assert randomized.max_examples == CI_EXAMPLES * RANDOM_FACTOR


def test_the_suite_runs_under_the_profile_the_environment_names() -> None:
    loaded = settings.default
    assert loaded.derandomize is (PROFILE == CI)
    assert loaded.max_examples == settings.get_profile(PROFILE).max_examples


def test_a_tests_own_settings_keep_the_profiles_derandomization() -> None:
    """What a property test's ``@settings(max_examples=...)`` does not set is the profile's."""
    own = settings(max_examples=7, deadline=None)
    assert own.derandomize is (PROFILE == CI) and own.database is None


def _drawn(profile: str) -> list[str]:
    """The examples a property test draws in one run under ``profile``."""
    drawn: list[str] = []

    @settings(settings.get_profile(profile), max_examples=30)
    @given(st.text(max_size=20))
    def record(text: str) -> None:
        drawn.append(text)

    record()
    return drawn


def test_the_ci_profile_draws_the_same_examples_on_every_run() -> None:
    first, second = _drawn(CI), _drawn(CI)
    assert len(first) == 30 and first == second


def test_the_random_profile_draws_new_examples_each_run() -> None:
    assert _drawn(RANDOM) != _drawn(RANDOM)  # 30 texts alike twice: never in practice


def test_the_random_profile_scales_a_tests_own_count() -> None:
    own = settings(max_examples=30)
    assert scaled(own, RANDOM).max_examples == 30 * RANDOM_FACTOR
    assert scaled(own, CI).max_examples == 30


@settings(max_examples=20, deadline=None)
@given(st.integers())
def test_collected_property_tests_run_under_the_profile(number: int) -> None:
    """This test's own settings, as tests/conftest.py left them at collection: 20 examples
    derandomized under ``ci``, 100 randomized under ``random``. Fails if a Hypothesis
    release moves where a test's settings are kept (the hook would then scale nothing)."""
    own = getattr(test_collected_property_tests_run_under_the_profile, SETTINGS_ATTRIBUTE)
    assert isinstance(own, settings)
    assert own.derandomize is (PROFILE == CI)
    assert own.max_examples == 20 * (RANDOM_FACTOR if PROFILE == RANDOM else 1)

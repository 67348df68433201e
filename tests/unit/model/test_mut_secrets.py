"""Secrets, at the edges the other tests leave open: a configured setting name, a password
echoed with no other secret word, a secret flag as the last word, settings masked only when
they hold a value (docs/testing.md, "Mutation testing", found these holes)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from specmon.model import secrets
from specmon.model.secrets import (
    is_secret_name,
    is_secret_setting,
    mask_secrets_in_text,
    redact_argv,
    redact_settings,
    set_configured_patterns,
)


@pytest.fixture
def configured() -> Iterator[None]:
    """``[security] secret_env = ["my_cred"]`` for one test, then what was there before."""
    before = secrets._configured
    set_configured_patterns(["my_cred"])
    yield
    secrets._configured = before


def test_a_configured_name_is_a_secret_setting_and_sweep_axis(configured: None) -> None:
    assert is_secret_setting("my_cred")
    assert is_secret_setting("MY_CRED")
    assert is_secret_name("--my_cred")
    assert is_secret_name("my_cred")
    assert not is_secret_setting("my_credit")


def test_a_password_echoed_alone_is_masked() -> None:
    assert mask_secrets_in_text("db_password='hunter2'") == "db_password='***'"
    assert mask_secrets_in_text("--db-passwd hunter2 --tp 8") == "--db-passwd *** --tp 8"


def test_a_secret_flag_as_the_last_word_keeps_no_value_to_mask() -> None:
    assert redact_argv(["python", "--api-key"]) == ("python", "--api-key")
    assert redact_argv(["--api-key", "--tp", "8"]) == ("--api-key", "--tp", "8")
    assert redact_argv(["--api-key", "s3", "--hf-token=x", "--hf-token="]) == (
        "--api-key",
        "***",
        "--hf-token=***",
        "--hf-token=",
    )


def test_reported_settings_mask_secret_values_but_not_empty_ones() -> None:
    assert redact_settings(
        {"api_key": "s3", "hf_token": None, "ssl_keyfile": "", "max_total_tokens": 5}
    ) == {"api_key": "***", "hf_token": None, "ssl_keyfile": "", "max_total_tokens": 5}
    assert redact_settings(["api_key"]) == ["api_key"]  # not an object: as it came


@pytest.fixture
def glob_configured() -> Iterator[None]:
    """``[security] secret_env = ["MY_CRED*", "*_PASSPHRASE"]``, then what was there before."""
    before = secrets._configured
    set_configured_patterns(["MY_CRED*", "*_PASSPHRASE"])
    yield
    set_configured_patterns(before)


def test_a_configured_secret_echoed_in_a_log_line_is_masked(glob_configured: None) -> None:
    """A name that holds none of the built-in words (key, token, secret, passw) but matches
    a configured pattern: the server echoing its environment or a command line must not show
    the value (the quick look for secret words once let such a line through unmasked)."""
    from specmon.session.log_follower import _shown

    line = b"[2026-02-10 09:19:10] env: MY_CRED_A=hunter2 DB_PASSPHRASE=swordfish TP=8"
    assert _shown(line) == "[2026-02-10 09:19:10] env: MY_CRED_A=*** DB_PASSPHRASE=*** TP=8"
    assert mask_secrets_in_text("MY_CRE=1 PASSPHRASE=2") == "MY_CRE=1 PASSPHRASE=2"  # no match
    assert mask_secrets_in_text("args: {'my_cred_b': 'x'}") == "args: {'my_cred_b': '***'}"
    assert mask_secrets_in_text("export my_cred_b=x") == "export my_cred_b=x"  # env is upper case


def test_a_pattern_without_letters_makes_every_line_be_looked_at() -> None:
    before = secrets._configured
    try:
        set_configured_patterns(["*"])
        assert mask_secrets_in_text("ANY=thing") == "ANY=***"
    finally:
        set_configured_patterns(before)

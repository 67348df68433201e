"""The launch spec at the edges the other tests leave open: switch words in any case, the
command name quoted only where a shell would misread it, long names cut in messages, the
simulator's settings' bounds, the relaunch form's messages and the secrets behind its ``***``
(docs/testing.md, "Mutation testing", found these holes)."""

from __future__ import annotations

import json

import pytest

from specmon.launch.spec import (
    LaunchSpec,
    LaunchSpecError,
    SecretValues,
    env_name_problem,
    parse_extra_env,
    restore_form_secrets,
    simulator_env_problem,
    validate_form,
)
from specmon.model.secrets import MASK

SPEC = LaunchSpec(backend="sglang", command=("python3",), args=("--enable-torch-compile",))


@pytest.mark.parametrize("word", ["OFF", " false ", "0", "No"])
def test_a_switch_set_false_in_any_spelling_is_removed(word: str) -> None:
    assert SPEC.with_flags({"enable-torch-compile": word}).args == ()


@pytest.mark.parametrize("word", [" On ", "TRUE", "1", "yes"])
def test_a_switch_set_true_in_any_spelling_stays_bare(word: str) -> None:
    assert SPEC.with_flags({"enable-torch-compile": word}).args == ("--enable-torch-compile",)


def test_a_switch_set_to_anything_else_is_refused_by_name() -> None:
    with pytest.raises(LaunchSpecError) as raised:
        SPEC.with_flags({"enable-torch-compile": "maybe"})
    assert raised.value.problems == [
        "--enable-torch-compile: is a switch; set it to true or false (got 'maybe')"
    ]


def test_the_command_name_is_quoted_only_where_a_shell_would_misread_it() -> None:
    def line(command: str) -> str:
        return LaunchSpec(backend="sglang", command=(command,)).shell_command()

    assert line("python3") == "python3"
    assert line("if") == "'if'"
    assert line("a=b") == "'a=b'"
    assert line("a b") == "'a b'"


def test_a_long_environment_name_is_cut_in_the_message() -> None:
    problem = env_name_problem("X" * 70)
    assert problem is not None
    assert problem.startswith(repr("X" * 57 + "...") + ": this environment variable may not")


def test_the_simulators_gpu_count_is_one_to_sixty_four() -> None:
    assert simulator_env_problem("SPECMON_SIM_GPUS", "64") is None
    assert simulator_env_problem("SPECMON_SIM_GPUS", "65") == (
        "'65' is not a whole number from 1 to 64"
    )
    assert simulator_env_problem("SPECMON_SIM_SHARDS", "65") is None


def test_a_spec_without_env_reads_as_none_and_an_empty_command_is_named() -> None:
    spec = LaunchSpec.from_json(json.dumps({"backend": "sglang", "command": ["python3"]}))
    assert spec == LaunchSpec(backend="sglang", command=("python3",))
    assert LaunchSpec(backend="sglang", command=()).problems() == [
        "command: is empty; name the server program to run"
    ]


# --- environment names, extra-env text and the simulator's settings (fourth round) ---------


def test_a_refused_environment_name_is_told_every_family_it_could_use() -> None:
    """The operator reads the message to find a name that is allowed: it lists them all."""
    assert env_name_problem("FOO") == (
        "'FOO': this environment variable may not be set by a launch; allowed are NCCL_*, "
        "CUDA_*, TORCH_*, PYTORCH_*, HF_*, SPECMON_*, SGLANG_*, VLLM_* and similar GPU-stack "
        "families, plus PYTHONPATH, LD_LIBRARY_PATH, TMPDIR (see docs/config.md)"
    )


def test_an_environment_name_of_sixty_characters_is_shown_whole_and_a_longer_one_cut() -> None:
    whole = env_name_problem("X" * 60)
    cut = env_name_problem("X" * 61)
    assert whole is not None and whole.startswith(repr("X" * 60) + ": ")
    assert cut is not None and cut.startswith(repr("X" * 57 + "...") + ": ")


def test_an_extra_env_value_may_itself_contain_an_equals_sign() -> None:
    """Only the first "=" separates name from value (NCCL_* values like "a=b" exist)."""
    assert parse_extra_env("NCCL_DEBUG_SUBSYS=a=b") == {"NCCL_DEBUG_SUBSYS": "a=b"}


def test_a_long_extra_env_word_without_equals_is_cut_to_forty_characters() -> None:
    with pytest.raises(LaunchSpecError) as raised:
        parse_extra_env("X" * 50)
    assert raised.value.problems == [f"extra-env: {'X' * 40!r} is not NAME=VALUE"]


@pytest.mark.parametrize("value", ["0.02", "1", "1000"])
def test_the_simulators_time_scale_accepts_positive_numbers_up_to_a_thousand(value: str) -> None:
    assert simulator_env_problem("SPECMON_SIM_TIME_SCALE", value) is None


@pytest.mark.parametrize("value", ["0", "-1", "1000.5", "fast"])
def test_the_simulators_time_scale_refuses_zero_negatives_too_large_and_words(value: str) -> None:
    assert simulator_env_problem("SPECMON_SIM_TIME_SCALE", value) == (
        f"{value!r} is not a positive number (1 = real time, 0.02 = 50x faster)"
    )


def test_a_long_simulator_value_is_cut_to_thirty_characters_in_the_message() -> None:
    scale = simulator_env_problem("SPECMON_SIM_TIME_SCALE", "9" * 40)
    gpus = simulator_env_problem("SPECMON_SIM_GPUS", "x" * 40)
    assert scale == f"{'9' * 30!r} is not a positive number (1 = real time, 0.02 = 50x faster)"
    assert gpus == f"{'x' * 30!r} is not a whole number from 1 to 64"


def test_the_simulators_shard_count_is_one_to_a_hundred_thousand() -> None:
    assert simulator_env_problem("SPECMON_SIM_SHARDS", "1") is None
    assert simulator_env_problem("SPECMON_SIM_SHARDS", "100000") is None
    for refused in ("0", "100001"):
        assert simulator_env_problem("SPECMON_SIM_SHARDS", refused) == (
            f"{refused!r} is not a whole number from 1 to 100000"
        )
    assert simulator_env_problem("SPECMON_SIM_GPUS", "1") is None


# --- the relaunch form's validation (fourth round) ------------------------------------------


def test_the_form_shows_a_bad_simulator_setting_under_extra_env() -> None:
    assert validate_form({"extra-env": "SPECMON_SIM_TIME_SCALE=0"}) == {
        "extra-env": (
            "SPECMON_SIM_TIME_SCALE: '0' is not a positive number (1 = real time, 0.02 = 50x faster)"
        )
    }


def test_the_form_says_a_refused_extra_env_name_whole() -> None:
    """The message keeps the name it refuses, even though the message itself holds ": "."""
    assert validate_form({"extra-env": "FOO=1"}) == {
        "extra-env": env_name_problem("FOO"),
    }


def test_a_variable_with_its_own_field_is_refused_in_extra_env() -> None:
    assert validate_form({"NCCL_PROTO": "LL", "extra-env": "NCCL_PROTO=Simple"}) == {
        "extra-env": "NCCL_PROTO has its own field; set it there"
    }


def test_a_flag_whose_field_is_left_out_of_the_form_may_be_given_in_extra_args() -> None:
    """A field missing from the values is not set, like a blank one: no "own field" clash."""
    assert validate_form({"extra-args": "--mem-fraction-static 0.8"}) == {}
    clash = validate_form({"mem-fraction-static": "0.7", "extra-args": "--mem-fraction-static 0.8"})
    assert clash["extra-args"] == "--mem-fraction-static has its own field; set it there"


# --- secrets behind the form's *** (fourth round) ---------------------------------------------


def test_secret_values_keep_only_real_secret_values() -> None:
    """Non-secret settings are not kept, and a *** (a record kept masked) is no value."""
    spec = LaunchSpec(
        backend="sglang",
        command=("python3",),
        args=("--tp", "8", "--api-key", "sk-1"),
        env=(("NCCL_DEBUG", "INFO"), ("HF_TOKEN", "hf-1")),
    )
    masked = LaunchSpec(
        backend="sglang",
        command=("python3",),
        args=("--tp", "8", "--api-key", MASK),
        env=(("NCCL_DEBUG", "INFO"), ("HF_TOKEN", MASK)),
    )
    assert SecretValues.of(spec) == SecretValues({"api-key": "sk-1"}, {"HF_TOKEN": "hf-1"})
    assert SecretValues.of(masked) == SecretValues({}, {})
    assert SecretValues.of(spec, masked) == SecretValues.of(spec)


def test_a_masked_secret_known_nowhere_is_refused_with_a_message() -> None:
    secrets = SecretValues()
    with pytest.raises(LaunchSpecError) as flag_raised:
        restore_form_secrets({"extra-args": "--api-key ***", "extra-env": ""}, secrets)
    with pytest.raises(LaunchSpecError) as env_raised:
        restore_form_secrets({"extra-args": "", "extra-env": "HF_TOKEN=***"}, secrets)
    assert flag_raised.value.problems == [
        "extra-args: --api-key shows *** and its value is not known here; type it again"
    ]
    assert env_raised.value.problems == [
        "extra-env: HF_TOKEN shows *** and its value is not known here; type it again"
    ]


def test_every_masked_secret_gets_its_value_back_after_plain_settings() -> None:
    secrets = SecretValues({"api-key": "sk-1"}, {"HF_TOKEN": "hf-1"})
    values = {"extra-args": "--tp 8 --api-key ***", "extra-env": "NCCL_DEBUG=INFO HF_TOKEN=***"}
    assert restore_form_secrets(values, secrets) == {
        "extra-args": "--tp 8 --api-key sk-1",
        "extra-env": "NCCL_DEBUG=INFO HF_TOKEN=hf-1",
    }


def test_a_form_that_leaves_out_one_text_field_still_gets_its_secrets_back() -> None:
    secrets = SecretValues({"api-key": "sk-1"}, {"HF_TOKEN": "hf-1"})
    assert restore_form_secrets({"extra-args": "--api-key ***"}, secrets) == {
        "extra-args": "--api-key sk-1",
        "extra-env": "",
    }
    assert restore_form_secrets({"extra-env": "HF_TOKEN=***"}, secrets) == {
        "extra-args": "",
        "extra-env": "HF_TOKEN=hf-1",
    }


def test_a_form_without_masked_secrets_is_given_back_as_typed() -> None:
    values = {"extra-args": '--served-model-name "a b"', "extra-env": "NCCL_DEBUG='INFO'"}
    assert restore_form_secrets(values, SecretValues({"api-key": "sk-1"})) == values


def test_a_secret_typed_anew_is_kept_not_replaced_by_the_old_one() -> None:
    secrets = SecretValues({}, {"HF_TOKEN": "hf-old"})
    values = {"extra-args": "", "extra-env": "HF_TOKEN=hf-new"}
    assert restore_form_secrets(values, secrets) == values

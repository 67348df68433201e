"""The launch spec at the edges the other tests leave open: switch words in any case, the
command name quoted only where a shell would misread it, long names cut in messages, the
simulator's GPU count bounds (docs/testing.md, "Mutation testing", found these holes)."""

from __future__ import annotations

import json

import pytest

from specmon.launch import LaunchSpec, LaunchSpecError, env_name_problem, simulator_env_problem

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

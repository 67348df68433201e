"""The launch spec: SGLang flag rules, overrides, the relaunch form, and that no value can
change the meaning of the rendered shell command (checked by running it under real shells)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specmon.backends import get_backend
from specmon.backends.nccl import NCCL_ALGO_VALUES, NCCL_P2P_LEVEL_VALUES, NCCL_PROTO_VALUES
from specmon.backends.sglang.flags import (
    EAGLE_TOPK_RANGE,
    NUM_DRAFT_TOKENS_RANGE,
    NUM_STEPS_RANGE,
    validate_sglang_launch,
)
from specmon.launch.config import Profile, SpeculativeSettings
from specmon.launch.spec import (
    ENV_NAME_PATTERN,
    LaunchSpec,
    SecretValues,
    form_overrides,
    form_values,
    split_overrides,
    validate_form,
)
from specmon.model.errors import LaunchSpecError

SHELLS = [shell for shell in ("/bin/sh", "/bin/bash", "/bin/dash") if Path(shell).exists()]

KIMI_ARGS = (
    "--model-path",
    "moonshotai/Kimi-K2.5",
    "--tp",
    "8",
    "--port",
    "8000",
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "/models/kimi-k2.5-eagle3",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
    "--mem-fraction-static",
    "0.88",
)


def kimi_spec(**env: str) -> LaunchSpec:
    return LaunchSpec(
        "sglang",
        ("python3", "-m", "sglang.launch_server"),
        KIMI_ARGS,
        {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1", **env},
    )


def problems_with(changes: dict, env: dict | None = None) -> list[str]:
    spec = kimi_spec().with_flags(changes)
    return validate_sglang_launch(spec.args, env or {})


# --- SGLang rules ---------------------------------------------------------------------------


def test_the_figures_launch_is_valid():
    kimi_spec(NCCL_PROTO="LL", NCCL_ALGO="Ring", NCCL_P2P_LEVEL="SYS").validate()


def test_topk_one_requires_draft_tokens_equal_steps_plus_one_and_says_sglang_would_adjust():
    problems = problems_with({"speculative-num-draft-tokens": "6"})
    assert len(problems) == 1
    assert problems[0].startswith("--speculative-num-draft-tokens: ")
    assert "= 4" in problems[0] and "silently" in problems[0]
    assert problems_with({"speculative-num-steps": "5", "speculative-num-draft-tokens": "6"}) == []


@pytest.mark.parametrize("steps", [1, 3, 31])
@pytest.mark.parametrize(("offset", "refused"), [(-1, True), (0, False), (1, True)])
def test_topk_one_draft_tokens_just_below_at_and_just_above_steps_plus_one(steps, offset, refused):
    """Too few draft tokens are refused as too many are: only steps + 1 passes with topk 1."""
    drafts = steps + 1 + offset
    problems = problems_with(
        {
            "speculative-num-steps": str(steps),
            "speculative-eagle-topk": "1",
            "speculative-num-draft-tokens": str(drafts),
        }
    )
    if not refused:
        assert problems == []
        return
    assert len(problems) == 1
    assert problems[0].startswith(
        f"--speculative-num-draft-tokens: must be --speculative-num-steps + 1 = {steps + 1} "
    )
    assert f"(got {drafts})" in problems[0]


@pytest.mark.parametrize(("drafts", "message"), [("3", True), ("4", False), ("5", True)])
def test_the_relaunch_form_shows_the_topk_rule_on_the_draft_tokens_field(drafts, message):
    """The form's own check (fast, headless): steps 3, topk 1."""
    values = {
        "speculative-num-steps": "3",
        "speculative-eagle-topk": "1",
        "speculative-num-draft-tokens": drafts,
    }
    messages = validate_form(values, base=kimi_spec())
    if message:
        assert list(messages) == ["speculative-num-draft-tokens"]
        assert "steps + 1 = 4" in messages["speculative-num-draft-tokens"]
    else:
        assert messages == {}


def test_topk_above_one_takes_fewer_draft_tokens_than_steps_plus_one():
    changes = {"speculative-eagle-topk": "2", "speculative-num-draft-tokens": "2"}
    assert problems_with(changes) == []


def test_topk_above_one_allows_any_draft_token_count():
    changes = {"speculative-eagle-topk": "4", "speculative-num-draft-tokens": "8"}
    assert problems_with(changes) == []


def test_without_num_steps_topk_and_draft_tokens_must_be_absent_too():
    problems = problems_with({"speculative-num-steps": None})
    assert any(
        p.startswith("--speculative-eagle-topk: needs --speculative-num-steps") for p in problems
    )
    only_algorithm = {
        "speculative-num-steps": None,
        "speculative-eagle-topk": None,
        "speculative-num-draft-tokens": None,
    }
    assert problems_with(only_algorithm) == []  # SGLang chooses all three itself


@pytest.mark.parametrize(
    ("changes", "subject", "fragment"),
    [
        ({"speculative-num-steps": "0"}, "--speculative-num-steps", "out of range"),
        ({"speculative-num-steps": "33"}, "--speculative-num-steps", "out of range"),
        ({"speculative-num-steps": "three"}, "--speculative-num-steps", "not a whole number"),
        ({"speculative-num-steps": "2.5"}, "--speculative-num-steps", "not a whole number"),
        ({"speculative-eagle-topk": "0"}, "--speculative-eagle-topk", "out of range"),
        ({"speculative-num-draft-tokens": "-4"}, "--speculative-num-draft-tokens", "range"),
        ({"speculative-algorithm": "eagle3"}, "--speculative-algorithm", "did you mean 'EAGLE3'"),
        ({"speculative-algorithm": "MEDUSA"}, "--speculative-algorithm", "EAGLE, EAGLE3"),
        ({"speculative-draft-model-path": None}, "--speculative-draft-model-path", "required"),
        ({"tp": "0"}, "--tp", "out of range"),
        ({"tp": "65"}, "--tp", "out of range"),
        ({"tp-size": "8"}, "--tp-size", "mean the same"),
        ({"mem-fraction-static": "1.2"}, "--mem-fraction-static", "at most 1"),
        ({"mem-fraction-static": "0"}, "--mem-fraction-static", "greater than 0"),
        ({"mem-fraction-static": "lots"}, "--mem-fraction-static", "not a fraction"),
        ({"port": "70000"}, "--port", "out of range"),
        ({"port": True}, "--port", "needs a value"),
    ],
)
def test_flag_rules_name_the_flag(changes, subject, fragment):
    problems = problems_with(changes)
    assert any(p.startswith(subject + ": ") and fragment in p for p in problems), problems


def test_speculative_flags_without_an_algorithm_are_reported():
    spec = kimi_spec().with_flags({"speculative-algorithm": None})
    problems = validate_sglang_launch(spec.args, {})
    assert (
        "--speculative-num-steps: has no effect without --speculative-algorithm; add it" in problems
    )


def test_flag_grammar_is_checked_but_unknown_flags_pass():
    assert validate_sglang_launch(["--cuda-graph-max-bs", "32", "--enable-metrics"], {}) == []
    problems = validate_sglang_launch(["-tp", "8", "--port", "1", "stray", "--bad name"], {})
    assert any("'-tp'" in p and "not a flag" in p for p in problems)
    assert any("'stray'" in p for p in problems)
    assert any("'--bad name'" in p for p in problems)
    assert validate_sglang_launch(["--port", "1", "--port", "2"], {}) == [
        "--port: given more than once; give it once"
    ]


@pytest.mark.parametrize(
    "value",
    ["LL", "LL128", "Simple", "LL,LL128", "^LL128", "^LL128;allreduce:LL128", "allgather:Simple"],
)
def test_nccl_proto_accepts_lists_negation_and_per_operation_sections(value):
    assert validate_sglang_launch([], {"NCCL_PROTO": value}) == []


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("LL256", "not a protocol"),
        ("ll", "did you mean 'LL'"),  # NCCL_PROTO names are case-sensitive
        ("LL,", "empty entry"),
        ("", "is empty"),
        ("allreduse:LL", "not an NCCL collective"),
        ("LL; touch x", "not a protocol"),
    ],
)
def test_nccl_proto_rejects_bad_values(value, fragment):
    problems = validate_sglang_launch([], {"NCCL_PROTO": value})
    assert len(problems) == 1 and problems[0].startswith("NCCL_PROTO: ") and fragment in problems[0]


def test_nccl_algo_is_case_insensitive_and_p2p_level_is_an_enumeration():
    for value in ("Ring", "ring", "Tree,Ring", "^NVLS", "nvlstree", "PAT", "CollnetDirect"):
        assert validate_sglang_launch([], {"NCCL_ALGO": value}) == [], value
    assert "did you mean 'Ring'" in validate_sglang_launch([], {"NCCL_ALGO": "Rign"})[0]
    for value in NCCL_P2P_LEVEL_VALUES:
        assert validate_sglang_launch([], {"NCCL_P2P_LEVEL": value}) == []
    problems = validate_sglang_launch([], {"NCCL_P2P_LEVEL": "3"})
    assert problems[0].startswith("NCCL_P2P_LEVEL: ") and "legacy" in problems[0]


def test_enumerations_for_select_widgets_match_the_reference():
    assert NCCL_PROTO_VALUES == ("LL", "LL128", "Simple")
    assert set(NCCL_ALGO_VALUES) == {
        "Ring",
        "Tree",
        "CollnetDirect",
        "CollnetChain",
        "NVLS",
        "NVLSTree",
        "PAT",
    }
    assert NCCL_P2P_LEVEL_VALUES == ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")


@pytest.mark.parametrize(
    "name",
    ["LD_PRELOAD", "LD_AUDIT", "PATH", "BASH_ENV", "ENV", "PS4", "IFS", "SHELLOPTS", "PYTHONHOME",
     "nccl_proto", "NCCL_", "HOME", "A=B", "NCCL_PROTO;x"],
)  # fmt: skip
def test_environment_names_outside_the_whitelist_are_refused(name):
    spec = kimi_spec().with_env({name: "x"})
    with pytest.raises(LaunchSpecError) as caught:
        spec.validate()
    assert any(problem.startswith(repr(name)) for problem in caught.value.problems)
    with pytest.raises(LaunchSpecError):
        spec.shell_command()


@pytest.mark.parametrize(
    "name",
    ["NCCL_PROTO", "CUDA_VISIBLE_DEVICES", "PYTHONPATH", "LD_LIBRARY_PATH", "SPECMON_PROBE_FILE",
     "TORCH_NCCL_ASYNC_ERROR_HANDLING", "HF_HOME"],
)  # fmt: skip
def test_whitelisted_environment_names(name):
    assert ENV_NAME_PATTERN.match(name)


def test_validate_lists_every_problem_at_once():
    spec = kimi_spec(NCCL_ALGO="Rign").with_flags({"tp": "0", "speculative-num-steps": "40"})
    with pytest.raises(LaunchSpecError) as caught:
        spec.validate()
    subjects = {problem.partition(": ")[0] for problem in caught.value.problems}
    assert {"--tp", "--speculative-num-steps", "NCCL_ALGO"} <= subjects


def test_unknown_backend_is_a_launch_spec_error_not_a_crash():
    """The spec holds its backend, looked up once when it is built: an unknown name is
    refused there, with the known ones named."""
    with pytest.raises(LaunchSpecError) as caught:
        LaunchSpec("tgi", ("tgi",), ())
    assert caught.value.problems == ["backend: unknown backend 'tgi'; known: sglang, vllm"]


def test_the_spec_holds_its_backend_and_writes_its_name():
    """Built once from the profile's name; every change keeps the very same backend, and
    JSON (the run record's meta) still carries the name."""
    spec = kimi_spec()
    assert spec.backend is get_backend("sglang")
    changed = spec.with_flags({"tp": "4"}).with_env({"NCCL_PROTO": "LL"}).shown()
    assert changed.backend is spec.backend
    assert json.loads(spec.to_json())["backend"] == "sglang"
    assert repr(spec).startswith("LaunchSpec(backend='sglang', command=(")


# --- changing a spec --------------------------------------------------------------------------


def test_with_flags_replaces_in_place_removes_and_adds_boolean_flags():
    spec = kimi_spec().with_flags(
        {"--speculative-num-steps": "2", "speculative-num-draft-tokens": "3", "port": None}
    )
    assert spec.flag("speculative-num-steps") == "2"
    assert (
        spec.args.index("--speculative-num-steps") == KIMI_ARGS.index("--speculative-num-steps") - 2
    )
    assert not spec.has_flag("port") and spec.flag("port") is None
    spec = spec.with_flags({"enable-metrics": True, "disable-custom-all-reduce": True})
    assert spec.args[-2:] == ("--enable-metrics", "--disable-custom-all-reduce")
    assert spec.flag("enable-metrics") == ""
    assert spec.with_flags({"enable-metrics": False}).has_flag("enable-metrics") is False
    spec.validate()


def test_values_that_look_like_options_stay_values():
    spec = kimi_spec().with_flags({"model-path": "--evil", "served-model-name": "-x", "seed": "-3"})
    assert "--model-path=--evil" in spec.args and "--served-model-name=-x" in spec.args
    assert spec.flag("model-path") == "--evil"
    assert spec.flag("served-model-name") == "-x" and spec.flag("seed") == "-3"
    assert spec.with_flags({"model-path": "/m"}).flag("model-path") == "/m"


def test_with_env_sets_and_removes_and_without_speculation_drops_every_speculative_flag():
    spec = kimi_spec().with_env(
        {"NCCL_PROTO": "LL", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": None}
    )
    assert spec.env_dict() == {"NCCL_PROTO": "LL"}
    baseline = kimi_spec().without_speculation()
    assert not any(token.startswith("--speculative") for token in baseline.args)
    assert baseline.key_flags()["algorithm"] == "off"
    baseline.validate()


def test_key_flags_for_the_console_header():
    spec = kimi_spec(NCCL_PROTO="LL", NCCL_ALGO="Ring", NCCL_P2P_LEVEL="SYS")
    assert spec.key_flags() == {
        "algorithm": "EAGLE3",
        "steps": "3",
        "topk": "1",
        "draft_tokens": "4",
        "tp": "8",
        "mem_fraction": "0.88",
        "NCCL_PROTO": "LL",
        "NCCL_ALGO": "Ring",
        "NCCL_P2P_LEVEL": "SYS",
    }


def test_json_round_trip_and_bad_json_is_a_clear_error():
    spec = kimi_spec(NCCL_PROTO="LL")
    assert LaunchSpec.from_json(spec.to_json()) == spec
    for bad in ("{", "[]", '{"backend": 1}', '{"backend": "sglang", "command": "python3"}',
                '{"backend": "sglang", "command": [], "env": {"A": 1}}'):  # fmt: skip
        with pytest.raises(LaunchSpecError, match="launch spec JSON"):
            LaunchSpec.from_json(bad)


def test_profile_overrides_reach_the_spec():
    profile = Profile(
        name="p",
        model_path="/m",
        draft_model_path="/d",
        tp=8,
        speculative=SpeculativeSettings("EAGLE3", 3, 1, 4),
        env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"},
    )
    spec = profile.to_launch_spec(
        {"speculative-num-steps": "2", "speculative-num-draft-tokens": "3"},
        {"NCCL_PROTO": "LL"},
        python="/opt/py/bin/python3",
    )
    assert spec.command == ("/opt/py/bin/python3", "-m", "sglang.launch_server")
    assert spec.key_flags()["steps"] == "2" and spec.env_dict()["NCCL_PROTO"] == "LL"
    spec.validate()


def test_split_overrides_sends_uppercase_names_to_the_environment():
    flags, env = split_overrides({"speculative-num-steps": "2", "--tp": "4", "NCCL_PROTO": "LL"})
    assert flags == {"speculative-num-steps": "2", "tp": "4"}
    assert env == {"NCCL_PROTO": "LL"}


# --- the relaunch form --------------------------------------------------------------------------


def form(**values: str) -> dict[str, str]:
    base = form_values(kimi_spec(NCCL_PROTO="LL"), ["--trust-remote-code"])
    base.update({key.replace("_", "-") if key.islower() else key: v for key, v in values.items()})
    return base


def test_form_prefilled_from_a_spec_is_valid():
    values = form()
    assert values["speculative-num-steps"] == "3" and values["NCCL_PROTO"] == "LL"
    assert values["extra-args"] == "--trust-remote-code"
    assert values["extra-env"] == "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
    assert validate_form(values) == {}


@pytest.mark.parametrize(
    ("values", "field", "fragment"),
    [
        ({"speculative_num_steps": "x"}, "speculative-num-steps", "not a whole number"),
        ({"speculative_num_draft_tokens": "9"}, "speculative-num-draft-tokens", "= 4"),
        ({"speculative_num_steps": ""}, "speculative-eagle-topk", "needs --speculative-num-steps"),
        ({"mem_fraction_static": "1.5"}, "mem-fraction-static", "at most 1"),
        ({"NCCL_PROTO": "LL129"}, "NCCL_PROTO", "not a protocol"),
        ({"NCCL_ALGO": "Rong"}, "NCCL_ALGO", "did you mean 'Ring'"),
        ({"NCCL_P2P_LEVEL": "PCI"}, "NCCL_P2P_LEVEL", "LOC, NVL"),
        ({"extra_args": "--served-model-name 'kimi"}, "extra-args", "unbalanced quotes"),
        ({"extra_args": "--cuda-graph-max-bs 16 oops"}, "extra-args", "'oops'"),
        ({"extra_args": "--speculative-num-steps 2"}, "extra-args", "its own field"),
        ({"extra_env": "LD_PRELOAD=/x.so"}, "extra-env", "may not be set"),
        ({"extra_env": "NCCL_DEBUG"}, "extra-env", "not NAME=VALUE"),
        ({"extra_env": "NCCL_MAX_NCHANNELS=zero"}, "extra-env", "positive whole number"),
        ({"NCCL_ALGO": "Ring\x00"}, "NCCL_ALGO", "NUL"),
        ({"extra_args": "--served-model-name a\x00b"}, "extra-args", "NUL"),
    ],
)
def test_form_validation_reports_by_field(values, field, fragment):
    messages = validate_form(form(**values))
    assert field in messages and fragment in messages[field], messages


def test_form_overrides_build_the_edited_launch():
    base = kimi_spec(NCCL_PROTO="LL")
    values = form(
        speculative_num_steps="5",
        speculative_num_draft_tokens="6",
        NCCL_PROTO="",
        NCCL_ALGO="Ring",
        extra_args="--enable-metrics --cuda-graph-max-bs 16",
        extra_env="NCCL_DEBUG=INFO",
    )
    assert validate_form(values) == {}
    flags, env = form_overrides(values, base, ["--trust-remote-code"])
    edited = base.with_flags({"trust-remote-code": True}).with_flags(flags).with_env(env)
    assert edited.key_flags()["steps"] == "5" and edited.flag("cuda-graph-max-bs") == "16"
    assert edited.has_flag("enable-metrics") and not edited.has_flag("trust-remote-code")
    assert edited.env_dict() == {"NCCL_ALGO": "Ring", "NCCL_DEBUG": "INFO"}
    edited.validate()


# --- the rendered command cannot be subverted -------------------------------------------------

HOSTILE = [
    "$(touch canary)",
    "`touch canary`",
    "; touch canary",
    "' ; touch canary ; '",
    '" ; touch canary ; "',
    "\ntouch canary\n",
    "&& touch canary",
    "| touch canary",
    "> canary",
    "$(printf x > canary)",
    "$(: > canary)",
    "${IFS}touch${IFS}canary",
    "$HOME",
    "*",
    "~",
    "\\",
    "'",
    '"',
    "!",
    "#",
    "-",
    "--",
    "--x=1",
    "a=b",
    "\t",
    "\r",
    "{a,b}",
    "é",
    "",
]
SAFE_CHARACTERS = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
hostile_text = st.one_of(
    st.text(SAFE_CHARACTERS, max_size=24),
    st.sampled_from(HOSTILE),
    st.lists(
        st.one_of(st.sampled_from(HOSTILE), st.text(SAFE_CHARACTERS, max_size=6)), max_size=4
    ).map("".join),
)
ENV_NAMES = ("SGLANG_TEST_VALUE", "NCCL_DEBUG_FILE", "SPECMON_SIM_FAULT")
ECHO_ARGV_AND_ENV = (
    "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], "
    f"'env': {{name: os.environ.get(name) for name in {ENV_NAMES!r}}}}}))"
)


def hostile_spec(model_path, draft_path, extra_args, served_name, env_values) -> LaunchSpec:
    profile = Profile(
        name="hostile",
        model_path=model_path,
        draft_model_path=draft_path,
        speculative=SpeculativeSettings("EAGLE3", 3, 1, 4),
        extra_args=tuple(extra_args),
        env=dict(zip(ENV_NAMES, env_values, strict=False)),
    )
    return profile.to_launch_spec({"served-model-name": served_name})


spec_fields = dict(
    model_path=hostile_text,
    draft_path=hostile_text,
    extra_args=st.lists(hostile_text, max_size=4),
    served_name=hostile_text,
    env_values=st.lists(hostile_text, min_size=0, max_size=3),
)


@settings(max_examples=400, deadline=None)
@given(**spec_fields)
def test_shell_words_round_trip_exactly(
    model_path, draft_path, extra_args, served_name, env_values
):
    spec = hostile_spec(model_path, draft_path, extra_args, served_name, env_values)
    expected = [f"{name}={value}" for name, value in spec.env] + list(spec.argv)
    assert shlex.split(spec.shell_command()) == expected
    assert spec.flag("model-path") == model_path
    assert spec.flag("speculative-draft-model-path") == draft_path
    assert spec.flag("served-model-name") == served_name


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(shell=st.sampled_from(SHELLS), **spec_fields)
def test_running_the_command_delivers_every_value_unchanged_and_runs_nothing_else(
    shell, model_path, draft_path, extra_args, served_name, env_values
):
    spec = hostile_spec(model_path, draft_path, extra_args, served_name, env_values)
    spec = spec.with_command((sys.executable, "-I", "-S", "-c", ECHO_ARGV_AND_ENV))
    with tempfile.TemporaryDirectory() as scratch:
        result = subprocess.run(
            [shell, "-c", spec.shell_command()],
            cwd=scratch,
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": "/usr/bin:/bin", "HOME": scratch, "LC_ALL": "C.UTF-8"},
        )
        assert result.returncode == 0, result.stderr
        assert list(Path(scratch).iterdir()) == []  # no canary, no redirect target
    seen = json.loads(result.stdout)
    assert seen["argv"] == list(spec.args)
    for name in ENV_NAMES:
        assert seen["env"][name] == spec.env_dict().get(name)


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(
    "word",
    ["x=1", "if", "time", "!", "{", "$(: > canary)", "`: > canary`", "; : > canary", "> canary"],
)
def test_a_hostile_command_name_is_only_ever_a_command_name(shell, word, tmp_path):
    spec = LaunchSpec("sglang", (word, "--x"), (), {"NCCL_DEBUG": "INFO"})
    empty_path = tmp_path / "empty-path"
    empty_path.mkdir()
    result = subprocess.run(
        [shell, "-c", spec.shell_command()],
        cwd=tmp_path,
        capture_output=True,
        timeout=30,
        env={"PATH": str(empty_path)},
    )
    assert result.returncode == 127  # "command not found": the word was looked up, not parsed
    assert [p.name for p in tmp_path.iterdir()] == ["empty-path"]


@settings(max_examples=100, deadline=None)
@given(before=st.text(max_size=8), after=st.text(max_size=8), where=st.sampled_from(["arg", "env"]))
def test_nul_and_unpaired_surrogates_are_refused_not_rendered(before, after, where):
    for bad in ("\x00", "\ud800"):
        value = before + bad + after
        spec = kimi_spec()
        spec = (
            spec.with_flags({"model-path": value})
            if where == "arg"
            else spec.with_env({"NCCL_DEBUG": value})
        )
        with pytest.raises(LaunchSpecError):
            spec.shell_command()
        with pytest.raises(LaunchSpecError):
            spec.validate()


FORM_FIELD_NAMES = (
    "speculative-num-steps",
    "speculative-eagle-topk",
    "speculative-num-draft-tokens",
    "mem-fraction-static",
    "NCCL_PROTO",
    "NCCL_ALGO",
    "NCCL_P2P_LEVEL",
    "extra-args",
    "extra-env",
)


def one_line(text: str) -> bool:
    return bool(text.strip()) and "\n" not in text and "\r" not in text


@settings(max_examples=300, deadline=None)
@given(
    values=st.fixed_dictionaries(
        {},
        optional={
            name: st.one_of(hostile_text, st.text(max_size=12), st.sampled_from(["1", "4", "LL"]))
            for name in FORM_FIELD_NAMES
        },
    )
)
def test_any_form_input_gives_one_line_messages_never_an_exception(values):
    """Whatever is typed: the form's messages are one line each, and a form whose free text
    cannot be read is one the form already flagged (submitting it is refused with one-line
    problems, never another exception)."""
    messages = validate_form(values)
    assert all(isinstance(message, str) and one_line(message) for message in messages.values())
    base = kimi_spec()
    try:
        flags, env = form_overrides(values, base)
    except LaunchSpecError as error:
        assert messages, f"submitting raised {error.problems} but the form showed no message"
        assert error.problems and all(one_line(problem) for problem in error.problems)
    else:
        base.with_flags(flags).with_env(env).problems()


@st.composite
def valid_forms(draw: st.DrawFn) -> dict[str, str]:
    """Relaunch-form values that obey every rule: the speculative three all given (topk 1:
    draft tokens = steps + 1) or all blank, values in range, known NCCL words, real SGLang
    flags in the extra arguments and allowed names in the extra environment."""
    values: dict[str, str] = {}
    if draw(st.booleans()):
        steps = draw(st.integers(*NUM_STEPS_RANGE))
        topk = draw(st.integers(*EAGLE_TOPK_RANGE))
        drafts = steps + 1 if topk == 1 else draw(st.integers(*NUM_DRAFT_TOKENS_RANGE))
        values["speculative-num-steps"] = str(steps)
        values["speculative-eagle-topk"] = str(topk)
        values["speculative-num-draft-tokens"] = str(drafts)
    else:
        for name in FORM_FIELD_NAMES[:3]:
            if draw(st.booleans()):
                values[name] = draw(st.sampled_from(["", " "]))  # blank: not set
    fraction = draw(st.one_of(st.just(""), st.integers(1, 100).map(lambda n: f"{n / 100:.2f}")))
    values["mem-fraction-static"] = fraction
    for name, words in (
        ("NCCL_PROTO", NCCL_PROTO_VALUES),
        ("NCCL_ALGO", NCCL_ALGO_VALUES),
        ("NCCL_P2P_LEVEL", NCCL_P2P_LEVEL_VALUES),
    ):
        values[name] = draw(st.sampled_from(("", *words)))
    extra = draw(
        st.lists(
            st.sampled_from(
                [
                    "--context-length 8192",
                    "--enable-metrics",
                    "--chunked-prefill-size 4096",
                    "--max-running-requests 64",
                    "--disable-radix-cache",
                    "--log-level info",
                ]
            ),
            unique=True,
            max_size=3,
        )
    )
    values["extra-args"] = " ".join(extra)
    env_names = st.sampled_from(
        ["SPECMON_SIM_FAULT", "NCCL_DEBUG_FILE", "TORCH_SHOW_CPP_STACKTRACES"]
    )
    env_values = st.text("abcxyz019_./-", min_size=1, max_size=12)
    extra_env = draw(st.dictionaries(env_names, env_values, max_size=3))
    values["extra-env"] = " ".join(
        f"{name}={shlex.quote(value)}" for name, value in extra_env.items()
    )
    return values


@settings(max_examples=200, deadline=None)
@given(values=valid_forms())
def test_valid_forms_always_build_a_launch_that_validates(values):
    """A form that obeys every rule shows no message, and what it submits is a launch with
    no problems, carrying what was typed."""
    assert validate_form(values) == {}
    base = kimi_spec()
    flags, env = form_overrides(values, base)
    edited = base.with_flags(flags).with_env(env)
    assert edited.problems() == []
    edited.validate()
    argv = shlex.split(edited.shell_command())
    for name in FORM_FIELD_NAMES[:4]:
        typed = values.get(name, "").strip()
        if typed:
            assert argv[argv.index(f"--{name}") + 1] == typed
        else:
            assert f"--{name}" not in argv
    for name in ("NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL"):
        assert edited.env_dict().get(name) == (values[name] or None)
    for word in values["extra-args"].split():
        assert word in argv


# --- edges the fourth mutation round found open (docs/testing.md, "Mutation testing") -----------


def test_removing_a_flag_takes_only_its_own_tokens():
    """A bare flag and a ``--name=value`` flag are one token each; a spaced value is two:
    removing or replacing one never eats the flag after it."""
    spec = LaunchSpec(
        "sglang",
        ("python3",),
        ("--enable-metrics", "--tp", "8", "--served-model-name=-x", "--port", "8000"),
    )
    assert spec.with_flags({"enable-metrics": None}).args == (
        "--tp", "8", "--served-model-name=-x", "--port", "8000"
    )  # fmt: skip
    assert spec.with_flags({"served-model-name": None}).args == (
        "--enable-metrics", "--tp", "8", "--port", "8000"
    )  # fmt: skip
    assert spec.with_flags({"served-model-name": "kimi"}).args == (
        "--enable-metrics", "--tp", "8", "--served-model-name", "kimi", "--port", "8000"
    )  # fmt: skip
    assert spec.with_flags({"tp": None}).args == (
        "--enable-metrics", "--served-model-name=-x", "--port", "8000"
    )  # fmt: skip


def test_flags_are_found_with_or_without_their_dashes():
    spec = kimi_spec()
    assert spec.has_flag("--port") and spec.has_flag("port") and spec.has_flag("-port")
    assert not spec.has_flag("--enable-metrics")
    assert spec.flag("--port") == "8000" == spec.flag("port")


def test_a_flag_name_starting_with_a_capital_is_kept_whole():
    """FLAG_NAME takes capitals: ``--Xfoo`` is its own flag, never read, set or split as
    ``--foo`` (no character but the leading dashes is taken off a name)."""
    spec = LaunchSpec("sglang", ("python3",), ("--foo", "1"))
    assert not spec.has_flag("Xfoo") and spec.flag("--Xfoo") is None
    changed = spec.with_flags({"--Xfoo": "2"})
    assert changed.args == ("--foo", "1", "--Xfoo", "2")
    assert changed.flag("--Xfoo") == "2" and changed.has_flag("Xfoo")
    assert split_overrides({"--Xfoo": "2"}) == ({"Xfoo": "2"}, {})


def test_a_spec_reads_its_flags_by_the_grammar_beyond_the_backends_settings():
    """A flag that is no named setting of the backend reads by the grammar alone: a given
    flag has its value, a bare one '', a missing one None (not ''). A spec JSON of a
    backend this build does not have (another build's record) is refused, not guessed."""
    spec = LaunchSpec("sglang", ("python3",), ("--port", "8000", "--trust-remote-code"))
    assert spec.flag("port") == "8000"
    assert spec.flag("trust-remote-code") == ""
    assert spec.flag("tp") is None
    with pytest.raises(LaunchSpecError, match="backend: unknown backend 'tgi'"):
        LaunchSpec.from_json('{"backend": "tgi", "command": ["tgi"]}')


def test_with_command_swaps_only_the_program():
    spec = kimi_spec(NCCL_PROTO="LL")
    swapped = spec.with_command(["/opt/py/bin/python3", "-m", "sglang.launch_server"])
    assert swapped == LaunchSpec(
        "sglang",
        ("/opt/py/bin/python3", "-m", "sglang.launch_server"),
        KIMI_ARGS,
        {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1", "NCCL_PROTO": "LL"},
    )
    assert swapped.shell_command().startswith(
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 NCCL_PROTO=LL /opt/py/bin/python3 -m "
    )


def test_unusable_text_is_named_by_where_it_stands():
    """NUL in a command word, an argument or a variable: each problem says which one (the
    word's position from 1, the argument's first 40 characters, the variable's name)."""
    spec = LaunchSpec(
        "sglang",
        ("python3", "-m\x00x"),
        ("--model-path", "a" * 50 + "\x00"),
        {"NCCL_DEBUG": "IN\x00FO"},
    )
    nul = "contains a NUL character, which no command line can carry"
    expected = [
        f"command word 2: {nul}",
        f"argument {'a' * 40!r}: {nul}",
        f"NCCL_DEBUG: {nul}",
    ]
    assert spec.problems() == expected
    with pytest.raises(LaunchSpecError) as caught:
        spec.shell_command()
    assert caught.value.problems == expected


def test_an_argument_with_a_nul_gets_that_one_problem_only():
    """The backend's rules are not run on an argument that cannot travel: its NUL is the one
    problem, not also the value's shape (``--tp 8\\0`` is not 'not a whole number')."""
    spec = LaunchSpec("sglang", ("python3",), ("--model-path", "/m", "--tp", "8\x00"))
    assert spec.problems() == [
        "argument '8\\x00': contains a NUL character, which no command line can carry"
    ]
    assert LaunchSpec("sglang", ("python3",), ("--model-path", "/m", "--tp", "8")).problems() == []


def test_a_variable_set_twice_and_a_bad_simulator_setting_are_problems():
    spec = LaunchSpec(
        "sglang",
        ("python3",),
        ("--model-path", "/m"),
        (("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG", "WARN"), ("SPECMON_SIM_TIME_SCALE", "fast")),
    )
    assert spec.problems() == [
        "NCCL_DEBUG: set twice",
        "SPECMON_SIM_TIME_SCALE: 'fast' is not a positive number (1 = real time, 0.02 = 50x "
        "faster)",
    ]
    fine = LaunchSpec("sglang", ("python3",), ("--model-path", "/m"), {"NCCL_DEBUG": "INFO"})
    assert fine.problems() == []


def test_shown_masks_secrets_and_keeps_everything_else():
    """The recorded spec: secret values as ***, the backend, command, other flags and
    variables as they were; a secret flag alone (no secret variable) is masked too."""
    spec = LaunchSpec(
        "sglang",
        ("python3",),
        ("--model-path", "/m", "--api-key", "k"),
        {"HF_TOKEN": "t", "NCCL_DEBUG": "INFO"},
    )
    assert spec.shown() == LaunchSpec(
        "sglang",
        ("python3",),
        ("--model-path", "/m", "--api-key", "***"),
        {"HF_TOKEN": "***", "NCCL_DEBUG": "INFO"},
    )
    flag_only = LaunchSpec("sglang", ("python3",), ("--api-key", "k"), {"NCCL_DEBUG": "INFO"})
    assert flag_only.shown().args == ("--api-key", "***")
    nothing_secret = kimi_spec(NCCL_DEBUG="INFO", HF_TOKEN="")
    assert nothing_secret.shown() == nothing_secret


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[]", "launch spec JSON: expected an object"),
        ('{"backend": 1}', "launch spec JSON: 'backend' must be a string"),
        ('{"backend": "sglang"}', "launch spec JSON: 'command' must be a list of strings"),
        (
            '{"backend": "sglang", "command": ["p"], "args": [1]}',
            "launch spec JSON: 'args' must be a list of strings",
        ),
        (
            '{"backend": "sglang", "command": ["p"], "env": {"A": 1}}',
            "launch spec JSON: 'env' must map names to strings",
        ),
    ],
)
def test_a_badly_shaped_spec_json_names_the_key_at_fault(text, problem):
    with pytest.raises(LaunchSpecError) as caught:
        LaunchSpec.from_json(text)
    assert caught.value.problems == [problem]


def test_long_bad_names_and_values_are_cut_in_the_message():
    """A refused flag name is shown to 60 characters, a refused switch value to 40, so the
    one-line message stays short."""
    with pytest.raises(LaunchSpecError) as caught:
        kimi_spec().with_flags({"bad name": "1"})
    assert caught.value.problems == ["'bad name': not a valid flag name"]
    long_name = "--" + "b" * 70 + " x"
    with pytest.raises(LaunchSpecError) as caught:
        kimi_spec().with_flags({long_name: "1"})
    assert caught.value.problems == [f"{long_name[:60]!r}: not a valid flag name"]
    spec = LaunchSpec("sglang", ("python3",), ("--enable-torch-compile",))
    with pytest.raises(LaunchSpecError) as caught:
        spec.with_flags({"enable-torch-compile": "y" * 50})
    assert caught.value.problems == [
        f"--enable-torch-compile: is a switch; set it to true or false (got {'y' * 40!r})"
    ]


@pytest.mark.parametrize(
    ("name", "flags", "env"),
    [
        ("NCCL_PROTO", {}, {"NCCL_PROTO": "v"}),
        ("Nccl_proto", {}, {"Nccl_proto": "v"}),  # mis-cased: refused as a variable later
        ("Xla_flags", {}, {"Xla_flags": "v"}),
        ("tp", {"tp": "v"}, {}),
        ("-O", {"O": "v"}, {}),  # dashes make it a flag (vLLM's -O), capital or not
        ("--Tp", {"Tp": "v"}, {}),
    ],
)
def test_split_overrides_reads_a_capital_first_letter_without_dashes_as_a_variable(
    name, flags, env
):
    assert split_overrides({name: "v"}) == (flags, env)


def test_form_values_leave_a_field_blank_when_the_spec_lacks_its_flag():
    values = form_values(LaunchSpec("sglang", ("python3",), ("--model-path", "/m")))
    assert values == dict.fromkeys(FORM_FIELD_NAMES, "")


def test_a_field_left_out_of_the_submitted_form_is_blank():
    """Blank and absent read alike: each field's flag or variable is removed, none set."""
    flags, env = form_overrides({}, kimi_spec(NCCL_PROTO="LL"))
    assert {name: flags[name] for name in FORM_FIELD_NAMES[:4]} == dict.fromkeys(
        FORM_FIELD_NAMES[:4]
    )
    assert env == dict.fromkeys(
        ["NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"]
    )


def test_form_overrides_take_a_masked_secret_from_the_secrets_given():
    """The relaunch screen passes the secrets of the run it edits (its record keeps them
    masked): a *** left in the form gets that value back, not the base spec's."""
    base = kimi_spec(HF_TOKEN="***")
    values = {**form_values(base), "extra-env": "HF_TOKEN=***"}
    _, env = form_overrides(values, base, secrets=SecretValues(env={"HF_TOKEN": "real"}))
    assert env["HF_TOKEN"] == "real"


def test_a_problem_with_an_extra_flag_is_shown_on_the_extra_args_field():
    """Even when the unknown flag's name is a field's with a capital in front."""
    values = {**form(), "extra-args": "--Xmem-fraction-static 0.5"}
    assert validate_form(values) == {
        "extra-args": "is not an SGLang flag; did you mean --mem-fraction-static?"
    }


def test_a_set_by_an_argparse_prefix_replaces_the_flag_it_stands_for_in_sglang() -> None:
    """`specmon launch --set mem-frac=0.8` on a profile with `--mem-fraction-static 0.88`:
    SGLang reads the prefix as the full flag, so the override replaces it in place (one
    flag, no "given more than once"); a name no flag starts with is kept for the checks to
    refuse."""
    spec = LaunchSpec(
        "sglang", ("python3",), ("--model-path", "/m", "--mem-fraction-static", "0.88", "--tp", "8")
    )
    changed = spec.with_flags({"mem-frac": "0.8"})
    assert changed.args == ("--model-path", "/m", "--mem-fraction-static", "0.8", "--tp", "8")
    assert changed.problems() == []
    assert spec.with_flags({"--speculative-num-st": "3"}).flag("speculative-num-steps") == "3"
    assert spec.with_flags({"mem-frac": None}).args == ("--model-path", "/m", "--tp", "8")
    unknown = spec.with_flags({"no-such-flag": "1"})
    assert unknown.args[-2:] == ("--no-such-flag", "1")
    assert unknown.problems()

"""The backend seam: profile inference, the flag schema (switches, unknown flags), the usage
error shown as a root cause, and what the registry refuses."""

from __future__ import annotations

import pytest
from support.paths import REPO

from specmon.backends import DEFAULT_BACKEND, backend_for_command, get_backend
from specmon.launch.config import Profile, parse_config_text
from specmon.launch.spec import split_overrides
from specmon.model.errors import ConfigError, LaunchSpecError, UsageError
from specmon.session.failure import usage_error_line


def test_a_profile_backend_is_inferred_from_its_command():
    server = get_backend(DEFAULT_BACKEND)
    assert Profile("p", "/m").backend == DEFAULT_BACKEND
    assert Profile("p", "/m").command == server.default_command
    assert backend_for_command(["python3", "-m", "specmon.sim"]) == DEFAULT_BACKEND
    assert backend_for_command(["python3", "-m", server.default_command[-1]]) == DEFAULT_BACKEND
    assert backend_for_command(["/usr/bin/env", "true"]) is None


def test_a_vllm_command_now_resolves_to_the_registered_backend():
    assert backend_for_command(["vllm", "serve", "/m"]) == "vllm"
    text = '[profiles.v]\nmodel_path = "/m"\ncommand = ["python3", "-m", "vllm.entrypoints.x"]\n'
    assert parse_config_text(text, None).profiles["v"].backend == "vllm"


def test_a_known_server_without_a_backend_is_refused_clearly(monkeypatch):
    import re

    from specmon import backends

    monkeypatch.setitem(backends.KNOWN_SERVER_COMMANDS, "tgi", re.compile(r"text-generation-"))
    with pytest.raises(UsageError, match="backend tgi is not installed in this specmon"):
        backend_for_command(["text-generation-launcher", "--model-id", "/m"])
    text = '[profiles.v]\nmodel_path = "/m"\ncommand = ["text-generation-launcher"]\n'
    with pytest.raises(ConfigError, match="not installed"):
        parse_config_text(text, None)


def test_set_true_renders_a_switch_bare_and_false_removes_it():
    spec = Profile("p", "/m").to_launch_spec()
    flags, _ = split_overrides({"enable-metrics": "true"})
    on = spec.with_flags(flags)
    assert on.args[-1] == "--enable-metrics" and on.problems() == []
    assert "true" not in on.args
    off = on.with_flags({"enable-metrics": "false"})
    assert "--enable-metrics" not in off.args
    with pytest.raises(LaunchSpecError, match="switch; set it to true or false"):
        spec.with_flags({"enable-metrics": "maybe"})


def test_a_switch_given_a_value_and_unknown_flags_are_refused_with_near_names():
    server = get_backend(DEFAULT_BACKEND)
    problems = server.validate_launch(["--enable-metrics", "true", "--enable-metric"], {})
    assert any(p.startswith("--enable-metrics: is a switch") for p in problems), problems
    assert any(
        p.startswith("--enable-metric: is not an SGLang flag; did you mean --enable-metrics")
        for p in problems
    ), problems
    # argparse's unambiguous prefixes are what the server accepts, so specmon does too
    assert server.validate_launch(["--tp", "8", "--trust-remote-code"], {}) == []


def test_a_usage_error_line_is_found_among_the_last_lines():
    lines = [
        "usage: launch_server.py [-h] --model-path MODEL_PATH",
        "launch_server.py: error: unrecognized arguments: true",
    ]
    assert usage_error_line(lines) == "launch_server.py: error: unrecognized arguments: true"
    assert usage_error_line(["[2026] INFO all good"]) is None


def test_a_run_record_names_its_backend_and_old_records_get_the_default():
    from specmon.state.run_status import RunStatus

    recorded = {"run_id": "r1", "alive": True, "meta": {"backend": "other", "owner": "me"}}
    assert RunStatus.from_helper(recorded).backend == "other"
    assert RunStatus.from_helper({"run_id": "r0"}).backend == DEFAULT_BACKEND
    assert RunStatus.from_helper(recorded).to_dict()["backend"] == "other"


def test_the_shipped_config_loads_under_the_flag_schema():

    from specmon.launch.config import load_config

    config = load_config(REPO / "specmon.toml", environ={})
    for profile in config.profiles.values():
        assert profile.to_launch_spec().problems() == [], profile.name

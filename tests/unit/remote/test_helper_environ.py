"""The helper's `environ` (what `specmon adopt` reads of a server's environment): only the names
the console allows leave the host, and a secret's value never does ("***" on the host)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specmon.launch.spec import allowed_env_rules, env_name_problem
from specmon.model.secrets import BUILTIN_SECRET_ENV, is_secret_env
from specmon.remote import helper


def test_the_helpers_secret_patterns_are_specmons() -> None:
    """The helper cannot import specmon: its copy of the rule must stay equal to it."""
    assert helper.SECRET_ENV == BUILTIN_SECRET_ENV


def test_filter_keeps_allowed_names_and_masks_secrets() -> None:
    data = b"\0".join(
        [
            b"NCCL_PROTO=LL",
            b"HF_TOKEN=hf_secret123",
            b"SGLANG_API_KEY=",
            b"PATH=/usr/bin",
            b"LD_PRELOAD=/evil.so",
            b"PYTHONPATH=/src",
            b"MY_ORG_CRED=abc",
            b"NCCL_PROTO=second",
            b"noequals",
            b"",
        ]
    )
    env = helper.filter_environ(
        data, ["PYTHONPATH"], ["NCCL_", "HF_", "SGLANG_", "MY_"], ["MY_ORG_*"]
    )
    assert env == {
        "NCCL_PROTO": "LL",  # the first of a name given twice, as getenv reads
        "HF_TOKEN": "***",
        "SGLANG_API_KEY": "",  # an empty secret is shown empty
        "PYTHONPATH": "/src",
        "MY_ORG_CRED": "***",  # a configured pattern
    }


def run_environ(
    request: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(request)))
    monkeypatch.setattr(sys, "stdout", out)
    helper.main(["environ", "--state-dir", str(tmp_path / "state")])
    return json.loads(out.getvalue().splitlines()[-1])


def test_environ_of_a_real_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin"),
        "NCCL_DEBUG": "INFO",
        "HF_TOKEN": "hf_secret123",
        "SPECMON_SIM_SHARDS": "4",
        "AWS_SECRET_ACCESS_KEY": "nope",
    }
    child = subprocess.Popen(["sleep", "30"], env=env)
    try:
        names, prefixes = allowed_env_rules()
        request = {"pid": child.pid, "names": list(names), "prefixes": list(prefixes)}
        reply = run_environ(request, tmp_path, monkeypatch)
        assert reply["ok"] and reply["pid"] == child.pid and reply["truncated"] is False
        assert reply["env"] == {"NCCL_DEBUG": "INFO", "HF_TOKEN": "***", "SPECMON_SIM_SHARDS": "4"}
        assert all(env_name_problem(name) is None for name in reply["env"])
        assert "hf_secret123" not in json.dumps(reply)
        # Even a console that sends no pattern and allows every name gets no secret.
        everything = run_environ({"pid": child.pid, "prefixes": ["A", "H"]}, tmp_path, monkeypatch)
        assert everything["env"]["HF_TOKEN"] == "***"
        assert everything["env"]["AWS_SECRET_ACCESS_KEY"] == "***"
        assert all(is_secret_env(n) for n, v in everything["env"].items() if v == "***")
    finally:
        child.kill()
        child.wait(5)


def test_environ_refusals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_environ({}, tmp_path, monkeypatch) == {"ok": False, "error": "environ: no pid"}
    gone = subprocess.Popen(["true"])
    gone.wait(5)
    reply = run_environ({"pid": gone.pid, "names": ["X"]}, tmp_path, monkeypatch)
    assert reply == {"ok": False, "error": f"environ: no process {gone.pid}"}
    if os.geteuid() != 0 and not os.access("/proc/1/environ", os.R_OK):
        reply = run_environ({"pid": 1, "names": ["X"]}, tmp_path, monkeypatch)
        assert "not readable by this user" in reply["error"]


def test_environ_gives_the_working_directory_a_relative_program_is_relative_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`nohup .venv/bin/python -m ... &` run from the server's own directory: the adopted
    profile must run that same program from wherever specmon launches it."""
    workdir = tmp_path / "srv"
    workdir.mkdir()
    sleeper = subprocess.Popen(["sleep", "30"], cwd=workdir)
    try:
        reply = run_environ({"pid": sleeper.pid}, tmp_path, monkeypatch)
    finally:
        sleeper.kill()
        sleeper.wait(5)
    assert reply["ok"] and reply["cwd"] == str(workdir)


def test_a_relative_program_is_made_absolute_against_the_servers_directory() -> None:
    from specmon.session.foreign import absolute_program

    argv = (".venv/bin/python", "-m", "specmon.sim", "--port", "1")
    assert absolute_program(argv, "/srv/llm") == ("/srv/llm/.venv/bin/python", *argv[1:])
    assert absolute_program(("../env/bin/python", "x"), "/srv/llm") == ("/srv/env/bin/python", "x")
    assert absolute_program(("python3", "-m", "x"), "/srv") == ("python3", "-m", "x")  # PATH
    assert absolute_program(("/opt/py/bin/python",), "/srv") == ("/opt/py/bin/python",)
    assert absolute_program((".venv/bin/python",), None) == (".venv/bin/python",)
    assert absolute_program((".venv/bin/python",), "relative/cwd") == (".venv/bin/python",)

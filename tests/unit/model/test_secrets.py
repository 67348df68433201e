"""Secrets: values of secret-looking environment names reach the server but are shown and
stored as *** everywhere specmon displays or records them (status, status --json, the run
event, the run record on the host, the sweep's launch line, the ledger); the ledger is private."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.hosts import Recorder, kill_everything_under, local_session, sim_profiles
from support.paths import REPO

from specmon.experiments.ledger import Ledger, RunRecord
from specmon.launch.config import load_config
from specmon.launch.spec import (
    FORM_EXTRA_ARGS,
    FORM_EXTRA_ENV,
    LaunchSpec,
    SecretValues,
    form_overrides,
    form_values,
    restore_form_secrets,
)
from specmon.model.errors import LaunchSpecError
from specmon.model.events import RunInfo
from specmon.model.secrets import (
    is_secret_env,
    is_secret_setting,
    mask_secrets_in_text,
    redact_argv,
    redact_env,
    redact_params,
)

TOKEN = "hf_s3cr3t-value-0123456789"
CUSTOM = "custom-secret-4242"


@pytest.fixture(autouse=True)
def _configured_patterns(tmp_path: Path) -> Iterator[None]:
    """A config with one extra pattern, loaded (and so registered) for every test here."""
    config = tmp_path / "specmon.toml"
    config.write_text('[security]\nsecret_env = ["SGLANG_MY_*"]\n', encoding="utf-8")
    load_config(config, environ={})
    yield
    load_config(None, cwd=tmp_path / "none", environ={"SPECMON_CONFIG_DIR": "/nonexistent"})


def test_secret_names_by_the_built_in_and_the_configured_patterns() -> None:
    for name in ("HF_TOKEN", "OPENAI_API_KEY", "aws_secret", "DB_PASSWORD", "SGLANG_MY_VAR"):
        assert is_secret_env(name), name
    for name in ("NCCL_DEBUG", "SGLANG_OTHER", "CUDA_VISIBLE_DEVICES"):
        assert not is_secret_env(name), name
    assert redact_env({"HF_TOKEN": TOKEN, "NCCL_DEBUG": "INFO"}) == {
        "HF_TOKEN": "***",
        "NCCL_DEBUG": "INFO",
    }
    assert is_secret_setting("api_key") and is_secret_setting("hf-token")
    assert not is_secret_setting("max_total_tokens") and not is_secret_setting("tokenizer_path")


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["--api-key", TOKEN, "--tp", "8"], ["--api-key", "***", "--tp", "8"]),
        ([f"--api-key={TOKEN}"], ["--api-key=***"]),
        (["--hf-token", TOKEN], ["--hf-token", "***"]),
        (["--admin-api-key", TOKEN], ["--admin-api-key", "***"]),
        (["--api-key="], ["--api-key="]),  # nothing to hide
        (["--max-total-tokens", "4096", "--tokenizer-path", "/m"],) * 2,
        (["--return-tokens-as-token-ids", "--port", "8000"],) * 2,  # a switch: no value
        (["env", f"HF_TOKEN={TOKEN}", "python3"], ["env", "HF_TOKEN=***", "python3"]),
        (["env", "NCCL_PROTO=LL", "python3"],) * 2,
    ],
)
def test_secret_flag_values_are_masked_in_a_command_line(argv: list[str], shown: list[str]):
    assert redact_argv(argv) == tuple(shown)


def test_the_form_shows_secrets_masked_and_launches_with_their_real_values() -> None:
    """The relaunch form's extra-args and extra-env texts show ***; left so, the launch gets
    the real values back (from the profile or the running launch); a *** whose value is not
    known here is refused, never sent to the server as the key."""
    base = LaunchSpec(
        "sglang",
        ("python3", "-m", "sglang.launch_server"),
        ("--model-path", "m", "--api-key", TOKEN),
        {"HF_TOKEN": TOKEN, "NCCL_DEBUG": "INFO"},
    )
    extra = ("--api-key", TOKEN)
    values = form_values(base, extra)
    assert TOKEN not in values[FORM_EXTRA_ARGS] + values[FORM_EXTRA_ENV]
    assert values[FORM_EXTRA_ARGS] == "--api-key '***'"
    assert "HF_TOKEN=***" in values[FORM_EXTRA_ENV]
    flags, env = form_overrides(values, base, extra)
    assert flags["api-key"] == TOKEN and env["HF_TOKEN"] == TOKEN
    relaunched = base.with_flags(flags).with_env(env)
    assert relaunched.flag("api-key") == TOKEN and relaunched.env_dict()["HF_TOKEN"] == TOKEN
    assert TOKEN not in relaunched.shown().shell_command()
    # A value typed over the mask is taken as typed.
    typed = {**values, FORM_EXTRA_ARGS: "--api-key new-key"}
    assert form_overrides(typed, base, extra)[0]["api-key"] == "new-key"
    # The running launch's own secret flag (not in the profile): its real value is known.
    running = LaunchSpec("sglang", (), ("--hf-token", CUSTOM))
    secrets = SecretValues.of(base, running)
    shown = {**values, FORM_EXTRA_ARGS: "--api-key '***' --hf-token=***"}
    assert restore_form_secrets(shown, secrets)[FORM_EXTRA_ARGS] == (
        f"--api-key {TOKEN} --hf-token={CUSTOM}"
    )
    # Known nowhere (the record keeps it masked): refused in one line.
    unknown = {**values, FORM_EXTRA_ARGS: "--admin-api-key '***'"}
    with pytest.raises(LaunchSpecError, match="--admin-api-key shows \\*\\*\\*"):
        form_overrides(unknown, base, extra)


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        (
            f"[2026-02-10 09:14:02] server_args=ServerArgs(model_path='m', api_key='{TOKEN}', "
            "hf_token=None, ssl_keyfile='/k', tp_size=8)",
            "[2026-02-10 09:14:02] server_args=ServerArgs(model_path='m', api_key='***', "
            "hf_token=None, ssl_keyfile='/k', tp_size=8)",
        ),
        (
            f"INFO 02-10 09:14:02 [utils.py:1] non-default args: {{'api_key': '{TOKEN}', "
            "'max_num_batched_tokens': 8192}",
            "INFO 02-10 09:14:02 [utils.py:1] non-default args: {'api_key': '***', "
            "'max_num_batched_tokens': 8192}",
        ),
        (f'{{"hf-token": "{TOKEN}"}}', '{"hf-token": "***"}'),
        (
            f"cmd: python3 -m x --api-key {TOKEN} --port 1",
            "cmd: python3 -m x --api-key *** --port 1",
        ),
        (f"env HF_TOKEN={TOKEN} NCCL_PROTO=LL", "env HF_TOKEN=*** NCCL_PROTO=LL"),
        (
            "[2026-02-10 12:46:18 TP0] Decode batch, #running-req: 40, #token: 77320, token usage:"
            " 0.14, accept len: 2.10, cuda graph: True, gen throughput (token/s): 473.97",
        )
        * 2,
        ("--return-tokens-as-token-ids --max-total-tokens 4096 tokenizer='t'",) * 2,
    ],
)
def test_secret_values_a_server_echoes_in_its_log_are_shown_masked(line: str, shown: str):
    assert mask_secrets_in_text(line) == shown


def test_the_run_event_shows_secret_flags_masked() -> None:
    event = RunInfo(run_id="r", argv=("python3", "--api-key", TOKEN))
    assert event.argv[-1] == TOKEN  # the event keeps what the run was launched with
    assert TOKEN not in event.to_json() and event.to_dict()["argv"][-1] == "***"


def test_a_bad_secret_env_setting_is_a_config_error(tmp_path: Path) -> None:
    from specmon.model.errors import ConfigError

    config = tmp_path / "bad.toml"
    config.write_text("[security]\nsecret_env = [1]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad.toml:2: security.secret_env: item 1"):
        load_config(config, environ={})


def test_the_sweeps_launch_line_masks_secrets() -> None:
    spec = LaunchSpec("sglang", ("python3", "-m", "x"), ("--tp", "8"), {"HF_TOKEN": TOKEN})
    line = spec.shown().shell_command()
    assert TOKEN not in line and "HF_TOKEN='***'" in line and "--tp 8" in line
    assert TOKEN in spec.shell_command()  # the spec itself is unchanged


def test_the_ledger_stores_and_shows_secrets_masked_in_private_files(tmp_path: Path) -> None:
    data = tmp_path / "data" / "specmon"
    env = {"SPECMON_DATA_DIR": str(data), "PYTHONPATH": str(REPO)}
    with Ledger(data / "ledger.sqlite3") as ledger:
        ledger.record_run(
            RunRecord(
                host="h",
                profile="p",
                run_id="r1",
                argv=("python3", "--api-key", TOKEN),
                env={"HF_TOKEN": TOKEN, "SGLANG_MY_VAR": CUSTOM, "NCCL_DEBUG": "INFO"},
                status="ready",
            )
        )
        assert ledger.list_runs()[0]["env"]["HF_TOKEN"] == "***"
    assert oct(data.stat().st_mode & 0o777) == oct(0o700)
    for path in data.iterdir():
        assert oct(path.stat().st_mode & 0o777) == oct(0o600), path
        assert TOKEN.encode() not in path.read_bytes() and CUSTOM.encode() not in path.read_bytes()
    for command in (["list", "--json"], ["show", "r1"], ["export", "--json", "--table", "runs"]):
        out = subprocess.run(
            [sys.executable, "-m", "specmon", "ledger", *command],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **env},
        )
        assert TOKEN not in out.stdout + out.stderr and CUSTOM not in out.stdout + out.stderr


def test_a_ledger_dir_that_exists_keeps_its_mode(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    Ledger(shared / "ledger.sqlite3").close()
    assert oct(shared.stat().st_mode & 0o777) == oct(0o755)
    assert oct((shared / "ledger.sqlite3").stat().st_mode & 0o777) == oct(0o600)


async def test_status_events_and_the_host_record_mask_secrets_the_server_gets_them(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    profiles = sim_profiles(
        env={"HF_TOKEN": TOKEN, "SGLANG_MY_VAR": CUSTOM}, extra_args=("--api-key", TOKEN)
    )
    session = local_session(state, profiles, gpu_agent="none")
    recorder = None
    try:
        await session.start()
        recorder = Recorder(session)
        run_id = await session.launch("fast")
        await recorder.settle()
        run = (await session.status())[-1]
        with open(f"/proc/{run.pid}/environ", "rb") as f:  # the server has the real values
            environ = f.read().split(b"\0")
        assert f"HF_TOKEN={TOKEN}".encode() in environ
        with open(f"/proc/{run.pid}/cmdline", "rb") as f:
            assert TOKEN.encode() in f.read().split(b"\0")
        assert TOKEN not in " ".join(run.argv) and "***" in run.argv
        assert TOKEN not in recorder.kinds("run")[-1].to_json()
        await recorder.wait_until(  # the server echoes its arguments as it starts
            "the echoed arguments",
            lambda: any("***" in line.text for line in recorder.kinds("log")),
            timeout=30,
        )
        logged = [line.text for line in recorder.kinds("log")]
        assert not [text for text in logged if TOKEN in text]
        assert f"SGLANG_MY_VAR={CUSTOM}".encode() in environ
        assert run.env["HF_TOKEN"] == "***" and run.env["SGLANG_MY_VAR"] == "***"
        assert dict(recorder.kinds("run")[-1].env)["HF_TOKEN"] == "***"
        for path in (state / "runs" / run_id).iterdir():  # run.json, meta: stored masked
            if path.is_file() and path.name != "server.log":  # the server's own output
                assert TOKEN.encode() not in path.read_bytes(), path
        for json_flag in ([], ["--json"]):
            out = await asyncio.to_thread(
                subprocess.run,
                [
                    sys.executable,
                    "-m",
                    "specmon",
                    "--config",  # the shipped one, which a test run's working dir holds
                    str(REPO / "specmon.toml"),
                    "status",
                    "local",
                    "--state-dir",
                    str(state),
                    *json_flag,
                ],
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
            assert out.returncode == 0, out.stderr
            assert TOKEN not in out.stdout and "HF_TOKEN" in out.stdout
            if json_flag:
                assert json.loads(out.stdout)["runs"][-1]["env"]["HF_TOKEN"] == "***"
        await session.stop()
    finally:
        await session.close()
        kill_everything_under(state)


def test_a_sweep_over_a_secret_keeps_its_values_out_of_the_ledger(tmp_path: Path) -> None:
    """A grid axis over a secret (two API keys, two tokens): the ledger stores *** for the
    values and a digest as the point's key, so a resumed sweep still tells the points apart
    and recognises the finished one."""
    from specmon.experiments.ledger import params_key
    from specmon.experiments.sweep import SweepPoint

    other = "hf_other-secret-9876543210"
    path = tmp_path / "ledger.sqlite3"
    with Ledger(path) as ledger:
        grid = [{"name": "HF_TOKEN", "values": [TOKEN, other]}, {"name": "tp", "values": ["8"]}]
        sid = ledger.start_sweep("k", "h", "p", {"grid": grid})
        ledger.record_sweep_point(
            sid, {"HF_TOKEN": TOKEN, "tp": "8"}, is_baseline=False, status="ok"
        )
        (point,) = ledger.sweep_points(sid)
        assert point.params == {"HF_TOKEN": "***", "tp": "8"}
        assert point.params_key == params_key({"HF_TOKEN": TOKEN, "tp": "8"})
        assert params_key({"HF_TOKEN": other, "tp": "8"}) != point.params_key
        assert ledger.get_sweep(sid).spec["grid"][0]["values"] == ["***", "***"]
    for stored in tmp_path.iterdir():
        assert (
            TOKEN.encode() not in stored.read_bytes() and other.encode() not in stored.read_bytes()
        )
    spec = LaunchSpec("sglang", ("python3",), ())
    label = SweepPoint({"HF_TOKEN": TOKEN, "tp": "8"}, False, spec, "p").label()
    assert label == "HF_TOKEN=*** tp=8"
    # Settings that merely hold a secret-looking word in capitals stay visible (vLLM's k).
    plain = {"num_speculative_tokens": "3", "speculative-num-draft-tokens": "4", "NCCL_PROTO": "LL"}
    assert redact_params(plain) == plain
    assert redact_params({"api-key": "k", "api_key": "k"}) == {"api-key": "***", "api_key": "***"}

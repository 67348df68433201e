"""docs/backends.md's walk-through, checked: a third server (toyserve, tests/support/
toy_backend/) is one folder and one registry line, and the rest of specmon serves it
unchanged: the config builds and checks its launch, `specmon parse` reads and detects its
log, and a host session launches it for real, sees it ready from its own log line, shows its
server info, tells its crash with the root cause, and stops it with its process group."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import hosts
from support.toy_backend import SERVER

from specmon.backends import (
    BACKENDS,
    Backend,
    HttpApi,
    LaunchRules,
    ProbeHook,
    RelaunchForm,
    ServerLogs,
    Simulator,
    Tuning,
    backend_for_command,
    detect_backend,
    get_backend,
    registry,
)
from specmon.cli import main
from specmon.launch.config import parse_config_text
from specmon.model.errors import ConfigError

TOY_PROFILE = """
[profiles.toy]
backend = "toy"
model_path = "{model}"
port = {port}
gpu_agent = "none"
stop_grace_s = 3.0
"""

TOY_LOG = """\
toyserve: loading model from /srv/toy-model
toyserve: listening on http://127.0.0.1:9123
toyserve: ready
toyserve: request "GET /health HTTP/1.1" 200 -
"""


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    monkeypatch.setitem(BACKENDS, "toy", "support.toy_backend:ToyBackend")  # the one line
    yield get_backend("toy")
    registry._instances.pop("toy", None)


def test_the_new_backend_fills_every_facet_and_nothing_is_left_abstract(toy: Backend) -> None:
    for facet in (ServerLogs, LaunchRules, RelaunchForm, HttpApi, Tuning, ProbeHook, Simulator):
        assert isinstance(toy, facet)
    assert not inspect.isabstract(type(toy))
    assert toy.probe_targets() is None and toy.sim_module is None  # the facets' defaults


def test_the_config_builds_and_checks_its_launch(toy: Backend, tmp_path: Path) -> None:
    config = parse_config_text(TOY_PROFILE.format(model="/srv/toy-model", port=9123), None)
    spec = config.profiles["toy"].to_launch_spec(python="python3")
    assert spec.argv == (
        "python3",
        str(SERVER),
        *("--model-dir", "/srv/toy-model", "--port", "9123"),
    )
    assert backend_for_command(["python3", str(SERVER)]) == "toy"  # a command infers it
    bad = TOY_PROFILE.format(model="/m", port=9123) + 'extra_args = ["--tp", "8"]\n'
    with pytest.raises(ConfigError, match="--tp: toyserve has no such flag"):
        parse_config_text(bad, None)
    assert toy.run_info_labels(spec.argv)["model"] == "/srv/toy-model"


def test_specmon_parse_detects_and_reads_its_log(
    toy: Backend, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "toy.log"
    log.write_text(TOY_LOG)
    assert detect_backend(TOY_LOG) == "toy"
    assert main(["parse", "--json", str(log)]) == 0
    out, err = capsys.readouterr()
    assert "detected backend toy" in err
    kinds = [json.loads(line)["kind"] for line in out.splitlines()]
    assert kinds == ["http_up", "ready"]
    assert main(["parse", "--backend", "toy", "--json", "--summary", "--no-events", str(log)]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["ready"] is True and summary["errors"] == 0


async def test_a_host_session_launches_it_sees_it_ready_and_stops_it(
    toy: Backend, tmp_path: Path
) -> None:
    port = hosts.free_port()
    config = parse_config_text(TOY_PROFILE.format(model=tmp_path, port=port), None)
    state_dir = tmp_path / "state"
    session = hosts.local_session(state_dir, config.profiles, gpu_agent="none")
    try:
        await session.start()
        recorder = hosts.Recorder(session)
        await session.launch("toy")
        store = await session.wait_for(
            lambda s: s.run_state == "ready" and "version" in s.server_info, 30
        )
        assert store.server_info["model"] == str(tmp_path)
        assert recorder.kinds("ready"), "ready comes from toyserve's own log line"
        assert (await session.http_base_url()) == f"http://127.0.0.1:{port}"
        pgids = hosts.run_pgids(state_dir)
        report = await session.stop()
        assert report is not None
        assert pgids and not any(hosts.group_alive(pgid) for pgid in pgids)
        recorder.close()
    finally:
        await session.close()
        hosts.kill_everything_under(state_dir)


async def test_its_crash_is_told_with_the_root_cause(toy: Backend, tmp_path: Path) -> None:
    text = TOY_PROFILE.format(model=tmp_path, port=hosts.free_port())
    config = parse_config_text(text + 'extra_args = ["--fail-after-load"]\n', None)
    state_dir = tmp_path / "state"
    session = hosts.local_session(state_dir, config.profiles, gpu_agent="none")
    try:
        await session.start()
        recorder = hosts.Recorder(session)
        await session.launch("toy")
        failed = (await recorder.wait_kind("server_failed", 30))[0]
        assert any("MemoryError" in line for line in failed.root_cause), failed
        assert failed.exit_code == 1
        recorder.close()
    finally:
        await session.close()
        hosts.kill_everything_under(state_dir)

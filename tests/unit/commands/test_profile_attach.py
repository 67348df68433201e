"""A profile's ``attach`` key (issue 28 item 2): `connect HOST -p P` and `watch HOST -p P`
follow the server the profile names, as `--attach` would; `--attach` on the command line wins
over the profile's key, which wins over the host's (launch.config.attach_for, the one place
the order is written). A profile without the key keeps what `-p` meant before; a bare
`launch --take-over` takes the same target."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from specmon.cli import main
from specmon.commands.launch import parse_take_over
from specmon.launch.config import HostConfig, Profile, attach_for, load_config
from specmon.model.errors import UsageError

NO_USER_DIR = {"SPECMON_CONFIG_DIR": "/nonexistent/specmon-test-config"}


@pytest.mark.parametrize(
    ("command_line", "of_profile", "of_host", "chosen"),
    [
        ("77", "4242", "auto", "77"),  # --attach wins over both keys
        (None, "4242", "auto", "4242"),  # the profile's key over the host's
        (None, "container:llm", None, "container:llm"),
        (None, None, "unit:vllm", "unit:vllm"),  # the host's key alone
        ("auto", None, "4242", "auto"),
        (None, None, None, None),  # this state dir's runs
    ],
)
def test_attach_for_orders_command_line_then_profile_then_host(
    command_line: str | None, of_profile: str | None, of_host: str | None, chosen: str | None
) -> None:
    profile = Profile(name="p", model_path="m", attach=of_profile)
    host = HostConfig(name="h", address="h", attach=of_host)
    assert attach_for(command_line, profile, host) == chosen
    if of_profile is None:  # no profile at all reads as a profile without the key
        assert attach_for(command_line, None, host) == chosen
    if of_host is None:
        assert attach_for(command_line, profile, None) == chosen


def write_config(tmp_path: Path) -> Path:
    path = tmp_path / "specmon.toml"
    path.write_text(
        f'[hosts.box]\ntransport = "local"\nstate_dir = "{tmp_path / "state"}"\n'
        '[hosts.keyed]\ntransport = "local"\nattach = "unit:old.service"\n'
        f'state_dir = "{tmp_path / "state"}"\n'
        '[profiles.running]\nmodel_path = "m"\nattach = 4242\n'
        '[profiles.anywhere]\nmodel_path = "m"\nattach = "auto"\n'
        '[profiles.plain]\nmodel_path = "m"\n'
    )
    return path


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The sessions `watch`/`connect` (headless) would follow, unstarted."""
    import specmon.commands.printers as printers

    seen: list[Any] = []

    def one(session: Any, args: Any, *rest: Any) -> int:
        seen.append(session)
        return 0

    def fleet(sessions: list[tuple[str, Any]], args: Any) -> int:
        seen.extend(session for _, session in sessions)
        return 0

    monkeypatch.setattr(printers, "watch_headless", one)
    monkeypatch.setattr(printers, "watch_fleet_headless", fleet)
    return seen


@pytest.mark.parametrize("command", ["watch", "connect"])
@pytest.mark.parametrize(
    ("argv", "attach"),
    [
        (["box", "-p", "running"], "4242"),  # the profile's key, as --attach 4242
        (["box", "--profile", "running", "--attach", "77"], "77"),  # --attach wins
        (["keyed", "-p", "running"], "4242"),  # the profile's key wins over the host's
        (["keyed", "-p", "plain"], "unit:old.service"),  # no key: the host's, as before
        (["box", "-p", "plain"], None),  # no key anywhere: this state dir's runs, as before
        (["keyed"], "unit:old.service"),
    ],
)
def test_connect_and_watch_follow_the_profiles_attach_target(
    command: str, argv: list[str], attach: str | None, tmp_path: Path, watched: list[Any]
) -> None:
    config = write_config(tmp_path)
    assert main([command, *argv, "--json", "--config", str(config)]) == 0
    assert [session.options.attach for session in watched] == [attach]


def test_a_profile_attaching_to_one_server_takes_one_host(
    tmp_path: Path, watched: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    assert main(["watch", "box", "keyed", "-p", "running", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err == ("specmon: profile 'running' attaches to 4242, one server: give one host\n"), err
    assert not watched
    # auto over several hosts: each host's only such server, as --attach auto.
    assert main(["watch", "box", "keyed", "-p", "anywhere", "--config", str(config)]) == 0
    assert [session.options.attach for session in watched] == ["auto", "auto"]


def test_a_misspelt_profile_is_still_refused(
    tmp_path: Path, watched: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    assert main(["watch", "box", "-p", "runing", "--config", str(config)]) == 2
    assert "unknown profile 'runing'; did you mean 'running'?" in capsys.readouterr().err
    assert not watched


def test_the_console_is_told_the_profile_its_take_over_form_starts_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import specmon.tui.app

    told: list[Any] = []
    monkeypatch.setattr(
        specmon.tui.app, "run_console", lambda session, config, **kw: told.append(kw) or 0
    )
    config = write_config(tmp_path)
    for profile in ("running", "plain"):
        argv = ["connect", "box", "-p", profile, "--console", "--config", str(config)]
        assert main(argv) == 0
    assert [kw["attach_profile"] for kw in told] == ["running", None]


def test_a_bare_take_over_takes_the_profiles_attach_target(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path), environ=NO_USER_DIR)

    def bare(host: str, profile: str) -> Any:
        args = argparse.Namespace(host=host, profile=profile, take_over="", yes=True)
        return parse_take_over(args, False, config)

    assert bare("keyed", "running").pid == 4242  # the profile's key over the host's
    assert bare("keyed", "plain").name == "old.service"  # else the host's
    with pytest.raises(UsageError, match="profile 'plain''s attach key, and it has none"):
        bare("box", "plain")
    given = argparse.Namespace(host="keyed", profile="running", take_over="55", yes=True)
    assert parse_take_over(given, False, config).pid == 55


def test_launch_ignores_the_profiles_attach_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key says where `connect`/`watch` look; `launch -p P` still launches P."""
    import specmon.commands.printers as printers

    made: list[Any] = []
    real = printers.session_from_args
    monkeypatch.setattr(
        printers, "session_from_args", lambda *a, **k: made.append(real(*a, **k)) or made[-1]
    )
    monkeypatch.setattr(printers, "run_async", lambda main: 0)
    assert main(["launch", "box", "-p", "running", "--config", str(write_config(tmp_path))]) == 0
    assert [session.options.attach for session in made] == [None]

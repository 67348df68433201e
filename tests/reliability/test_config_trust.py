"""A specmon.toml found in the working directory is used only once trusted (issue 24 item 5).

The attack: an untrusted checkout ships a specmon.toml whose host has ``ssh_options =
{ ProxyCommand = "..." }`` or whose ``[profiles.demo]`` runs a command of its choosing, and
the victim runs ``specmon status gpu-box`` or ``specmon demo`` in it. Each test runs the real
``specmon`` in its own process, with HOME and XDG_CONFIG_HOME in a temp dir (so no trust
record of the real user's is read or written), and a marker file shows whether the planted
command ran.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support.hosts import free_port, kill_everything_under, processes_mentioning
from support.paths import REPO

from specmon.launch.config import load_config
from specmon.model.errors import ConfigError

REFUSED = (
    "specmon: ./specmon.toml is not trusted (found in the working directory): "
    "review it, then run: specmon trust ./specmon.toml\n"
)
CHANGED = (
    "specmon: ./specmon.toml has changed since it was trusted (found in the working "
    "directory): review it, then run: specmon trust ./specmon.toml\n"
)


def hostile_config(marker: Path) -> str:
    """A config an attacker could ship: its host's ssh_options and its demo profile each run
    a command that creates ``marker``."""
    return f"""\
[hosts.gpu-box]
address = "127.0.0.1"
port = {free_port()}
ssh_options = {{ ProxyCommand = "touch {marker}", ConnectTimeout = 5 }}

[profiles.demo]
command = ["sh", "-c", "touch {marker}"]
model_path = "m"

[profiles.evil]
command = ["sh", "-c", "touch {marker}"]
model_path = "m"
"""


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """The environment of a user whose HOME and config dir are fresh temp dirs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECMON_")}
    env.update(
        HOME=str(tmp_path / "home"),
        XDG_CONFIG_HOME=str(tmp_path / "xdg"),
        PYTHONPATH=str(REPO),
        TMPDIR=str(tmp_path),
    )
    (tmp_path / "home").mkdir()
    return env


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """An untrusted checkout holding the hostile specmon.toml."""
    directory = tmp_path / "checkout"
    directory.mkdir()
    (directory / "specmon.toml").write_text(hostile_config(tmp_path / "MARKER"))
    return directory


def specmon(
    env: dict[str, str], cwd: Path, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specmon", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )


def test_an_untrusted_config_in_the_working_dir_is_refused_and_its_proxy_command_never_runs(
    tmp_path: Path, home: dict[str, str], checkout: Path
) -> None:
    for command in (["status", "gpu-box"], ["launch", "local", "-p", "evil"]):
        result = specmon(home, checkout, *command)
        assert (result.returncode, result.stderr, result.stdout) == (2, REFUSED, "")
    assert not (tmp_path / "MARKER").exists()


def test_a_trusted_config_is_used_until_it_changes(
    tmp_path: Path, home: dict[str, str], checkout: Path
) -> None:
    config = (checkout / "specmon.toml").resolve()
    marker = tmp_path / "MARKER"
    trusted = specmon(home, checkout, "trust")
    digest = hashlib.sha256(config.read_bytes()).hexdigest()
    assert trusted.returncode == 0, trusted.stderr
    assert trusted.stdout == f"trusted {config} (sha256 {digest})\n"
    # Trusted, the file is used: its ProxyCommand is what ssh runs (the user said so).
    used = specmon(home, checkout, "status", "gpu-box")
    assert used.returncode == 1, used.stderr  # the proxy exits at once: ssh cannot connect
    assert marker.exists()
    marker.unlink()

    config.write_text(config.read_text() + "# one more line\n")
    changed = specmon(home, checkout, "status", "gpu-box")
    assert (changed.returncode, changed.stderr) == (2, CHANGED)
    assert not marker.exists()
    listed = specmon(home, checkout, "trust", "--list")
    assert listed.stdout == f"{config}  sha256 {digest}  changed\n"

    revoked = specmon(home, checkout, "trust", "--revoke")
    assert revoked.stdout == f"no longer trusted: {config}\n"
    assert specmon(home, checkout, "status", "gpu-box").stderr == REFUSED
    assert not marker.exists()


def test_a_config_given_explicitly_or_in_the_user_config_dir_needs_no_trust_step(
    tmp_path: Path, home: dict[str, str], checkout: Path
) -> None:
    marker = tmp_path / "MARKER"
    explicit = specmon(home, checkout, "--config", "specmon.toml", "status", "gpu-box")
    assert explicit.returncode == 1 and marker.exists(), explicit.stderr
    marker.unlink()
    user_dir = tmp_path / "xdg" / "specmon"
    user_dir.mkdir(parents=True)
    (user_dir / "specmon.toml").write_text((checkout / "specmon.toml").read_text())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for cwd in (elsewhere, user_dir):  # the user's own file, even as the working dir's
        found = specmon(home, cwd, "status", "gpu-box")
        assert found.returncode == 1 and marker.exists(), found.stderr
        marker.unlink()


def test_demo_ignores_an_untrusted_config_and_never_runs_its_demo_command(
    tmp_path: Path, home: dict[str, str], checkout: Path
) -> None:
    marker = tmp_path / "MARKER"
    env = {**home, "SPECMON_SIM_TIME_SCALE": "0.003"}
    try:
        result = specmon(env, checkout, "demo", "--headless", "--until", "ready", timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stderr.splitlines()[0] == (
            "specmon demo: ignoring ./specmon.toml: it is not trusted (found in the working "
            "directory); to use it, review it, then run: specmon trust ./specmon.toml"
        )
        assert "ready" in result.stdout
        # A profile only the ignored file defines is refused, with the command to trust it.
        evil = specmon(env, checkout, "demo", "--headless", "--profile", "evil")
        assert (evil.returncode, evil.stderr) == (2, REFUSED)
    finally:
        for directory in tmp_path.glob("specmon-demo-*"):
            kill_everything_under(directory)
    assert not marker.exists()
    assert processes_mentioning(str(tmp_path / "specmon-demo-")) == []


def test_the_readme_demo_runs_from_a_fresh_clones_root(
    tmp_path: Path, home: dict[str, str]
) -> None:
    """The repository ships a specmon.toml and the README runs `specmon demo` beside it: the
    demo runs the built-in profile, saying in one line that the file is ignored."""
    env = {**home, "SPECMON_SIM_TIME_SCALE": "0.003"}
    try:
        result = specmon(env, REPO, "demo", "--headless", "--until", "ready", timeout=120)
    finally:
        for directory in tmp_path.glob("specmon-demo-*"):
            kill_everything_under(directory)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr.startswith("specmon demo: ignoring ./specmon.toml: it is not trusted")
    assert "ready" in result.stdout


def test_trust_records_are_private_and_keyed_by_the_files_resolved_path(
    tmp_path: Path, home: dict[str, str], checkout: Path
) -> None:
    trusted = specmon(home, tmp_path, "trust", str(checkout))  # a directory: its specmon.toml
    assert trusted.returncode == 0, trusted.stderr
    records = tmp_path / "xdg" / "specmon" / "trusted.json"
    assert stat.S_IMODE(records.stat().st_mode) == 0o600
    assert stat.S_IMODE(records.parent.stat().st_mode) == 0o700
    config = (checkout / "specmon.toml").resolve()
    digest = hashlib.sha256(config.read_bytes()).hexdigest()
    assert json.loads(records.read_text())["trusted"] == {str(config): digest}
    environ = {"SPECMON_CONFIG_DIR": str(records.parent)}  # the same dir, for the library
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "specmon.toml").symlink_to(checkout / "specmon.toml")
    assert load_config(cwd=linked, environ=environ).hosts["gpu-box"].ssh_options
    # Records others could have written are not used: the file is refused, not trusted.
    records.chmod(0o666)
    with pytest.raises(ConfigError, match=r"trusted\.json: trust records not used: .* mode 666"):
        load_config(cwd=checkout, environ=environ)


def test_an_untrusted_file_gives_none_of_its_settings_to_the_library_either(
    tmp_path: Path, checkout: Path
) -> None:
    from specmon.launch.trust import UntrustedConfigError

    environ = {"SPECMON_CONFIG_DIR": str(tmp_path / "config")}
    with pytest.raises(UntrustedConfigError, match="is not trusted"):
        load_config(cwd=checkout, environ=environ)
    skipped = load_config(cwd=checkout, environ=environ, skip_untrusted=True)
    assert "gpu-box" not in skipped.hosts and "evil" not in skipped.profiles
    assert skipped.profiles["demo"].command[1:] == ("-m", "specmon.sim")


def test_trust_refuses_a_config_that_does_not_load(
    tmp_path: Path, home: dict[str, str], checkout: Path
) -> None:
    (checkout / "specmon.toml").write_text("[hosts.a]\nport = 70000\n")
    result = specmon(home, checkout, "trust")
    assert result.returncode == 2
    out_of_range = "hosts.a.port: 70000 is out of range [1, 65535]"
    assert result.stderr == f"specmon.toml:2: {out_of_range}\n"  # as every config error
    assert not (tmp_path / "xdg" / "specmon" / "trusted.json").exists()


def test_a_profile_saved_into_a_trusted_config_keeps_it_trusted_and_an_untrusted_one_stays_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """specmon's own append (the relaunch form's save) re-records a file that was trusted
    before it; it never makes an untrusted or changed file trusted."""
    from specmon.launch.config import save_profile
    from specmon.launch.trust import trust, trust_state

    monkeypatch.setenv("SPECMON_CONFIG_DIR", str(tmp_path / "config"))
    shipped = load_config(REPO / "specmon.toml")
    profile = next(iter(shipped.profiles.values()))
    trusted = tmp_path / "trusted" / "specmon.toml"
    untrusted = tmp_path / "untrusted" / "specmon.toml"
    for path in (trusted, untrusted):
        path.parent.mkdir()
        path.write_bytes((REPO / "specmon.toml").read_bytes())
    trust(trusted, trusted.read_bytes())
    save_profile(trusted, dataclasses.replace(profile, name="saved-here"))
    save_profile(untrusted, dataclasses.replace(profile, name="saved-here"))
    assert trust_state(trusted, trusted.read_bytes()) == "trusted"
    assert trust_state(untrusted, untrusted.read_bytes()) == "untrusted"
    assert "saved-here" in load_config(trusted).profiles

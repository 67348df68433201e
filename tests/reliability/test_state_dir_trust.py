"""Code planted in a shared state dir never runs (issue 24, item 2).

The attack: a shared 1777 state dir (``--state-dir /tmp/shared``) in which another user made
``bin/`` first and put a helper of their own there; specmon used to run
``bin/specmon_helper.py hello`` before uploading anything and trust the sha256 the script
itself printed, so the planted code ran as the specmon user (root here). Each test below plants
code that leaves a marker file when it runs, runs specmon as the CLI (a subprocess, on the
local transport and through a real OpenSSH sshd), and checks the refusal is one line naming
the path, its owner and its mode, and that the marker never appeared.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.hosts import kill_everything_under
from support.paths import REPO
from support.sshd import SshdServer

from specmon.session.agent_runner import AGENT_SOURCE
from specmon.session.helper_client import HELPER_SOURCE, HelperClient
from specmon.session.local import LocalTransport

REPO_ROOT = REPO
AS_ROOT = os.geteuid() == 0
NOT_ROOT_REASON = "needs root: only root can make a directory owned by another user (nobody)"
NOBODY = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"]
ME = pwd.getpwuid(os.geteuid()).pw_name


def _digest(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _helper_names() -> list[str]:
    """Every name an attacker who read specmon's source would plant the helper under: the one
    specmon used to run, and the one named after the shipped helper's digest."""
    return ["specmon_helper.py", f"specmon_helper-{_digest(HELPER_SOURCE)[:16]}.py"]


def _planted_helper(marker: Path, state: Path) -> str:
    """A helper that leaves ``marker`` behind, then answers hello as the real one would, with
    the real helper's digest: a client that trusts what the script says sees nothing wrong."""
    reply = {"ok": True, "sha256": _digest(HELPER_SOURCE), "state_dir": str(state), "runs": []}
    return (
        "import json, os, sys\n"
        f"with open({str(marker)!r}, 'a') as f:\n"
        "    f.write('ran as uid %d: %s\\n' % (os.geteuid(), sys.argv[1:]))\n"
        f"print(json.dumps({reply!r}))\n"
    )


def _as_nobody(script: str, stdin: str = "") -> None:
    subprocess.run(
        [*NOBODY, "sh", "-c", script], input=stdin, text=True, check=True, timeout=30, cwd="/"
    )


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Path]:
    """A shared 1777 directory another user can reach (pytest's own tmp dirs are 0700)."""
    base = Path(tempfile.mkdtemp(prefix="specmon-shared-"))
    base.chmod(0o755)
    path = base / "shared"
    path.mkdir()
    path.chmod(0o1777)
    try:
        yield path
    finally:
        kill_everything_under(path)
        shutil.rmtree(base, ignore_errors=True)


def _ssh_config(tmp_path: Path, sshd: SshdServer) -> Path:
    path = tmp_path / "specmon.toml"
    path.write_text(
        f"""
{sshd.host_toml()}
"""
    )
    return path


def _specmon(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specmon", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        cwd=REPO_ROOT / "tests",  # not the repo root, whose ./specmon.toml is not trusted
    )


def _status(transport: str, state: Path, tmp_path: Path, sshd: SshdServer | None) -> list[str]:
    """The argv of ``specmon status`` for ``state`` on the local host or over the test sshd."""
    if transport == "local":
        return ["status", "local", "--state-dir", str(state)]
    assert sshd is not None
    config = _ssh_config(tmp_path, sshd)
    return ["--config", str(config), "status", "testbox", "--state-dir", str(state)]


@pytest.fixture(params=["local", "ssh"])
def transport(request: pytest.FixtureRequest) -> Iterator[tuple[str, SshdServer | None]]:
    if request.param == "local":
        yield "local", None
    else:
        yield "ssh", request.getfixturevalue("sshd")


def _assert_refused(
    result: subprocess.CompletedProcess[str], path: Path, owner: str, mode: int
) -> None:
    assert result.returncode != 0, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    message = lines[0]
    assert f"{path} " in message, message
    assert f"owner {owner}," in message and f"mode {mode:04o}" in message, message


@pytest.mark.skipif(not AS_ROOT, reason=NOT_ROOT_REASON)
def test_a_helper_planted_in_a_shared_state_dir_by_another_user_never_runs(
    shared: Path, tmp_path: Path, transport: tuple[str, SshdServer | None]
) -> None:
    """The exact reproduction: nobody makes bin/ in a 1777 shared state dir and plants a
    helper; root runs ``specmon status`` with that state dir."""
    marker = tmp_path / "planted-code-ran"
    planted = _planted_helper(marker, shared)
    for name in _helper_names():
        _as_nobody(f"mkdir -p {shared}/bin && cat > {shared}/bin/{name}", planted)
    bin_dir = shared / "bin"
    assert bin_dir.stat().st_uid == pwd.getpwnam("nobody").pw_uid
    kind, sshd = transport
    result = _specmon(*_status(kind, shared, tmp_path, sshd))
    assert not marker.exists(), f"the planted helper ran: {marker.read_text()}"
    _assert_refused(result, bin_dir, "nobody", 0o755)
    assert oct(shared.stat().st_mode & 0o7777) == oct(0o1777)  # never re-moded


@pytest.mark.skipif(not AS_ROOT, reason=NOT_ROOT_REASON)
def test_an_agent_planted_in_a_shared_state_dir_never_runs(
    shared: Path, tmp_path: Path, sshd: SshdServer
) -> None:
    """nobody makes bin/ with a genuine copy of the helper (so a hello that checks the helper
    passes) and a planted agent: ``bin/agent.py`` as a directory whose ``__main__.py`` python
    runs in its place (the upload's ``mv`` used to drop the real agent inside it), and the
    agent under the name of its digest."""
    marker = tmp_path / "planted-agent-ran"
    planted = f"import os\nopen({str(marker)!r}, 'a').write('agent ran as uid %d' % os.geteuid())\n"
    genuine = HELPER_SOURCE.read_text()
    for name in _helper_names():
        _as_nobody(f"mkdir -p {shared}/bin && cat > {shared}/bin/{name}", genuine)
    _as_nobody(
        f"mkdir -p {shared}/bin/agent.py && cat > {shared}/bin/agent.py/__main__.py", planted
    )
    _as_nobody(f"cat > {shared}/bin/agent-{_digest(AGENT_SOURCE)[:16]}.py", planted)
    config = _ssh_config(tmp_path, sshd)
    watch = ["watch", "testbox", "--state-dir", str(shared), "--gpu-agent", "nvml"]
    result = _specmon("--config", str(config), *watch, "--json", "--duration", "4")
    assert not marker.exists(), f"the planted agent ran: {marker.read_text()}"
    _assert_refused(result, shared / "bin", "nobody", 0o755)


@pytest.mark.parametrize("mode", [0o770, 0o703])
def test_a_bin_dir_of_ours_that_group_or_others_can_write_is_refused(
    tmp_path: Path, mode: int, transport: tuple[str, SshdServer | None]
) -> None:
    """bin/ is ours but others could write into it: what is in it may be theirs."""
    state = tmp_path / "state"
    bin_dir = state / "bin"
    bin_dir.mkdir(parents=True)
    bin_dir.chmod(mode)
    marker = tmp_path / "planted-code-ran"
    for name in _helper_names():
        (bin_dir / name).write_text(_planted_helper(marker, state))
    kind, sshd = transport
    try:
        result = _specmon(*_status(kind, state, tmp_path, sshd))
    finally:
        kill_everything_under(state)
    assert not marker.exists(), f"the planted helper ran: {marker.read_text()}"
    _assert_refused(result, bin_dir, ME, mode)
    assert oct(bin_dir.stat().st_mode & 0o7777) == oct(mode)  # refused, not re-moded


@pytest.mark.skipif(not AS_ROOT, reason=NOT_ROOT_REASON)
def test_a_state_dir_inside_a_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    """The owner of the directory above the state dir can rename our bin/ and runs/ away
    between specmon's check and its use, so that directory must be ours or root's too."""
    parent = tmp_path / "theirs"
    parent.mkdir(mode=0o755)
    os.chown(parent, pwd.getpwnam("nobody").pw_uid, -1)
    state = parent / "state"
    result = _specmon("status", "local", "--state-dir", str(state))
    kill_everything_under(state)
    _assert_refused(result, parent, "nobody", 0o755)


@pytest.mark.skipif(not AS_ROOT, reason=NOT_ROOT_REASON)
def test_a_lock_planted_in_a_shared_state_dir_is_refused_and_its_target_untouched(
    shared: Path, tmp_path: Path
) -> None:
    """nobody plants ``lock`` as a symlink to a file of root's: taking the host lock used to
    open it through the link and truncate the target (where fs.protected_symlinks is 0)."""
    victim = tmp_path / "roots-file"
    victim.write_text("precious\n")
    _as_nobody(f"ln -s {victim} {shared}/lock")
    result = _specmon("stop", "local", "--state-dir", str(shared), "--all", "--gpu-agent", "none")
    assert victim.read_text() == "precious\n", "the lock's target was overwritten"
    _assert_refused(result, shared / "lock", "nobody", 0o777)


async def test_the_bootstrap_imports_nothing_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python3 -c`` puts the working directory first on sys.path (running the helper file
    put bin/ there instead): a console started in an untrusted checkout must not import its
    ``hashlib.py``. A guard for the bootstrap's design; the old code never used -c."""
    marker = tmp_path / "imported-from-cwd"
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for module in ("hashlib", "json", "types", "argparse", "contextlib"):
        (checkout / f"{module}.py").write_text(
            f"open({str(marker)!r}, 'a').write({module!r} + '\\n')\n"
        )
    monkeypatch.chdir(checkout)
    transport = LocalTransport()
    await transport.connect()
    client = HelperClient(
        transport, python=sys.executable, state_dir=str(tmp_path / "state"), call_timeout_s=30
    )
    try:
        assert await client.install() == []  # installs, then runs from the installed file
        assert await client.install() == []
    finally:
        await transport.close()
    assert not marker.exists(), marker.read_text()

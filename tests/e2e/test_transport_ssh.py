"""SSH transport and the headless commands through a real sshd: host keys verified (unknown or
changed refused with a way to accept them), ssh config aliases, clear connection errors, the
same transport behaviour locally and over SSH, and launch/status/watch/stop from the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.hosts import free_port, kill_everything_under, ssh_transport
from support.paths import REPO
from support.sshd import SshdServer

from specmon.model.errors import SpecmonError
from specmon.session import HostKeyError, SessionOptions, TransportError, open_session
from specmon.session.local import LocalTransport
from specmon.session.transport import Transport

REPO_ROOT = REPO


async def test_unknown_host_key_is_refused_with_the_way_to_accept_it(
    sshd: SshdServer, tmp_path: Path
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    transport = ssh_transport(sshd, known_hosts=str(empty))
    with pytest.raises(HostKeyError) as caught:
        await transport.connect()
    message = str(caught.value)
    assert "not trusted" in message and "refused" in message
    assert f"ssh-keyscan -p {sshd.port} 127.0.0.1 >> {empty}" in message
    assert "SHA256:" in message
    assert "\n" not in message
    assert not transport.connected


async def test_changed_host_key_is_refused(sshd: SshdServer, tmp_path: Path) -> None:
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    key_type, key = (other.with_suffix(".pub")).read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {key_type} {key}\n")
    with pytest.raises(HostKeyError, match="ssh-keygen -R"):
        await ssh_transport(sshd, known_hosts=str(known)).connect()


async def test_wrong_user_key_and_closed_port_are_clear_errors(
    sshd: SshdServer, tmp_path: Path
) -> None:
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    transport = ssh_transport(sshd)
    transport.target.identity_files = (str(stranger),)
    transport.target.options = {}
    with pytest.raises(TransportError, match="permission denied"):
        await transport.connect()
    closed = ssh_transport(sshd)
    closed.target.port = free_port()
    with pytest.raises(TransportError, match=r"cannot reach|ssh to"):
        await closed.connect()


async def test_ssh_config_alias_resolves_host_port_user_and_key(
    sshd: SshdServer, tmp_path: Path
) -> None:
    session = open_session(
        "specmon-test",
        None,
        options=SessionOptions(state_dir=str(tmp_path / "state"), gpu_agent="none"),
        ssh_config=(str(sshd.ssh_config),),
        known_hosts=str(sshd.known_hosts),
    )
    await session.start(streams=False)
    try:
        assert await session.status() == []
        assert session.state_dir == str(tmp_path / "state")
        assert oct((tmp_path / "state").stat().st_mode & 0o777) == oct(0o700)
    finally:
        await session.close()


@pytest.fixture(params=["local", "ssh"])
async def transport(request: pytest.FixtureRequest, sshd: SshdServer) -> Iterator[Transport]:
    chosen: Transport = LocalTransport() if request.param == "local" else ssh_transport(sshd)
    await chosen.connect()
    try:
        yield chosen
    finally:
        await chosen.close()


async def test_transports_behave_alike(transport: Transport, tmp_path: Path) -> None:
    hostile = "a b'c\"$(touch canary);`x`\n"
    result = await transport.run(["printf", "%s", hostile], timeout=20)
    assert result.returncode == 0 and result.stdout.decode() == hostile
    assert not (Path.home() / "canary").exists() and not Path("canary").exists()

    target = tmp_path / "dir" / "file.bin"
    await transport.write_file(str(target), b"\x00\x01payload", timeout=20)
    assert target.read_bytes() == b"\x00\x01payload"
    assert oct(target.stat().st_mode & 0o777) == oct(0o600)

    result = await transport.run(["sh", "-c", "cat; exit 3"], input=b"echo", timeout=20)
    assert (result.returncode, result.stdout) == (3, b"echo")
    with pytest.raises(TransportError, match="timed out"):
        await transport.run(["sleep", "5"], timeout=0.5)

    process = await transport.start(["sh", "-c", "echo one; echo two; read line; echo $line"])
    assert await process.readline() == b"one\n"
    assert await process.readline() == b"two\n"
    await process.close_stdin()
    assert await process.readline() == b"\n"
    assert await process.wait(10) == 0

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        local_port = await transport.forward_port(port)
        async with httpx.AsyncClient(trust_env=False) as client:
            for _ in range(100):
                try:
                    response = await client.get(f"http://127.0.0.1:{local_port}/dir/file.bin")
                    break
                except httpx.HTTPError:
                    import asyncio

                    await asyncio.sleep(0.05)
            assert response.content == b"\x00\x01payload"
    finally:
        server.kill()
        server.wait()


def _config(tmp_path: Path, sshd: SshdServer, state_dir: Path) -> Path:
    path = tmp_path / "specmon.toml"
    path.write_text(
        f"""
{sshd.host_toml(state_dir)}

[profiles.fast]
command = ["{{python}}", "-m", "specmon.sim"]
model_path = "moonshotai/Kimi-K2.5"
draft_model_path = "/models/kimi-k2.5-eagle3"
tp = 8
port = {free_port()}
extra_args = ["--trust-remote-code"]
gpu_agent = "sim"
stop_grace_s = 5.0

[profiles.fast.speculative]
algorithm = "EAGLE3"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4

[profiles.fast.env]
SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN = "1"
SPECMON_SIM_TIME_SCALE = "0.003"
SPECMON_SIM_SHARDS = "8"
"""
    )
    return path


def specmon(config: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "specmon", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_headless_launch_status_watch_stop_over_ssh(sshd: SshdServer, tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    config = _config(tmp_path, sshd, state_dir)
    try:
        launched = specmon(
            config, "launch", "testbox", "--profile", "fast", "--set",
            "speculative-num-steps=2", "--set", "speculative-num-draft-tokens=3",
            "--env", "NCCL_PROTO=LL", "--wait", "ready", "--json",
        )  # fmt: skip
        assert launched.returncode == 0, launched.stderr
        lines = [json.loads(line) for line in launched.stdout.splitlines()]
        run_id = lines[0]["run_id"]
        assert any(e.get("kind") == "ready" for e in lines[1:])

        status = specmon(config, "status", "testbox", "--json")
        assert status.returncode == 0, status.stderr
        runs = json.loads(status.stdout)["runs"]
        assert [(r["run_id"], r["alive"]) for r in runs] == [(run_id, True)]
        assert runs[0]["load_seconds"] is not None and runs[0]["state"] == "ready"
        assert "--speculative-num-steps" in runs[0]["argv"] and runs[0]["env"]["NCCL_PROTO"] == "LL"

        watched = specmon(config, "watch", "testbox", "--json", "--duration", "3")
        assert watched.returncode == 0, watched.stderr
        events = [json.loads(line) for line in watched.stdout.splitlines()]
        reattached = [e for e in events if e["kind"] == "run"]
        assert reattached and reattached[0]["reattached"] and reattached[0]["run_id"] == run_id
        assert any(e["kind"] == "gpu" for e in events)
        assert all("at" in e for e in events)

        stopped = specmon(config, "stop", "testbox", "--json")
        assert stopped.returncode == 0, stopped.stderr
        steps = [s["step"] for s in json.loads(stopped.stdout)["steps"]]
        assert steps[0] == "sigterm" and "group_gone" in steps and steps[-1] == "gpu_released"
        final = json.loads(specmon(config, "status", "testbox", "--json").stdout)["runs"]
        assert [r["alive"] for r in final] == [False]
    finally:
        kill_everything_under(state_dir)


def test_cli_errors_are_one_line(sshd: SshdServer, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    refused = specmon(
        _config(tmp_path, sshd, tmp_path / "state"),
        "status", f"{sshd.user}@127.0.0.1:{sshd.port}", "--known-hosts", str(empty),
        "-i", str(sshd.client_key),
    )  # fmt: skip
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert "ssh-keyscan" in refused.stderr
    bad = specmon(tmp_path / "specmon.toml", "launch", "testbox", "--profile", "nope")
    assert bad.returncode == 2 and "unknown profile 'nope'" in bad.stderr
    bad_set = specmon(tmp_path / "specmon.toml", "launch", "testbox", "-p", "fast", "--set", "x")
    assert bad_set.returncode == 2 and "expected NAME=VALUE" in bad_set.stderr
    assert isinstance(HostKeyError("x"), SpecmonError)


def _alias_transport(sshd: SshdServer, tmp_path: Path, known: Path) -> Transport:
    """An ~/.ssh/config alias with another name, the sshd's port and its own known_hosts file:
    nothing of which the alias itself says."""
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host keytest-alias\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
        f'  IdentityFile {sshd.client_key}\n  UserKnownHostsFile "{known}"\n'
    )
    from specmon.session.ssh import SshTarget, SshTransport

    return SshTransport(SshTarget(host="keytest-alias", config_files=(str(config),)))


def _shell(command: str) -> None:
    subprocess.run(["sh", "-c", command], check=True, capture_output=True, timeout=30)


async def test_host_key_hints_for_an_alias_are_commands_that_work(
    sshd: SshdServer, tmp_path: Path
) -> None:
    known = tmp_path / "alias known_hosts"  # a space: the commands must quote it
    known.write_text("")
    with pytest.raises(HostKeyError) as caught:
        await _alias_transport(sshd, tmp_path, known).connect()
    error = caught.value
    assert not error.changed and "unknown" in str(error) and "attack" not in str(error)
    assert error.accept_command is not None and error.accept_command in str(error)
    assert f"-p {sshd.port} 127.0.0.1" in error.accept_command
    _shell(error.accept_command)  # run what was printed, then the connection is trusted
    transport = _alias_transport(sshd, tmp_path, known)
    await transport.connect()
    await transport.close()

    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    key_type, key = other.with_suffix(".pub").read_text().split()[:2]
    known.write_text(f"[127.0.0.1]:{sshd.port} {key_type} {key}\n")
    with pytest.raises(HostKeyError) as caught:
        await _alias_transport(sshd, tmp_path, known).connect()
    error = caught.value
    assert error.changed and "CHANGED" in str(error) and "attack" in str(error)
    assert error.remove_command is not None and f"-f '{known}'" in error.remove_command
    assert f"{error.remove_command} && {error.accept_command}" in str(error)
    assert "\n" not in str(error)
    _shell(f"{error.remove_command} && {error.accept_command}")
    transport = _alias_transport(sshd, tmp_path, known)
    await transport.connect()
    await transport.close()


async def test_a_host_key_that_changes_on_reconnect_stops_the_session_at_once(
    sshd: SshdServer, tmp_path: Path
) -> None:
    import asyncio
    import io

    from support.hosts import Recorder, test_options

    from specmon.commands.printers import stream_events
    from specmon.session import HostSession

    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts.read_text())
    session = HostSession(
        ssh_transport(sshd, known_hosts=str(known)),
        profiles={},
        options=test_options(tmp_path / "state", gpu_agent="none"),
    )
    await session.start()
    recorder = Recorder(session)
    out = io.StringIO()
    try:
        watch = asyncio.create_task(
            stream_events(session, as_json=False, with_log=False, until=None, duration=60, out=out)
        )
        await asyncio.sleep(0.2)
        other = tmp_path / "other"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True
        )
        key_type, key = other.with_suffix(".pub").read_text().split()[:2]
        known.write_text(f"[127.0.0.1]:{sshd.port} {key_type} {key}\n")
        sshd.drop_connections()
        assert await asyncio.wait_for(watch, 20) != 0  # watch ends, non-zero, long before 60 s
        await recorder.settle()
        states = [e for e in recorder.kinds("connection")]
        assert [e.state for e in states].count("reconnecting") <= 1  # one try, no retries
        final = states[-1]
        assert final.state == "disconnected" and "CHANGED" in (final.detail or "")
        assert "attack" in out.getvalue()
    finally:
        await session.close()


@pytest.mark.parametrize(
    ("field", "role"),
    [
        ("identity_files", "identity file"),
        ("known_hosts", "known_hosts file"),
        ("config_files", "ssh config file"),
    ],
)
async def test_a_missing_ssh_file_is_named_in_the_error(
    sshd: SshdServer, tmp_path: Path, field: str, role: str
) -> None:
    missing = tmp_path / "no-such-file"
    value = str(missing) if field == "known_hosts" else (str(missing),)
    with pytest.raises(TransportError) as caught:
        await ssh_transport(sshd, **{field: value}).connect()
    assert f"{role} {missing}: No such file or directory" in str(caught.value)

"""A real OpenSSH sshd on 127.0.0.1 for tests: throw-away host and user keys, key auth only.

Use the ``sshd_server`` fixture (import it into a test module, or call ``start_sshd``):

    from support.sshd import sshd_server  # noqa: F401  (pytest fixture)

    async def test_x(sshd_server): ...  # sshd_server.port, .client_key, .known_hosts, ...

The server runs as the current user (root in CI), with ``PermitUserEnvironment`` so the
authorized key puts this checkout on the session's PYTHONPATH (the "remote" python can then run
``python3 -m specmon.sim``). ``drop_connections()`` kills the sshd children serving clients,
the way a network drop ends a session; the listener stays up for reconnects.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SshdServer:
    port: int
    directory: Path
    proc: subprocess.Popen[bytes]
    client_key: Path
    known_hosts: Path
    ssh_config: Path  # defines the alias "specmon-test" for this server
    log_path: Path
    user: str
    host_key_pub: str

    @property
    def address(self) -> str:
        return f"{self.user}@127.0.0.1:{self.port}"

    def host_toml(self, state_dir: Path | None = None, name: str = "testbox") -> str:
        """The config's ``[hosts.NAME]`` table for this server: its key, its known host key,
        this interpreter on the host, and ``state_dir`` where given."""
        lines = [
            f"[hosts.{name}]",
            'address = "127.0.0.1"',
            f"port = {self.port}",
            f'user = "{self.user}"',
            f'identity_file = "{self.client_key}"',
            f'known_hosts = "{self.known_hosts}"',
            f'python = "{sys.executable}"',
        ]
        if state_dir is not None:
            lines.append(f'state_dir = "{state_dir}"')
        return "\n".join(lines)

    def session_children(self) -> list[int]:
        """Pids of the sshd processes serving connections (the listener's sshd descendants;
        the commands they run are left alone, as a network drop would leave them)."""
        parents: dict[int, int] = {}
        names: dict[int, str] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            parents[int(name)] = int(fields[1])
            names[int(name)] = stat[stat.find("(") + 1 : stat.rfind(")")]
        found: list[int] = []
        frontier = [self.proc.pid]
        while frontier:
            parent = frontier.pop()
            for pid, ppid in parents.items():
                if ppid == parent and names.get(pid) == "sshd":
                    found.append(pid)
                    frontier.append(pid)
        return found

    def drop_connections(self) -> int:
        """Kill every connection's sshd process (SIGKILL): the clients see the link die."""
        killed = 0
        for pid in self.session_children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        return killed

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def start_sshd(directory: Path, *, python_path: str | None = None) -> SshdServer:
    directory.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
    host_key = directory / "host_ed25519"
    client_key = directory / "client_ed25519"
    _keygen(host_key)
    _keygen(client_key)
    env_opt = f'environment="PYTHONPATH={python_path or REPO_ROOT}" '
    authorized = directory / "authorized_keys"
    authorized.write_text(env_opt + (directory / "client_ed25519.pub").read_text())
    authorized.chmod(0o600)
    port = free_port()
    config = directory / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key}",
                f"PidFile {directory / 'sshd.pid'}",
                f"AuthorizedKeysFile {authorized}",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                "StrictModes no",
                "UsePAM no",
                "PermitUserEnvironment yes",
                "AllowTcpForwarding yes",
                "MaxSessions 64",
                "MaxStartups 64",
                "LogLevel VERBOSE",
                "",
            ]
        )
    )
    log_path = directory / "sshd.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited: {log_path.read_text(errors='replace')[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    else:
        stop_sshd(proc)
        raise RuntimeError("sshd did not listen within 15 s")
    host_pub = (directory / "host_ed25519.pub").read_text().split()
    known_hosts = directory / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    user = os.environ.get("USER") or __import__("getpass").getuser()
    ssh_config = directory / "ssh_config"
    ssh_config.write_text(
        f"Host specmon-test\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n"
        f"  IdentityFile {client_key}\n"
    )
    return SshdServer(
        port=port,
        directory=directory,
        proc=proc,
        client_key=client_key,
        known_hosts=known_hosts,
        ssh_config=ssh_config,
        log_path=log_path,
        user=user,
        host_key_pub=" ".join(host_pub[:2]),
    )


def stop_sshd(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


@pytest.fixture
def sshd_server(tmp_path: Path) -> Iterator[SshdServer]:
    if not Path(SSHD).exists():
        pytest.fail("OpenSSH sshd is not installed (apt-get install openssh-server)")
    server = start_sshd(tmp_path / "sshd")
    try:
        yield server
    finally:
        server.drop_connections()
        stop_sshd(server.proc)

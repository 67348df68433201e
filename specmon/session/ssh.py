"""The SSH transport (asyncssh): ssh config aliases, users, ports, identity files, the agent and
known_hosts as OpenSSH has them; host keys verified, an unknown or changed one refused."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from specmon.model.errors import ConnectionLost, HostKeyError, TransportError
from specmon.session.transport import CommandResult, RemoteProcess, Transport


def shell_word(arg: str) -> str:
    """Quote for the remote shell; a leading ``~/`` still means the remote home."""
    if arg.startswith("~/"):
        rest = arg[2:]
        return '"$HOME"/' + shlex.quote(rest) if rest else '"$HOME"'
    return shlex.quote(arg)


def shell_command(argv: Sequence[str]) -> str:
    return " ".join(shell_word(a) for a in argv)


@dataclass(slots=True)
class SshTarget:
    """Where to connect. ``host`` may be an ssh config alias; None fields defer to ssh config."""

    host: str
    port: int | None = None
    username: str | None = None
    identity_files: tuple[str, ...] = ()
    known_hosts: str | None = None  # None: ~/.ssh/known_hosts (and ssh config)
    config_files: tuple[str, ...] | None = None  # None: ~/.ssh/config
    options: dict[str, str] = field(default_factory=dict)  # extra ssh config lines
    connect_timeout: float = 15.0
    keepalive_s: float = 5.0
    not_configured: str | None = None  # a name not in the config: which files were searched

    @property
    def label(self) -> str:
        user = f"{self.username}@" if self.username else ""
        port = f":{self.port}" if self.port else ""
        return f"{user}{self.host}{port}"


class SshProcess(RemoteProcess):
    def __init__(self, process: asyncssh.SSHClientProcess[bytes]) -> None:
        self._process = process

    async def readline(self) -> bytes:
        try:
            return await self._process.stdout.readline()
        except (asyncssh.Error, OSError, asyncio.IncompleteReadError):
            return b""

    async def write(self, data: bytes) -> None:
        with contextlib.suppress(asyncssh.Error, OSError, BrokenPipeError):
            self._process.stdin.write(data)
            await self._process.stdin.drain()

    async def close_stdin(self) -> None:
        with contextlib.suppress(asyncssh.Error, OSError, BrokenPipeError):
            self._process.stdin.write_eof()

    async def wait(self, timeout: float) -> int | None:
        try:
            result = await asyncio.wait_for(self._process.wait_closed(), timeout)
        except (asyncio.TimeoutError, asyncssh.Error, OSError):
            return None
        del result
        return self._process.exit_status

    async def kill(self) -> None:
        await self.close_stdin()
        self._process.close()
        with contextlib.suppress(asyncio.TimeoutError, asyncssh.Error, OSError):
            await asyncio.wait_for(self._process.wait_closed(), 5.0)


class SshTransport(Transport):
    def __init__(self, target: SshTarget) -> None:
        self.target = target
        self.label = target.label
        self._conn: asyncssh.SSHClientConnection | None = None
        self._forwards: dict[int, asyncssh.SSHListener] = {}

    def _connect_options(self) -> dict[str, Any]:
        t = self.target
        kwargs: dict[str, Any] = {
            "connect_timeout": t.connect_timeout,
            "keepalive_interval": t.keepalive_s,
            "keepalive_count_max": 3,
        }
        if t.port:
            kwargs["port"] = t.port
        if t.username:
            kwargs["username"] = t.username
        if t.identity_files:
            kwargs["client_keys"] = [str(Path(p).expanduser()) for p in t.identity_files]
        if t.known_hosts is not None:
            kwargs["known_hosts"] = str(Path(t.known_hosts).expanduser())
        if t.config_files is not None:
            kwargs["config"] = [str(Path(p).expanduser()) for p in t.config_files]
        return kwargs

    def _check_files(self) -> None:
        """A named identity, known_hosts or ssh config file that cannot be read is reported by
        its role and path (asyncssh's own error names neither)."""
        t = self.target
        named = [("identity file", p) for p in t.identity_files]
        named += [("known_hosts file", t.known_hosts)] if t.known_hosts is not None else []
        named += [("ssh config file", p) for p in t.config_files or ()]
        for role, path in named:
            full = Path(path).expanduser()
            try:
                with full.open("rb"):
                    pass
            except OSError as exc:
                raise TransportError(
                    f"ssh to {self.label}: {role} {full}: {exc.strerror or exc}"
                ) from None

    async def connect(self) -> None:
        t = self.target
        self._check_files()
        try:
            self._conn = await asyncssh.connect(t.host, **self._connect_options())
        except asyncssh.HostKeyNotVerifiable as exc:
            raise await self._host_key_error(str(exc)) from None
        except asyncssh.PermissionDenied:
            raise TransportError(
                f"ssh to {self.label}: permission denied (no accepted key; check the user, "
                "the identity file and the ssh agent)"
            ) from None
        except asyncssh.Error as exc:
            raise TransportError(f"ssh to {self.label}: {exc.reason or exc}") from None
        except asyncio.TimeoutError:
            raise TransportError(
                f"ssh to {self.label}: timed out after {t.connect_timeout:.0f}s"
            ) from None
        except OSError as exc:
            if exc.filename:  # a file ssh reads (one named in an ssh config, say)
                raise TransportError(
                    f"ssh to {self.label}: {exc.filename}: {exc.strerror or exc}"
                ) from None
            unknown = ""
            if isinstance(exc, socket.gaierror) and t.not_configured:
                unknown = f" ({t.not_configured})"  # perhaps a config host, mistyped
            raise TransportError(
                f"cannot reach {self.label}: {exc.strerror or exc}{unknown}"
            ) from None

    def _resolved(self) -> tuple[str, int, str]:
        """The HostName, Port and known_hosts file ssh would use for the target (an
        ~/.ssh/config alias resolved), so printed commands name the real host and file."""
        t = self.target
        host, port, known = t.host, t.port or 22, t.known_hosts
        options = {k: v for k, v in self._connect_options().items() if k in ("port", "config")}
        with contextlib.suppress(Exception):  # an unreadable config: the target as given
            resolved = asyncssh.SSHClientConnectionOptions(host=t.host, **options)
            host, port = resolved.host or host, int(resolved.port or port)
            configured = resolved.config.get("UserKnownHostsFile")
            if known is None and configured:
                known = configured[0] if isinstance(configured, list | tuple) else configured
        return host, port, known or "~/.ssh/known_hosts"

    async def _host_key_error(self, reason: str) -> HostKeyError:
        host, port, known = self._resolved()
        fingerprint = "unknown"
        options = {k: v for k, v in self._connect_options().items() if k in ("port", "config")}
        with contextlib.suppress(Exception):
            key = await asyncio.wait_for(
                asyncssh.get_server_host_key(self.target.host, **options), 10
            )
            if key is not None:
                fingerprint = key.get_fingerprint("sha256")
        known_path = str(Path(known).expanduser())
        changed = False
        with contextlib.suppress(Exception):  # missing or unreadable file: nothing known
            changed = bool(asyncssh.read_known_hosts(known_path).match(host, host, port)[0])
        entry = host if port == 22 else f"[{host}]:{port}"
        port_flag = f"-p {port} " if port != 22 else ""
        file_word = shlex.quote(known_path)
        accept = f"ssh-keyscan {port_flag}{shlex.quote(host)} >> {file_word}"
        remove = f"ssh-keygen -R {shlex.quote(entry)} -f {file_word}"
        where = f"{host}:{port}" + (f" ({self.target.host})" if self.target.host != host else "")
        if changed:
            message = (
                f"host key for {where} has CHANGED since it was recorded in {known}: this may "
                f"be an attack (someone intercepting the connection), or the host was "
                f"reinstalled; refused ({reason}). The host now presents {fingerprint}. Only if "
                f"you have confirmed that is the host's real key, replace the old one: "
                f"{remove} && {accept}"
            )
        else:
            message = (
                f"host key for {where} is unknown (not in {known}); refused ({reason}). The "
                f"host presents {fingerprint}. If that is the host's real key, accept it with: "
                f"{accept}"
            )
        return HostKeyError(message, changed=changed, accept_command=accept, remove_command=remove)

    async def wait_closed(self) -> None:
        if self._conn is not None:
            await self._conn.wait_closed()

    @property
    def connected(self) -> bool:
        conn = self._conn
        return conn is not None and not conn.is_closed()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        self._forwards.clear()  # listeners end with their connection
        if conn is not None:
            conn.close()
            with contextlib.suppress(asyncio.TimeoutError, asyncssh.Error, OSError):
                await asyncio.wait_for(conn.wait_closed(), 5.0)

    def _live(self) -> asyncssh.SSHClientConnection:
        if self._conn is None or self._conn.is_closed():
            raise ConnectionLost(f"ssh connection to {self.label} is closed")
        return self._conn

    def python_argv(self, python: str) -> list[str]:
        return shlex.split(python)

    async def run(
        self, argv: Sequence[str], *, input: bytes | None = None, timeout: float
    ) -> CommandResult:
        conn = self._live()
        try:
            result = await asyncio.wait_for(
                conn.run(shell_command(argv), input=input or b"", encoding=None, check=False),
                timeout,
            )
        except asyncio.TimeoutError:
            raise TransportError(
                f"remote call timed out after {timeout:.0f}s on {self.label}: {argv[-1] if argv else ''}"
            ) from None
        except (asyncssh.Error, OSError) as exc:
            raise ConnectionLost(f"ssh to {self.label} failed during a call: {exc}") from None
        stdout = result.stdout if isinstance(result.stdout, bytes) else b""
        stderr = result.stderr if isinstance(result.stderr, bytes) else b""
        code = result.exit_status if result.exit_status is not None else -1
        return CommandResult(code, stdout, stderr)

    async def start(self, argv: Sequence[str]) -> RemoteProcess:
        conn = self._live()
        try:
            process = await asyncio.wait_for(
                conn.create_process(shell_command(argv), encoding=None, stderr=asyncssh.DEVNULL),
                15.0,
            )
        except (asyncssh.Error, OSError, asyncio.TimeoutError) as exc:
            raise ConnectionLost(f"ssh to {self.label}: cannot start a command: {exc}") from None
        return SshProcess(process)

    async def write_file(self, path: str, data: bytes, *, timeout: float) -> None:
        directory, _, name = path.rpartition("/")
        d = shell_word(directory or ".")
        tmp = f"{d}/.upload.$$"
        script = f"umask 077 && mkdir -p {d} && cat > {tmp} && mv -f {tmp} {d}/{shlex.quote(name)}"
        result = await self.run(["sh", "-c", script], input=data, timeout=timeout)
        if result.returncode != 0:
            raise TransportError(
                f"cannot write {path} on {self.label}: "
                f"{result.stderr.decode(errors='replace').strip()}"
            )

    async def forward_port(self, remote_port: int) -> int:
        conn = self._live()
        try:
            listener = await conn.forward_local_port("127.0.0.1", 0, "127.0.0.1", remote_port)
        except (asyncssh.Error, OSError) as exc:
            raise ConnectionLost(
                f"cannot forward port {remote_port} via {self.label}: {exc}"
            ) from None
        port = int(listener.get_port())
        self._forwards[port] = listener
        return port

    async def close_forward(self, local_port: int) -> None:
        listener = self._forwards.pop(local_port, None)
        if listener is not None:
            listener.close()

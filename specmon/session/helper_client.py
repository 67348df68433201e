"""The client of the remote helper (``remote_helper.py``, uploaded to the host): installing it,
one-shot JSON calls with a timeout, the host-wide launch/stop lock, and the argv of its
streaming commands (follow, stop, supervise).

Nothing in the state dir runs on its own say-so. Every command starts as
``python3 -c BOOTSTRAP MODE SHA256 STATE_DIR NAME ...``: the bootstrap (``host_bootstrap.py``)
is part of the command line, so the host's files cannot change it; it checks the state dir,
``bin/`` and ``runs/`` (ours, not writable by group or others), hashes ``bin/NAME`` and runs
the bytes it hashed, or refuses in one line. That keeps a connect to one round trip when the
helper is installed (as before) and costs one more hash of 30 KB per call; feeding the helper
over stdin instead would take stdin from the commands that read it (launch, follow, the lock).
Files are named after their digest (``specmon_helper-0123456789abcdef.py``), so consoles of
two specmon versions on one host each keep their own instead of replacing each other's.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from specmon.model.errors import SpecmonError
from specmon.remote import BOOTSTRAP_SOURCE, HELPER_SOURCE
from specmon.session.state_dir import checked_state_dir
from specmon.session.transport import CommandResult, Transport


def _bootstrap_program() -> str:
    """The bootstrap as one ``python3 -c`` argument: one line (a newline breaks csh's quoting)
    without '!' (csh's history), both written as escapes inside the string literal."""
    literal = repr(BOOTSTRAP_SOURCE.read_text()).replace("!", "\\x21")
    return f"exec({literal})"


BOOTSTRAP = _bootstrap_program()


def digest_name(stem: str, source: bytes) -> tuple[str, str]:
    """(the sha256 of ``source``, the name it has in the state dir's bin/)."""
    digest = hashlib.sha256(source).hexdigest()
    return digest, f"{stem}-{digest[:16]}.py"


class RemoteCallError(SpecmonError):
    """The helper on the host failed or answered nonsense."""


class NotInstalled(RemoteCallError):
    """The file to run is missing from the state dir's bin/ or is another version (nothing of
    it ran): upload it."""


class LockBusyError(SpecmonError):
    """Another console holds the host's launch/stop lock."""


class HelperClient:
    """Calls the helper on one host; ``install()`` must succeed before anything else."""

    def __init__(
        self, transport: Transport, *, python: str, state_dir: str, call_timeout_s: float
    ) -> None:
        self.transport = transport
        self.python = python
        self.state_dir = state_dir  # the resolved state dir once installed
        self._requested_state_dir = state_dir
        self.call_timeout_s = call_timeout_s
        self._helper: list[str] = []  # the bootstrap's argv that runs the helper

    @property
    def host_label(self) -> str:
        return self.transport.label

    def argv(self, command: str, *args: str) -> list[str]:
        """The argv of a helper command, e.g. ``argv("follow", "--run-id", rid)``."""
        return [*self._helper, command, "--state-dir", self.state_dir, *args]

    def _bootstrap(self, mode: str, digest: str, name: str, state_dir: str) -> list[str]:
        """The argv that checks ``state_dir`` and runs (or installs) its ``bin/name``."""
        python = self.transport.python_argv(self.python)
        return [*python, "-c", BOOTSTRAP, mode, digest, state_dir, name]

    async def install(self) -> list[dict[str, Any]]:
        """Make sure the host runs this exact helper (uploading it only when it is missing or
        another version) and return the runs' records, all in one round trip when the helper
        is already there."""
        source = HELPER_SOURCE.read_bytes()
        digest, name = digest_name("specmon_helper", source)
        base = checked_state_dir(self._requested_state_dir)
        self._helper = self._bootstrap("run", digest, name, base)
        try:
            reply = await self.call(["hello", "--with-status"], state_dir=base)
        except NotInstalled:
            self._helper = self._bootstrap("install", digest, name, base)
            try:
                reply = await self.call(["hello", "--with-status"], state_dir=base, input=source)
            finally:  # later commands never run in install mode, even after a failure
                self._helper = self._bootstrap("run", digest, name, base)
        self.state_dir = str(reply["state_dir"])
        self._helper = self._bootstrap("run", digest, name, self.state_dir)
        return list(reply.get("runs", []))

    async def install_file(self, stem: str, source: bytes) -> list[str]:
        """Put ``source`` in the state dir's bin/ (checked and hashed on the host, written only
        when it is missing or differs) and return the argv that runs it, verified again."""
        digest, name = digest_name(stem, source)
        argv = self._bootstrap("install", digest, name, self.state_dir)
        result = await self.transport.run(argv, input=source, timeout=self.call_timeout_s)
        self._reply(result, f"install {stem}")
        return self._bootstrap("run", digest, name, self.state_dir)

    async def call(
        self,
        args: Sequence[str],
        *,
        input: bytes | None = None,
        timeout: float | None = None,
        state_dir: str | None = None,
    ) -> dict[str, Any]:
        """Run one helper command and return its last JSON line; RemoteCallError else."""
        argv = [*self._helper, args[0], "--state-dir", state_dir or self.state_dir, *args[1:]]
        result = await self.transport.run(argv, input=input, timeout=timeout or self.call_timeout_s)
        return self._reply(result, args[0])

    def _reply(self, result: CommandResult, what: str) -> dict[str, Any]:
        """The last JSON line of a call; RemoteCallError (NotInstalled) for a failure."""
        lines = [ln for ln in result.stdout.decode(errors="replace").splitlines() if ln.strip()]
        try:
            reply = json.loads(lines[-1]) if lines else None
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            err = result.stderr.decode(errors="replace").strip().splitlines()
            raise RemoteCallError(
                f"helper {what} on {self.host_label} failed (exit {result.returncode}): "
                f"{err[-1] if err else 'no output'}"
            )
        if reply.get("ok") is False and "error" in reply:
            kind = NotInstalled if reply.get("install") is True else RemoteCallError
            raise kind(f"{self.host_label}: {reply['error']}")
        return reply

    @contextlib.asynccontextmanager
    async def host_lock(self, owner: str) -> AsyncIterator[None]:
        """The host-wide lock, held by a helper process for the length of the action."""
        proc = await self.transport.start(self.argv("hold-lock", "--owner", owner))
        try:
            line = await asyncio.wait_for(proc.readline(), self.call_timeout_s)
        except asyncio.TimeoutError:
            await proc.kill()
            raise RemoteCallError(f"{self.host_label}: the lock helper did not answer") from None
        except BaseException:
            # A launch cancelled while waiting for the lock must not leave its holder alive,
            # or every later launch from any console is refused as "busy".
            await asyncio.shield(proc.kill())
            raise
        try:
            reply = json.loads(line) if line else {}
        except ValueError:
            reply = {}
        if not reply.get("ok"):
            await proc.kill()
            if "owner" in reply:
                since = reply.get("since")
                when = (
                    time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since))
                    if isinstance(since, (int, float))
                    else "an unknown time"
                )
                raise LockBusyError(
                    f"{self.host_label} is busy: {reply.get('owner') or 'another console'} "
                    f"holds its launch/stop lock since {when}; try again when it is done"
                )
            why = reply.get("error") or "the lock helper gave no answer"
            raise RemoteCallError(f"{self.host_label}: could not take the host lock: {why}")
        try:
            yield
        finally:
            await proc.close_stdin()
            if await proc.wait(5.0) is None:
                await proc.kill()

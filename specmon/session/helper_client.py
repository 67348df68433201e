"""The client of the remote helper (``remote_helper.py``, uploaded to the host): installing it,
one-shot JSON calls with a timeout, the host-wide launch/stop lock, and the argv of its
streaming commands (follow, stop, supervise)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from specmon.errors import SpecmonError
from specmon.session.state_dir import checked_state_dir
from specmon.session.transport import Transport

HELPER_NAME = "specmon_helper.py"
HELPER_SOURCE = Path(__file__).with_name("remote_helper.py")


class RemoteCallError(SpecmonError):
    """The helper on the host failed or answered nonsense."""


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
        self._helper: list[str] = []

    @property
    def host_label(self) -> str:
        return self.transport.label

    def argv(self, command: str, *args: str) -> list[str]:
        """The argv of a helper command, e.g. ``argv("follow", "--run-id", rid)``."""
        return [*self._helper, command, "--state-dir", self.state_dir, *args]

    async def install(self) -> list[dict[str, Any]]:
        """Make sure the host runs this exact helper (uploading it only when it differs) and
        return the runs' records, all in one round trip when the helper is already there."""
        source = HELPER_SOURCE.read_bytes()
        digest = hashlib.sha256(source).hexdigest()
        base = checked_state_dir(self._requested_state_dir)
        remote = f"{base}/bin/{HELPER_NAME}"
        python = self.transport.python_argv(self.python)
        self._helper = [*python, remote]
        reply: dict[str, Any] | None = None
        with contextlib.suppress(RemoteCallError):
            reply = await self.call(["hello", "--with-status"], state_dir=base)
        if reply is None or reply.get("sha256") != digest:
            await self.transport.write_file(remote, source, timeout=self.call_timeout_s)
            reply = await self.call(["hello", "--with-status"], state_dir=base)
            if reply.get("sha256") != digest:
                raise RemoteCallError(
                    f"the helper on {self.host_label} does not match what was sent "
                    f"(sha256 {reply.get('sha256')} != {digest})"
                )
        self.state_dir = str(reply["state_dir"])
        self._helper = [*python, f"{self.state_dir}/bin/{HELPER_NAME}"]
        return list(reply.get("runs", []))

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
        lines = [ln for ln in result.stdout.decode(errors="replace").splitlines() if ln.strip()]
        try:
            reply = json.loads(lines[-1]) if lines else None
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            err = result.stderr.decode(errors="replace").strip().splitlines()
            raise RemoteCallError(
                f"helper {args[0]} on {self.host_label} failed (exit {result.returncode}): "
                f"{err[-1] if err else 'no output'}"
            )
        if reply.get("ok") is False and "error" in reply:
            raise RemoteCallError(f"{self.host_label}: {reply['error']}")
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

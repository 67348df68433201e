"""The host's sweep lease: one sweep at a time per host (and state dir). A sweep relaunches
the server point after point, so a second sweep on the same host would replace the first's
server under it and both would store numbers of the other's settings. The lease is a flock
held by a helper process (``hold-sweep``) for the sweep's length: it dies with the sweep, a
killed one included, and a refused sweep is told who holds it, since when, and which sweep."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from specmon.model.errors import SpecmonError
from specmon.session.helper_client import HelperClient, RemoteCallError
from specmon.state.controller import SweepLease


class SweepBusyError(SpecmonError):
    """Another sweep holds the host's sweep lease."""


def busy_text(host: str, reply: dict[str, Any]) -> str:
    """The refusal: who holds the lease, since when, which sweep (text from the host, shown
    through safe_text by whoever prints it)."""
    since = reply.get("since")
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since))
        if isinstance(since, (int, float))
        else "an unknown time"
    )
    sweep = str(reply.get("sweep") or "").strip()
    which = f"sweep {sweep}" if sweep else "a sweep"
    return (
        f"{host} is busy: {which} of {reply.get('owner') or 'another console'} runs there "
        f"since {when} (lease holder pid {reply.get('pid') or '?'}); a second sweep would "
        "replace its server. Wait for it to finish, or stop that sweep first"
    )


@contextlib.asynccontextmanager
async def hold_sweep_lease(
    helper: HelperClient, *, owner: str, sweep: str
) -> AsyncIterator[SweepLease]:
    """Hold the host's sweep lease for the block; SweepBusyError when another sweep has it."""
    proc = await helper.transport.start(
        helper.argv("hold-sweep", "--owner", owner, "--sweep", sweep)
    )
    try:
        line = await asyncio.wait_for(proc.readline(), helper.call_timeout_s)
    except asyncio.TimeoutError:
        await proc.kill()
        raise RemoteCallError(f"{helper.host_label}: the sweep lease did not answer") from None
    except BaseException:
        await asyncio.shield(proc.kill())  # a cancelled sweep must not leave its lease held
        raise
    try:
        reply = json.loads(line) if line else {}
    except ValueError:
        reply = {}
    if not isinstance(reply, dict) or not reply.get("ok"):
        await proc.kill()
        if isinstance(reply, dict) and "owner" in reply:
            raise SweepBusyError(busy_text(helper.host_label, reply))
        why = reply.get("error") if isinstance(reply, dict) else None
        raise RemoteCallError(
            f"{helper.host_label}: could not take the sweep lease: {why or 'no answer'}"
        )
    try:
        yield SweepLease(proc)
    finally:
        with contextlib.suppress(SpecmonError, OSError):
            await proc.close_stdin()
        with contextlib.suppress(SpecmonError, OSError):
            if await proc.wait(5.0) is None:
                await proc.kill()

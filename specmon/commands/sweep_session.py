"""What the sweep commands (`specmon sweep`, `specmon nccl-sweep`) share: which host a sweep
runs on, and the host session and ledger it runs with, closed however the sweep ends."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any


def sweep_host(config: Any, host: str) -> tuple[str, str]:
    """(label, python) of a sweep's HOST: the label the ledger records it under, and the
    python its points are planned with (on `local`, what the host session itself runs local
    servers with)."""
    host_config = config.hosts.get(host)
    host_label = host_config.label if host_config is not None else host
    if host == "local" or (host_config is not None and host_config.transport == "local"):
        python = sys.executable
    else:
        python = host_config.python if host_config is not None else "python3"
    return host_label, python


@asynccontextmanager
async def sweep_session(
    host: str, config: Any, ledger_path: str | None
) -> AsyncIterator[tuple[Any, Any]]:
    """(session, ledger) for one sweep. SIGTERM (kill, tmux/nohup teardown) cancels the
    current task, so the sweep ends as on Ctrl-C; on the way out the session is closed
    (shielded from that cancellation) and the ledger too."""
    import asyncio
    import contextlib
    import signal

    from specmon.experiments.ledger import Ledger
    from specmon.session import open_session

    ledger = Ledger(ledger_path)
    session = open_session(host, config)
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGTERM, lambda: task.cancel() if task else None)
    try:
        yield session, ledger
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGTERM)
        with contextlib.suppress(Exception):
            await asyncio.shield(session.close())
        ledger.close()


def interrupted(command: str, sweep_id: int | None) -> int:
    """Say that ``command``'s sweep was interrupted and how to resume it; the exit status."""
    which = f" s{sweep_id}" if sweep_id else ""
    print(
        f"specmon: {command}{which} interrupted; run the same command again to resume it",
        file=sys.stderr,
    )
    return 130

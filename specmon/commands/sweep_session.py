"""What the sweep commands (`specmon sweep`, `specmon nccl-sweep`) share: the profile and host
checked before anything connects, the host session and ledger a sweep runs with (closed however
it ends), the body that runs it and what it prints."""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any


def sweep_target(args: argparse.Namespace) -> tuple[Any, str, str]:
    """(config, host label, python) of a sweep command line. An unknown ``--profile`` is
    refused first, in the one message of every command (launch.config.profile_named, with its
    "did you mean"), before any host is touched."""
    from specmon.launch.config import load_config

    config = load_config(getattr(args, "config", None))
    config.profile(args.profile)
    host_label, python = sweep_host(config, args.host)
    return config, host_label, python


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
async def sweep_session(args: argparse.Namespace, config: Any) -> AsyncIterator[tuple[Any, Any]]:
    """(session, ledger) for one sweep, the session opened as every command opens one (its
    SSH knobs, ``--state-dir``, ``--gpu-agent``). SIGTERM (kill, tmux/nohup teardown) cancels
    the current task, so the sweep ends as on Ctrl-C; on the way out the session is closed
    (shielded from that cancellation) and the ledger too."""
    import asyncio
    import contextlib
    import signal

    from specmon.commands.printers import session_from_args
    from specmon.experiments.ledger import Ledger

    session = session_from_args(args, config)
    ledger = Ledger(args.ledger)
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


async def run_sweep(
    args: argparse.Namespace,
    config: Any,
    plan: Any,
    reporter: SweepPrinter,
    new_runner: Callable[[Any, Any, Any], Any],
    *,
    command: str,
    passed: Callable[[Iterable[bool]], bool],
) -> int:
    """The body of both sweep commands: connect, run the sweep ``new_runner(session, ledger,
    plan)`` builds, print its table; the exit status is 0 when ``passed`` (any, all) holds of
    the points' "ok", 1 otherwise, 130 when interrupted (then resumable)."""
    import asyncio
    from dataclasses import replace

    runner: Any = None
    async with sweep_session(args, config) as (session, ledger):
        try:
            await session.start()
            if session.host_label != plan.host:
                plan = replace(plan, host=session.host_label)
                reporter.plan = plan
            runner = new_runner(session, ledger, plan)
            finished = await runner.run()
            reporter.final(finished)
            return 0 if passed(r.status == "ok" for r in finished.results) else 1
        except asyncio.CancelledError:
            return interrupted(command, runner.sweep_id if runner is not None else None)


class SweepPrinter:
    """Progress on stderr; each finished point as a JSON line (--json) or the final table on
    stdout (then on stderr, after the JSON lines)."""

    def __init__(self, plan: Any, *, json_lines: bool, out: Any = None, err: Any = None) -> None:
        self.plan = plan
        self.json_lines = json_lines
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self.total = 0

    def final(self, finished: Any) -> None:
        """The final table of ``finished``."""
        raise NotImplementedError

    def _point_json(self, result: Any) -> None:
        if not self.json_lines:
            return
        import json

        self.out.write(json.dumps(result.to_json_dict()) + "\n")
        self.out.flush()

    def _table(self, table: str) -> None:
        (self.err if self.json_lines else self.out).write(table + "\n")
        self.out.flush()

    def _say(self, text: str) -> None:
        from specmon.model.terminal_text import safe_text

        self.err.write(safe_text(text) + "\n")
        self.err.flush()


def interrupted(command: str, sweep_id: int | None) -> int:
    """Say that ``command``'s sweep was interrupted and how to resume it; the exit status."""
    which = f" s{sweep_id}" if sweep_id else ""
    print(
        f"specmon: {command}{which} interrupted; run the same command again to resume it",
        file=sys.stderr,
    )
    return 130

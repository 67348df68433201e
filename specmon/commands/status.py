"""`specmon status HOST [HOST ...]`: the runs on hosts, their state, argv and load time.

Several hosts are asked in parallel; one that cannot be reached is reported on its own and the
others still answer (exit code 1 then).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.session.arguments import add_hosts_arguments

    add_hosts_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the runs as JSON")
    parser.add_argument("--all", action="store_true", help="list ended runs too (default: last 5)")


def run(args: argparse.Namespace) -> int:
    from specmon.errors import SpecmonError
    from specmon.fleet import fleet_names
    from specmon.session.cli import load_config_from, run_async, sessions_from_args
    from specmon.terminal_text import safe_text

    config = load_config_from(args)
    sessions = sessions_from_args(args, config, fleet_names(args.hosts, config, every=False))
    several = len(sessions) > 1

    async def runs_of(session: Any) -> list[Any]:
        await session.start(streams=False)
        try:
            runs = await session.status()
        finally:
            await session.close()
        if not args.all:
            runs = [r for r in runs if r.alive] + [r for r in runs if not r.alive][-5:]
            runs.sort(key=lambda r: r.started_at or 0)
        return runs

    async def main() -> int:
        # One host: its error ends the command as before (one line); several: reported per host.
        answers = await asyncio.gather(
            *(runs_of(s) for _, s in sessions), return_exceptions=several
        )
        code = 0
        for (name, session), answer in zip(sessions, answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, (SpecmonError, OSError)):
                    raise answer
                code = 1
                if args.json:
                    print(json.dumps({"host": name, "error": str(answer)}))
                else:
                    print(safe_text(f"== {name}: unreachable: {answer}"))
                continue
            print_runs(name if several else None, session.host_label, answer, as_json=args.json)
        return code

    return run_async(main)


def print_runs(name: str | None, label: str, runs: list[Any], *, as_json: bool) -> None:
    """One host's runs; ``name`` (several hosts) heads them, or tags the JSON line. Text that
    came from the host (argv, env, profile) reaches the terminal stripped of controls."""
    from specmon.secrets import redact_argv
    from specmon.terminal_text import safe_text

    if as_json:
        print(json.dumps({"host": name or label, "runs": [r.to_dict() for r in runs]}))
        return
    if name is not None:
        print(safe_text(f"== {name} ({label})"))
    if not runs:
        print(safe_text(f"no runs on {label}"))
        return
    for r in runs:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.started_at or 0))
        load = f"{r.load_seconds:.1f}s" if r.load_seconds is not None else "-"
        head = f"{r.run_id}  {r.state:<18} profile={r.profile} started={started} load={load}"
        print(safe_text(head))
        print(safe_text(f"    {' '.join(redact_argv(r.argv))}"))
        if r.env:
            env = " ".join(f"{k}={v}" for k, v in sorted(r.env.items()))
            print(safe_text(f"    env: {env}"))

"""`specmon status HOST [HOST ...]`: the runs on hosts, their state, argv and load time.

Several hosts are asked in parallel; one that cannot be reached is reported on its own and the
others still answer (exit code 1 then). `status --profile P` asks every node of a multi-node
profile and says, per run, which nodes run their part (a launch killed between nodes leaves
node 0 running alone).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from collections.abc import Mapping
from typing import Any

EPILOG = """\
examples:
  specmon status gpu-box                the live runs and the last 5 ended
  specmon status a b c --json           several hosts at once, as JSON lines
  specmon status --profile kimi-2x8     is every node of a multi-node run running?
"""
"""The examples that end `specmon status --help`."""


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.commands.arguments import add_hosts_arguments

    add_hosts_arguments(parser)
    for action in parser._actions:
        if action.dest == "hosts":
            action.nargs = "*"  # none with --profile: its nodes
    parser.add_argument(
        "--profile",
        "-p",
        metavar="P",
        help="a multi-node profile: ask each of its nodes and show each run as a whole",
    )
    parser.add_argument("--json", action="store_true", help="print the runs as JSON")
    parser.add_argument("--all", action="store_true", help="list ended runs too (default: last 5)")


def run(args: argparse.Namespace) -> int:
    from specmon.commands.nodes import nodes_profile
    from specmon.commands.printers import load_config_from, run_async, sessions_from_args
    from specmon.model.errors import SpecmonError, UsageError
    from specmon.model.terminal_text import safe_text
    from specmon.state.fleet import fleet_names

    config = load_config_from(args)
    spanning = nodes_profile(args, config)
    if args.profile and spanning is None:
        raise UsageError(f"profile {args.profile!r} has no nodes; give its HOST instead")
    names = list(spanning.nodes) if spanning is not None else args.hosts
    sessions = sessions_from_args(args, config, fleet_names(names, config, every=False))
    several = len(sessions) > 1

    wiring: dict[str, dict[str, Any]] = {}  # run id -> its draft_info (--json, live runs)

    async def runs_of(session: Any) -> list[Any]:
        await session.start(streams=False)
        try:
            runs = await session.status()
            # --json: one more helper call per live run, its draft's config.json read
            if args.json and hasattr(session, "read_draft_info"):
                for r in runs:
                    if r.alive:
                        with contextlib.suppress(SpecmonError, OSError):
                            info = await session.read_draft_info(r.run_id, r.backend, r.argv, r.env)
                            if info is not None:
                                wiring[r.run_id] = info.to_dict()
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
            print_runs(
                name if several else None,
                session.host_label,
                answer,
                as_json=args.json,
                wiring=wiring,
            )
        if spanning is not None:
            reached = {
                name: answer
                for (name, _), answer in zip(sessions, answers, strict=True)
                if not isinstance(answer, BaseException)
            }
            for line in whole_runs(list(spanning.nodes), reached, as_json=args.json):
                print(safe_text(line))
        return code

    return run_async(main)


def print_runs(
    name: str | None,
    label: str,
    runs: list[Any],
    *,
    as_json: bool,
    wiring: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """One host's runs; ``name`` (several hosts) heads them, or tags the JSON line. Text that
    came from the host (argv, env, profile) reaches the terminal stripped of controls. A live
    run with a draft model carries its ``draft_info`` in the JSON (``wiring``)."""
    from specmon.model.secrets import redact_argv
    from specmon.model.terminal_text import safe_text

    if as_json:
        rows = [r.to_dict() for r in runs]
        for row in rows:
            if wiring and row.get("run_id") in wiring:
                row["draft_info"] = wiring[row["run_id"]]
        print(json.dumps({"host": name or label, "runs": rows}))
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


def whole_runs(nodes: list[str], runs_by_node: dict[str, list[Any]], *, as_json: bool) -> list[str]:
    """Each live multi-node run as a whole: which node runs which part, and whether every
    node of it runs (a part missing on a node not reached is unknown, not missing)."""
    live: dict[str, dict[str, Any]] = {}
    for node, runs in runs_by_node.items():
        for run in runs:
            if run.alive and (run.nnodes or 1) > 1:
                live.setdefault(run.run_id, {})[node] = run
    lines = []
    for run_id, parts in sorted(live.items()):
        nnodes = max(r.nnodes or 0 for r in parts.values())
        rows = []
        for rank, node in enumerate(nodes):
            run = parts.get(node)
            if run is not None:
                rows.append({"node": node, "rank": run.node_rank, "state": "running"})
            elif node in runs_by_node:
                rows.append({"node": node, "rank": rank, "state": "missing"})
            else:
                rows.append({"node": node, "rank": rank, "state": "unreachable"})
        whole = len(parts) == nnodes and not any(r.multinode_incomplete for r in parts.values())
        verdict = "complete" if whole else "incomplete"
        if as_json:
            lines.append(json.dumps({"run_id": run_id, "nodes": rows, "whole": verdict}))
            continue
        shown = ", ".join(f"node {r['rank']} {r['node']}: {r['state']}" for r in rows)
        advice = "" if whole else "; stop it with `specmon stop --profile P` and relaunch"
        lines.append(f"run {run_id} over {nnodes} nodes is {verdict}: {shown}{advice}")
    return lines

"""`specmon diff HOST RUN_A RUN_B`: every recorded difference between two runs on a host
(flags, environment, the draft's and target's config.json fields, chat template, sampling,
server version), grouped under their likely cause, most likely first (docs/run-diff.md)."""

from __future__ import annotations

import argparse

EPILOG = """\
examples:
  specmon diff gpu-box 20261204-0931 20261204-1015   two runs by id (or a unique prefix)
  specmon diff gpu-box latest~1 latest               the run before the latest, and the latest
  specmon diff gpu-box A B --json                    {"runs", "changes", "diagnoses", "not_compared"}

Run ids are those `specmon status HOST --all` lists. A run's sampling (temperature, max
tokens, ignore_eos) is its latest benchmark's in the ledger (`specmon bench`, `specmon sweep`);
without one the report ends "not compared: sampling". The exit code is 0 whether or not the
runs differ; 2 when a run cannot be found (unknown, or a prefix of several: they are named).
"""
"""The examples that end `specmon diff --help`."""


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.commands.arguments import add_host_arguments

    add_host_arguments(parser)
    parser.add_argument(
        "run_a", metavar="RUN_A", help="the earlier run: an id, a prefix or latest~N"
    )
    parser.add_argument("run_b", metavar="RUN_B", help="the later run: an id, a prefix or latest")
    parser.add_argument("--json", action="store_true", help="print the difference as JSON")
    parser.add_argument(
        "--ledger",
        metavar="PATH",
        help="ledger file the runs' benchmarks' sampling is read from (default: this "
        "machine's); one that does not exist holds none, and none is created",
    )


def run(args: argparse.Namespace) -> int:
    import json

    from specmon.commands.printers import load_config_from, run_async, session_from_args
    from specmon.experiments.ledger import recorded_sampling
    from specmon.model.terminal_text import safe_text
    from specmon.state.run_diff import DiffReport, RunFacts, find_run

    session = session_from_args(args, load_config_from(args))

    async def main() -> int:
        await session.start(streams=False)
        try:
            runs = sorted(await session.status(), key=lambda r: (r.started_at or 0.0, r.run_id))
        finally:
            await session.close()
        a, b = find_run(runs, args.run_a), find_run(runs, args.run_b)
        sampling = recorded_sampling((a.run_id, b.run_id), args.ledger)
        facts = [RunFacts.from_status(r, sampling.get(r.run_id)) for r in (a, b)]
        report = DiffReport.of(*facts)
        if args.json:
            print(json.dumps(report.to_dict(), default=str))
        else:
            for line in report.lines():
                print(safe_text(line))
        return 0

    return run_async(main)

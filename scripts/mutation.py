"""Mutation testing of the modules where a silent bug costs most (docs/testing.md, "Mutation
testing"): runs mutmut (configured in pyproject.toml, [tool.mutmut]) on a fixed-seed random
sample of each module's mutants, or on all of them, and prints killed / survived / score per
module.

    .venv/bin/python scripts/mutation.py                 # the sample: 40 a module, seed 30
    .venv/bin/python scripts/mutation.py --per-module 0  # every mutant (an hour or more)
    .venv/bin/python scripts/mutation.py --per-module 0 --resume  # only those not killed yet
    .venv/bin/python scripts/mutation.py --report        # the last results again, no run
    .venv/bin/python scripts/mutation.py --survivors     # the surviving mutants' names

mutmut keeps its work in ./mutants (git-ignored); `mutmut show NAME` prints one mutant's diff.
A module is a file and, where only part of it matters here, the functions of that part.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MUTANTS = REPO / "mutants"
MUTMUT = Path(sys.executable).parent / "mutmut"


@dataclass(frozen=True)
class Module:
    """One row of the score table: a source file, the mutants of it that count, the target."""

    name: str
    path: str
    functions: tuple[str, ...]  # fnmatch patterns on the mutated function's name; () is all
    target: float  # the share of mutants that must be killed


MODULES = (
    Module("sglang parser", "specmon/backends/sglang/parser.py", (), 0.90),
    Module("vllm parser", "specmon/backends/vllm/parser.py", (), 0.90),
    Module("sglang flags", "specmon/backends/sglang/flags.py", (), 0.90),
    Module("vllm flags", "specmon/backends/vllm/flags.py", (), 0.90),
    Module("flag grammar", "specmon/backends/flag_grammar.py", (), 0.90),
    Module("launch spec", "specmon/launch/spec.py", (), 0.80),
    Module("secrets", "specmon/model/secrets.py", (), 0.90),
    Module("terminal text", "specmon/model/terminal_text.py", (), 0.90),
    Module("store", "specmon/state/store.py", (), 0.80),
    Module(
        "ledger baseline",
        "specmon/experiments/ledger.py",
        (
            "xǁBaselineǁ*",
            "xǁLedgerǁfind_baseline",
            "xǁLedgerǁbaseline_for_benchmark",
            "x__baseline_from_row",
        ),
        0.80,
    ),
    Module("exporter collector", "specmon/exporter/collector.py", (), 0.80),
    Module(
        "remote helper stop",
        "specmon/remote/helper.py",
        (
            "x_cmd_stop",
            "x_wait_group_gone",
            "x_run_alive",
            "x_leader_alive",
            "x_group_left",
            "x_group_members",
        ),
        0.80,
    ),
)

# mutmut's exit codes (mutmut/stats.py): a mutant that made a test fail, crash or hang is
# caught; "no tests" (33, 5) means no selected test calls the function, so it counts against.
KILLED = {1, 3, 24, -24, 152, 255, 36, 37, -9, -11}
SURVIVED = {0}
NO_TESTS = {5, 33}


def module_of(mutant: str) -> str:
    """``specmon.state.store.xǁStateStoreǁapply__mutmut_3`` -> ``xǁStateStoreǁapply``."""
    return mutant.rsplit(".", 1)[1].rsplit("__mutmut_", 1)[0]


def exit_codes(module: Module) -> dict[str, int | None]:
    """mutmut's recorded result of every mutant of the module (None: not run yet)."""
    meta = MUTANTS / (module.path + ".meta")
    if not meta.exists():
        return {}
    codes: dict[str, int | None] = json.loads(meta.read_text())["exit_code_by_key"]
    if not module.functions:
        return codes
    return {
        name: code
        for name, code in codes.items()
        if any(fnmatch.fnmatchcase(module_of(name), f) for f in module.functions)
    }


def chosen(module: Module, per_module: int, seed: int) -> list[str]:
    """The module's mutants this run checks: all, or a sample fixed by the seed."""
    names = sorted(exit_codes(module))
    if per_module <= 0 or len(names) <= per_module:
        return names
    # One fixed order a module: a smaller sample is the start of a larger one.
    random.Random(f"{seed}:{module.path}").shuffle(names)
    return sorted(names[:per_module])


def mutmut(*args: str, workers: int) -> int:
    """Run mutmut niced (the machine is shared), on at most ``workers`` processes."""
    command = ["nice", "-n", "10", str(MUTMUT), "run", "--max-children", str(workers), *args]
    return subprocess.run(command, cwd=REPO, check=False).returncode


def report(names_by_module: dict[Module, list[str]]) -> bool:
    """Print the table; True when every module meets its target."""
    print(f"{'module':<20} {'killed':>6} {'surv.':>6} {'no test':>7} {'total':>6} {'score':>6}")
    all_met = True
    for module, names in names_by_module.items():
        codes = exit_codes(module)
        results = [codes.get(n) for n in names if codes.get(n) is not None]
        killed = sum(code in KILLED for code in results)
        survived = sum(code in SURVIVED for code in results)
        untested = sum(code in NO_TESTS for code in results)
        total = len(results)
        score = killed / total if total else 0.0
        met = total > 0 and score >= module.target
        all_met &= met
        mark = "" if met else f"  below {module.target:.0%}"
        print(
            f"{module.name:<20} {killed:>6} {survived:>6} {untested:>7} {total:>6} "
            f"{score:>6.1%}{mark}"
        )
    return all_met


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-module", type=int, default=40, help="mutants a module; 0: all")
    parser.add_argument("--seed", type=int, default=30, help="fixes the sample")
    parser.add_argument("--workers", type=int, default=2, help="mutmut's worker processes")
    parser.add_argument("--only", action="append", default=[], help="module name (repeatable)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="run only the chosen mutants not killed yet: a stopped run goes on, and new "
        "tests are tried on the survivors (a test added kills more, never fewer)",
    )
    parser.add_argument("--report", action="store_true", help="print the last results only")
    parser.add_argument("--survivors", action="store_true", help="list surviving mutants")
    args = parser.parse_args(argv)
    modules = [m for m in MODULES if not args.only or m.name in args.only]
    if not modules:
        parser.error(f"no module named {args.only}; known: {[m.name for m in MODULES]}")
    if not args.report and not args.survivors:
        # mutmut writes every module's mutants on its first run; the smallest module, run in
        # full, makes them (and checks that the tests pass unmutated) before the sample.
        if not (MUTANTS / (MODULES[7].path + ".meta")).exists():
            mutmut("specmon.model.terminal_text.*", workers=args.workers)
        sample = [n for m in modules for n in chosen(m, args.per_module, args.seed)]
        if args.resume:
            # mutmut drops the result of a function whose code changed, so a kept one is
            # still the result of today's code.
            killed = {n for m in modules for n, code in exit_codes(m).items() if code in KILLED}
            sample = [n for n in sample if n not in killed]
            print(f"{len(sample)} mutants not killed yet", flush=True)
            if not sample:
                names = {m: chosen(m, args.per_module, args.seed) for m in modules}
                return 0 if report(names) else 1
        os.environ.setdefault("PYTHONHASHSEED", "0")
        if mutmut(*sample, workers=args.workers) != 0:
            print("mutmut failed (its output is above)", file=sys.stderr)
            return 2
    names = {m: chosen(m, args.per_module, args.seed) for m in modules}
    if args.survivors:
        for module, chosen_names in names.items():
            codes = exit_codes(module)
            for name in chosen_names:
                if codes.get(name) in SURVIVED | NO_TESTS:
                    print(name)
        return 0
    return 0 if report(names) else 1


if __name__ == "__main__":
    raise SystemExit(main())

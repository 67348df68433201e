"""`specmon advise HOST`: predict tok/s at other draft step counts from the running server's
probe cycles, and recommend one (a prediction, labelled as such; `specmon sweep` measures)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

DEFAULT_TIMEOUT_S = 120.0
NO_RUN_WAIT_S = 5.0  # a live run is reattached at once; without one, refuse after this
DEFAULT_CYCLES = 300  # about 10 s of a 30 ms cycle: P(accepted >= i) to a few percent


EPILOG = """\
examples:
  specmon advise local                  the best step count for the demo server here
  specmon advise gpu-box --concurrency 1,8,32 --json   the best step count at each load
  specmon advise gpu-box --cycles 200 --timeout 120   read longer before predicting
"""
"""The examples that end `specmon advise --help`."""


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.commands.arguments import add_host_arguments

    add_host_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the advice as one JSON object")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"wait at most S seconds for enough probe cycles (default {DEFAULT_TIMEOUT_S:.0f})",
    )
    parser.add_argument(
        "--cycles",
        type=int,
        default=DEFAULT_CYCLES,
        metavar="N",
        help=f"wait for N probe cycles, up to --timeout (default {DEFAULT_CYCLES}; at least 50)",
    )
    parser.add_argument(
        "--ledger", metavar="PATH", help="ledger file (verify times at other token counts)"
    )
    parser.add_argument(
        "--concurrency",
        metavar="N[,N...]",
        help="also predict the best step count at each of these loads (concurrent requests)",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio
    import json
    import time

    from specmon.commands.printers import load_config_from, run_async, session_from_args
    from specmon.experiments.advisor import MIN_CYCLES, AdvisorError
    from specmon.experiments.advisor_inputs import advise_from_store, enough_data
    from specmon.experiments.ledger import Ledger
    from specmon.model.errors import SpecmonError, UsageError
    from specmon.model.terminal_text import safe_text

    if not 0 < args.timeout <= 86400:
        raise UsageError("--timeout must be more than 0 and at most 86400 seconds")
    if not MIN_CYCLES <= args.cycles <= 1_000_000:
        raise UsageError(f"--cycles must be from {MIN_CYCLES} to 1000000")
    from specmon.experiments.load import parse_loads

    loads = parse_loads(args.concurrency) if args.concurrency is not None else ()
    session = session_from_args(args, load_config_from(args))

    async def main() -> int:
        await session.start()
        try:
            store = session.bus.store
            began = time.monotonic()
            deadline = began + args.timeout
            told = began  # the last progress line (none in the first seconds: usually enough)
            while not enough_data(store, args.cycles) and time.monotonic() < deadline:
                if store.run is None and time.monotonic() - began > NO_RUN_WAIT_S:
                    break  # no server on the host: nothing will come, say so now
                if time.monotonic() - told >= PROGRESS_EVERY_S:
                    told = time.monotonic()
                    wait = waiting_text(store, args, deadline - told)
                    print(safe_text(f"advise {session.host_label}: {wait}"), file=sys.stderr)
                await asyncio.sleep(0.2)
            collapse = await session.acceptance_collapse()
        finally:
            await session.close()
        if store.run is None:
            raise SpecmonError(no_server_text(args.host, session.host_label))
        with Ledger(args.ledger) as ledger:
            try:
                advice, _model = advise_from_store(store, ledger, session.host_label, loads)
            except AdvisorError as exc:
                raise SpecmonError(f"advise {session.host_label}: {exc}") from None
        if args.json:
            out = advice.to_dict()
            # The acceptance collapse's likely causes (docs/run-diff.md): [] without one.
            out["diagnosis"] = [d.to_dict() for d in collapse.diagnoses] if collapse else []
            out["collapse"] = collapse.to_dict() if collapse else None
            print(json.dumps(out))
        else:
            if collapse is not None:
                print(f"ACCEPTANCE COLLAPSE: {safe_text(collapse.message)}\n")
            print(advice_text(advice, session.host_label, store))
        return 0

    return run_async(main)


PROGRESS_EVERY_S = 10.0  # a line on stderr while the cycles gather (silent for 2 min before)


def waiting_text(store: Any, args: argparse.Namespace, left_s: float) -> str:
    """Where the wait stands: probe cycles and drafts counted against those asked for, and,
    while none come, why (a server decodes only while requests come)."""
    import shlex

    from specmon.experiments.advisor import MIN_CYCLES
    from specmon.experiments.advisor_inputs import probe_cycles

    wanted = max(MIN_CYCLES, args.cycles)
    cycles = probe_cycles(store)
    drafts = store.accept_by_position.drafts
    text = (
        f"waiting for probe cycles: {cycles} of {wanted}, {min(drafts, wanted)} of {wanted} "
        f"drafts ({left_s:.0f} s left of --timeout {args.timeout:g})"
    )
    if cycles == 0:
        bench = shlex.join(["specmon", "bench", args.host])
        text += (
            "; none yet: the probe times a cycle only while the server decodes, so send it "
            f"requests (`{bench}` sends some), and the profile needs probe = true"
        )
    return text


def no_server_text(host: str, label: str) -> str:
    """What to do when the host runs no server: the launch command to start one (the built-in
    demo profile on this machine, where a new user most often tries it)."""
    import shlex

    profile = "demo" if label == "local" else "PROFILE"
    launch = shlex.join(["specmon", "launch", host, "-p", profile, "--wait", "ready"])
    return (
        f"advise {label}: no server is running there, so there is nothing to measure; "
        f"start one with `{launch}`, then run advise again"
    )


def advice_text(advice: Any, host: str, store: Any) -> str:
    """The prediction table with what it rests on, for people."""
    from specmon.experiments.advisor import prediction_flags
    from specmon.experiments.advisor_inputs import steps_setting
    from specmon.experiments.report import render_table

    inputs = advice.inputs
    setting = steps_setting(store) or "steps"  # the launch setting that sets the step count
    measured = store.throughput_stats()[1]
    rows = []
    for p in advice.predictions:
        rows.append(
            [
                str(p.num_steps),
                str(p.num_draft_tokens),
                f"{p.accept_len:.2f}",
                f"{p.cycle_ms:.2f}",
                f"{p.tok_s:.1f}",
                ", ".join(prediction_flags(p, advice)),
            ]
        )
    header = ["steps", "draft tokens", "accept len", "cycle ms", "tok/s (predicted)", "flags"]
    slope = (
        f"{advice.verify_slope_ms_per_token:.2f} ms per token from this host's ledger"
        if advice.verify_slope_source == "ledger"
        else f"{advice.verify_slope_ms_per_token:.2f} ms per token, a default slope (estimated)"
    )
    measured_text = f", measured {measured:.1f} tok/s (server log)" if measured else ""
    lines = [
        f"{host}: running {inputs.num_steps} steps (topk {inputs.topk}, "
        f"{inputs.current_tokens} draft tokens){measured_text}",
        f"based on {inputs.cycles} probe cycles, {inputs.requests_per_cycle:.1f} requests per "
        f"cycle; verify {inputs.verify_ms:.2f} ms + {slope}",
        "PREDICTION, not a measurement:",
        render_table(header, rows, {0, 1, 2, 3, 4}),
        f"recommended: {advice.recommended.num_steps} steps ({setting}="
        f"{advice.recommended.num_steps}, {advice.recommended.num_draft_tokens} tokens per "
        "verify), predicted "
        f"{advice.recommended.tok_s:.1f} tok/s vs {advice.current.tok_s:.1f} at the current "
        "setting; measure it with `specmon sweep`",
    ]
    if advice.by_load:
        lines.extend(["", by_load_text(advice)])
    return "\n".join(lines)


def by_load_text(advice: Any) -> str:
    """The per-load PREDICTION: the best step count at each load with its range over the
    uncertain inputs, and what it is predicted to give."""
    from specmon.experiments.report import render_table

    model = advice.load_model
    rows = []
    for entry in advice.by_load:
        best = next(s for s in entry.steps if s.num_steps == entry.recommended_steps)
        rows.append(
            [
                str(entry.concurrency),
                str(entry.recommended_steps),
                f"{entry.steps_low}-{entry.steps_high}",
                f"{best.tok_s:.1f}",
                f"{best.tok_s_low:.1f}-{best.tok_s_high:.1f}",
                f"{best.tok_s_per_request:.1f}",
                f"{best.itl_ms:.2f}",
            ]
        )
    header = ["load", "steps", "range", "tok/s", "tok/s range", "tok/s/req", "ITL ms"]
    knee = (
        f"{model.knee_tokens:.0f} tokens per forward from this host's ledger"
        if model.source == "ledger"
        else f"{model.knee_tokens:.0f} tokens per forward, a default (estimated)"
    )
    return (
        "PREDICTION at each load (not a measurement): a forward's time grows as 1 + tokens / "
        f"knee, knee {knee}; range: the best step count over the uncertain inputs\n"
        + render_table(header, rows, {0, 1, 3, 5, 6})
        + "\nmeasure it with `specmon sweep ... --concurrency "
        + ",".join(str(e.concurrency) for e in advice.by_load)
        + "`"
    )

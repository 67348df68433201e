"""`specmon ledger list|show|export|plot`: read the recorded experiments."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from specmon.model.terminal_text import safe_text

TABLES = ("benchmarks", "sweep_points", "sweeps", "runs", "predictions", "collective_results")


EPILOG = """\
examples:
  specmon ledger list                   recent sweeps and benchmarks
  specmon ledger show s3                one sweep, its points and the best
  specmon ledger export --csv --table benchmarks > benchmarks.csv
"""
"""The examples that end `specmon ledger --help`."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ledger", metavar="PATH", help="ledger file (default: user data dir or $SPECMON_DATA_DIR)"
    )
    sub = parser.add_subparsers(dest="ledger_command", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="recent sweeps and benchmarks")
    listing.add_argument("--limit", type=int, default=20, metavar="N")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    show = sub.add_parser("show", help="one sweep (s3), benchmark (b12 or 12) or run (r5)")
    show.add_argument("id", metavar="ID")
    show.add_argument("--json", action="store_true")
    show.add_argument(
        "--objective",
        default="throughput",
        metavar="NAME",
        help="a sweep at several loads: rank by throughput (default), itl-p90 or ttft-p90",
    )
    show.add_argument(
        "--slo", action="append", default=[], metavar="SLO", help="e.g. 'itl_p90<=30ms'"
    )
    export = sub.add_parser("export", help="a whole table as CSV or JSON")
    fmt = export.add_mutually_exclusive_group(required=True)
    fmt.add_argument("--csv", action="store_true")
    fmt.add_argument("--json", action="store_true")
    export.add_argument("--table", choices=TABLES, default="benchmarks")
    plot = sub.add_parser("plot", help="tok/s vs steps per NCCL setting, baseline as a line")
    plot.add_argument("sweep", nargs="?", metavar="SWEEP", help="sweep id (default: the latest)")
    plot.add_argument(
        "--x", metavar="NAME", help="x axis (default: the sweep's step count setting)"
    )
    plot.add_argument("--width", type=int, default=80)
    plot.add_argument("--height", type=int, default=22)
    plot.add_argument("--color", action="store_true", help="colour output")
    for action_parser in (listing, show, export, plot):
        action_parser.add_argument(
            "--ledger", default=argparse.SUPPRESS, metavar="PATH", help="ledger file"
        )


def run(args: argparse.Namespace) -> int:
    from specmon.experiments.ledger import Ledger

    with Ledger(args.ledger) as ledger:
        action = {"list": _list, "show": _show, "export": _export, "plot": _plot}
        return action[args.ledger_command](ledger, args)


def parse_ref(text: str) -> tuple[str, int]:
    """'s3' -> ("sweep", 3), 'b12' or '12' -> ("benchmark", 12), 'r5' -> ("run", 5)."""
    from specmon.model.errors import UsageError

    kinds = {"s": "sweep", "b": "benchmark", "r": "run"}
    raw = text.strip().lower()
    kind = "benchmark"
    if raw[:1] in kinds:
        kind, raw = kinds[raw[:1]], raw[1:]
    if not raw.isdigit():
        raise UsageError(f"bad id {text!r}: expected s<N> (sweep), b<N> (benchmark) or r<N> (run)")
    return kind, int(raw)


def _list(ledger: Any, args: argparse.Namespace) -> int:
    import json
    import time

    from specmon.experiments.ledger import format_age
    from specmon.experiments.report import render_table

    if args.limit < 1:
        from specmon.model.errors import UsageError

        raise UsageError("--limit must be at least 1")
    sweeps = ledger.list_sweeps(args.limit)
    benchmarks = ledger.list_benchmarks(args.limit)
    if args.json:
        for sweep in sweeps:
            points = ledger.sweep_points(sweep.id)
            print(
                json.dumps(
                    {
                        "id": f"s{sweep.id}",
                        "kind": "sweep",
                        "created_at": sweep.created_at,
                        "host": sweep.host,
                        "profile": sweep.profile,
                        "status": sweep.status,
                        "note": sweep.note,
                        "points_ok": sum(p.status == "ok" for p in points),
                        "points_failed": sum(p.status == "failed" for p in points),
                    }
                )
            )
        for row in benchmarks:
            print(json.dumps({"id": f"b{row['id']}", "kind": "benchmark", **_bench_brief(row)}))
        return 0
    now = time.time()
    if not sweeps and not benchmarks:
        print(f"the ledger {ledger.path} is empty")
        return 0
    if sweeps:
        rows = []
        for sweep in sweeps:
            points = ledger.sweep_points(sweep.id)
            ok = sum(p.status == "ok" for p in points)
            failed = sum(p.status == "failed" for p in points)
            grid = " ".join(f"{a['name']}={','.join(a['values'])}" for a in sweep.spec["grid"])
            rows.append(
                [
                    f"s{sweep.id}",
                    format_age(now - sweep.created_at) + " ago",
                    sweep.host,
                    sweep.profile,
                    sweep.status,
                    f"{ok} ok, {failed} failed",
                    grid
                    + (" +baseline" if sweep.spec.get("baseline") else "")
                    + (
                        f" at c{','.join(map(str, sweep.spec['loads']))}"
                        if sweep.spec.get("loads")
                        else ""
                    ),
                ]
            )
        header = ["sweep", "when", "host", "profile", "status", "points", "grid"]
        print(safe_text(render_table(header, rows, set())))
        print()
    if benchmarks:
        rows = []
        for row in benchmarks:
            spec = {1: "on", 0: "off (baseline)"}.get(row["speculative"], "unknown")
            rows.append(
                [
                    f"b{row['id']}",
                    format_age(now - row["created_at"]) + " ago",
                    row["host"],
                    row["profile"] or "-",
                    spec,
                    f"{row['tok_s']:.1f}",
                    "-" if row["accept_len"] is None else f"{row['accept_len']:.2f}",
                    f"{row['prompt_set']} x{row['requests']} c{row['concurrency']}",
                ]
            )
        header = ["bench", "when", "host", "profile", "speculation", "tok/s", "accept", "prompts"]
        print(safe_text(render_table(header, rows, {5, 6})))
    return 0


def _bench_brief(row: dict[str, Any]) -> dict[str, Any]:
    keep = (
        "created_at",
        "host",
        "profile",
        "model",
        "speculative",
        "tok_s",
        "tok_s_median",
        "accept_len",
        "verify_ms",
        "prompt_set",
        "concurrency",
        "max_tokens",
        "requests",
    )
    return {key: row[key] for key in keep}


def _show(ledger: Any, args: argparse.Namespace) -> int:
    import json

    from specmon.model.errors import SpecmonError

    kind, number = parse_ref(args.id)
    if kind == "benchmark":
        row = ledger.get_benchmark(number)
        if row is None:
            raise SpecmonError(f"no benchmark b{number} in {ledger.path}")
        baseline = None if row["speculative"] == 0 else ledger.baseline_for_benchmark(number)
        if args.json:
            row = {**row, "baseline": _baseline_json(baseline)}
            print(json.dumps(row, default=str))
        else:
            from specmon.experiments.report import benchmark_summary

            print(safe_text(benchmark_summary(row, baseline)))
        return 0
    if kind == "run":
        run_row = ledger.get_run(number)
        if run_row is None:
            raise SpecmonError(f"no run r{number} in {ledger.path}")
        print(json.dumps(run_row, default=str) if args.json else safe_text(_run_text(run_row)))
        return 0
    sweep = ledger.get_sweep(number)
    if sweep is None:
        raise SpecmonError(f"no sweep s{number} in {ledger.path}")
    if sweep.spec.get("kind") == "collective":
        return _show_collective(ledger, sweep, json_lines=args.json)
    results, baseline = sweep_results(ledger, sweep)
    from specmon.experiments.sweep import steps_axis

    prediction = ledger.prediction_for_sweep(sweep.id)
    steps_param = steps_axis(axis["name"] for axis in sweep.spec.get("grid", [])) or ""
    if sweep.spec.get("loads"):
        return _show_loads(ledger, sweep, results, prediction, steps_param, args)
    if args.json:
        from specmon.experiments.report import predicted_vs_measured

        predicted = (
            {}
            if prediction is None
            else {
                steps: tok_s
                for steps, tok_s, _measured, _error in predicted_vs_measured(
                    prediction["advice"], results, steps_param
                )
            }
        )
        for result in results:
            row = result.to_json_dict()
            steps = result.params.get(steps_param, "")
            if steps.isdigit() and int(steps) in predicted and not result.is_baseline:
                row["predicted_tok_s"] = predicted[int(steps)]  # the advisor's, not measured
            print(json.dumps(row))
        return 0
    from specmon.experiments.report import prediction_table, sweep_table

    names = [axis["name"] for axis in sweep.spec["grid"]]
    bench = sweep.spec.get("bench", {})
    print(
        f"sweep s{sweep.id}  {sweep.host}  profile {sweep.profile}  status {sweep.status}\n"
        f"prompts {bench.get('prompt_set')}, {bench.get('requests')} requests x "
        f"{bench.get('max_tokens')} tokens, concurrency {bench.get('concurrency')}\n"
    )
    if sweep.note:
        print(safe_text(f"interrupted: {sweep.note}"))
    print(safe_text(sweep_table(results, names, baseline)))
    if prediction is not None:
        print()
        print(safe_text(prediction_table(prediction, results, steps_param)))
    return 0


def _show_loads(
    ledger: Any,
    sweep: Any,
    results: list[Any],
    prediction: dict[str, Any] | None,
    steps_param: str,
    args: argparse.Namespace,
) -> int:
    """A sweep at several loads: its points per load, the best per load against the baseline
    at that load, and the advisor's per-load prediction against what was measured."""
    import json

    from specmon.experiments.load import parse_objective, parse_slos
    from specmon.experiments.report import (
        best_per_load_table,
        load_sweep_table,
        prediction_by_load,
        prediction_by_load_table,
    )

    objective, slos = parse_objective(args.objective), parse_slos(args.slo)
    baselines = load_sweep_baselines(ledger, sweep, results)
    results = [r.with_baseline(baselines.get(r.concurrency)) for r in results]
    advice = prediction["advice"] if prediction is not None else {}
    predicted = {
        (int(entry["concurrency"]), int(step["num_steps"])): step["tok_s"]
        for entry in advice.get("by_load") or []
        for step in entry["steps"]
    }
    if args.json:
        verdicts = {
            row["concurrency"]: row for row in prediction_by_load(advice, results, steps_param)
        }
        for result in results:
            row = result.to_json_dict()
            steps = result.params.get(steps_param, "")
            key = (result.concurrency, int(steps) if steps.isdigit() else -1)
            if key in predicted and not result.is_baseline:
                row["predicted_tok_s"] = predicted[key]  # the advisor's, not measured
            if result.concurrency in verdicts:
                row["prediction_verdict"] = verdicts[result.concurrency]["verdict"]
            print(json.dumps(row))
        return 0
    names = [axis["name"] for axis in sweep.spec["grid"]]
    bench = sweep.spec.get("bench", {})
    loads = ",".join(str(load) for load in sweep.spec["loads"])
    print(
        f"sweep s{sweep.id}  {sweep.host}  profile {sweep.profile}  status {sweep.status}\n"
        f"prompts {bench.get('prompt_set')}, at least {bench.get('requests')} requests x "
        f"{bench.get('max_tokens')} tokens per load, loads {loads}, "
        f"{sweep.spec.get('repeats', 1)} repeat(s)\n"
    )
    if sweep.note:
        print(safe_text(f"interrupted: {sweep.note}"))
    print(safe_text(load_sweep_table(results, names, objective, slos, baselines)))
    print()
    print(safe_text(best_per_load_table(results, objective, slos, baselines)))
    if prediction is not None:
        print()
        print(safe_text(prediction_by_load_table(prediction, results, steps_param)))
    return 0


def load_sweep_baselines(ledger: Any, sweep: Any, results: list[Any]) -> dict[int, Any]:
    """Per load of a sweep at several loads, the newest comparable baseline at that load."""
    bench = sweep.spec.get("bench", {})
    model = next((r.model for r in results if r.status == "ok" and r.model), None)
    out = {}
    for load in sweep.spec.get("loads") or []:
        found = ledger.find_baseline(
            host=sweep.host,
            model=model,
            prompt_set=bench.get("prompt_set", "v1"),
            concurrency=int(load),
        )
        if found is not None and model is not None:
            out[int(load)] = found
    return out


def _show_collective(ledger: Any, sweep: Any, *, json_lines: bool) -> int:
    """A `specmon nccl-sweep`: per-size latencies per setting, not tok/s."""
    import json

    from specmon.experiments.collective_sweep import point_result_from_ledger
    from specmon.experiments.report import collective_table

    results = [point_result_from_ledger(ledger, row) for row in ledger.sweep_points(sweep.id)]
    if json_lines:
        for result in results:
            print(json.dumps(result.to_json_dict()))
        return 0
    names = [axis["name"] for axis in sweep.spec["grid"]]
    print(f"nccl-sweep s{sweep.id}  {sweep.host}  profile {sweep.profile}  status {sweep.status}\n")
    if sweep.note:
        print(safe_text(f"interrupted: {sweep.note}"))
    print(safe_text(collective_table(results, names)))
    return 0


def sweep_results(ledger: Any, sweep: Any) -> tuple[list[Any], Any]:
    """A stored sweep's points as results, with speed-ups vs the newest comparable baseline."""
    from specmon.experiments.sweep import stored_result

    results = [stored_result(ledger, row) for row in ledger.sweep_points(sweep.id)]
    bench = sweep.spec.get("bench", {})
    model = next((r.model for r in results if r.status == "ok" and r.model), None)
    baseline = None
    if model is not None:
        baseline = ledger.find_baseline(
            host=sweep.host,
            model=model,
            prompt_set=bench.get("prompt_set", "v1"),
            concurrency=int(bench.get("concurrency", 1)),
        )
    return [r.with_baseline(baseline) for r in results], baseline


def _baseline_json(baseline: Any) -> dict[str, Any] | None:
    if baseline is None:
        return None
    return {
        "id": f"b{baseline.benchmark_id}",
        "tok_s": baseline.tok_s,
        "measured_at": baseline.measured_at,
        "age_s": baseline.age_s(),
        "profile": baseline.profile,
    }


def _run_text(row: dict[str, Any]) -> str:
    env = " ".join(f"{k}={v}" for k, v in sorted((row.get("env") or {}).items()))
    lines = [
        f"run r{row['id']}  {row['host']}  profile {row.get('profile') or '-'}  "
        f"status {row['status']}  load {row.get('load_seconds') or 0:.1f} s",
        f"  command: {env + ' ' if env else ''}{' '.join(row.get('argv') or [])}",
    ]
    if row.get("error"):
        lines.append(f"  error: {row['error']}")
    lines.extend(f"    {line}" for line in row.get("root_cause") or [])
    return "\n".join(lines)


def _export(ledger: Any, args: argparse.Namespace) -> int:
    import csv
    import json

    rows = ledger.table(args.table)
    if args.json:
        for row in rows:
            sys.stdout.write(json.dumps(row, default=str) + "\n")
        return 0
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    writer = csv.DictWriter(sys.stdout, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(
            {k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in row.items()}
        )
    return 0


def _plot(ledger: Any, args: argparse.Namespace) -> int:
    from specmon.experiments.report import sweep_plot
    from specmon.model.errors import SpecmonError, UsageError

    if not (20 <= args.width <= 400 and 8 <= args.height <= 200):
        raise UsageError("--width must be 20..400 and --height 8..200")
    if args.sweep is None:
        sweep = ledger.latest_sweep()
        if sweep is None:
            raise SpecmonError(f"no sweep in {ledger.path} yet; run `specmon sweep` first")
    else:
        _kind, number = parse_ref(
            args.sweep if args.sweep.lower().startswith("s") else "s" + args.sweep
        )
        sweep = ledger.get_sweep(number)
        if sweep is None:
            raise SpecmonError(f"no sweep s{number} in {ledger.path}")
    results, baseline = sweep_results(ledger, sweep)
    if sweep.spec.get("loads"):
        baseline = None  # one line per load; no single baseline is comparable with them all
    x = args.x
    if x is None:
        from specmon.experiments.sweep import steps_axis

        names = [axis["name"] for axis in sweep.spec.get("grid", [])]
        x = steps_axis(names) or (names[0] if names else "steps")
    print(sweep_plot(results, baseline, x, width=args.width, height=args.height, color=args.color))
    return 0

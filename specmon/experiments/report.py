"""Text reports of experiments: the sweep table, benchmark summaries and terminal plots.

Plain strings (plotext for plots), so the CLI, logs of unattended runs and the console can all
show the same thing. Every speed-up is printed next to the baseline it was computed against.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specmon.experiments.ledger import Baseline, format_age
from specmon.experiments.load import (
    OBJECTIVES,
    Objective,
    Slo,
    best_per_load,
    meets_slos,
    rank_at_load,
    ranks_at_load,
)
from specmon.experiments.sweep import SweepPointResult, best_first, rank_results
from specmon.model.secrets import redact_params

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
NO_BASELINE = (
    "no measured baseline for this host, model, prompt set and concurrency: speed-ups are not "
    "shown (measure one with `specmon sweep ... --baseline`)"
)


# The result columns of a sweep table, after the rank and the swept parameters; the console's
# sweep table shows the same ones.
SWEEP_RESULT_COLUMNS: tuple[str, ...] = (
    "status",
    "tok/s",
    "speed-up",
    "accept len",
    "verify ms",
    "load s",
    "note",
)


def _fmt(value: float | None, digits: int = 1, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def render_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> str:
    """A plain aligned table; columns in ``right`` are right-aligned (numbers)."""
    widths = [len(h) for h in header]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def baseline_line(baseline: Baseline | None, now: float | None = None) -> str:
    return f"speed-up vs {baseline.describe(now)}" if baseline is not None else NO_BASELINE


def sweep_table(
    results: Sequence[SweepPointResult],
    param_names: Sequence[str],
    baseline: Baseline | None,
    now: float | None = None,
) -> str:
    """The final sweep table: fastest first, speed-up vs the measured baseline, failures last."""
    header = ["#", *param_names, *SWEEP_RESULT_COLUMNS]
    first_number = 1 + len(param_names) + 1
    right = set(range(first_number, first_number + 5)) | {0}
    rows: list[list[str]] = []
    rank = 0
    for result in rank_results(results):
        if result.status == "ok" and not result.is_baseline:
            rank += 1
            number = str(rank)
        else:
            number = "-"
        if result.is_baseline:
            params = ["(baseline)", *[""] * (len(param_names) - 1)] if param_names else []
            speedup = "1.00x" if result.status == "ok" and baseline is not None else "-"
        else:
            params = [result.params.get(name, "") for name in param_names]
            speedup = _fmt(result.speedup_vs_baseline, 2, "x")
        note = ""
        if result.status != "ok":
            note = result.error or "failed"
        rows.append(
            [
                number,
                *params,
                result.status,
                _fmt(result.tok_s),
                speedup,
                _fmt(result.accept_len, 2),
                _fmt(result.verify_ms, 2),
                _fmt(result.load_seconds),
                note,
            ]
        )
    return render_table(header, rows, right) + "\n" + baseline_line(baseline, now)


def benchmark_summary(row: Mapping[str, Any], baseline: Baseline | None) -> str:
    """A stored benchmark (ledger row) as readable lines."""
    now = time.time()
    spec = row.get("speculative")
    spec_text = {1: "on", 0: "off"}.get(spec, "unknown")
    lines = [
        f"benchmark b{row['id']}  {row['host']}  profile {row.get('profile') or '-'}  "
        f"measured {format_age(now - row['created_at'])} ago",
        f"  model {row.get('model') or '-'}  server {row.get('server_version') or '-'}  "
        f"speculation {spec_text}  specmon {row.get('specmon_version')}",
        f"  prompts {row['prompt_set']}  {row['requests']} requests x {row['max_tokens']} tokens"
        f"  concurrency {row['concurrency']}  warm-up {row['warmup']}",
        f"  tok/s {row['tok_s']:.1f} overall; per request median {row['tok_s_median']:.1f}"
        f" (p10 {row['tok_s_p10']:.1f}, p90 {row['tok_s_p90']:.1f})",
        f"  TTFT median {_fmt(row.get('ttft_median_ms'), 0, ' ms')}"
        f" (p90 {_fmt(row.get('ttft_p90_ms'), 0, ' ms')})"
        f"  accept len {_fmt(row.get('accept_len'), 2)}"
        f" (/metrics {_fmt(row.get('metrics_accept_len'), 2)})",
    ]
    if row.get("verify_ms") is not None:
        lines.append(
            f"  per cycle ({row.get('timing_source')}): draft {row['draft_ms']:.2f} ms, "
            f"verify {row['verify_ms']:.2f} ms, extend {row['extend_ms']:.2f} ms"
        )
    argv = row.get("argv") or []
    env = row.get("env") or {}
    if argv:
        env_text = " ".join(f"{k}={v}" for k, v in sorted(env.items()))
        lines.append(f"  command: {env_text + ' ' if env_text else ''}{' '.join(argv)}")
    if spec == 0:
        lines.append("  this is a measured baseline (speculation off)")
    elif spec is None:
        lines.append(
            "  the server did not report its launch args: this result can never be a baseline"
        )
    elif "baseline" in (row.get("profile") or ""):
        lines.append(
            f"  profile {row['profile']} is named like a baseline, but its server reported "
            "speculation on: it is not a baseline"
        )
    elif baseline is not None:
        lines.append(f"  speed-up {row['tok_s'] / baseline.tok_s:.2f}x vs {baseline.describe(now)}")
    else:
        lines.append("  " + NO_BASELINE)
    return "\n".join(lines)


def sweep_series(
    results: Sequence[SweepPointResult], x_name: str
) -> dict[str, list[tuple[float, float]]]:
    """(x, tok/s) points per setting of the other grid parameters, x ascending: the data of
    the tok/s-vs-steps plot, for plotext here and textual-plotext in the console."""
    series: dict[str, list[tuple[float, float]]] = {}
    for result in results:
        if result.is_baseline or result.status != "ok" or result.tok_s is None:
            continue
        raw_x = result.params.get(x_name)
        if raw_x is None:
            continue
        try:
            x = float(raw_x)
        except ValueError:
            continue
        rest = {k: v for k, v in result.params.items() if k != x_name}
        if result.concurrency is not None:  # a sweep at several loads: a line per load
            rest["concurrency"] = str(result.concurrency)
        label = " ".join(f"{k}={v}" for k, v in rest.items()) or "tok/s"
        series.setdefault(label, []).append((x, result.tok_s))
    for points in series.values():
        points.sort()
    return dict(sorted(series.items()))


def sweep_plot(
    results: Sequence[SweepPointResult],
    baseline: Baseline | None,
    x_name: str,
    *,
    width: int = 80,
    height: int = 20,
    color: bool = False,
) -> str:
    """tok/s against ``x_name`` (e.g. steps), one line per setting of the other parameters,
    with the measured baseline as a horizontal line."""
    import plotext as plt

    series = sweep_series(results, x_name)
    if not series:
        return f"nothing to plot: no finished point has a numeric {x_name}"
    plt.clear_figure()
    plt.plotsize(width, height)
    if not color:
        plt.theme("clear")
    markers = ("dot", "x", "+", "star", "o", "sd", "hd", "braille")
    for number, (label, points) in enumerate(series.items()):
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        plt.plot(xs, ys, label=label, marker=markers[number % len(markers)])
    values = [p[1] for points in series.values() for p in points]
    if baseline is not None:
        values.append(baseline.tok_s)
    low, high = min(values), max(values)
    margin = max(1.0, (high - low) * 0.1)
    plt.ylim(max(0.0, low - margin), high + margin)  # keeps the baseline off the frame
    if baseline is not None:
        plt.hline(baseline.tok_s)
        plt.title(
            f"tok/s vs {x_name}; line: baseline b{baseline.benchmark_id} {baseline.tok_s:.1f}"
        )
    else:
        plt.title(f"tok/s vs {x_name} (no measured baseline)")
    plt.xlabel(x_name)
    plt.ylabel("tok/s")
    text = plt.build()
    plt.clear_figure()
    return text if color else _ANSI.sub("", text)


def progress_printer(stream: Any, *, width: int = 30) -> Any:
    """A BenchProgress callback drawing a bar: redrawn in place on a TTY, one line per
    finished request otherwise (for nohup/tmux logs of unattended runs)."""
    interactive = bool(getattr(stream, "isatty", lambda: False)())

    def show(progress: Any) -> None:
        filled = int(width * progress.done / max(1, progress.total))
        bar = "#" * filled + "." * (width - filled)
        last = progress.last
        figure = ""
        if last is not None:
            figure = f"  {last.tok_s:.1f} tok/s" if last.ok else f"  failed: {last.error}"
        text = f"{progress.phase:<7} [{bar}] {progress.done}/{progress.total}{figure}"
        if interactive:
            end = "\n" if progress.done == progress.total else ""
            stream.write("\r\x1b[2K" + text + end)
        else:
            stream.write(text + "\n")
        stream.flush()

    return show


def predicted_vs_measured(
    advice: Mapping[str, Any], results: Sequence[SweepPointResult], steps_param: str
) -> list[tuple[int, float, float | None, float | None]]:
    """(steps, predicted tok/s, measured tok/s, relative error) for each step count the sweep
    measured (mean over its points at that count), from a stored ``Advice.to_dict()``."""
    predicted = {int(p["num_steps"]): float(p["tok_s"]) for p in advice.get("predictions", [])}
    measured: dict[int, list[float]] = {}
    for result in results:
        steps = result.params.get(steps_param, "")
        if result.is_baseline or result.status != "ok" or not steps.isdigit():
            continue
        if result.tok_s is not None:
            measured.setdefault(int(steps), []).append(result.tok_s)
    rows = []
    for steps in sorted(set(measured) & set(predicted)):
        mean = sum(measured[steps]) / len(measured[steps])
        error = predicted[steps] / mean - 1 if mean > 0 else None
        rows.append((steps, predicted[steps], mean, error))
    return rows


def prediction_table(
    prediction: Mapping[str, Any], results: Sequence[SweepPointResult], steps_param: str
) -> str:
    """The advisor's prediction made before a sweep, next to what the sweep measured."""
    advice = prediction["advice"]
    inputs = advice["inputs"]
    rows = [
        [
            str(steps),
            f"{predicted:.1f}",
            _fmt(measured),
            "-" if error is None else f"{error * 100:+.1f}%",
            "recommended" if steps == advice["recommended"]["num_steps"] else "",
        ]
        for steps, predicted, measured, error in predicted_vs_measured(advice, results, steps_param)
    ]
    head = (
        f"advisor PREDICTION p{prediction['id']} ({prediction['source']}, before the sweep): "
        f"from {inputs['cycles']} probe cycles at {inputs['num_steps']} steps, "
        f"{inputs['requests_per_cycle']:.1f} requests per cycle; recommended "
        f"{advice['recommended']['num_steps']} steps"
    )
    if not rows:
        return head + "\n(no measured point at a predicted step count)"
    header = ["steps", "predicted tok/s", "measured tok/s", "error", ""]
    return head + "\n" + render_table(header, rows, {0, 1, 2, 3})


def collective_table(results: Sequence[Any], param_names: Sequence[str]) -> str:
    """A collective sweep's table: one row per setting, the per-call p50 latency (us) for each
    batch size and the p99 at the smallest; lowest small-batch p50 first, failures last."""
    batches = sorted({r.batch for point in results for r in point.results})
    header = [
        "#",
        *param_names,
        "status",
        *(f"p50 b{b}" for b in batches),
        f"p99 b{batches[0]}" if batches else "p99",
        "note",
    ]
    first_number = 1 + len(param_names) + 1
    right = set(range(first_number, first_number + len(batches) + 1)) | {0}

    def p50(point: Any) -> float | None:
        return point.results[0].p50_us if point.status == "ok" and point.results else None

    rows: list[list[str]] = []
    rank = 0
    for point in best_first(results, p50):
        by_batch = {r.batch: r for r in point.results}
        if point.status == "ok":
            rank += 1
        smallest = by_batch.get(batches[0]) if batches else None
        rows.append(
            [
                str(rank) if point.status == "ok" else "-",
                *(point.params.get(name, "") for name in param_names),
                point.status,
                *(_fmt(by_batch[b].p50_us if b in by_batch else None) for b in batches),
                _fmt(smallest.p99_us if smallest else None),
                "" if point.status == "ok" else (point.error or "failed"),
            ]
        )
    return render_table(header, rows, right)


# --- sweeps at several loads ----------------------------------------------------------------


def setting_label(result: SweepPointResult) -> str:
    """A point's setting as text (secrets masked); "(baseline)" for the baseline."""
    if result.is_baseline:
        return "(baseline)"
    return " ".join(f"{k}={v}" for k, v in redact_params(result.params).items())


def _spread(spread: Sequence[float] | None, digits: int = 1) -> str:
    return "-" if spread is None else f"{spread[0]:.{digits}f}-{spread[1]:.{digits}f}"


@dataclass(frozen=True, slots=True)
class LoadBaseline:
    """The baseline's figures at one load, from the sweep's own baseline point or the ledger."""

    tok_s: float
    ttft_p90_ms: float | None
    itl_p90_ms: float | None
    source: str  # "this sweep" or "b<N>"


def load_baselines(
    results: Sequence[SweepPointResult], baselines: Mapping[int, Baseline]
) -> dict[int, LoadBaseline]:
    """Per load, the baseline measured at that same load: this sweep's baseline point when it
    measured one, else the ledger's (a comparable benchmark: same host, model, prompts)."""
    out: dict[int, LoadBaseline] = {}
    for load, baseline in baselines.items():
        out[load] = LoadBaseline(
            baseline.tok_s, baseline.ttft_p90_ms, baseline.itl_p90_ms, f"b{baseline.benchmark_id}"
        )
    for result in results:
        if result.is_baseline and result.status == "ok" and result.load is not None:
            figures = result.load
            out[figures.concurrency] = LoadBaseline(
                figures.tok_s, figures.ttft_p90_ms, figures.itl_p90_ms, "this sweep"
            )
    return out


def _versus(objective: Objective, value: float | None, base: float | None) -> str:
    """The best point against the baseline on the objective: a speed-up (throughput) or the
    latency ratio (lower is better)."""
    if value is None or not base:
        return "-"
    if objective.higher_is_better:
        return f"{value / base:.2f}x"
    return f"{value / base:.2f}x {objective.label.removesuffix(' ms')}"


def order_key(
    result: SweepPointResult, ranks: Mapping[int, int], objective: Objective, last: int
) -> tuple[bool, int, float]:
    """A load's rows: the baseline first, then by rank (``ranks_at_load``), a tie best first
    by the objective's value, the unranked (failed) last."""
    value = objective.value(result.load) or 0.0
    key = -value if objective.higher_is_better else value
    return (not result.is_baseline, ranks.get(id(result), last + 1), key)


def load_sweep_table(
    results: Sequence[SweepPointResult],
    param_names: Sequence[str],
    objective: Objective,
    slos: Sequence[Slo] = (),
    baselines: Mapping[int, Baseline] | None = None,
) -> str:
    """Every point of a sweep at several loads, load by load, ranked by ``objective``; tied
    points share a rank ("=1"); SLO misses after the points that meet them, failures last."""
    header = [
        "load",
        "#",
        *param_names,
        "status",
        "tok/s",
        "tok/s spread",
        "tok/s/req",
        "TTFT p90 ms",
        "ITL p90 ms",
        "ITL p90 spread",
        "speed-up",
        *(["SLO"] if slos else []),
        "note",
    ]
    numbers = set(range(len(param_names) + 3, len(param_names) + 10)) | {0, 1}
    ranks = ranks_at_load(results, objective, slos)
    base = load_baselines(results, baselines or {})
    rows: list[list[str]] = []
    for load in sorted({r.concurrency for r in results if r.concurrency is not None}):
        here = [r for r in results if r.concurrency == load]
        ordered = sorted(here, key=lambda r: order_key(r, ranks, objective, len(here)))
        for result in ordered:
            figures = result.load
            rank = ranks.get(id(result))
            tied = sum(1 for r in here if rank is not None and ranks.get(id(r)) == rank) > 1
            number = "-" if rank is None else f"{'=' if tied else ''}{rank}"
            if result.is_baseline:
                params = ["(baseline)", *[""] * (len(param_names) - 1)] if param_names else []
                speedup = "1.00x" if result.status == "ok" else "-"
            else:
                params = [redact_params(result.params).get(name, "") for name in param_names]
                speedup = _fmt(result.speedup_vs_baseline, 2, "x")
                if result.speedup_vs_baseline is None and load in base and figures is not None:
                    speedup = f"{figures.tok_s / base[load].tok_s:.2f}x"
            slo_cell: list[str] = []
            if slos:
                met = figures is not None and meets_slos(figures, slos)
                slo_cell = ["-" if figures is None else ("met" if met else "missed")]
            rows.append(
                [
                    str(load),
                    number,
                    *params,
                    result.status,
                    _fmt(figures.tok_s if figures else result.tok_s),
                    _spread(figures.tok_s_spread) if figures else "-",
                    _fmt(figures.tok_s_per_request if figures else None),
                    _fmt(figures.ttft_p90_ms if figures else None),
                    _fmt(figures.itl_p90_ms if figures else None, 2),
                    _spread(figures.itl_p90_spread, 2) if figures else "-",
                    speedup,
                    *slo_cell,
                    "" if result.status == "ok" else (result.error or "failed"),
                ]
            )
    return render_table(header, rows, numbers)


def best_per_load_table(
    results: Sequence[SweepPointResult],
    objective: Objective,
    slos: Sequence[Slo] = (),
    baselines: Mapping[int, Baseline] | None = None,
) -> str:
    """The result of a sweep at several loads: per load, the best setting for ``objective``
    (a tie shown as one row: "a ~ b"), next to the baseline measured at that same load."""
    base = load_baselines(results, baselines or {})
    header = [
        "load",
        "best setting",
        "tok/s",
        "TTFT p90 ms",
        "ITL p90 ms",
        "baseline tok/s",
        "baseline ITL p90 ms",
        "vs baseline",
        "note",
    ]
    rows: list[list[str]] = []
    for entry in best_per_load(results, objective, slos):
        baseline = base.get(entry.concurrency)
        if not entry.best:
            rows.append([str(entry.concurrency), "(nothing measured)", *["-"] * 6, ""])
            continue
        lead = entry.best[0].load
        notes = []
        if len(entry.best) > 1:
            notes.append(f"tie of {len(entry.best)}: spreads overlap")
        if slos and not entry.meets_slo:
            notes.append("no setting meets the SLO; the best of the rest shown")
            if entry.baseline is not None and meets_slos(entry.baseline.load, slos):
                notes.append("the baseline meets it")
        if baseline is None:
            notes.append("no baseline at this load")
        elif baseline.source != "this sweep":
            notes.append(f"baseline {baseline.source}")
        base_value = None
        if baseline is not None:
            base_value = {
                "tok_s": baseline.tok_s,
                "itl_p90_ms": baseline.itl_p90_ms,
                "ttft_p90_ms": baseline.ttft_p90_ms,
            }[objective.field]
        rows.append(
            [
                str(entry.concurrency),
                " ~ ".join(setting_label(p) for p in entry.best),
                _fmt(lead.tok_s),
                _fmt(lead.ttft_p90_ms),
                _fmt(lead.itl_p90_ms, 2),
                _fmt(baseline.tok_s if baseline else None),
                _fmt(baseline.itl_p90_ms if baseline else None, 2),
                _versus(objective, objective.value(lead), base_value),
                "; ".join(notes),
            ]
        )
    slo_text = f"; SLO {' and '.join(slo.text() for slo in slos)}" if slos else ""
    direction = "highest" if objective.higher_is_better else "lowest"
    head = (
        f"best per load for {objective.name} ({direction} {objective.label}){slo_text}; "
        "a tie: spreads that overlap (docs/experiments.md)"
    )
    return head + "\n" + render_table(header, rows, {0, 2, 3, 4, 5, 6})


def prediction_by_load(
    advice: Mapping[str, Any], results: Sequence[SweepPointResult], steps_param: str
) -> list[dict[str, Any]]:
    """The advisor's best step count per load against the sweep's measured best (by
    throughput, what the advisor predicts): "confirmed" when a step count of the measured
    best tie group lies in the predicted range, "refuted" when none does, "untested" when the
    grid measured no step count in that range (or nothing at that load)."""
    throughput = OBJECTIVES["throughput"]
    out: list[dict[str, Any]] = []
    for entry in advice.get("by_load") or []:
        load = int(entry["concurrency"])
        low, high = int(entry["steps_low"]), int(entry["steps_high"])
        here = [
            r
            for r in results
            if r.concurrency == load and not r.is_baseline and r.params.get(steps_param, "")
        ]
        grid = {int(r.params[steps_param]) for r in here if r.params[steps_param].isdigit()}
        measured = [r for r in here if r.status == "ok" and r.load is not None]
        groups = rank_at_load(measured, throughput)
        best = sorted(
            {int(r.params[steps_param]) for r in groups[0] if r.params[steps_param].isdigit()}
            if groups
            else set()
        )
        if not best or not any(low <= k <= high for k in grid):
            verdict = "untested"
        elif any(low <= k <= high for k in best):
            verdict = "confirmed"
        else:
            verdict = "refuted"
        out.append(
            {
                "concurrency": load,
                "predicted_steps": int(entry["recommended_steps"]),
                "predicted_low": low,
                "predicted_high": high,
                "measured_best_steps": best,
                "verdict": verdict,
            }
        )
    return out


def prediction_by_load_table(
    prediction: Mapping[str, Any], results: Sequence[SweepPointResult], steps_param: str
) -> str:
    """The advisor's per-load PREDICTION (made before the sweep) next to what it measured."""
    rows = [
        [
            str(row["concurrency"]),
            f"{row['predicted_steps']} ({row['predicted_low']}-{row['predicted_high']})",
            " ~ ".join(map(str, row["measured_best_steps"])) or "-",
            row["verdict"],
        ]
        for row in prediction_by_load(prediction["advice"], results, steps_param)
    ]
    head = (
        f"advisor PREDICTION p{prediction['id']} per load ({prediction['source']}, before the "
        "sweep): best step count (range over the uncertain inputs) vs the measured best"
    )
    if not rows:
        return head + "\n(the prediction has no per-load part)"
    header = ["load", "predicted steps", "measured best", "verdict"]
    return head + "\n" + render_table(header, rows, {0})


def load_series(
    results: Sequence[SweepPointResult], field: str
) -> dict[str, list[tuple[int, float]]]:
    """(load, figure) per setting of a sweep at several loads, loads ascending: the data of
    the console's tok/s and ITL p90 charts (``field`` a LoadFigures field)."""
    series: dict[str, list[tuple[int, float]]] = {}
    for result in results:
        if result.status != "ok" or result.load is None:
            continue
        value = getattr(result.load, field)
        if value is not None:
            series.setdefault(setting_label(result), []).append((result.load.concurrency, value))
    for points in series.values():
        points.sort()
    return series

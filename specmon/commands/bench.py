"""`specmon bench HOST`: benchmark the ready server on a host with the fixed prompt set."""

from __future__ import annotations

import argparse
import sys
from typing import Any

DEFAULT_WAIT_S = 0.0


BENCH_REQUESTS = 8
"""Measured requests of one `specmon bench`."""
SWEEP_REQUESTS = 5
"""Measured requests per point of a sweep: fewer than a bench, because a sweep measures every
point of its grid (and relaunches the server between them), so a grid of 6 points takes 30
requests rather than 48; `--requests 8` makes its points comparable with a bench."""


def add_bench_options(
    parser: argparse.ArgumentParser, *, requests: int, requests_why: str = ""
) -> None:
    """Options shared by `bench` and `sweep` (what is measured)."""
    group = parser.add_argument_group("benchmark")
    group.add_argument(
        "--requests",
        type=int,
        default=requests,
        metavar="N",
        help=f"measured requests (default {requests}{requests_why})",
    )
    group.add_argument(
        "--concurrency",
        default="1",
        metavar="N[,N...]",
        help="requests in flight at once (default 1); several (1,8,32) measure each load: "
        "at least 2 requests per slot, tok/s, TTFT and ITL with their spreads",
    )
    group.add_argument(
        "--max-tokens",
        type=int,
        default=256,
        metavar="N",
        help="tokens generated per request (default 256)",
    )
    group.add_argument(
        "--warmup",
        type=int,
        default=2,
        metavar="N",
        help="warm-up requests before measuring (default 2)",
    )
    group.add_argument(
        "--prompt-set",
        default="v1",
        metavar="VERSION",
        help="shipped prompt set version (default v1)",
    )
    group.add_argument(
        "--ledger",
        metavar="PATH",
        help="ledger file (default: the user data dir, or $SPECMON_DATA_DIR)",
    )
    loads = parser.add_argument_group("several loads (--concurrency N1,N2,...)")
    loads.add_argument(
        "--repeats",
        type=int,
        default=1,
        metavar="N",
        help="measure each load N times (default 1); the spreads cover every repeat",
    )
    loads.add_argument(
        "--objective",
        default="throughput",
        metavar="NAME",
        help="rank by throughput (default), itl-p90 or ttft-p90",
    )
    loads.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="SLO",
        help="a target a point must meet to rank first, e.g. 'itl_p90<=30ms' (repeatable)",
    )


MAX_REPEATS = 100


def load_options(args: argparse.Namespace) -> tuple[tuple[int, ...], int, Any, tuple[Any, ...]]:
    """(loads, repeats, objective, SLOs) of a command line; loads is empty for one load
    given without --objective, --slo or --repeats (the single-load output, unchanged)."""
    from specmon.experiments.load import parse_loads, parse_objective, parse_slos
    from specmon.model.errors import UsageError

    loads = parse_loads(args.concurrency)
    objective = parse_objective(args.objective)
    slos = parse_slos(args.slo)
    if not 1 <= args.repeats <= MAX_REPEATS:
        raise UsageError(f"--repeats must be from 1 to {MAX_REPEATS}, got {args.repeats}")
    several = len(loads) > 1 or args.repeats > 1 or bool(slos) or args.objective != "throughput"
    return (loads if several else ()), args.repeats, objective, slos


def bench_settings(args: argparse.Namespace) -> Any:
    from specmon.experiments.bench.runner import BenchSettings
    from specmon.experiments.load import parse_loads

    settings = BenchSettings(
        requests=args.requests,
        concurrency=parse_loads(args.concurrency)[0],
        max_tokens=args.max_tokens,
        warmup=args.warmup,
        prompt_set=args.prompt_set,
    )
    settings.validate()
    from specmon.model.prompts import load_prompt_set

    load_prompt_set(settings.prompt_set)  # an unknown version fails before anything connects
    return settings


EPILOG = """\
examples:
  specmon bench local                   the demo server here, 8 requests, recorded
  specmon bench gpu-box --concurrency 1,8,32 --repeats 2   each load: tok/s, TTFT, ITL
  specmon bench gpu-box --url http://127.0.0.1:8000 --no-record   a server specmon did not launch
"""
"""The examples that end `specmon bench --help`."""


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.commands.arguments import HOST_HELP

    parser.add_argument(
        "host",
        metavar="HOST",
        help=HOST_HELP,
    )
    parser.add_argument(
        "--profile", metavar="P", help="the profile the running server must have been launched with"
    )
    parser.add_argument(
        "--url",
        metavar="URL",
        help="benchmark this server URL directly (e.g. a server specmon did not "
        "launch); recorded under HOST",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=DEFAULT_WAIT_S,
        metavar="S",
        help="wait up to S seconds for a loading server to become ready",
    )
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.add_argument("--no-record", action="store_true", help="do not write to the ledger")
    add_bench_options(parser, requests=BENCH_REQUESTS)


def run(args: argparse.Namespace) -> int:
    import asyncio

    settings = bench_settings(args)
    load_options(args)  # a bad --slo or --objective is refused before anything connects
    if args.url is not None:
        _check_url(args.url)
    if args.wait < 0:
        from specmon.model.errors import UsageError

        raise UsageError("--wait must not be negative")
    return asyncio.run(_bench(args, settings))


def _check_url(url: str) -> None:
    from urllib.parse import urlsplit

    from specmon.model.errors import UsageError

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--url {url!r}: expected http://HOST:PORT")


async def _bench(args: argparse.Namespace, settings: Any) -> int:
    import json

    from specmon.experiments.bench.runner import run_benchmark
    from specmon.experiments.ledger import BenchContext, Ledger
    from specmon.experiments.report import benchmark_summary, progress_printer

    ledger = None if args.no_record else Ledger(args.ledger)
    loads, repeats, _objective, _slos = load_options(args)
    try:
        printer = progress_printer(sys.stderr)
        if loads:
            if args.url is not None:
                results = await measure_loads(
                    args.url.rstrip("/"), settings, loads, repeats, printer, None, None
                )
                context = BenchContext(host=args.host, profile=args.profile)
            else:
                results, context = await _bench_through_session(
                    args, settings, printer, loads, repeats
                )
            return _report_loads(args, results, context, ledger)
        if args.url is not None:
            result = await run_benchmark(args.url.rstrip("/"), settings, on_progress=printer)
            context = BenchContext(host=args.host, profile=args.profile)
        else:
            (result,), context = await _bench_through_session(args, settings, printer)
        if ledger is None:
            payload = result.to_dict()
            print(json.dumps(payload) if args.json else _unrecorded_summary(result))
            return 0
        bench_id = ledger.record_benchmark(result, context)
        row = ledger.get_benchmark(bench_id)
        assert row is not None
        baseline = ledger.baseline_for_benchmark(bench_id)
        if args.json:
            payload = {
                **result.to_dict(),
                "id": bench_id,
                "host": context.host,
                "profile": context.profile,
            }
            if baseline is not None and result.speculative:
                payload["baseline"] = {
                    "id": baseline.benchmark_id,
                    "tok_s": baseline.tok_s,
                    "age_s": baseline.age_s(),
                }
                payload["speedup_vs_baseline"] = baseline.speedup(result.tok_s_overall)
            else:
                payload["baseline"] = None
                payload["speedup_vs_baseline"] = None
            print(json.dumps(payload))
        else:
            print(benchmark_summary(row, None if row["speculative"] == 0 else baseline))
        return 0
    finally:
        if ledger is not None:
            ledger.close()


async def measure_loads(
    base_url: str,
    settings: Any,
    loads: tuple[int, ...],
    repeats: int,
    printer: Any,
    bus: Any,
    backend: str | None,
) -> list[Any]:
    """One (merged) result per load: ``repeats`` measurements of each, warm-up before the
    first, with the probe's phase times when a host session's ``bus`` is given."""
    import contextlib
    from dataclasses import replace

    from specmon.experiments.bench.runner import merge_repeats, run_benchmark
    from specmon.experiments.bench.timing import ProbeCollector
    from specmon.experiments.load import requests_at

    out = []
    for load in loads:
        at_load = replace(settings, concurrency=load, requests=requests_at(settings.requests, load))
        sys.stderr.write(f"concurrency {load}: {at_load.requests} requests x {repeats}\n")
        measured = []
        for repeat in range(repeats):
            async with (
                ProbeCollector(bus) if bus is not None else contextlib.nullcontext()
            ) as probes:
                measured.append(
                    await run_benchmark(
                        base_url,
                        at_load if repeat == 0 else replace(at_load, warmup=0),
                        on_progress=printer,
                        phase_timing=probes.phase_times if probes is not None else None,
                        backend=backend,
                    )
                )
        out.append(merge_repeats(measured))
    return out


def _report_loads(args: argparse.Namespace, results: list[Any], context: Any, ledger: Any) -> int:
    """Each load's result: one JSON object per load (--json), else a table; recorded (one
    benchmark per load) unless --no-record, each against the baseline at its own load."""
    import json

    from specmon.experiments.load import load_figures
    from specmon.experiments.report import render_table

    rows = []
    for result in results:
        figures = load_figures(result)
        payload: dict[str, Any] = {**result.to_dict(), **figures.to_json_dict()}
        baseline = None
        if ledger is not None:
            bench_id = ledger.record_benchmark(result, context)
            payload.update(id=bench_id, host=context.host, profile=context.profile)
            if result.speculative:
                baseline = ledger.baseline_for_benchmark(bench_id)
        payload["baseline"] = (
            None
            if baseline is None
            else {"id": baseline.benchmark_id, "tok_s": baseline.tok_s, "age_s": baseline.age_s()}
        )
        speedup = None if baseline is None else baseline.speedup(result.tok_s_overall)
        payload["speedup_vs_baseline"] = speedup
        if args.json:
            print(json.dumps(payload))
        rows.append(
            [
                str(figures.concurrency),
                f"{figures.tok_s:.1f}",
                f"{figures.tok_s_spread[0]:.1f}-{figures.tok_s_spread[1]:.1f}",
                f"{figures.tok_s_per_request:.1f}",
                _ms(figures.ttft_p90_ms, 1),
                _ms(figures.itl_p90_ms, 2),
                "-" if speedup is None else f"{speedup:.2f}x",
                "-" if baseline is None else f"b{baseline.benchmark_id}",
            ]
        )
    header = [
        "load",
        "tok/s",
        "tok/s spread",
        "tok/s/req",
        "TTFT p90 ms",
        "ITL p90 ms",
        "speed-up",
        "baseline",
    ]
    table = render_table(header, rows, {0, 1, 3, 4, 5, 6})
    if ledger is None:
        table += "\nnot recorded (--no-record), so no baseline comparison"
    print(table, file=sys.stderr if args.json else sys.stdout)
    return 0


def _ms(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


async def _bench_through_session(
    args: argparse.Namespace,
    settings: Any,
    printer: Any,
    loads: tuple[int, ...] = (),
    repeats: int = 1,
) -> Any:
    from specmon.experiments.bench.runner import run_benchmark
    from specmon.experiments.bench.timing import ProbeCollector
    from specmon.experiments.ledger import BenchContext
    from specmon.experiments.sweep import session_base_url
    from specmon.launch.config import load_config
    from specmon.model.errors import SpecmonError
    from specmon.session import open_session

    config = load_config(getattr(args, "config", None))
    session = open_session(args.host, config)
    await session.start()
    try:
        run = session.current_run
        if run is None or not run.alive:
            raise SpecmonError(
                f"no server is running on {session.host_label}; start one with "
                f"`specmon launch {args.host} --profile P` (or give --url)"
            )
        if args.profile and run.profile != args.profile:
            raise SpecmonError(
                f"the server on {session.host_label} runs profile {run.profile!r}, "
                f"not {args.profile!r}"
            )
        store = await _wait_ready(session, args.wait)
        if store.run_state != "ready":
            raise SpecmonError(
                f"the server on {session.host_label} is {store.run_state}, not ready"
                + ("" if args.wait else "; add --wait SECONDS to wait for it")
            )
        base_url = await session_base_url(session)
        if loads:
            results = await measure_loads(
                base_url, settings, loads, repeats, printer, session.bus, run.backend
            )
        else:
            async with ProbeCollector(session.bus) as probes:
                results = [
                    await run_benchmark(
                        base_url,
                        settings,
                        on_progress=printer,
                        phase_timing=probes.phase_times,
                        backend=run.backend,
                    )
                ]
        context = BenchContext(
            host=session.host_label,
            profile=run.profile,
            argv=tuple(run.argv),
            env=dict(run.env),
            fingerprint=getattr(session, "run_fingerprint", None) or run.fingerprint,
            run_id=run.run_id,
        )
        return results, context
    finally:
        await session.close()


async def _wait_ready(session: Any, wait_s: float) -> Any:
    """The store once the run is ready, failed or hung, or after ``wait_s`` seconds."""
    import asyncio

    store = session.bus.store
    if wait_s <= 0:
        return store
    try:
        return await session.wait_for(
            lambda s: s.run_state in ("ready", "failed", "hung"), timeout=wait_s
        )
    except asyncio.TimeoutError:
        return store


def _unrecorded_summary(result: Any) -> str:
    return (
        f"tok/s {result.tok_s_overall:.1f} overall; per request median {result.tok_s_median:.1f}"
        f" (p10 {result.tok_s_p10:.1f}, p90 {result.tok_s_p90:.1f}); not recorded (--no-record),"
        " so no baseline comparison"
    )

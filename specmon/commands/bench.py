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
        type=int,
        default=1,
        metavar="N",
        help="requests in flight at once (default 1)",
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


def bench_settings(args: argparse.Namespace) -> Any:
    from specmon.experiments.bench.runner import BenchSettings

    settings = BenchSettings(
        requests=args.requests,
        concurrency=args.concurrency,
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
  specmon bench gpu-box --concurrency 4 --requests 32
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
    try:
        printer = progress_printer(sys.stderr)
        if args.url is not None:
            result = await run_benchmark(args.url.rstrip("/"), settings, on_progress=printer)
            context = BenchContext(host=args.host, profile=args.profile)
        else:
            result, context = await _bench_through_session(args, settings, printer)
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


async def _bench_through_session(args: argparse.Namespace, settings: Any, printer: Any) -> Any:
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
        async with ProbeCollector(session.bus) as probes:
            result = await run_benchmark(
                base_url,
                settings,
                on_progress=printer,
                phase_timing=probes.phase_times,
                backend=run.backend,
            )
        context = BenchContext(
            host=session.host_label,
            profile=run.profile,
            argv=tuple(run.argv),
            env=dict(run.env),
        )
        return result, context
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

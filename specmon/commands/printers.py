"""What the headless host commands (launch, stop, status, watch, demo, connect) share:
host arguments, building a session from them, and printing the event stream."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shlex
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import IO, Any, TypeVar

from specmon.model.errors import UsageError
from specmon.model.events import (
    AcceptanceCollapse,
    AgentStatus,
    ConnectionState,
    Decode,
    DraftInfo,
    Event,
    GpuSample,
    HealthStatus,
    Latency,
    LoadBegin,
    LogLine,
    MetricsSnapshot,
    Notice,
    ProbeTiming,
    Ready,
    RunInfo,
    RunState,
    ServerError,
    ServerFailed,
    ServerInfo,
    ShardProgress,
    StopProgress,
)
from specmon.model.terminal_text import safe_text
from specmon.state.controller import BesideService

T = TypeVar("T")


def load_config_from(args: argparse.Namespace) -> Any:
    from specmon.launch.config import load_config

    return load_config(getattr(args, "config", None))


def session_from_args(args: argparse.Namespace, config: Any, **kwargs: Any) -> Any:
    from dataclasses import replace

    from specmon.session import SessionOptions, open_session

    options = SessionOptions()
    if args.gpu_agent:
        options = replace(options, gpu_agent=args.gpu_agent)
    if getattr(args, "attach", None):
        options = replace(options, attach=attach_text(args.attach))
    session = open_session(
        args.host,
        config,
        options=options,
        known_hosts=args.known_hosts,
        ssh_config=tuple(args.ssh_config) if args.ssh_config else None,
        identity_files=tuple(args.identity or ()),
        **kwargs,
    )
    if args.state_dir:
        session.use_state_dir(args.state_dir)
    session.stop_command = stop_command(args)
    if getattr(args, "command", None):  # named in the stop records of the runs it stops
        session.command_name = f"specmon {args.command}"
    return session


def sessions_from_args(
    args: argparse.Namespace, config: Any, names: list[str], **kwargs: Any
) -> list[tuple[str, Any]]:
    """One session per host name (each its own transport, state and reconnects), in order.
    ``attach_profile`` (in kwargs): the profile whose ``attach`` key `connect`/`watch -p`
    follow, unless ``--attach`` is given."""
    attach = getattr(args, "attach", None)
    if attach and len(names) > 1 and attach_text(attach) != "auto":
        raise UsageError(f"--attach {attach} names one server: give one host (or --attach auto)")
    profile = kwargs.get("attach_profile")
    if not attach and profile is not None and len(names) > 1 and profile.attach != "auto":
        raise UsageError(
            f"profile {profile.name!r} attaches to {profile.attach}, one server: give one host"
        )
    return [
        (
            name,
            session_from_args(argparse.Namespace(**{**vars(args), "host": name}), config, **kwargs),
        )
        for name in names
    ]


def attach_text(text: str) -> str:
    """``--attach``'s value checked (UsageError in one line), as the session takes it."""
    from specmon.model.attach_target import parse_attach_target

    try:
        return parse_attach_target(text).text()
    except ValueError as exc:
        raise UsageError(f"--attach: {exc}") from None


def stop_command(args: argparse.Namespace) -> str:
    """The `specmon stop` command line that reaches the same host and state dir as ``args``
    (for advice in refusals)."""
    words = ["specmon"]
    if getattr(args, "config", None):
        words += ["--config", str(args.config)]  # an option of specmon, before the subcommand
    words += ["stop", args.host]
    for option, values in (
        ("--known-hosts", [args.known_hosts] if args.known_hosts else []),
        ("--ssh-config", args.ssh_config or []),
        ("--identity", args.identity or []),
        ("--state-dir", [args.state_dir] if args.state_dir else []),
    ):
        for value in values:
            words += [option, value]
    return shlex.join(words)


def parse_assignments(items: list[str] | None, what: str) -> dict[str, str]:
    """``--set flag=value`` / ``--env NAME=VALUE`` into a dict, with a clear error."""
    out: dict[str, str] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"{what} {item!r}: expected NAME=VALUE")
        out[name.strip().removeprefix("--")] = value
    return out


def run_async(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a command's coroutine; SIGTERM and SIGHUP end it as Ctrl-C does, so clean-ups
    (closing streams, the demo stopping its server) still run."""

    async def main() -> T:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        if task is not None:
            for sig in (signal.SIGTERM, signal.SIGHUP):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, task.cancel)
        try:
            return await factory()
        finally:
            for sig in (signal.SIGTERM, signal.SIGHUP):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(sig)

    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def describe_event(event: Event) -> str | None:
    """One line of human text for an event, or None for events too chatty to print (and the
    copies of start-up lines that every TP rank but 0 prints)."""
    if event.rank not in (None, 0):
        return None
    if isinstance(event, ConnectionState):
        extra = f" (attempt {event.attempt})" if event.state == "reconnecting" else ""
        detail = f": {event.detail}" if event.detail else ""
        return f"connection  {event.host} {event.state}{extra}{detail}"
    if isinstance(event, RunInfo):
        if event.replaces:
            return (
                f"run         following {event.run_id} (profile {event.profile}, pid "
                f"{event.pid}, launched by {event.owner or 'another client'}; it replaced "
                f"{event.replaces})"
            )
        if event.foreign:
            return (
                f"run         attached to pid {event.pid} ({event.backend}, run by "
                f"{event.owner or '?'}; not launched by specmon; log: {event.log_source})"
            )
        if event.pid is None and event.profile is None and event.backend:  # a URL's server
            return f"run         watching {event.run_id} ({event.backend}, HTTP only)"
        how = "reattached" if event.reattached else "launched"
        took = f"; it took over {event.took_over}" if event.took_over else ""
        return f"run         {how} {event.run_id} (profile {event.profile}, pid {event.pid}{took})"
    if isinstance(event, RunState):
        return f"run state   {event.state}" + (f" ({event.detail})" if event.detail else "")
    if isinstance(event, ShardProgress):
        return f"loading     shards {event.done}/{event.total}"
    if isinstance(event, Ready):
        return "ready       the server is ready"
    if isinstance(event, Decode):
        accept = f", accept len {event.accept_len:.2f}" if event.accept_len is not None else ""
        return f"decode      {event.gen_throughput:.1f} tok/s, {event.running_req} running{accept}"
    if isinstance(event, Latency):
        return f"latency     {latency_text(event)}"
    if isinstance(event, ServerError):
        return f"error       [{event.category}] {event.message}"
    if isinstance(event, ServerFailed):
        how = "hung" if event.hung else "failed"
        end = (
            f"signal {event.signal}"
            if event.signal is not None
            else f"exit {event.exit_code}"
            if event.exit_code is not None
            else f"last phase {event.last_phase}"
        )
        cause = " | ".join(event.root_cause[-3:])
        return f"FAILED      server {how} ({end}): {cause}"
    if isinstance(event, StopProgress):
        return f"stop        {event.step} after {event.seconds:.2f}s" + (
            f" ({event.detail})" if event.detail else ""
        )
    if isinstance(event, AgentStatus):
        return f"gpu agent   {event.state}" + (f": {event.detail}" if event.detail else "")
    if isinstance(event, HealthStatus):
        return f"health      {event.status if event.status is not None else 'no answer'}"
    if isinstance(event, Notice):
        return f"notice      {event.message}"
    if isinstance(event, ServerInfo):  # the server's own words: made safe by print_event
        return "server info " + ", ".join(f"{name} {value}" for name, value in event.values)
    if isinstance(event, DraftInfo):
        from specmon.backends.draft_info import wiring_line

        said = [wiring_line(event), *event.problems, *event.errors]
        return "draft       " + safe_text("; ".join(said))
    if isinstance(event, AcceptanceCollapse):
        if event.cleared:
            return f"collapse    over: {event.message}"
        return f"COLLAPSE    {event.message}"
    if isinstance(event, (GpuSample, ProbeTiming, MetricsSnapshot, LogLine)):
        return None
    name = type(event).__name__
    fields = {k: v for k, v in event.to_dict().items() if k not in ("kind", "ts", "rank")}
    return (
        f"{event.kind:<11} " + ", ".join(f"{k}={v}" for k, v in fields.items() if v is not None)
        if fields
        else name
    )


def _seconds(value: float | None) -> str:
    """As the console's latency panel says it (a bound of 0.5 ms read "<0 ms" here)."""
    from specmon.model.durations import format_latency

    return "-" if value is None else format_latency(value)


def latency_text(event: Latency) -> str:
    """A ``latency`` event in one line: p50/p90 of what the server serves, then capacity,
    then the saturation flags in capitals (absent figures left out)."""
    parts: list[str] = []
    for label, figures in (
        ("TTFT", event.ttft_s),
        ("ITL", event.itl_s),
        ("e2e", event.e2e_s),
        ("queue", event.queue_s),
    ):
        if figures is not None:
            p50, p90 = figures.shown("p50", _seconds), figures.shown("p90", _seconds)
            parts.append(f"{label} p50 {p50} p90 {p90}")
    if event.requests_per_s is not None:
        parts.append(f"{event.requests_per_s:.2f} req/s")
    if event.running is not None:
        limit = f"/{event.max_running}" if event.max_running is not None else ""
        parts.append(f"{event.running}{limit} running, {event.waiting or 0} waiting")
    if event.kv_usage is not None:
        parts.append(f"KV {event.kv_usage:.0%}")
    flags = [
        name
        for name, up in (
            ("QUEUE GROWING", event.queue_growing),
            ("KV NEAR FULL", event.kv_near_full),
            (f"{event.preemptions or 0:.0f} PREEMPTED", event.preempting),
        )
        if up
    ]
    text = ", ".join(parts) or "no latency figures on /metrics"
    return f"{text}; {', '.join(flags)}" if flags else text


def print_event(
    at: float,
    event: Event,
    *,
    as_json: bool,
    with_log: bool,
    out: IO[str],
    host: str | None = None,
) -> None:
    """One event as a JSON line or a line of text. With ``host`` (a watch of several hosts)
    the JSON carries ``"host": HOST as given`` (for a connection event it replaces the
    transport's label) and the text has the host after the clock; without, the line is the
    single-host form, unchanged."""
    if isinstance(event, LogLine) and not with_log:
        return
    where = f"{host}  " if host is not None else ""
    if as_json:
        data = event.to_dict()
        data["at"] = round(at, 3)
        if host is not None:
            data["host"] = host
        out.write(json.dumps(data, default=str) + "\n")
    elif isinstance(event, LogLine):
        out.write(f"{_clock(at)}  {where}log         {safe_text(event.text)}\n")
    else:
        text = describe_event(event)
        if text is None:
            return
        out.write(f"{_clock(at)}  {where}{safe_text(text)}\n")
    out.flush()


def until_reached(until: str | None, event: Event, store: Any) -> bool | None:
    """True when ``--until`` is met, False when it can no longer be (the run failed or ended
    first), None to keep going."""
    if until is None:
        return None
    failed = isinstance(event, ServerFailed)
    ended = isinstance(event, RunState) and event.state in ("stopped", "failed")
    if until == "ready":
        if isinstance(event, Ready) or (isinstance(event, RunState) and event.state == "ready"):
            return True
        return False if failed or ended else None
    if until == "failed":
        return True if failed else (False if ended else None)
    if until == "exit":
        return True if (failed or ended) else None
    return None


# How long `--until ready` goes on printing once the health endpoint said ready before the
# log's own ready line was read: the log's last loading lines and that ready line follow.
READY_LOG_GRACE_S = 5.0


async def stream_events(
    session: Any,
    *,
    as_json: bool,
    with_log: bool,
    until: str | None,
    duration: float | None,
    out: IO[str] = sys.stdout,
    queue: asyncio.Queue[tuple[float, Event]] | None = None,
    run_id: str | None = None,
    host: str | None = None,
    ready_log_grace_s: float = READY_LOG_GRACE_S,
) -> int:
    """Print the session's events until ``until`` or ``duration``; the exit code says which
    (0 reached or ran for the duration, 1 the run failed or ended first, or the session gave
    up on the host: a refused host key, or reconnecting ran out of attempts). With ``run_id``,
    only that run's events count (and are printed): a relaunch's queue also holds the
    previous run's replayed ``ready`` and its ``stopped``, which say nothing of the new run.

    Watching a start (a ``load_begin`` printed), ``--until ready`` met by the health endpoint
    (a ``run_state`` ready) still prints the log's lines up to its ``ready``, for at most
    ``ready_log_grace_s``: the log tail can be behind the health poll, and its last loading
    events would otherwise never be printed."""
    queue = queue if queue is not None else session.bus.subscribe()
    deadline = time.monotonic() + duration if duration is not None else None
    in_run = run_id is None
    loading_seen = False
    grace_end: float | None = None
    try:
        while True:
            now = time.monotonic()
            if grace_end is not None and now >= grace_end:
                return 0
            timeout = None if deadline is None else deadline - now
            if timeout is not None and timeout <= 0:
                return 0 if until is None else 1
            if grace_end is not None:
                timeout = grace_end - now if timeout is None else min(timeout, grace_end - now)
            try:
                at, event = await asyncio.wait_for(queue.get(), timeout)
            except asyncio.TimeoutError:
                continue
            if not in_run:
                in_run = isinstance(event, RunInfo) and event.run_id == run_id
                if not in_run:
                    continue  # the previous run's events, queued before the new run began
            if run_id is not None and getattr(event, "run_id", None) not in (None, run_id):
                continue
            print_event(at, event, as_json=as_json, with_log=with_log, out=out, host=host)
            if isinstance(event, ConnectionState) and event.state == "disconnected":
                return 1  # the session gave up on the host (a host key refused, or no reconnect)
            loading_seen = loading_seen or isinstance(event, LoadBegin)
            reached = until_reached(until, event, session.bus.store)
            health_first = until == "ready" and isinstance(event, RunState)
            if reached and loading_seen and health_first:
                if grace_end is None:  # the health endpoint told first: the log follows
                    grace_end = time.monotonic() + ready_log_grace_s
                continue
            if reached is not None:
                return 0 if reached else 1
    finally:
        session.bus.unsubscribe(queue)


def watch_headless(
    session: Any, args: argparse.Namespace, beside: Sequence[BesideService] = ()
) -> int:
    """Start ``session``, print its events as `watch` does (text or JSON lines, ``--until``,
    ``--duration``), and close it however the watch ends: the one headless loop shared by
    `specmon watch`, `specmon connect --headless` and `specmon demo --headless`. The
    ``beside`` services are started first and closed after the session, for as long as the
    watch runs (`connect --export`)."""

    async def main() -> int:
        queue = session.bus.subscribe()  # before start: not one early event is missed
        async with contextlib.AsyncExitStack() as services:
            for service in beside:
                await service.start()
                services.push_async_callback(service.close)
            try:
                await session.start()
                return await stream_events(
                    session,
                    as_json=args.json,
                    with_log=args.log,
                    until=args.until,
                    duration=args.duration,
                    queue=queue,
                )
            finally:
                await session.close()

    return run_async(main)


def watch_fleet_headless(sessions: list[tuple[str, Any]], args: argparse.Namespace) -> int:
    """`watch_headless` over several hosts at once: each connected in parallel with its own
    session; every line names its host. A host that cannot be reached prints why on its own
    line and ends its own watch; the others go on. Exit code 0 only if every host's watch
    reached its end (``--until``, ``--duration``) as the single-host watch would."""
    from specmon.model.errors import SpecmonError

    async def watch_one(name: str, session: Any, queue: asyncio.Queue[tuple[float, Event]]) -> int:
        try:
            try:
                await session.start()
            except (SpecmonError, OSError) as exc:
                while not queue.empty():  # what was published before it gave up
                    at, event = queue.get_nowait()
                    if not (isinstance(event, ConnectionState) and event.state == "disconnected"):
                        print_event(
                            at,
                            event,
                            as_json=args.json,
                            with_log=args.log,
                            out=sys.stdout,
                            host=name,
                        )
                failed = ConnectionState(
                    host=session.host_label, state="disconnected", detail=str(exc)
                )
                session.bus.unsubscribe(queue)
                session.bus.publish(failed)
                print_event(
                    time.time(),
                    failed,
                    as_json=args.json,
                    with_log=args.log,
                    out=sys.stdout,
                    host=name,
                )
                return 1
            return await stream_events(
                session,
                as_json=args.json,
                with_log=args.log,
                until=args.until,
                duration=args.duration,
                queue=queue,
                host=name,
            )
        finally:
            await session.close()

    async def main() -> int:
        queues = [s.bus.subscribe() for _, s in sessions]  # before start: nothing missed
        codes = await asyncio.gather(
            *(watch_one(name, s, q) for (name, s), q in zip(sessions, queues, strict=True))
        )
        return max(codes)

    return run_async(main)

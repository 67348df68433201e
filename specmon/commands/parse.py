"""`specmon parse LOGFILE [--json] [--summary] [--backend NAME]`: a server log, read offline,
as events. Which server wrote it is told by ``--backend`` or detected from its first lines."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from specmon.errors import UsageError

if TYPE_CHECKING:
    from specmon.backends import Backend

READ_BYTES = 1 << 20
DETECT_BYTES = 64 * 1024
"""Backend detection reads up to this much of the log's beginning (less if it is sure)."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logfile", metavar="LOGFILE", help="server log file, or - for stdin")
    parser.add_argument(
        "--json", action="store_true", help="one JSON object per event (JSON Lines)"
    )
    parser.add_argument(
        "--summary", action="store_true", help="end with a summary (readiness, load time, means)"
    )
    parser.add_argument(
        "--backend",
        metavar="NAME",
        help="the server that wrote the log (default: detected from its first lines)",
    )


def _open_log(name: str) -> IO[bytes]:
    """The log as a binary stream; a bad path is a one-line usage error."""
    if name == "-":
        return sys.stdin.buffer
    try:
        mode = os.stat(name).st_mode
    except FileNotFoundError:
        raise UsageError(f"parse: no such file: {name}") from None
    except OSError as exc:
        raise UsageError(f"parse: cannot read {name}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise UsageError(f"parse: {name} is a directory, not a log file")
    try:
        return open(name, "rb")  # closed by run()
    except OSError as exc:
        raise UsageError(f"parse: cannot read {name}: {exc.strerror or exc}") from None


def format_event(event_dict: dict[str, Any]) -> str:
    """One readable line: time, rank, kind, then the fields the line had."""
    ts = event_dict.get("ts") or "-"
    rank = event_dict.get("rank")
    where = f"TP{rank}" if rank is not None else "-"
    details = " ".join(
        f"{key}={_show(value)}"
        for key, value in event_dict.items()
        if key not in ("kind", "ts", "rank") and value is not None
    )
    return f"{ts:<23} {where:<4} {event_dict['kind']:<14} {details}".rstrip()


def format_summary(summary: dict[str, Any]) -> str:
    def show(value: Any, unit: str = "") -> str:
        return "-" if value is None else f"{_show(value)}{unit}"

    lines = [
        "summary:",
        f"  ready:               {'yes' if summary['ready'] else 'no'}",
        f"  load time:           {show(summary['load_seconds'], ' s')}",
        f"  checkpoint shards:   {show(summary['shards_total'])}",
        f"  decode lines:        {summary['decode_lines']}",
        f"  mean gen throughput: {show(summary['mean_gen_throughput'], ' tok/s')}",
        f"  mean accept len:     {show(summary['mean_accept_len'])}",
        f"  errors:              {summary['errors']}",
    ]
    if summary.get("first_error"):
        lines.append(f"  first error:         {summary['first_error']}")
    return "\n".join(lines)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _detect(read: Callable[[int], bytes], source: str) -> tuple[Backend, list[bytes], bool]:
    """The backend whose log this is, from its first lines, the chunks read to tell, and
    whether it was detected (said on stderr); undetected: the first registered backend."""
    from specmon.backends import BACKENDS, detect_backend, get_backend

    chunks: list[bytes] = []
    size = 0
    name = None
    while size < DETECT_BYTES:
        chunk = _read(read, source)
        chunks.append(chunk)
        if not chunk:
            break
        size += len(chunk)
        name = detect_backend(b"".join(chunks).decode("utf-8", errors="replace"))
        if name is not None:
            break
    if name is not None:
        print(f"specmon: detected backend {name}", file=sys.stderr)
        return get_backend(name), chunks, True
    return get_backend(next(iter(BACKENDS))), chunks, False


def _read(read: Callable[[int], bytes], source: str) -> bytes:
    try:
        return read(READ_BYTES)
    except OSError as exc:
        raise UsageError(f"parse: cannot read {source}: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    from specmon.backends import get_backend

    chosen = get_backend(args.backend) if args.backend else None  # a bad name: usage error
    log = _open_log(args.logfile)
    out = sys.stdout
    events_seen = 0
    bytes_read = 0
    # read1 returns what has arrived, so `tail -f server.log | specmon parse -` keeps up.
    read = getattr(log, "read1", log.read)
    try:
        if chosen is None:
            backend, held, detected = _detect(read, args.logfile)
        else:
            backend, held, detected = chosen, [], True
        parser = backend.new_log_parser()
        summary = backend.new_log_summary()
        while True:
            chunk = held.pop(0) if held else _read(read, args.logfile)
            events = parser.feed(chunk) if chunk else parser.flush()
            bytes_read += len(chunk)
            lines = []
            for event in events:
                summary.add(event)
                lines.append(event.to_json() if args.json else format_event(event.to_dict()))
            if lines:
                out.write("\n".join(lines) + "\n")
                out.flush()
                events_seen += len(lines)
            if not chunk:
                break
        if args.summary:
            record = summary.finish(parser)
            out.write((json.dumps(record) if args.json else format_summary(record)) + "\n")
        out.flush()
    except BrokenPipeError:
        # The reader went away (`| head`); stop quietly and keep Python's exit flush silent.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    finally:
        if log is not sys.stdin.buffer:
            log.close()
    if events_seen == 0:
        name = "stdin" if args.logfile == "-" else args.logfile
        if bytes_read == 0:
            what = "empty"
        elif detected:
            what = f"no {backend.name} log lines recognised"
        else:
            what = "no log lines of a known server recognised"
        print(f"specmon: parse: {name}: {what} ({bytes_read} bytes read)", file=sys.stderr)
    elif not detected:
        print(
            f"specmon: parse: no backend detected from the log's first lines; read as "
            f"{backend.name} (choose one with --backend)",
            file=sys.stderr,
        )
    return 0

"""`specmon parse LOGFILE [--json] [--summary]`: a server log, read offline, as events."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from typing import IO, Any

from specmon.errors import UsageError

READ_BYTES = 1 << 20


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logfile", metavar="LOGFILE", help="server log file, or - for stdin")
    parser.add_argument(
        "--json", action="store_true", help="one JSON object per event (JSON Lines)"
    )
    parser.add_argument(
        "--summary", action="store_true", help="end with a summary (readiness, load time, means)"
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


def run(args: argparse.Namespace) -> int:
    from specmon.backends import get_backend
    from specmon.backends.sglang.parser import LogSummary
    from specmon.terminal_text import safe_text

    parser = get_backend("sglang").new_log_parser()
    summary = LogSummary()
    log = _open_log(args.logfile)
    out = sys.stdout
    events_seen = 0
    bytes_read = 0
    # read1 returns what has arrived, so `tail -f server.log | specmon parse -` keeps up.
    read = getattr(log, "read1", log.read)
    try:
        while True:
            try:
                chunk = read(READ_BYTES)
            except OSError as exc:
                raise UsageError(
                    f"parse: cannot read {args.logfile}: {exc.strerror or exc}"
                ) from None
            events = parser.feed(chunk) if chunk else parser.flush()
            bytes_read += len(chunk)
            lines = []
            for event in events:
                summary.add(event)
                lines.append(event.to_json() if args.json else format_event(event.to_dict()))
            if lines:
                out.write(safe_text("\n".join(lines)) + "\n")  # JSON lines hold no controls
                out.flush()
                events_seen += len(lines)
            if not chunk:
                break
        if args.summary:
            record = summary.result()
            out.write(safe_text(json.dumps(record) if args.json else format_summary(record)) + "\n")
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
        what = "empty" if bytes_read == 0 else "no SGLang log lines recognised"
        print(f"specmon: parse: {name}: {what} ({bytes_read} bytes read)", file=sys.stderr)
    return 0

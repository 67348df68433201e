"""`specmon parse LOGFILE [--json] [--summary [--events]] [--kind KIND] [--since/--until TIME]
[--backend NAME] [--jobs N]`: a server log, read offline or from a live pipe, plain or gzip-,
bzip2- or xz-compressed, as events. Which server wrote it is told by ``--backend`` or detected
from its first lines; a log in which no server is recognised is read for its errors alone
(PyTorch, NCCL, tracebacks: specmon/backends/neutral.py).

Each chunk read is parsed, filtered and written at once (specmon.logs.event_lines writes runs of
decodes in bulk) and flushed, so a live pipe sees each event as soon as its line arrives.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import stat
import sys
from collections.abc import Callable, Hashable
from itertools import compress
from operator import attrgetter
from typing import IO, TYPE_CHECKING, Any

from specmon.logs.parts import PartReader
from specmon.model.errors import UsageError

if TYPE_CHECKING:
    from specmon.backends import LogReading, LogSummary
    from specmon.logs.window import TimeWindow
    from specmon.model.events import Event

NOTHING_RECOGNISED = 1
"""The exit code when the log held no line specmon reads (empty, or no server's and no error
line): a script piping a log in learns that nothing was read."""

EPILOG = f"""\
examples:
  specmon parse server.log                       one readable line per event
  specmon parse server.log --summary             ready?, load time, means, errors
  specmon parse server.log --json --kind error   the errors, as JSON Lines
  tail -F server.log | specmon parse -           live: each event as its line arrives

exit codes: 0 events were read; {NOTHING_RECOGNISED} no line of the log was recognised (empty, or
neither a server's nor an error line); 2 a bad command line or an unreadable file.
"""

READ_BYTES = 1 << 20
DETECT_BYTES = 64 * 1024
"""Backend detection reads up to this much of the log's beginning (less if it is sure)."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logfile", metavar="LOGFILE", help="server log file, or - for stdin")
    parser.add_argument(
        "--json", action="store_true", help="one JSON object per event (JSON Lines)"
    )
    parser.add_argument(
        "--summary",
        action="store_true",
        help="print a summary (readiness, load time, means) instead of the events",
    )
    parser.add_argument(
        "--events",
        action="store_true",
        help="with --summary: print the events too, then the summary",
    )
    parser.add_argument(  # the default with --summary now; kept so old command lines work
        "--no-events", action="store_true", help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--kind",
        action="append",
        metavar="KIND",
        help="print only events of this kind (repeatable: --kind error --kind ready); one of: "
        + ", ".join(sorted(_event_kinds())),
    )
    parser.add_argument(
        "--since",
        metavar="TIME",
        help="start at this log timestamp ('2026-02-10 09:20', or a time such as 09:20)",
    )
    parser.add_argument(
        "--until",
        metavar="TIME",
        help="stop after this log timestamp (09:20 takes all of that minute)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="processes reading a log file at once (default: one per core, at most 8; 1: one pass)",
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


def _detect(read: Callable[[int], bytes], source: str) -> tuple[LogReading, list[bytes], bool]:
    """The backend whose log this is, from its first lines, the chunks read to tell, and
    whether it was detected (said on stderr); undetected: the neutral reader, which reports
    what PyTorch, NCCL and Python write (errors, tracebacks) and no server's events."""
    from specmon.backends import detect_backend, get_backend, neutral_log_reading

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
    return neutral_log_reading(), chunks, False


def _read(read: Callable[[int], bytes], source: str) -> bytes:
    from specmon.logs.compressed import DECOMPRESS_ERRORS

    try:
        return read(READ_BYTES)
    except OSError as exc:
        raise UsageError(f"parse: cannot read {source}: {exc.strerror or exc}") from None
    except EOFError:
        # A compressed log cut short (still being compressed, or copied half-way): what it
        # held is read; the end is missing, and that is said.
        print(f"specmon: parse: {source}: the compressed data ends early", file=sys.stderr)
        return b""
    except DECOMPRESS_ERRORS as exc:
        raise UsageError(f"parse: cannot read {source}: {exc}") from None


_KIND = attrgetter("kind")


LOG_KINDS = (
    "load_begin", "shard_progress", "load_end", "kv_cache", "graph_begin", "graph_end",
    "http_up", "ready", "decode", "prefill", "error", "weights_loaded", "compile_begin",
    "compile", "spec_decode", "spec_params", "notice",
)  # fmt: skip
"""The kinds of ``events.LOG_EVENT_KINDS``, spelled out so `--help` needs no import of the
events (40 ms); tests/e2e/test_cli_papercuts.py checks that the two agree."""


def _event_kinds() -> set[str]:
    """The kinds a log can give (``--kind`` offers no others: no GPU, probe or connection
    events are ever read from a log)."""
    return set(LOG_KINDS)


def _chosen_kinds(names: list[str] | None) -> set[str] | None:
    if not names:
        return None
    known = _event_kinds()
    unknown = sorted(set(names) - known)
    if unknown:
        raise UsageError(
            f"parse: {unknown[0]!r} is not a kind of event a log gives; "
            f"choose from: {', '.join(sorted(known))}"
        )
    return set(names)


def _of_kinds(events: list[Event], kinds: set[str]) -> list[Event]:
    return list(compress(events, map(kinds.__contains__, map(_KIND, events))))


def _json_one(event: Event) -> str:
    # The standard library's encoder: ensure_ascii escapes every non-ASCII character,
    # C1 controls (U+0080-U+009F) included, so no log text reaches a terminal raw.
    return event.to_json()


def _text_one(event: Event) -> str:
    from specmon.model.terminal_text import safe_text

    return safe_text(format_event(event.to_dict()))  # log text reaches the terminal stripped


class _LogReader(PartReader):
    """One pass of `specmon parse` over consecutive chunks: parse, keep the window and the
    kinds asked for, add to the summary, write the events; each chunk's events are written
    and flushed at once, so a live pipe sees them as their lines arrive."""

    def __init__(
        self,
        args: argparse.Namespace,
        backend: LogReading,
        kinds: set[str] | None,
        window: TimeWindow | None,
        out: IO[str],
    ) -> None:
        from specmon.logs.event_lines import json_lines, text_lines

        self._backend = backend
        self.parser = backend.new_log_parser()
        self.summary = backend.new_log_summary()
        self._kinds = kinds
        self._window = window
        self._out = out
        self._with_summary = bool(args.summary)
        self._show_events = _shows_events(args)
        self._summary_only = not self._show_events and window is None
        self._write_lines, self._write_one = (
            (json_lines, _json_one) if args.json else (text_lines, _text_one)
        )
        self.events_seen = 0
        self.bytes_read = 0

    def take(self, chunk: bytes) -> None:
        self.bytes_read += len(chunk)
        parser = self.parser
        if self._summary_only:
            self.events_seen += parser.summarize(chunk, self.summary)
            return
        events = parser.feed(chunk) if chunk else parser.flush()
        self.events_seen += len(events)
        if self._window is not None:
            events = self._window.keep(events)
        if self._with_summary:
            self.summary.add_all(events)  # decodes summed from their texts, left unread
        if self._show_events and self._kinds is not None:
            events = _of_kinds(events, self._kinds)
        if self._show_events and events:
            self._out.write(self._write_lines(events, self._write_one))
            self._out.flush()  # each chunk as it is read: a live pipe sees its events now

    def line_state(self) -> Hashable | None:
        state = self.parser.line_state()
        if state is None or self._window is None:
            return state
        return state, self._window.carry_state()  # a time window: inside it or not

    def begin_part(self, out: IO[str]) -> None:
        self._out = out
        self.summary = self._backend.new_log_summary()
        self.parser.unparsed_decode_like = 0
        self.events_seen = self.bytes_read = 0

    def part_totals(self) -> tuple[LogSummary, int, int, int]:
        return self.summary, self.events_seen, self.bytes_read, self.parser.unparsed_decode_like

    def add_part(self, totals: tuple[LogSummary, int, int, int]) -> None:
        summary, events_seen, bytes_read, unparsed = totals
        self.summary.merge(summary)
        self.events_seen += events_seen
        self.bytes_read += bytes_read
        self.parser.unparsed_decode_like += unparsed


def _to_line_boundary(log: IO[bytes], reader: _LogReader) -> int | None:
    """Read on to the end of the line under way (within one read); where the file then
    stands, or None if no line ended (the caller reads on as usual)."""
    position = log.tell()
    chunk = log.read(READ_BYTES)
    cut = chunk.rfind(b"\n")
    if cut < 0:
        log.seek(position)
        return None
    reader.take(chunk[: cut + 1])
    log.seek(position + cut + 1)
    return position + cut + 1


def run(args: argparse.Namespace) -> int:
    from specmon.backends import get_backend
    from specmon.logs.compressed import decompressed
    from specmon.logs.parts import jobs_available, read_in_parts
    from specmon.logs.window import TimeWindow
    from specmon.model.terminal_text import safe_text

    chosen = get_backend(args.backend) if args.backend else None  # a bad name: usage error
    if args.no_events and not args.summary:
        raise UsageError("parse: --no-events prints only the summary; add --summary")
    if args.events and not args.summary:
        raise UsageError("parse: --events is for --summary (the events are printed without it)")
    if args.events and args.no_events:
        raise UsageError("parse: --events and --no-events say opposite things; choose one")
    if args.kind and not _shows_events(args):
        raise UsageError("parse: --kind chooses the events printed; with --summary add --events")
    if args.jobs is not None and not 1 <= args.jobs <= 64:
        raise UsageError(f"parse: --jobs wants a number of processes from 1 to 64, not {args.jobs}")
    kinds = _chosen_kinds(args.kind)
    window = TimeWindow(args.since, args.until) if args.since or args.until else None
    raw = _open_log(args.logfile)
    try:
        log, compression = decompressed(raw, args.logfile)  # type: ignore[arg-type]
    except UsageError:
        if raw is not sys.stdin.buffer:
            raw.close()
        raise
    out = sys.stdout
    # read1 returns what has arrived, so `tail -f server.log | specmon parse -` keeps up.
    read = getattr(log, "read1", log.read)
    # Events and their texts hold no cycles; the collector's passes over the young ones were
    # about a tenth of a long log's time (a profile of 1M lines with and without it).
    collecting = gc.isenabled()
    gc.disable()
    try:
        if chosen is None:
            reading, held, detected = _detect(read, args.logfile)
        else:
            reading, held, detected = chosen, [], True
        reader = _LogReader(args, reading, kinds, window, out)
        for chunk in held:
            reader.take(chunk)
        ended = bool(held) and not held[-1]
        jobs = args.jobs or jobs_available()
        if not ended and jobs > 1 and compression is None and _is_regular(log):
            boundary = _to_line_boundary(log, reader)
            if boundary is not None:
                log.seek(read_in_parts(log, boundary, reader, out, jobs))
        while not ended:
            chunk = _read(read, args.logfile)
            reader.take(chunk)
            ended = not chunk
        if args.summary:
            record = reader.summary.finish(reader.parser)
            out.write(
                (json.dumps(record) if args.json else safe_text(format_summary(record))) + "\n"
            )
        out.flush()
    except BrokenPipeError:
        # The reader went away (`| head`); stop quietly and keep Python's exit flush silent.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    finally:
        if collecting:
            gc.enable()
        if log is not raw:
            log.close()  # the decompressor; it leaves the file it reads open
        if raw is not sys.stdin.buffer:
            raw.close()
    events_seen, bytes_read = reader.events_seen, reader.bytes_read
    if events_seen == 0:
        name = "stdin" if args.logfile == "-" else args.logfile
        if bytes_read == 0:
            what = "empty"
        elif detected:
            what = f"no {reading.name} log lines recognised"
        else:
            what = "no log lines of a known server recognised"
        print(f"specmon: parse: {name}: {what} ({bytes_read} bytes read)", file=sys.stderr)
        return NOTHING_RECOGNISED
    elif not detected:
        print(
            "specmon: parse: no backend detected from the log's first lines; read for errors "
            "alone (choose a server with --backend)",
            file=sys.stderr,
        )
    return 0


def _shows_events(args: argparse.Namespace) -> bool:
    """Events are printed without --summary, and with it only on --events: a summary asked
    for is not buried under a long log's events."""
    return not args.summary or bool(args.events)


def _is_regular(log: IO[bytes]) -> bool:
    try:
        return stat.S_ISREG(os.fstat(log.fileno()).st_mode) and log.seekable()
    except (OSError, ValueError):
        return False

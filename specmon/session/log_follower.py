"""Following a run's log and probe files by byte offset, as a pure step: bytes in, events out.

The host session feeds it the chunks the helper's ``follow`` streams (a chunk may repeat bytes
already seen after a reconnect, or start mid-line on a reattach that skips an old log's head)
and publishes what comes back; nothing here touches a connection, so it is unit-tested alone.

A reattach replays the last ``replay_log_bytes`` of the log (16 MiB: some 85,000 lines of a
busy server). While no lossless subscriber listens (the console's view is lossy; `watch`,
`launch --wait` and tests are lossless and get every line) the replay is read as a summary:
every state event the parser finds in it (start-up phases, ready, errors, speculation changes)
comes out as its chunk is read, but of the high-rate lines only what the store keeps comes
out, once the replay is read: a ``Dropped`` marker counting the older log lines and samples
(never a state change), then the last ``LOG_LINES`` log lines (the log pane's and the store's
length) and the last ``HISTORY`` decode and prefill samples (the throughput history's
length). The store ends in the state a full replay leaves, without making ~170,000 events.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from specmon.backends import LogParser
from specmon.model.errors import SpecmonError
from specmon.model.events import Decode, Dropped, Event, LogLine, Prefill, ServerError
from specmon.model.secrets import mask_secrets_in_text
from specmon.state.store import HISTORY, LOG_LINES

MAX_PARTIAL_LINE = 1 << 20  # a "line" longer than this is emitted in pieces
RECENT_LINES = 40  # the last lines kept for a failure's root cause (argparse errors)
REPLAY_SAMPLES = (Decode, Prefill)  # high-rate samples: a replay keeps only the last HISTORY


class LogGapError(SpecmonError):
    """A chunk started after the bytes read so far: bytes in between were lost."""


@dataclass
class LogFollower:
    """Where the log tail of one run stands (it survives reconnects) and the parser state.

    ``replay_end``: on reattach, the log size when we came; the bytes before it are a replay
    (their arrival time is not when they were written), read as a summary (module docstring).
    """

    parser: LogParser
    log_offset: int = 0
    probe_offset: int = 0
    line_start: int = 0
    partial: bytearray = field(default_factory=bytearray)
    probe_partial: bytearray = field(default_factory=bytearray)
    errors: deque[ServerError] = field(default_factory=lambda: deque(maxlen=20))
    recent: deque[str] = field(default_factory=lambda: deque(maxlen=RECENT_LINES))
    last_output: float = field(default_factory=time.monotonic)
    skip_to_newline: bool = False
    replay_end: int = 0
    replay_lines: int = LOG_LINES
    replayed: bytearray | None = None  # a summarised replay's bytes from its first line
    samples: deque[Event] = field(default_factory=deque)  # the replay's newest samples
    samples_seen: int = 0

    @classmethod
    def reattached(
        cls,
        parser: LogParser,
        log_size: int,
        replay_bytes: int,
        *,
        summary: bool = False,
        lines: int = LOG_LINES,
        samples: int = HISTORY,
    ) -> LogFollower:
        """A follower for a run that was already running: replay at most ``replay_bytes``
        of its log, starting at a line boundary; with ``summary``, as a summary that ends
        with its last ``lines`` log lines and ``samples`` decode and prefill samples."""
        follower = cls(parser=parser, replay_end=log_size, replay_lines=lines)
        if log_size and summary:
            follower.replayed = bytearray()
            follower.samples = deque(maxlen=samples)
        if log_size > replay_bytes:
            follower.log_offset = follower.line_start = log_size - replay_bytes
            follower.skip_to_newline = True
        return follower

    @property
    def replaying(self) -> bool:
        return bool(self.replay_end)

    def feed_log(self, offset: int, data: bytes) -> list[Event]:
        """A chunk of the log starting at byte ``offset``: its complete lines as LogLine
        events, then the parser's events. LogGapError when bytes were skipped."""
        if offset > self.log_offset:
            raise LogGapError(f"log gap at byte {self.log_offset} (got {offset})")
        if offset < self.log_offset:
            data = data[self.log_offset - offset :]  # already seen before a reconnect
        if not data:
            return []
        self.log_offset += len(data)
        self.last_output = time.monotonic()
        if self.skip_to_newline:
            cut = data.find(b"\n")
            if cut < 0:
                self.line_start += len(data)
                return []
            self.line_start += cut + 1
            data = data[cut + 1 :]
            self.skip_to_newline = False
        if self.replayed is not None:
            return self._replay(data)
        events: list[Event] = []
        buf = self.partial
        buf.extend(data)
        start = 0
        while True:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            text = _shown(bytes(buf[start:end]))
            self.recent.append(text)
            events.append(LogLine(text=text, offset=self.line_start))
            self.line_start += end + 1 - start
            start = end + 1
        del buf[:start]
        if len(buf) > MAX_PARTIAL_LINE:
            events.append(LogLine(text=_shown(bytes(buf)), offset=self.line_start))
            self.line_start += len(buf)
            buf.clear()
        events.extend(self._parsed(self.parser.feed(data)))
        return events

    def restart(self) -> list[Event]:
        """The log started over at byte 0 (a server specmon did not launch: its file was
        rotated or truncated): what was read of the old one is finished (its last partial
        line told as a line, a replay in progress summed up), then the new bytes are read
        from 0 as live lines. The parser keeps its state: it is the same server."""
        events: list[Event] = []
        if self.replayed is not None:
            self.replay_end = self.log_offset  # the replay ends where the old file did
            events.extend(self._replay(b""))
        self.replay_end = 0
        if self.partial:
            events.append(LogLine(text=_shown(bytes(self.partial)), offset=self.line_start))
            self.partial.clear()
        self.log_offset = self.line_start = 0
        self.skip_to_newline = False
        return events

    def _replay(self, data: bytes) -> list[Event]:
        """A chunk of the replay: its state events now; at the replay's end also the last log
        lines and samples (no LogLine or sample is made for the older lines)."""
        assert self.replayed is not None
        self.replayed.extend(data)
        parsed = self._parsed(self.parser.feed(data))
        samples = REPLAY_SAMPLES
        events = [e for e in parsed if not isinstance(e, samples)]
        if len(events) < len(parsed):
            self.samples_seen += len(parsed) - len(events)
            self.samples.extend(e for e in parsed if isinstance(e, samples))
        if self.log_offset < self.replay_end:
            return events
        skipped, lines = self._replayed_tail()
        skipped += self.samples_seen - len(self.samples)
        if skipped:
            events.append(Dropped(count=skipped))
        events.extend(lines)
        events.extend(self.samples)
        self.samples.clear()
        return events

    def _replayed_tail(self) -> tuple[int, list[LogLine]]:
        """How many complete lines the replay has before its last ``replay_lines``, and
        those as LogLine events; the partial line after them is held as a live tail's is."""
        buf = self.replayed
        assert buf is not None
        self.replayed = None
        end = buf.rfind(b"\n") + 1  # just past the last complete line (0: none)
        start = end  # then back to the start of the oldest line shown
        for _ in range(self.replay_lines):
            if start == 0:
                break
            start = buf.rfind(b"\n", 0, start - 1) + 1
        offset = self.line_start + start
        skipped = buf.count(b"\n", 0, start)
        lines: list[LogLine] = []
        for raw in bytes(buf[start : end - 1]).split(b"\n") if end > start else ():
            lines.append(LogLine(text=_shown(raw), offset=offset))
            offset += len(raw) + 1
        self.recent.extend(line.text for line in lines[-RECENT_LINES:])
        self.line_start += end
        self.partial = bytearray(buf[end:])
        if len(self.partial) > MAX_PARTIAL_LINE:
            lines.append(LogLine(text=_shown(bytes(self.partial)), offset=offset))
            self.line_start += len(self.partial)
            self.partial.clear()
        return skipped, lines

    def replay_finished(self) -> bool:
        """True once, when the replayed part of a reattached run's log has been read."""
        if self.replay_end and self.log_offset >= self.replay_end:
            self.replay_end = 0
            return True
        return False

    def feed_probe(self, offset: int, data: bytes) -> list[Event]:
        """A chunk of the probe's JSONL file: its timing records (warnings dropped)."""
        from specmon.probe.records import ProbeWarning, parse_probe_line

        if offset < self.probe_offset:
            data = data[self.probe_offset - offset :]
        self.probe_offset += len(data)
        buf = self.probe_partial
        buf.extend(data)
        *complete, rest = bytes(buf).split(b"\n")
        buf[:] = rest[-MAX_PARTIAL_LINE:]
        events: list[Event] = []
        for raw in complete:
            record = parse_probe_line(raw.decode(errors="replace"))
            if record is not None and not isinstance(record, ProbeWarning):
                events.append(record)
        return events

    def finish(self) -> list[Event]:
        """The end of the log: what the parser held back, then the unterminated last line."""
        events = self._parsed(self.parser.flush())
        if self.partial:
            text = _shown(bytes(self.partial))
            self.recent.append(text)
            events.append(LogLine(text=text, offset=self.line_start))
            self.line_start += len(self.partial)
            self.partial.clear()
        return events

    def _parsed(self, events: list[Event]) -> list[Event]:
        self.errors.extend(e for e in events if isinstance(e, ServerError))
        return events


def _shown(raw: bytes) -> str:
    """A log line as the console and `watch` show it: decoded, secret values the server
    echoed (its arguments, a command line) as ``***`` (specmon.model.secrets)."""
    return mask_secrets_in_text(raw.decode(errors="replace"))

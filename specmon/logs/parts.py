"""One log file read on several cores at once, with the output it would have had read in one go.

`specmon parse` on a long log is bound by one core: the parser, the summary and the output
are Python for every chunk. A regular file can be cut at line boundaries and its parts read
at the same time by forked copies of the reader, each writing into its own in-memory file;
the first part's reader (this process) then writes those outputs after its own, in order.

A parser carries state from line to line (a traceback being read, a shard counter), so a
part read from its start with the state the parser had where the wave began is right only if
the reader before it ended in that same state (``PartReader.line_state`` says), and it leaves
this process's parser where one pass would be only if it ends in that state too. A part that
fails either check is thrown away, with those after it, and read again here in order.
So the output is what one pass would have written; only the float totals of a summary are
added in another grouping (their sums differ in the last bits, below the summary's rounding).

The file is read in waves of one part per core (PART_BYTES each), so the outputs held in
memory stay bounded however long the log is; what follows the file's last newline when the
reading began (a live log still growing) is read in one go at the end.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import signal
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Hashable
from dataclasses import dataclass
from itertools import pairwise
from typing import IO, Any

PART_BYTES = 32 << 20
"""Bytes of log per part: a wave holds at most one part's output per forked reader."""
MIN_PART_BYTES = 4 << 20
"""Below this much log left, forking costs more than it saves: the rest is read in one go."""
MAX_JOBS = 8
READ_BYTES = 1 << 20
_TAIL_PROBE = 1 << 16


class PartReader(ABC):
    """Reads consecutive chunks of one log into its output and totals."""

    @abstractmethod
    def take(self, chunk: bytes) -> None:
        """Read the next chunk (b"": the log has ended)."""

    @abstractmethod
    def line_state(self) -> Hashable | None:
        """The parser's state between lines (LogParser.line_state); None: do not cut here."""

    @abstractmethod
    def part_totals(self) -> Any:
        """What this reader counted since ``begin_part``, picklable, for ``add_part``."""

    @abstractmethod
    def begin_part(self, out: IO[str]) -> None:
        """In a forked copy: write to ``out`` from now on and count from zero."""

    @abstractmethod
    def add_part(self, totals: Any) -> None:
        """Fold in the totals of the part that followed this reader's last chunk."""


def jobs_available() -> int:
    """The cores this process may run on, at most MAX_JOBS."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_JOBS))


@dataclass
class _Part:
    start: int
    end: int
    pid: int
    output: int  # the in-memory file the forked reader writes into
    results: int  # the pipe end its totals and end state arrive on

    def wait(self) -> tuple[Any, Hashable | None] | None:
        """The part's totals and the state it ended in, or None if its reader failed."""
        with os.fdopen(self.results, "rb") as results:
            data = results.read()
        self.results = -1
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
            return None
        try:
            return pickle.loads(data)  # our own forked reader wrote it
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError):
            return None

    def discard(self) -> None:
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = 0
        if self.results >= 0:
            os.close(self.results)
            self.results = -1
        if self.output >= 0:
            os.close(self.output)
            self.output = -1


def read_in_parts(log: IO[bytes], start: int, reader: PartReader, out: IO[str], jobs: int) -> int:
    """Read ``log`` (a regular file) from ``start``, a line boundary, up to the last newline
    it holds now, in parts at once where that pays; returns where it stopped (a line
    boundary). The caller reads the rest, and ends the log, as usual."""
    fd = log.fileno()
    stop = _after_last_newline(fd)
    position = start
    while position < stop and jobs > 1 and stop - position >= 2 * MIN_PART_BYTES:
        state = reader.line_state()
        if state is None:
            break
        bounds = _wave_bounds(fd, position, stop, jobs)
        parts: list[_Part] = []
        try:
            out.flush()  # nothing buffered may be copied into a forked reader
            for part_start, part_end in pairwise(bounds[1:]):
                parts.append(_fork_part(fd, part_start, part_end, reader, out))
            _read_range(fd, bounds[0], bounds[1], reader)
            # A part is taken if the one before it ended in the state the wave began with
            # (so it began as it should have) and it ended so too (so this process's parser,
            # which read the first part only, is where one pass would be after it).
            resume = bounds[1]
            if reader.line_state() == state:
                for part in parts:
                    result = part.wait()
                    if result is None or result[1] != state:
                        break
                    _copy_output(part.output, out)
                    reader.add_part(result[0])
                    resume = part.end
            if resume < bounds[-1]:  # a part's start was not confirmed: read on from there
                for part in parts:
                    part.discard()
                _read_range(fd, resume, bounds[-1], reader)
        finally:
            for part in parts:
                part.discard()
        position = bounds[-1]
    return position


def _fork_part(fd: int, start: int, end: int, reader: PartReader, out: IO[str]) -> _Part:
    output = _memory_file()
    results_read, results_write = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the forked reader: never returns
        code = 1
        try:
            _die_with(parent)
            os.close(results_read)
            with open(
                output,
                "w",
                encoding=getattr(out, "encoding", None) or "utf-8",
                errors=getattr(out, "errors", None) or "strict",
                closefd=False,
            ) as part_out:
                reader.begin_part(part_out)
                _read_range(fd, start, end, reader)
            data = pickle.dumps((reader.part_totals(), reader.line_state()))
            with os.fdopen(results_write, "wb") as results:
                results.write(data)
            code = 0
        except BaseException:  # a failed part is read again by the parent
            code = 1
        os._exit(code)
    os.close(results_write)
    return _Part(start, end, pid, output, results_read)


def _die_with(parent: int) -> None:
    """Have Linux kill this forked reader when the process that forked it dies, even by
    SIGKILL (PR_SET_PDEATHSIG), so no reader outlives `specmon parse`; elsewhere a reader
    finishes its part (at most PART_BYTES) and exits."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
    except (ImportError, OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the call
        os._exit(1)


def _memory_file() -> int:
    try:
        return os.memfd_create("specmon-parse-part", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        with tempfile.TemporaryFile() as spill:
            return os.dup(spill.fileno())


def _read_range(fd: int, start: int, end: int, reader: PartReader) -> None:
    position = start
    while position < end:
        chunk = os.pread(fd, min(READ_BYTES, end - position), position)
        if not chunk:
            break
        reader.take(chunk)
        position += len(chunk)


def _copy_output(source: int, out: IO[str]) -> None:
    """The part's output, written after everything ``out`` has written so far."""
    size = os.lseek(source, 0, os.SEEK_END)
    out.flush()
    try:
        target = out.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        target = -1
    offset = 0
    if target >= 0:
        with contextlib.suppress(OSError):  # where sendfile cannot, read and write below
            while offset < size:
                sent = os.sendfile(target, source, offset, size - offset)
                if sent == 0:
                    break
                offset += sent
    if offset < size:
        os.lseek(source, offset, os.SEEK_SET)
        encoding = getattr(out, "encoding", None) or "utf-8"
        with open(source, "rb", closefd=False) as part_out:
            decoder = io.TextIOWrapper(part_out, encoding=encoding, newline="")
            while text := decoder.read(READ_BYTES):
                out.write(text)
            decoder.detach()
    out.flush()


def _after_last_newline(fd: int) -> int:
    """Where the last complete line of the file ends now (0: none yet)."""
    size = os.fstat(fd).st_size
    end = size
    while end > 0:
        begin = max(0, end - _TAIL_PROBE)
        found = os.pread(fd, end - begin, begin).rfind(b"\n")
        if found >= 0:
            return begin + found + 1
        end = begin
    return 0


def _wave_bounds(fd: int, position: int, stop: int, jobs: int) -> list[int]:
    """Line boundaries cutting the next wave (at most ``jobs`` parts of PART_BYTES) into
    equal parts: the first, read here, also writes the others' outputs, which costs about
    what a forked reader pays in copy-on-write faults (measured: 1.0 : 1 beat 0.9 and 1.15)."""
    length = min(stop - position, jobs * PART_BYTES)
    if stop - position - length < MIN_PART_BYTES:
        length = stop - position  # no short wave left over
    end = _next_line(fd, position + length, stop)
    share = length / jobs
    bounds = [position]
    for index in range(jobs - 1):
        cut = _next_line(fd, position + int(share * (index + 1)), stop)
        if bounds[-1] < cut < end:
            bounds.append(cut)
    bounds.append(end)
    return bounds


def _next_line(fd: int, offset: int, stop: int) -> int:
    """The first line boundary at or after ``offset`` (``stop`` if none before it)."""
    if offset <= 0:
        return 0
    position = offset - 1  # a boundary at offset: the byte before it is a newline
    while position < stop:
        window = os.pread(fd, min(_TAIL_PROBE, stop - position), position)
        if not window:
            break
        found = window.find(b"\n")
        if found >= 0:
            return position + found + 1
        position += len(window)
    return stop

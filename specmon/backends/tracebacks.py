"""Reading Python tracebacks in a server's log: one rule for every backend's parser.

A traceback is read line by line once its head (`Traceback (most recent call last):`) or, in
a log or paste that begins inside one, its first `File "...", line N, in f` frame was seen.
Frames, their source lines, 3.11's `^^^^`/`~~~` markers and chain lines are part of it; the
line that reads as an exception (`Name: message`, a bare `KeyboardInterrupt`) is its cause.
Frames and their source lines never are, indented or not (log collectors strip indentation,
and `raise RuntimeError(f"NCCL error: ...")` is a source line, not an error).

A traceback can end before its exception line: a log tail, a killed process, a paste that
stops early. It is then reported as a crash whose cause is not in the log (category
``unknown``), with its last frame, when the reader knows it has ended:

- at the end of the input (a parser's ``flush``: `specmon parse` at end of file, the console's
  follower when the server process exits);
- when a line arrives that cannot belong to it: not blank, not indented, not a frame, source
  line, marker or chain line, and not an exception line (a tqdm bar, the shell's `Killed`);
  that line is then read as any other line;
- when a new traceback's head arrives.

An exception group (Python 3.11) is indented behind `|` to its last line: its first exception
line (``group_exception``) is the cause once its lines end, not a cut.

While frames are still arriving nothing is reported. Each backend decides which lines may be
the traceback's (SGLang: the lines without a log prefix, since a record of another rank may
fall between a traceback's lines; vLLM: the lines with the same process tags) and hands their
message text to ``OpenTraceback.read``.
"""

from __future__ import annotations

import re
from dataclasses import astuple, dataclass
from enum import IntEnum

from specmon.backends.logtext import CHAIN_LINES, TRACEBACK_HEAD, TRACEBACK_MAX_LINES
from specmon.model.events import ServerError

CUT_MESSAGE = "traceback cut before its exception line"
"""The start of a cut traceback's error message; the last frame follows."""

FRAME_STARTS = ('File "', "[Previous line repeated", "...")
"""How a frame line (or a line standing for skipped frames) starts, its indentation off."""
FRAME_LINE = re.compile(r'File "[^"\n]*", line \d+, in ')
"""A traceback frame as Python prints it; faulthandler's dumps (`line N in f`) are not."""
CARETS = re.compile(r"[\^~ ]+")
EXCEPTION_LINE = re.compile(
    r"[A-Za-z_][\w.]*(?:[Ee]rror|Exception|Interrupt|Exit|Iteration|Warning|Failure|Timeout)"
    r"(?:\([\w.]*\))?(?::|$)|(?:[A-Za-z_]\w*\.)*[A-Z]\w*: \S"
)
"""The line that ends a traceback: `SomeError: text`, a bare `KeyboardInterrupt`, c10d's
`torch.distributed.DistBackendError: ...`, Ray's `RayTaskError(ValueError): ...`, a class
(CapWords) and its message; what a frame's source line (`self.comm: T = f(`) does not look
like."""


class _After(IntEnum):
    """What the line before was, for telling a source line from an exception line."""

    OTHER = 0
    FRAME = 1  # an indented frame: its source line is indented too
    STRIPPED_FRAME = 2  # a frame without indentation: its source line may have none either


class Read(IntEnum):
    """What one line is to the traceback being read."""

    PART = 0  # a frame, source line, marker, chain or blank line: nothing to report yet
    EXCEPTION = 1  # its exception line: the cause, to report
    CUT = 2  # not part of it: the traceback ended before its exception line
    ABANDONED = 3  # longer than TRACEBACK_MAX_LINES: no longer waited for


def source_text(message: str) -> bool:
    """Whether a line outside a traceback is a traceback's source line or a message's
    continuation (indented, or a `raise` statement), which is never an error of its own
    whatever it quotes (`raise RuntimeError(f"NCCL error: {error_str}")`)."""
    return message[:1] in (" ", "\t") or message.startswith("raise ")


def starts_inside(message: str) -> bool:
    """Whether a line outside any traceback is a frame, so the log begins (or resumes) inside
    a traceback whose head it does not hold."""
    return 'File "' in message and FRAME_LINE.match(message.lstrip()) is not None


@dataclass(slots=True)
class OpenTraceback:
    """A traceback being read: who opened it (time, rank) and where the reading stands."""

    ts: str | None
    rank: int | None
    report: bool  # False: a later link of a chained exception, or one Python ignored
    lines: int = 0
    after: _After = _After.OTHER  # what the last line was
    last_frame: str | None = None
    last_source: str | None = None  # the source line under the last frame
    nccl_frames: bool = False  # an indented line mentioned NCCL (vLLM's category hint)
    # An exception group's (3.11) lines are all indented behind `|`: its first exception
    # line, which stands for the cause once the group's lines end.
    group_exception: str | None = None

    def read(self, message: str) -> Read:
        """What the next line of this traceback's source is, given its text after any log
        prefix (indentation kept where the prefix left it)."""
        self.lines += 1
        if self.lines > TRACEBACK_MAX_LINES:
            return Read.ABANDONED
        stripped = message.strip()
        after, self.after = self.after, _After.OTHER
        if not stripped:
            return Read.PART
        if message[0] in " \t" or stripped.startswith(CHAIN_LINES):
            if stripped[0] == "|":
                stripped = stripped[1:].strip()  # inside an exception group
                if not after and self.group_exception is None and EXCEPTION_LINE.match(stripped):
                    self.group_exception = stripped
            if stripped.startswith('File "'):
                self._frame(stripped, _After.FRAME)
            elif after:
                self.last_source = stripped
            if "nccl" in message or "NCCL" in message:
                self.nccl_frames = True
            return Read.PART
        if stripped.startswith(FRAME_STARTS) or CARETS.fullmatch(stripped):
            # Frames whose indentation a log collector stripped: `File "..."`, its source
            # line next, and 3.11's `^^^^` markers.
            if stripped.startswith('File "'):
                self._frame(stripped, _After.STRIPPED_FRAME)
            return Read.PART
        if stripped.startswith(TRACEBACK_HEAD):
            return Read.CUT  # a new traceback: this one ended before its exception line
        exception = EXCEPTION_LINE.match(stripped) is not None
        if after is _After.STRIPPED_FRAME and not exception:
            self.last_source = stripped  # the source line of the frame before
            return Read.PART
        return Read.EXCEPTION if exception else Read.CUT

    def _frame(self, stripped: str, after: _After) -> None:
        self.after = after
        self.last_frame = stripped
        self.last_source = None

    def cut_error(self) -> ServerError | None:
        """The crash a traceback cut before its exception line stands for (None for one that
        is not reported, or an exception group whose exception line was read, which the
        backend reports as it reports an exception line): its cause is not in the log, its
        last frame is."""
        if not self.report or self.group_exception is not None:
            return None
        return ServerError(ts=self.ts, rank=self.rank, category="unknown", message=self.cut_text())

    def cut_text(self) -> str:
        if self.last_frame is None:
            return f"{CUT_MESSAGE} (no frame logged)"
        where = self.last_frame
        if self.last_source:
            where = f"{where}: {self.last_source}"
        return f"{CUT_MESSAGE}; last frame: {where}"

    def state(self) -> tuple[object, ...]:
        """Everything it holds, for a parser's ``line_state``."""
        return astuple(self)


def opened_inside(ts: str | None, rank: int | None, message: str) -> OpenTraceback:
    """A traceback whose head is not in the log, opened at its first frame (``message``)."""
    traceback = OpenTraceback(ts, rank, report=True)
    traceback.read(message)
    return traceback

"""Server-neutral mechanics of reading a server's log text, shared by the backends' parsers.

What every Python server's log has alike: ANSI colour codes, lines that may be any length,
Python's traceback vocabulary and tqdm's progress fields. Each server's own message patterns
(and which errors it counts as fatal) stay in its backend's parser.
"""

from __future__ import annotations

import re

MAX_LINE_CHARS = 64 * 1024
"""Lines are cut to this length before any regex, so a 1 MB line costs no more than 64 KB."""

TRACEBACK_MAX_LINES = 5000
"""A traceback longer than this is abandoned (its exception line is not waited for)."""
CONTINUATION_MAX_LINES = 50
"""Lines after an exception's first line that may continue its message, at most."""

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|\x1b[=>NOM78]")
"""Terminal escape sequences: CSI (colours, cursor moves), charset selection and the short ones."""

TRACEBACK_HEAD = "Traceback (most recent call last)"
CHAIN_LINES = (
    "During handling of the above exception",
    "The above exception was the direct cause",
)
"""The lines that join one link of a chained exception to the next."""
BARE_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt): \S")
"""An exception's line (`SomeError: text`), as it ends a traceback or stands alone."""

TORCH_OOM = r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|CUDA driver error: out of memory"
"""PyTorch's and the CUDA driver's out-of-memory errors, whatever the server (a regex text)."""
TORCH_NCCL = (
    r"NCCL error|DistBackendError|Watchdog caught collective operation timeout"
    r"|\bnccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage"
    r"|RemoteError)\b|NCCL communicator was aborted"
    r"|Some NCCL operations have failed or timed out"
    r"|Process group watchdog thread terminated with exception"
)
"""NCCL's errors and PyTorch c10d's watchdog lines, whatever the server (a regex text)."""

TQDM_RATE = re.compile(r"(\d+(?:\.\d+)?)(s/it|it/s)")
"""tqdm's rate field: seconds per item or items per second."""


def clean_line(line: str) -> str:
    """``line`` cut at MAX_LINE_CHARS and without ANSI escape sequences."""
    if len(line) > MAX_LINE_CHARS:
        line = line[:MAX_LINE_CHARS]
    if "\x1b" in line:
        line = ANSI.sub("", line)
    return line


def parse_float(text: str | None) -> float | None:
    """``text`` as a float; None for None, an empty text or one that does not read."""
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def parse_int(text: str | None) -> int | None:
    """``text`` as an int; None for None, an empty text or one that does not read."""
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def clock_seconds(text: str | None) -> float | None:
    """tqdm's `01:27` or `1:02:03` -> seconds; None for `?` or an empty field."""
    if not text or "?" in text:
        return None
    seconds = 0
    for part in text.split(":"):
        if not part.isdigit():
            return None
        seconds = seconds * 60 + int(part)
    return float(seconds)


LAUNCHER_PREFIX = re.compile(r"\[rank(\d{1,9})\]: ?", re.ASCII)
"""torchrun's (torch.distributed's) `[rankN]:` before every line a rank writes, and the one
space it may put after it: a wrapper around the line, not the line's own prefix."""


def launcher_rank(line: str) -> tuple[int | None, str]:
    """(N, the line inside) for a line torchrun wrapped in `[rankN]:`; (None, line) for any
    other. The line inside reads as it would unwrapped (its indentation kept), so a rank's
    traceback is read as one; N is the rank where the line's own prefix names none."""
    if not line.startswith("[rank"):
        return None, line
    match = LAUNCHER_PREFIX.match(line)
    if match is None:
        return None, line
    return int(match.group(1)), line[match.end() :]

"""SGLang 0.5.9's output, byte for byte in shape: logger prefixes, uvicorn lines and tqdm bars.

Python logging and tqdm write to stderr, uvicorn's access log to stdout (sglang.md section 1
and 10). Every write is flushed, so a host that sends both streams into one file keeps order.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

_BAR_BLOCKS = " ▏▎▍▌▋▊▉"


def format_interval(seconds: float) -> str:
    """tqdm's mm:ss (or h:mm:ss)."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours:d}:{minutes:02d}:{secs:02d}"
    return f"{minutes:02d}:{secs:02d}"


def _rate_text(n: int, elapsed: float) -> tuple[str, float | None]:
    rate = n / elapsed if n and elapsed > 0 else None
    if rate is None:
        return "?it/s", None
    if rate < 1:
        return f"{1 / rate:5.2f}s/it", rate
    return f"{rate:5.2f}it/s", rate


def _times_text(n: int, total: int, elapsed: float) -> str:
    rate_text, rate = _rate_text(n, elapsed)
    remaining = format_interval((total - n) / rate) if rate else "?"
    return f"[{format_interval(elapsed)}<{remaining}, {rate_text}]"


def safetensors_bar(n: int, total: int, elapsed: float) -> str:
    """SGLang 0.5.9's BAR_FORMAT for the checkpoint shard bar (without its trailing newline)."""
    percentage = 100.0 * n / total if total else 100.0
    return (
        f"Loading safetensors checkpoint shards: {percentage:3.0f}% Completed | "
        f"{n}/{total} {_times_text(n, total, elapsed)}"
    )


def default_bar(desc: str, n: int, total: int, elapsed: float, width: int = 10) -> str:
    """tqdm's default format with a 10-cell bar (its width when the output is not a tty)."""
    fraction = n / total if total else 1.0
    cells = fraction * width
    full = int(cells)
    bar = "█" * full
    if full < width:
        bar += _BAR_BLOCKS[int((cells - full) * len(_BAR_BLOCKS))]
        bar += " " * (width - full - 1)
    return f"{desc}: {100 * fraction:3.0f}%|{bar}| {n}/{total} {_times_text(n, total, elapsed)}"


class LogWriter:
    """Writes log records the way SGLang's processes do; thread-safe, flushed per write."""

    def __init__(self, stdout: TextIO | None = None, stderr: TextIO | None = None) -> None:
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self._lock = threading.Lock()
        self.enabled = True  # a hung simulator stops writing

    @staticmethod
    def timestamp(now: float | None = None) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))

    def _write(self, stream: TextIO, text: str) -> None:
        if not self.enabled:
            return
        with self._lock:
            try:
                stream.write(text)
                stream.flush()
            except (BrokenPipeError, ValueError, OSError):
                self.enabled = False  # nobody reads us any more; keep serving

    def raw(self, text: str) -> None:
        """Unprefixed text on stderr: warnings before logging is set up, tqdm output."""
        self._write(self.stderr, text)

    def main(self, message: str) -> None:
        """The main process (HTTP server, tokenizer manager): no rank in the prefix."""
        self._write(self.stderr, f"[{self.timestamp()}] {message}\n")

    def rank(self, rank: int | None, message: str) -> None:
        """A scheduler process; ``rank`` None when TP is 1 (SGLang then prints no TP tag)."""
        tag = "" if rank is None else f" TP{rank}"
        self._write(self.stderr, f"[{self.timestamp()}{tag}] {message}\n")

    def uvicorn(self, message: str, level: str = "INFO") -> None:
        """uvicorn's records as SGLang formats them: ``[time] LEVEL:    message``."""
        self._write(self.stderr, f"[{self.timestamp()}] {level + ':':<9} {message}\n")

    def access(self, client: str, method: str, path: str, status: int, reason: str) -> None:
        self._write(
            self.stdout,
            f'[{self.timestamp()}] INFO:     {client} - "{method} {path} HTTP/1.1" {status} {reason}\n',
        )

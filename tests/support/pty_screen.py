"""Run a terminal program (curses or plain) in a pseudo-terminal and read its screen.

    from support.pty_screen import PtyScreen

    with PtyScreen([sys.executable, "-m", "sgtop.cli", ...], columns=120, lines=50) as term:
        term.wait_for(lambda lines: any("kv-cache" in line for line in lines), timeout=20)
        term.send("q")

The program's output is fed to a pyte terminal emulator, so what a test reads is what a
person would see on a terminal of that size (cursor moves, erases and redraws applied), not
the raw escape codes. The process runs in its own session and is killed (group) on exit.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Callable, Sequence
from types import TracebackType

import pyte


class PtyScreen:
    """A program on a pty of ``columns`` x ``lines``, its screen kept by pyte."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        columns: int = 120,
        lines: int = 50,
        env: dict[str, str] | None = None,
    ) -> None:
        self.screen = pyte.Screen(columns, lines)
        self.stream = pyte.ByteStream(self.screen)
        master, slave = os.openpty()
        os.set_blocking(master, False)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
        full_env = dict(os.environ if env is None else env)
        full_env.update(TERM="xterm-256color", LINES=str(lines), COLUMNS=str(columns))
        self.proc = subprocess.Popen(
            list(argv),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=full_env,
            start_new_session=True,
            close_fds=True,
        )
        os.close(slave)
        self.master = master
        self.frames: list[list[str]] = []  # every distinct screen seen, in order

    def pump(self, seconds: float = 0.1) -> None:
        """Read what the program wrote for up to ``seconds`` and apply it to the screen."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select([self.master], [], [], left)
            if not ready:
                break
            try:
                data = os.read(self.master, 65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:  # EIO: the program exited and the pty closed
                break
            if not data:
                break
            self.stream.feed(data)
        lines = self.lines()
        if not self.frames or self.frames[-1] != lines:
            self.frames.append(lines)

    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display]

    def wait_for(self, check: Callable[[list[str]], bool], timeout: float) -> list[str]:
        """Pump until ``check(lines)`` holds; the screen at that moment, or AssertionError."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pump(0.2)
            if check(self.lines()):
                return self.lines()
            if self.proc.poll() is not None:
                self.pump(0.2)
                break
        raise AssertionError(
            f"screen never matched within {timeout} s; last screen:\n" + "\n".join(self.lines())
        )

    def send(self, text: str) -> None:
        os.write(self.master, text.encode())

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        with contextlib.suppress(OSError):
            os.close(self.master)

    def __enter__(self) -> PtyScreen:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

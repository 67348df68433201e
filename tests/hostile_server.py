"""A hostile "server" for the reliability suite, run as a launch profile's command.

It ignores its arguments (a profile renders SGLang flags) and does what SPECMON_HOSTILE_MODE says,
step by step (comma-separated):

  escapes      lines carrying terminal escapes: OSC title, ESC[2J, OSC 52 clipboard, OSC 8
               link, DCS, 8-bit CSI, C0/C1 controls, and Rich markup that must stay literal
  flood:N      N numbered lines ("flood 0" ...), as fast as the pipe takes them
  ready        SGLang's ready line
  sleep:S      wait S seconds
  fork         a child in the same process group that outlives this leader
  crash:C      a traceback, then exit with code C
  serve        sleep until killed
  tick:MS      a numbered line ("tick 0" ...) every MS milliseconds, until killed
"""

from __future__ import annotations

import itertools
import os
import sys
import time

READY_LINE = "[2026-01-01 00:00:00] The server is fired up and ready to roll!"
ESCAPE_LINES = (
    "title \x1b]0;pwned title\x07 end",
    "clear \x1b[2J\x1b[H end",
    "clipboard \x1b]52;c;cm0gLXJmIH4=\x07 end",
    "link \x1b]8;;https://example.invalid\x1b\\click\x1b]8;;\x1b\\ end",
    "dcs \x1bPq#0;2;0;0;0\x1b\\ end",
    "c1 \x9b2J\x9d0;t\x9c end",
    "controls \x00\x07\x08\r\x7f\x85 end",
    "markup [bold red]not markup[/] end",
)


def main() -> int:
    out = sys.stdout
    for step in os.environ.get("SPECMON_HOSTILE_MODE", "ready,serve").split(","):
        name, _, value = step.partition(":")
        if name == "escapes":
            for line in ESCAPE_LINES:
                out.write(line + "\n")
        elif name == "flood":
            out.writelines(f"flood {i}\n" for i in range(int(value)))
        elif name == "ready":
            out.write(READY_LINE + "\n")
        elif name == "sleep":
            time.sleep(float(value))
        elif name == "fork":
            out.flush()
            if os.fork() == 0:
                time.sleep(3600)
                os._exit(0)
        elif name == "crash":
            out.write("Traceback (most recent call last):\n")
            out.write("RuntimeError: hostile crash \x1b]0;crash title\x07\n")
            out.flush()
            return int(value or 1)
        elif name == "tick":
            for i in itertools.count():
                out.write(f"tick {i}\n")
                out.flush()
                time.sleep(float(value) / 1000)
        elif name == "serve":
            out.flush()
            while True:
                time.sleep(3600)
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

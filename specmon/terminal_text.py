"""Untrusted text (server log lines, argv, error messages) made safe to show on a terminal.

A server log is written by someone else's program: a line holding ``ESC ] 0 ; title BEL``
retitles the operator's terminal, ``ESC [ 2 J`` blanks the console, OSC 52 writes the
clipboard. ``safe_text`` removes every escape sequence (CSI, OSC, DCS, SOS, PM, APC, in their
7-bit and 8-bit forms, terminated or not) and every other C0/C1 control, keeping tab and
newline. A clean line, the usual case, costs one scan for a control character (a single
character class, which the regex engine scans fast; the full pattern's alternation it cannot).

JSON output needs none of this: ``json.dumps`` escapes C0 controls and, with its default
``ensure_ascii``, every C1 one (``\\u009b``), so no raw control byte is ever printed.
"""

from __future__ import annotations

import re

# String sequences (OSC, DCS, SOS, PM, APC) run to BEL or ST; an unterminated one to the end
# of its line. Longest forms first, single controls last.
_UNSAFE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI
    r"|\x9b[0-?]*[ -/]*[@-~]?"  # 8-bit CSI
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"  # other ESC sequences (charset selection, keypad modes, ...)
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # the remaining C0 and C1 controls: tab, newline kept
)
# Every match of _UNSAFE begins with one of these.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def safe_text(text: str) -> str:
    """``text`` without escape sequences or control characters (tab and newline kept)."""
    if _CONTROL.search(text) is None:
        return text
    return _UNSAFE.sub("", text)

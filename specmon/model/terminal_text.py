"""Untrusted text (server log lines, argv, error messages) made safe to show on a terminal.

A server log is written by someone else's program: a line holding ``ESC ] 0 ; title BEL``
retitles the operator's terminal, ``ESC [ 2 J`` blanks the console, OSC 52 writes the
clipboard. ``safe_text`` removes every escape sequence (CSI, OSC, DCS, SOS, PM, APC, in their
7-bit and 8-bit forms, terminated or not) and every other C0/C1 control, keeping tab and
newline. A clean line, the usual case, costs one scan for a control character (a single
character class, which the regex engine scans fast; the full pattern's alternation it cannot).

Unicode's bidirectional controls (U+202A-202E embeddings and overrides, U+2066-2069 isolates,
U+200E-200F and U+061C marks) go too: they print nothing yet reorder what follows on the
terminal, so ``rm -rf \u202e/ tmp`` could show as something else (the "Trojan Source" trick).
The zero-width characters (U+200B-200D, U+2060-2064, U+FEFF) and the line and paragraph
separators (U+2028, U+2029) go as well: the first print nothing, the second may break a line.

JSON output needs none of this: ``json.dumps`` escapes C0 controls and, with its default
``ensure_ascii``, every C1 one (``\\u009b``), so no raw control byte is ever printed.
"""

from __future__ import annotations

import re

# Single characters removed wherever they stand: the C0 and C1 controls (tab and newline
# kept), the bidi controls (marks, embeddings, overrides, isolates), the invisible ones that
# can hide a word's true spelling (zero-width space, joiners, word joiner, invisible
# operators, the byte order mark) and the line and paragraph separators (a line break to a
# renderer that honours them, so one log line could pose as two).
_SINGLES = (
    r"\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
    r"\u200b-\u200d\u2060-\u2064\ufeff\u2028\u2029"
)
# String sequences (OSC, DCS, SOS, PM, APC) run to BEL or ST; an unterminated one to the end
# of its line. Longest forms first, single characters last.
_UNSAFE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI
    r"|\x9b[0-?]*[ -/]*[@-~]?"  # 8-bit CSI
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"  # other ESC sequences (charset selection, keypad modes, ...)
    rf"|[{_SINGLES}]"
)
# Every match of _UNSAFE begins with one of these.
_CONTROL = re.compile(rf"[{_SINGLES}]")


def safe_text(text: str) -> str:
    """``text`` without escape sequences, control characters (tab and newline kept),
    bidirectional controls or invisible characters."""
    if _CONTROL.search(text) is None:
        return text
    return _UNSAFE.sub("", text)

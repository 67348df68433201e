"""A log that may have been compressed by its rotation (``server.log.1.gz``), read as text.

Rotated logs of servers that ran for days are kept gzip-, bzip2- or xz-compressed; `specmon
parse` reads them as they are, told by their first bytes (not their names), from a file or
stdin, with the standard library's decompressors. zstd has none there (before Python 3.14):
such a log is refused in one line that says how to read it.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import re
import zlib
from collections.abc import Callable
from typing import IO, BinaryIO

from specmon.model.errors import UsageError

_BZIP2 = re.compile(rb"BZh[1-9]1AY&SY")  # the stream header and the first block's magic
_OPENERS: tuple[tuple[Callable[[bytes], bool], str, Callable[[BinaryIO], IO[bytes]]], ...] = (
    (lambda head: head.startswith(b"\x1f\x8b\x08"), "gzip", lambda raw: gzip.GzipFile(fileobj=raw)),
    (lambda head: _BZIP2.match(head) is not None, "bzip2", bz2.BZ2File),
    (lambda head: head.startswith(b"\xfd7zXZ\x00"), "xz", lzma.LZMAFile),
)
_ZSTD = b"\x28\xb5\x2f\xfd"

DECOMPRESS_ERRORS = (lzma.LZMAError, zlib.error)
"""Raised while reading a damaged compressed log besides OSError (a stream cut short raises
EOFError: what it held is still read)."""


def decompressed(raw: BinaryIO, name: str) -> tuple[IO[bytes], str | None]:
    """``raw`` as it reads uncompressed, and the compression it had (None: none). ``raw``
    must allow ``peek`` (a buffered file or stdin); nothing is consumed from it to tell."""
    shown = "stdin" if name == "-" else name
    try:
        head = raw.peek(10)[:10] if hasattr(raw, "peek") else b""
    except OSError as exc:
        raise UsageError(f"parse: cannot read {shown}: {exc.strerror or exc}") from None
    for looks_like, compression, opener in _OPENERS:
        if looks_like(head):
            return opener(raw), compression
    if head.startswith(_ZSTD):
        raise UsageError(
            f"parse: {shown} is zstd-compressed, which Python cannot read here; "
            f"decompress it first: zstd -dc {name if name != '-' else 'FILE'} | specmon parse -"
        )
    return raw, None

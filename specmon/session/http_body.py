"""Answers read from a server over HTTP, never more than a cap.

httpx reads a whole body into memory before ``response.text`` exists, and its line reader
holds a line until the newline comes: a hostile server answering ``/metrics`` with an endless
body (or one line that never ends) makes the reader grow without bound. Here each body is
streamed and the reading stops at its cap (``BodyTooLarge``), before the bytes past the cap
are held. Compression is refused: a request asks for ``identity``, and an answer encoded all
the same is not read (a 1 KB gzip chunk can inflate to 1 MB before any cap could see it).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from specmon.model.errors import SpecmonError

# A /metrics page (the simulator's vLLM page is 13 KB; a real server's grows with its
# engines and histograms).
METRICS_BODY_LIMIT = 8 << 20
# Any other answer: health, server info, a generation, one line of a streamed generation.
BODY_LIMIT = 1 << 20
# Headers that ask a server for an uncompressed answer (on every capped request).
IDENTITY = {"Accept-Encoding": "identity"}


class BodyTooLarge(SpecmonError):
    """A server's answer ran past its cap (or came compressed although that was refused);
    the message says which and where, in one line. ``status_code``: the answer's status."""

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


@dataclass(frozen=True, slots=True)
class CappedResponse:
    """A whole answer that fit its cap: the status, headers' charset and the bytes."""

    status_code: int
    content: bytes
    encoding: str = "utf-8"

    @property
    def text(self) -> str:
        return self.content.decode(self.encoding, "replace")

    def json(self) -> Any:
        """The body as JSON; raises ValueError when it is not."""
        return json.loads(self.content)


def size_text(limit: int) -> str:
    """``8 MiB``, ``1 MiB``, ``64 KiB``: a cap as people read it."""
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if limit >= 1 << shift and limit % (1 << shift) == 0:
            return f"{limit >> shift} {unit}"
    return f"{limit} bytes"


def _refuse_encoding(response: httpx.Response, what: str) -> None:
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        raise BodyTooLarge(
            f"{what}: the answer came {encoding[:40]}-encoded, not read", response.status_code
        )


async def request_capped(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    limit: int = BODY_LIMIT,
    what: str | None = None,
    **kwargs: Any,
) -> CappedResponse:
    """``method url`` with the answer's body read up to ``limit`` bytes; raises BodyTooLarge
    past it (a Content-Length over it is refused before a byte is read), httpx.HTTPError as
    httpx does. ``what`` names the request in messages (default: the URL)."""
    what = what or url
    headers = {**IDENTITY, **kwargs.pop("headers", {})}
    async with client.stream(method, url, headers=headers, **kwargs) as response:
        _refuse_encoding(response, what)
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise BodyTooLarge(
                f"{what}: the answer says it is {int(declared)} bytes, over the "
                f"{size_text(limit)} cap; not read",
                response.status_code,
            )
        # One growing buffer: a list of a server's 1-byte chunks would cost 40 bytes each.
        body = bytearray()
        async for chunk in response.aiter_raw():
            if len(body) + len(chunk) > limit:
                raise BodyTooLarge(
                    f"{what}: the answer ran past the {size_text(limit)} cap; cut there",
                    response.status_code,
                )
            body += chunk
        return CappedResponse(response.status_code, bytes(body), response.encoding or "utf-8")


async def head_text(response: httpx.Response, limit: int = 4096) -> str:
    """The first ``limit`` bytes of a streamed answer as text (an error page, for a one-line
    message); the rest is not read."""
    head = b""
    async for chunk in response.aiter_raw():
        head += chunk
        if len(head) >= limit:
            break
    return head[:limit].decode("utf-8", "replace")


async def capped_lines(
    response: httpx.Response, *, limit: int = BODY_LIMIT, what: str = "the answer"
) -> AsyncIterator[str]:
    """A streamed answer's lines (without their ends), none longer than ``limit`` bytes:
    raises BodyTooLarge at a line that runs past it, before it is held whole. The stream as
    a whole has no cap: each line is let go once read."""
    _refuse_encoding(response, what)
    # The newline is looked for in each new chunk alone, and the line grows in place: a
    # server's 1-byte chunks cost linear time, not a rescan of the line at every byte.
    pending = bytearray()
    async for chunk in response.aiter_raw():
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            pending += chunk[start:] if end < 0 else chunk[start:end]
            if len(pending) > limit:
                raise BodyTooLarge(
                    f"{what}: a line ran past the {size_text(limit)} cap; cut there",
                    response.status_code,
                )
            if end < 0:
                break
            yield pending.rstrip(b"\r").decode("utf-8", "replace")
            pending.clear()
            start = end + 1
    if pending:
        yield pending.rstrip(b"\r").decode("utf-8", "replace")

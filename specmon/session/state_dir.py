"""Which host state dirs specmon accepts: a directory of its own, never the root or nothing.

specmon creates what it needs inside the state dir (``bin/``, ``runs/``, the lock) and never
changes the mode of a directory it did not create; the bootstrap that runs everything on the
host (``host_bootstrap.py``) applies the same rule and refuses a ``bin/`` or ``runs/`` that is
not the user's own. This check runs before anything is written to the host.
"""

from __future__ import annotations

import posixpath

from specmon.model.errors import UsageError


def checked_state_dir(path: str) -> str:
    """``path`` without trailing slashes; UsageError for an empty path or the root."""
    text = path.strip()
    trimmed = text.rstrip("/")
    if not text or posixpath.normpath(text) in ("/", "//") or not trimmed:
        raise UsageError(
            f"state dir {path!r} refused: specmon needs a directory of its own on the host "
            "(e.g. ~/.local/state/specmon), never the root or an empty path"
        )
    return trimmed

"""specmon's temporary directories (the demo's state dir, ssh option files): each records its
owner inside, and the next start removes those whose owner is gone (after a kill -9 nothing
else would). A directory whose owner lives, or whose owner is unknown, is never touched."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from specmon.model.process_owner import owner_gone, this_process

OWNER_FILE = ".specmon-owner.json"


def owned_tempdir(prefix: str) -> Path:
    """A new private directory ``<tmp>/<prefix>XXXX`` owned by this process, after removing
    stale ones of the same prefix."""
    remove_stale(prefix)
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    (directory / OWNER_FILE).write_text(json.dumps(this_process()))
    return directory


def remove_stale(prefix: str, root: str | None = None) -> list[Path]:
    """Remove ``<root>/<prefix>*`` directories of this user whose recorded owner is gone."""
    removed = []
    base = Path(root or tempfile.gettempdir())
    for directory in base.glob(f"{prefix}*"):
        with contextlib.suppress(OSError, ValueError):
            if directory.is_symlink() or not directory.is_dir():
                continue
            if directory.stat().st_uid != os.getuid():
                continue
            owner = json.loads((directory / OWNER_FILE).read_text())
            if isinstance(owner, dict) and owner_gone(owner):
                shutil.rmtree(directory)
                removed.append(directory)
    return removed

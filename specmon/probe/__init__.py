"""The draft/verify timing probe injected into a real server (see records.py for the record
schema the probe and the simulator both write).

The in-server hook modules live in ``inject/`` (per server by nature); the backend adds what
its server needs to find them (its ``probe_targets()``). ``launch_env()`` gives the variables
to merge into the server's environment. Nothing in the server is edited: Python runs the
copied ``sitecustomize.py`` in every process.
"""

from __future__ import annotations

import posixpath
from importlib import resources

from specmon.model.errors import UsageError

PROBE_FILE_ENV = "SPECMON_PROBE_FILE"


def injection_files() -> dict[str, bytes]:
    """Relative path -> content of the in-server hook modules copied to ``<run dir>/probe/``:
    ``sitecustomize.py`` and every server's ``specmon_probe_*.py`` (each acts only inside the
    server whose modules it watches)."""
    package = resources.files("specmon.probe.inject")
    hooks = sorted(
        entry.name
        for entry in package.iterdir()
        if entry.name.startswith("specmon_probe_") and entry.name.endswith(".py")
    )
    names = ["sitecustomize.py", *hooks]
    return {name: package.joinpath(name).read_bytes() for name in names}


def launch_env(probe_dir: str, probe_file: str, existing_pythonpath: str | None) -> dict[str, str]:
    """The variables to merge into the server's environment: ``PYTHONPATH`` with ``probe_dir``
    first (the host's own entries kept after it) and ``SPECMON_PROBE_FILE``. Paths are the
    host's (POSIX) paths."""
    for label, path in (("probe dir", probe_dir), ("probe file", probe_file)):
        if not path or not posixpath.isabs(path):
            raise UsageError(f"{label} must be an absolute path on the host, got {path!r}")
        if "\n" in path or "\0" in path:
            raise UsageError(f"{label} contains a newline or NUL byte: {path!r}")
    if ":" in probe_dir:
        raise UsageError(f"probe dir cannot contain ':' (the PYTHONPATH separator): {probe_dir!r}")
    others = [p for p in (existing_pythonpath or "").split(":") if p and p != probe_dir]
    return {
        "PYTHONPATH": ":".join([probe_dir, *others]),
        PROBE_FILE_ENV: probe_file,
    }

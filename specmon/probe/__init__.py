"""The draft/verify timing probe injected into a real server (see records.py for the record
schema the probe and the simulator both write).

The in-server runtime lives in ``inject/`` and names no server; each backend keeps its server
table (the methods to time, and the glue) in its own folder and ships it with the runtime
through its ``probe_targets()``, built with ``injection_files()``. ``launch_env()`` gives the
variables to merge into the server's environment. Nothing in the server is edited: Python runs
the copied ``sitecustomize.py`` in every process.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from importlib import resources

from specmon.model.errors import UsageError
from specmon.probe.inject.specmon_probe_hook import PROBE_FILE_ENV, TABLES_FILE

RUNTIME_FILES = ("sitecustomize.py", "specmon_probe_hook.py")


def injection_files(tables: Mapping[str, str]) -> dict[str, bytes]:
    """Relative path -> content of the files copied to ``<run dir>/probe/``: the runtime
    (``sitecustomize.py``, ``specmon_probe_hook.py``), each server table of ``tables`` (the
    top-level module name it has there -> the specmon module whose source it is), and
    ``TABLES_FILE`` naming those tables, one a line: the runtime reads it beside itself, so
    what was shipped together is what loads, with no variable to add to the environment."""
    package = resources.files("specmon.probe.inject")
    files = {name: package.joinpath(name).read_bytes() for name in RUNTIME_FILES}
    for shipped, source in tables.items():
        path = f"{shipped}.py"
        if not shipped.isidentifier() or path in files:
            raise ValueError(f"not a name for a server table module: {shipped!r}")
        owner, _, leaf = source.rpartition(".")
        files[path] = resources.files(owner).joinpath(f"{leaf}.py").read_bytes()
    files[TABLES_FILE] = "".join(f"{shipped}\n" for shipped in tables).encode()
    return files


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

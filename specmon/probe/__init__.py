"""The draft/verify timing probe injected into a real SGLang server (see records.py for the
record schema the probe and the simulator both write).

The host session asks for two things: ``injection_files()``, the files to copy to
``<run dir>/probe/`` on the host, and ``launch_env()``, the variables to merge into the server's
environment. Nothing in SGLang is edited: Python runs the copied ``sitecustomize.py`` in every
process, and SGLang 0.5.11+ also finds the ``sglang.srt.plugins`` entry point declared by the
copied ``.dist-info`` folder.
"""

from __future__ import annotations

import posixpath
from importlib import resources

from specmon.errors import UsageError

PROBE_FILE_ENV = "SPECMON_PROBE_FILE"
PROBE_DIST_INFO = "specmon_probe-1.0.dist-info"
_INJECTED_MODULES = ("sitecustomize.py", "specmon_probe_hook.py", "specmon_probe_vllm.py")

_DIST_METADATA = "Metadata-Version: 2.1\nName: specmon-probe\nVersion: 1.0\n"
_ENTRY_POINTS = "[sglang.srt.plugins]\nspecmon_probe = specmon_probe_hook:register_sglang_plugin\n"


def injection_files() -> dict[str, bytes]:
    """Relative path -> content of every file the host session copies to ``<run dir>/probe/``."""
    package = resources.files("specmon.probe.inject")
    files = {name: package.joinpath(name).read_bytes() for name in _INJECTED_MODULES}
    files[f"{PROBE_DIST_INFO}/METADATA"] = _DIST_METADATA.encode()
    files[f"{PROBE_DIST_INFO}/entry_points.txt"] = _ENTRY_POINTS.encode()
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

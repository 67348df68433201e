"""SGLang's timing probe delivery: the probe runtime with SGLang's table
(``probe_hook.py``, shipped as ``specmon_probe_sglang.py``), plus a ``.dist-info`` folder whose
entry point SGLang 0.5.11+ loads from its ``sglang.srt.plugins`` group; older versions load the
table through the runtime that the copied ``sitecustomize.py`` starts."""

from __future__ import annotations

from specmon.probe import injection_files as probe_files

TABLE_MODULE = "specmon_probe_sglang"  # probe_hook.py's name in <run dir>/probe/
PROBE_DIST_INFO = "specmon_probe-1.0.dist-info"
_DIST_METADATA = "Metadata-Version: 2.1\nName: specmon-probe\nVersion: 1.0\n"
_ENTRY_POINTS = f"[sglang.srt.plugins]\nspecmon_probe = {TABLE_MODULE}:register_sglang_plugin\n"


def injection_files() -> dict[str, bytes]:
    """Relative path -> content of every file copied to ``<run dir>/probe/``."""
    files = probe_files({TABLE_MODULE: "specmon.backends.sglang.probe_hook"})
    files[f"{PROBE_DIST_INFO}/METADATA"] = _DIST_METADATA.encode()
    files[f"{PROBE_DIST_INFO}/entry_points.txt"] = _ENTRY_POINTS.encode()
    return files

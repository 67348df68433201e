"""SGLang's timing probe delivery: the in-server hook modules (``specmon.probe.inject``) plus a
``.dist-info`` folder whose entry point SGLang 0.5.11+ loads from its ``sglang.srt.plugins``
group; older versions load the hook through the copied ``sitecustomize.py``."""

from __future__ import annotations

from specmon.probe import injection_files as hook_files

PROBE_DIST_INFO = "specmon_probe-1.0.dist-info"
_DIST_METADATA = "Metadata-Version: 2.1\nName: specmon-probe\nVersion: 1.0\n"
_ENTRY_POINTS = "[sglang.srt.plugins]\nspecmon_probe = specmon_probe_hook:register_sglang_plugin\n"


def injection_files() -> dict[str, bytes]:
    """Relative path -> content of every file copied to ``<run dir>/probe/``."""
    files = hook_files()
    files[f"{PROBE_DIST_INFO}/METADATA"] = _DIST_METADATA.encode()
    files[f"{PROBE_DIST_INFO}/entry_points.txt"] = _ENTRY_POINTS.encode()
    return files

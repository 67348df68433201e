"""specmon probe bootstrap, copied to ``<run dir>/probe/`` on the GPU host.

Python imports ``sitecustomize`` at start-up in every process, SGLang's spawned schedulers
included, and this folder is first on PYTHONPATH, so this file runs there. It starts the probe
(only when ``$SPECMON_PROBE_FILE`` is set) and then runs the next ``sitecustomize`` on sys.path,
which it would otherwise shadow. Self-contained: standard library only.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _start_probe() -> None:
    if not os.environ.get("SPECMON_PROBE_FILE"):
        return
    try:
        import specmon_probe_hook

        specmon_probe_hook.install()
    except Exception as exc:  # the server must start even if the probe cannot
        print(f"[specmon probe] not started: {exc}", file=sys.stderr)


def _run_next_sitecustomize() -> None:
    """Find the sitecustomize this one shadows (the rest of sys.path) and execute it."""
    for entry in sys.path:
        try:
            if os.path.abspath(entry or os.getcwd()) == _HERE:
                continue
        except (TypeError, ValueError):
            continue
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # what Python's site.py does for a failing sitecustomize
            print(f"Error in sitecustomize ({spec.origin}): {exc}", file=sys.stderr)
        return


if __name__ == "sitecustomize":  # not when imported as specmon.probe.inject.sitecustomize
    _start_probe()
    _run_next_sitecustomize()

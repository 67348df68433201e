"""``python -m specmon.sim``, a published name: SGLang's personality lives in its backend folder."""

from __future__ import annotations

import runpy

# By name, not import: the engine sits below the backends (tests/unit/meta/test_layers.py).
PERSONALITY = "specmon.backends.sglang.sim"

if __name__ == "__main__":
    runpy.run_module(PERSONALITY, run_name="__main__")

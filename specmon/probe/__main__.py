"""``python -m specmon.probe --check-source DIR``: would the probe work on this server's source?

A thin launcher: the command line is ``specmon.backends.check_source``, because the checks are
each server's (in its backend folder) and probe/ sits below backends/ in the layer order
(tests/unit/meta/test_layers.py), so this package may not import them. The module is named as
a string and imported only when run as ``python -m``, which keeps the order of the layers at
import time and the command's output and exit codes as they were.
"""

from __future__ import annotations

import importlib

COMMAND_LINE = "specmon.backends.check_source"

if __name__ == "__main__":
    raise SystemExit(importlib.import_module(COMMAND_LINE).main())

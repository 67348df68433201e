"""The hostile server (tests/hostile_server.py) as a launch profile, in specmon.toml text."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HOSTILE_SERVER = Path(__file__).resolve().parents[1] / "hostile_server.py"


def hostile_profile_toml(
    mode: str, *, name: str = "hostile", port: int | None = None, backend: str | None = None
) -> str:
    """A profile running the hostile server with SPECMON_HOSTILE_MODE=``mode``, no GPU agent;
    ``backend`` names the server it poses as (None: the default); ``port`` None: a free one
    (its ``ready`` step answers HTTP there before it says ready)."""
    from support.hosts import free_port

    port = free_port() if port is None else port
    command = json.dumps([sys.executable, str(HOSTILE_SERVER)])
    backend_line = f'backend = "{backend}"\n' if backend else ""
    return f"""
[profiles.{name}]
{backend_line}command = {command}
model_path = "hostile"
tp = 1
port = {port}
gpu_agent = "none"
stop_grace_s = 2.0

[profiles.{name}.env]
SPECMON_HOSTILE_MODE = "{mode}"
"""

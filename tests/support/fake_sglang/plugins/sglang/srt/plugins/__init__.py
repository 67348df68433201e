"""Stand-in for SGLang's general plugin loader: entry points in group ``sglang.srt.plugins``,
filtered by ``SGLANG_PLUGINS``, then the registered hooks are applied."""

from __future__ import annotations

import os
from importlib.metadata import entry_points

from sglang.srt.plugins.hook_registry import HookRegistry

GENERAL_PLUGINS_GROUP = "sglang.srt.plugins"
LOADED: list[str] = []


def load_plugins() -> None:
    allowed = {n.strip() for n in os.environ.get("SGLANG_PLUGINS", "").split(",") if n.strip()}
    for entry in entry_points(group=GENERAL_PLUGINS_GROUP):
        if allowed and entry.name not in allowed:
            continue
        entry.load()()
        LOADED.append(entry.name)
    HookRegistry.apply_hooks()

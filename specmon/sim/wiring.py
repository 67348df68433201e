"""The simulated draft's wiring: which target layers it reads, and which it was trained on.

Issue 31's bug in the simulator: when the draft path holds a ``config.json``, the server's own
rule (specmon/backends/<name>/draft_wiring.py) gives the auxiliary layers in effect; the layers
the draft "was trained with" come from ``SPECMON_SIM_TRAINED_AUX_LAYERS`` (a comma list,
default: the server's default for the target). When the two differ, acceptance drops to the
miswired curve of specmon.sim.perf (figures.md: ~19% where the right wiring gives ~47%).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmon.backends.draft_wiring import (
    AuxLayers,
    DraftConfigError,
    aux_layers,
    backend_wiring,
    load_config,
    parse_layer_list,
)

TRAINED_ENV = "SPECMON_SIM_TRAINED_AUX_LAYERS"


@dataclass(frozen=True, slots=True)
class DraftWiring:
    """What the simulated server wires the draft to, against what the draft expects."""

    in_effect: AuxLayers
    trained: tuple[int, ...]
    target_layers: int

    @property
    def matched(self) -> bool:
        return tuple(self.in_effect.layer_ids) == self.trained


def target_layer_count(target_path: str | None, default: int) -> int:
    """``num_hidden_layers`` of the target's ``config.json`` when it is a local directory.

    Multimodal checkpoints (Kimi-K2.5) keep it under ``text_config``; anything unreadable
    falls back to the personality's own count.
    """
    if not target_path:
        return default
    try:
        config = load_config(target_path)
    except DraftConfigError:
        return default
    for section in (config or {}, (config or {}).get("text_config") or {}):
        layers = section.get("num_hidden_layers") if isinstance(section, Mapping) else None
        if isinstance(layers, int) and not isinstance(layers, bool) and layers > 0:
            return layers
    return default


def resolve(
    backend: str,
    draft_path: str | None,
    env: Mapping[str, str],
    *,
    target_layers: int,
    version: str | None = None,
) -> DraftWiring:
    """The wiring for a launch; DraftConfigError (one line) for an unusable config or env list."""
    config: dict[str, Any] | None = load_config(Path(draft_path)) if draft_path else None
    in_effect = aux_layers(backend, config, target_layers, version)
    raw = env.get(TRAINED_ENV, "").strip()
    if raw:
        trained = parse_layer_list(raw, TRAINED_ENV)
    else:
        trained = tuple(backend_wiring(backend).default_aux_layers(target_layers, version))
    return DraftWiring(in_effect, trained, target_layers)

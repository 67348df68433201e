"""vLLM's rule for the EAGLE-3 auxiliary layers (docs/draft-wiring.md has the sources).

``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py::set_eagle3_aux_hidden_state_layers`` (0.33.0)
asks ``get_eagle3_aux_layers_from_config``, which reads the *top-level* attribute
``eagle_aux_hidden_state_layer_ids`` of the draft's hf_config (the speculators converter copies
it there); a non-empty list or tuple wins and is logged "from config". Otherwise the target
model's ``get_eagle3_default_aux_hidden_state_layers()`` gives ``(2, L // 2, L - 3)``, logged
"from model". The ids are used as they are: vLLM captures the hidden state entering layer i.
A copy nested under ``eagle_config`` (SGLang's place) is not read, so such a draft silently
gets the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specmon.backends.draft_wiring import AUX_KEY, AuxLayers, check_layer_ids

VERSIONS = ("0.32", "0.33.0")
CONFIG_WHERE = AUX_KEY


def default_aux_layers(num_target_layers: int, version: str | None = None) -> list[int]:
    """The layers vLLM's target models return by default: (2, L // 2, L - 3)."""
    del version
    n = num_target_layers
    return [2, n // 2, n - 3]


def checkpoint_aux_layers(config: Mapping[str, Any] | None) -> tuple[int, ...] | None:
    """The ids vLLM reads from a parsed draft ``config.json``: only the top-level key counts."""
    if not config:
        return None
    return check_layer_ids(config.get(AUX_KEY), f"config.json {CONFIG_WHERE}")


def aux_layers(
    config: Mapping[str, Any] | None, num_target_layers: int, version: str | None = None
) -> AuxLayers:
    """The layers in effect for this draft config on a target of ``num_target_layers``."""
    ids = checkpoint_aux_layers(config)
    if ids is not None:
        return AuxLayers(ids, "checkpoint", CONFIG_WHERE)
    return AuxLayers(
        tuple(default_aux_layers(num_target_layers, version)), "default", "(2, L//2, L-3)"
    )


def captured_inputs(wiring: AuxLayers) -> list[int]:
    """The target layers whose input vLLM hands the draft: the ids as they are."""
    return list(wiring.layer_ids)


def startup_line(wiring: AuxLayers) -> str:
    """The worker's log message (``eagle3_utils.py:39``); a tuple, as vLLM formats it."""
    origin = "config" if wiring.source == "checkpoint" else "model"
    return f"Using Eagle3 auxiliary layers from {origin}: {tuple(wiring.layer_ids)}"

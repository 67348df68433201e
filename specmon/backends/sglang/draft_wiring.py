"""SGLang's rule for the EAGLE-3 auxiliary layers (docs/draft-wiring.md has the sources).

Read from 0.5.9 and checked unchanged through 0.5.23: the target's ``ModelRunner`` loads the
draft's config and reads ``hf_config.eagle_config["eagle_aux_hidden_state_layer_ids"]`` (a bare
``except`` turns a missing ``eagle_config`` or key into None), then calls the target model's
``set_eagle3_layers_to_capture(ids)``. With None the model captures ``[2, L // 2, L - 3]``;
with ids it captures ``[i + 1 for i in ids]``, because SGLang takes the hidden state entering
layer i, which is the output of layer i - 1. A top-level ``eagle_aux_hidden_state_layer_ids``
(vLLM's place for it) is not read. SGLang logs no line naming the layers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specmon.backends.draft_wiring import AUX_KEY, AuxLayers, check_layer_ids

VERSIONS = ("0.5.9", "0.5.18", "0.5.23")  # read or spot-checked: the same rule in all
CONFIG_WHERE = f"eagle_config.{AUX_KEY}"


def default_aux_layers(num_target_layers: int, version: str | None = None) -> list[int]:
    """The layers SGLang captures when the draft config names none: [2, L // 2, L - 3]."""
    del version  # the same in every version read
    n = num_target_layers
    return [2, n // 2, n - 3]


def checkpoint_aux_layers(config: Mapping[str, Any] | None) -> tuple[int, ...] | None:
    """The ids SGLang reads from a parsed draft ``config.json``: only the nested key counts."""
    if not config:
        return None
    eagle = config.get("eagle_config")
    if not isinstance(eagle, Mapping):
        return None
    return check_layer_ids(eagle.get(AUX_KEY), f"config.json {CONFIG_WHERE}")


def aux_layers(
    config: Mapping[str, Any] | None, num_target_layers: int, version: str | None = None
) -> AuxLayers:
    """The layers in effect for this draft config on a target of ``num_target_layers``."""
    ids = checkpoint_aux_layers(config)
    if ids is not None:
        return AuxLayers(ids, "checkpoint", CONFIG_WHERE)
    return AuxLayers(
        tuple(default_aux_layers(num_target_layers, version)), "default", "[2, L//2, L-3]"
    )


def captured_inputs(wiring: AuxLayers) -> list[int]:
    """The target layers whose *input* SGLang hands the draft (checkpoint ids are shifted +1)."""
    if wiring.source == "checkpoint":
        return [i + 1 for i in wiring.layer_ids]
    return list(wiring.layer_ids)


def startup_line(wiring: AuxLayers) -> str | None:
    """SGLang prints nothing about the auxiliary layers."""
    del wiring
    return None

"""Which target layers an EAGLE-3 draft reads: the neutral half of the "draft wiring".

An EAGLE-3 draft is fed the hidden states of a few target layers (the "auxiliary" layers).
The server takes their ids from the draft checkpoint's ``config.json`` or, when it finds none
there, from a default computed from the target's layer count. A draft fed other layers than it
was trained on still runs, but its acceptance collapses (figures.md: about 19% against 47%),
and nothing in the server's output says so. Each backend knows where its server looks and what
its default is (``specmon/backends/<name>/draft_wiring.py``, rules and sources in
docs/draft-wiring.md); this module holds what they share: reading ``config.json`` with one clear
message instead of a traceback, checking a list of layer ids, and the answer type.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

CONFIG_NAME = "config.json"
AUX_KEY = "eagle_aux_hidden_state_layer_ids"

AuxSource = Literal["checkpoint", "default"]


class DraftConfigError(ValueError):
    """A draft ``config.json`` that cannot be used; the message is one line for the operator."""


@dataclass(frozen=True, slots=True)
class AuxLayers:
    """The auxiliary layer ids a server will use, and where it took them from.

    ``layer_ids`` are in the checkpoint's own numbering (what ``config.json`` holds and what the
    server logs); ``where`` names the config key or the default rule, for display.
    """

    layer_ids: tuple[int, ...]
    source: AuxSource
    where: str


def load_config(path: str | Path) -> dict[str, Any] | None:
    """The parsed ``config.json`` of a checkpoint directory (or the file itself); None if absent.

    Unreadable, malformed or non-object JSON raises DraftConfigError with one line that names
    the file, so callers show it instead of a traceback.
    """
    p = Path(path)
    file = p / CONFIG_NAME if p.is_dir() else p
    if not file.is_file():
        return None
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DraftConfigError(f"{file}: cannot read: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DraftConfigError(
            f"{file}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    if not isinstance(data, dict):
        raise DraftConfigError(f"{file}: expected a JSON object, found {type(data).__name__}")
    return data


def check_layer_ids(value: Any, where: str) -> tuple[int, ...] | None:
    """``value`` as a tuple of layer ids; None for absent or empty (servers treat both as unset).

    Anything else that is not a list of non-negative integers raises DraftConfigError.
    """
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return None
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        raise DraftConfigError(f"{where}: expected a list of non-negative integers, got {value!r}")
    return tuple(value)


def parse_layer_list(text: str, where: str = "layer list") -> tuple[int, ...]:
    """A comma list such as ``"2,30,58"`` (spaces and brackets allowed) as layer ids."""
    body = text.strip().strip("[]()")
    try:
        ids = tuple(int(part) for part in body.replace(" ", "").split(",") if part)
    except ValueError:
        raise DraftConfigError(
            f"{where}: expected comma-separated integers, got {text!r}"
        ) from None
    if not ids or any(i < 0 for i in ids):
        raise DraftConfigError(
            f"{where}: expected comma-separated non-negative integers, got {text!r}"
        )
    return ids


def out_of_range(layer_ids: Sequence[int], num_target_layers: int) -> list[int]:
    """The ids at or past the target's layer count (a wiring that cannot work)."""
    return [i for i in layer_ids if i >= num_target_layers]


def backend_wiring(backend: str) -> ModuleType:
    """The backend's own ``draft_wiring`` module (``default_aux_layers``, ``aux_layers``, ...).

    Imported on demand so callers outside specmon/backends/ never name a server.
    """
    return importlib.import_module(f"specmon.backends.{backend}.draft_wiring")


def aux_layers(
    backend: str,
    config: Mapping[str, Any] | None,
    num_target_layers: int,
    version: str | None = None,
) -> AuxLayers:
    """The auxiliary layers ``backend`` (at ``version``) would use for this draft config."""
    return backend_wiring(backend).aux_layers(config, num_target_layers, version)

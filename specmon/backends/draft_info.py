"""The draft's wiring as one ``DraftInfo`` event: the helper's ``model-configs`` reply (the
draft's and target's ``config.json`` read on the host) and the backend's rule for the
auxiliary layers (draft_wiring.py) give what the server will feed the draft, and the wirings
that cannot work, which a launch refuses before the server starts (docs/console.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specmon.backends.draft_wiring import DraftConfigError, aux_layers, out_of_range
from specmon.model.events import DraftInfo

# The variables that decide which Hugging Face cache a server reads a model id from.
HF_CACHE_ENV = ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")


def config_request(
    target: str | None, draft: str | None, env: Mapping[str, str]
) -> dict[str, Any] | None:
    """The helper's ``model-configs`` request for a launch's models, or None without a draft
    (nothing to wire): the server's own cache variables, so a model id resolves as it will."""
    if not draft:
        return None
    models = {"draft": draft, **({"target": target} if target else {})}
    return {"models": models, "env": {k: env[k] for k in HF_CACHE_ENV if env.get(k)}}


def _text_config(config: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A multimodal target's language model config (``text_config``), else the config."""
    if not config:
        return {}
    text = config.get("text_config")
    if isinstance(text, Mapping) and "hidden_size" not in config:
        return text
    return config


def _int(config: Mapping[str, Any], key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dtype(config: Mapping[str, Any]) -> str | None:
    value = config.get("torch_dtype", config.get("dtype"))
    return value if isinstance(value, str) else None


def draft_info(
    run_id: str,
    backend: str,
    models: Mapping[str, Any],
    version: str | None = None,
) -> DraftInfo:
    """The event for a ``model-configs`` reply's ``models`` ({"draft": ..., "target": ...})."""
    entries = {role: models.get(role) or {} for role in ("draft", "target")}
    errors = tuple(f"{role}: {e['error']}" for role, e in entries.items() if e.get("error"))
    draft_raw = entries["draft"].get("config")
    draft: Mapping[str, Any] = draft_raw if isinstance(draft_raw, Mapping) else {}
    target = _text_config(entries["target"].get("config"))
    layers = _int(target, "num_hidden_layers")
    problems: list[str] = []
    aux: dict[str, Any] = {}
    if draft and layers:
        try:
            wiring = aux_layers(backend, draft, layers, version)
        except DraftConfigError as exc:
            problems.append(str(exc))
        else:
            aux = {
                "aux_layer_ids": wiring.layer_ids,
                "aux_source": wiring.source,
                "aux_rule": wiring.where,
            }
            past = out_of_range(wiring.layer_ids, layers)
            if past:
                problems.append(
                    f"auxiliary layer ids {list(past)} ({wiring.where}) are at or past the "
                    f"target's {layers} layers: the draft cannot be fed them"
                )
    architectures = draft.get("architectures")
    hidden = _int(draft, "hidden_size")
    fc_hidden = _int(draft, "target_hidden_size") or hidden
    target_hidden = _int(target, "hidden_size")
    if fc_hidden and target_hidden and fc_hidden != target_hidden:
        key = "target_hidden_size" if _int(draft, "target_hidden_size") else "hidden_size"
        problems.append(
            f"the draft's input layer takes hidden size {fc_hidden} (its config.json {key}), "
            f"the target's is {target_hidden}: it cannot read this target's hidden states"
        )
    return DraftInfo(
        run_id=run_id,
        draft_path=entries["draft"].get("path"),
        target_path=entries["target"].get("path"),
        draft_architecture=(
            str(architectures[0]) if isinstance(architectures, list) and architectures else None
        ),
        draft_hidden_size=hidden,
        draft_fc_hidden_size=fc_hidden,
        target_hidden_size=target_hidden,
        draft_vocab_size=_int(draft, "vocab_size"),
        draft_mapped_vocab_size=_int(draft, "draft_vocab_size"),
        target_vocab_size=_int(target, "vocab_size"),
        target_layers=layers,
        draft_dtype=_dtype(draft) if draft else None,
        target_dtype=_dtype(target) if target else None,
        draft_config_sha256=entries["draft"].get("config_sha256"),
        target_config_sha256=entries["target"].get("config_sha256"),
        chat_template_sha256=entries["target"].get("chat_template_sha256"),
        draft_revision=entries["draft"].get("revision"),
        target_revision=entries["target"].get("revision"),
        problems=tuple(problems),
        errors=errors,
        **aux,
    )


def wiring_line(info: DraftInfo) -> str:
    """The console's one line: "draft ARCH h4096/h7168 (reads h7168) · aux [2, 30, 58]
    (checkpoint) · 61 layers": the draft's hidden size against the target's, and the target
    hidden size its input layer takes where that differs (an EAGLE-3 draft projects)."""
    parts = [f"draft {info.draft_architecture or '?'}"]
    if info.draft_hidden_size or info.target_hidden_size:
        parts.append(f"h{info.draft_hidden_size or '?'}/h{info.target_hidden_size or '?'}")
    if info.draft_fc_hidden_size and info.draft_fc_hidden_size != info.draft_hidden_size:
        parts.append(f"(reads h{info.draft_fc_hidden_size})")
    words = [" ".join(parts)]
    if info.aux_layer_ids:
        words.append(f"aux {list(info.aux_layer_ids)} ({info.aux_source})")
    if info.target_layers:
        words.append(f"{info.target_layers} layers")
    if info.draft_mapped_vocab_size and info.target_vocab_size:
        words.append(f"vocab {info.draft_mapped_vocab_size}/{info.target_vocab_size}")
    return " · ".join(words)


def launch_wiring_problems(info: DraftInfo) -> list[str]:
    """The one-line refusals of a launch whose draft cannot work with its target."""
    return [f"draft {info.draft_path}: {problem}" for problem in info.problems]


# A run's fingerprint keeps each config.json as flat "a.b.c" -> value fields, bounded: a
# checkpoint's file never sizes what a run record or the ledger holds (docs/run-diff.md).
FINGERPRINT_VERSION = 1
FIELDS_MAX = 400  # per config.json; a longer one keeps its first fields and says so
LIST_ITEMS_MAX = 64  # a longer list (or one of non-scalars) is kept as its hash
TEXT_MAX = 200  # a longer string is kept as its hash
DEPTH_MAX = 6


def _digest(value: Any) -> str:
    import hashlib
    import json

    text = json.dumps(value, sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _field_value(value: Any) -> Any:
    if isinstance(value, str):
        return value if len(value) <= TEXT_MAX else _digest(value)
    if _scalar(value):
        return value
    if isinstance(value, list) and len(value) <= LIST_ITEMS_MAX and all(map(_scalar, value)):
        return [_field_value(v) for v in value]
    return _digest(value)


def config_fields(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """``config`` flattened to "a.b" -> value (a dict nests, anything else is a value), at
    most FIELDS_MAX fields (then "…truncated": the count left out)."""
    fields: dict[str, Any] = {}
    left_out = 0
    stack: list[tuple[str, Any, int]] = [("", config or {}, 0)]
    while stack:
        prefix, node, depth = stack.pop()
        items = list(node.items()) if isinstance(node, Mapping) else []
        for key, value in reversed(items):
            name = f"{prefix}{key}"
            if isinstance(value, Mapping) and value and depth < DEPTH_MAX:
                stack.append((f"{name}.", value, depth + 1))
            elif len(fields) < FIELDS_MAX:
                fields[name] = _field_value(value)
            else:
                left_out += 1
    if left_out:
        fields["…truncated"] = left_out
    return dict(sorted(fields.items()))


def run_fingerprint(
    info: DraftInfo, models: Mapping[str, Any], backend: str | None = None
) -> dict[str, Any]:
    """What a run's draft and target were, kept in its record and the ledger so two runs can
    be told apart later (``specmon diff``, the collapse banner): each config.json's hash,
    revision and fields, the chat template's hash, and the auxiliary layers in effect."""
    out: dict[str, Any] = {"v": FINGERPRINT_VERSION}
    for role in ("draft", "target"):
        entry = models.get(role) or {}
        if not isinstance(entry, Mapping):
            entry = {}
        config = entry.get("config")
        out[role] = {
            "path": entry.get("path"),
            "config_sha256": entry.get("config_sha256"),
            "revision": entry.get("revision"),
            "fields": config_fields(config if isinstance(config, Mapping) else None),
        }
    out["chat_template_sha256"] = info.chat_template_sha256
    out["aux_layer_ids"] = list(info.aux_layer_ids) if info.aux_layer_ids else None
    out["aux_source"] = info.aux_source
    out["aux_captured"] = None  # the capture indices: what the draft is fed
    if info.aux_layer_ids and info.aux_source in ("checkpoint", "default") and backend:
        from specmon.backends.draft_wiring import AuxLayers, backend_wiring

        wiring = AuxLayers(info.aux_layer_ids, info.aux_source, info.aux_rule or "")
        out["aux_captured"] = list(backend_wiring(backend).captured_inputs(wiring))
    return out

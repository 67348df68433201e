"""A dashboard's JSON checked against Grafana's own dashboard schema (v1, as Grafana 11.6
imports it: schemaVersion 41), through the types `grafana-foundation-sdk` generates from
Grafana's CUE schema: the dashboard, every panel plugin's options and field config, the
Prometheus query.

Neither that package (PyPI, npm) nor `@grafana/schema` (npm: TypeScript types only) ships the
schema as JSON Schema, so the generated models are the schema here: every key must be a field
of its object (an unknown key is a typo that Grafana drops on import), every field the schema
does not mark optional must be there, and every value must be of its field's type (enums by
value, a panel's ``options`` and ``fieldConfig.defaults.custom`` by its plugin's types, a
target by its data source's query type).

    errors = dashboard_errors(json.loads(path.read_text()))   # [] when it validates
"""

from __future__ import annotations

import enum
import functools
import types
import typing
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.cog import plugins, runtime, variants
from grafana_foundation_sdk.models import dashboard

plugins.register_default_plugins()

# Keys a schema object takes besides its generated fields, each with the reason:
OPEN_FIELDS: dict[type, frozenset[str]] = {
    # Grafana's "Export for sharing externally" wrapper, which its import reads and drops.
    dashboard.Dashboard: frozenset({"__inputs", "__elements", "__requires"}),
    # Grafana's schema leaves an annotation query open to its data source's own fields: the
    # Prometheus data source reads these from the annotation itself (its annotations.ts:
    # processEvents), and moves ``step`` into ``target.interval`` (prepareAnnotation).
    dashboard.AnnotationQuery: frozenset(
        {"step", "titleFormat", "textFormat", "tagKeys", "useValueForTime"}
    ),
}
_UNSET = object()


@dataclass(frozen=True, slots=True)
class _Where:
    """The panel plugin and data source that type a panel's options and targets."""

    panel_type: str = ""
    datasource_type: str = ""


@functools.cache
def fields_of(cls: type) -> tuple[dict[str, tuple[str, Any]], frozenset[str]]:
    """JSON key -> (attribute, type) of a generated model, and the keys it requires: read
    off its own ``to_json``, which writes a required field always and an optional one only
    when set."""
    hints = typing.get_type_hints(cls)
    blank = cls.__new__(cls)
    for name in hints:
        setattr(blank, name, None)
    required = frozenset(blank.to_json())
    keys: dict[str, tuple[str, Any]] = {}
    for name, hint in hints.items():
        setattr(blank, name, _UNSET)
        written = [key for key, value in blank.to_json().items() if value is _UNSET]
        setattr(blank, name, None)
        if len(written) != 1:
            raise AssertionError(f"{cls.__name__}.{name}: written as {written}")
        keys[written[0]] = (name, hint)
    return keys, required


def dashboard_errors(data: Any) -> list[str]:
    """Every way ``data`` departs from the schema, one line each with its JSON path."""
    return _check(data, dashboard.Dashboard, "$", _Where())


def _plugin_class(hook: Any) -> type | None:
    owner = getattr(hook, "__self__", None)  # a generated model's bound ``from_json``
    return owner if isinstance(owner, type) else None


def _field_type(cls: type, attribute: str, hint: Any, where: _Where) -> Any:
    """A field's type where the schema leaves it to the panel plugin or data source."""
    config = runtime.panelcfg_config(where.panel_type)
    if cls is dashboard.Panel and attribute == "options" and config is not None:
        return _plugin_class(config.options_from_json_hook) or hint
    if cls is dashboard.FieldConfig and attribute == "custom" and config is not None:
        return _plugin_class(config.field_config_from_json_hook) or hint
    return hint


def _check(value: Any, hint: Any, path: str, where: _Where) -> list[str]:
    if hint is Any or hint is object:
        return []
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if value is None:
            return [] if len(options) < len(typing.get_args(hint)) else [f"{path}: null"]
        options = [option for option in options if _may_be(value, option)] or options
        tried = [_check(value, option, path, where) for option in options]
        return min(tried, key=len)
    if value is None:
        return [f"{path}: null where the schema wants {_name(hint)}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{path}: {type(value).__name__} where the schema wants a list"]
        (item,) = typing.get_args(hint)
        return [e for i, v in enumerate(value) for e in _check(v, item, f"{path}[{i}]", where)]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path}: {type(value).__name__} where the schema wants an object"]
        _, item = typing.get_args(hint)
        return [e for k, v in value.items() for e in _check(v, item, f"{path}.{k}", where)]
    if origin is typing.Literal:
        allowed = typing.get_args(hint)
        return [] if value in allowed else [f"{path}: {value!r} not one of {allowed}"]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        allowed = [member.value for member in hint]
        ok = value in allowed and not isinstance(value, bool)
        return [] if ok else [f"{path}: {value!r} not one of {hint.__name__} {allowed}"]
    if hint in (bool, int, float, str):
        return [] if _is(value, hint) else [f"{path}: {value!r} is not {hint.__name__}"]
    if hint is variants.Dataquery:
        return _check_query(value, path, where)
    if isinstance(hint, type) and hasattr(hint, "from_json"):
        return _check_object(value, hint, path, where)
    return [f"{path}: no rule for the schema type {hint!r}"]


def _may_be(value: Any, hint: Any) -> bool:
    """False where ``hint`` is a model whose ``type`` is fixed to other values than the
    object's own (a row panel is ``type: row``; any other type is a panel)."""
    if not (isinstance(value, dict) and isinstance(hint, type) and hasattr(hint, "from_json")):
        return True
    kind = fields_of(hint)[0].get("type")
    if kind is None or typing.get_origin(kind[1]) is not typing.Literal:
        return True
    return value.get("type") in typing.get_args(kind[1])


def _is(value: Any, kind: type) -> bool:
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, int | float)
    return isinstance(value, kind)


def _check_query(value: Any, path: str, where: _Where) -> list[str]:
    own = value.get("datasource") if isinstance(value, dict) else None
    kind = own.get("type", "") if isinstance(own, dict) else ""
    config = runtime.Runtime().dataquery_variants.get(kind or where.datasource_type)
    query_class = _plugin_class(config.from_json_hook) if config is not None else None
    if query_class is None:
        return [f"{path}: no query type for data source {kind or where.datasource_type!r}"]
    return _check_object(value, query_class, path, where)


def _check_object(value: Any, cls: type, path: str, where: _Where) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path}: {type(value).__name__} where the schema wants {cls.__name__}"]
    keys, required = fields_of(cls)
    errors = [
        f"{path}: no {key!r} ({cls.__name__} requires it)" for key in sorted(required - set(value))
    ]
    if cls in (dashboard.Panel, dashboard.RowPanel):
        source = value.get("datasource")
        where = _Where(
            panel_type=str(value.get("type", "")),
            datasource_type=source.get("type", "") if isinstance(source, dict) else "",
        )
    open_keys = OPEN_FIELDS.get(cls, frozenset())
    for key, item in value.items():
        if key not in keys:
            if key not in open_keys:
                errors.append(f"{path}.{key}: not a field of {cls.__name__}")
            continue
        attribute, hint = keys[key]
        hint = _field_type(cls, attribute, hint, where)
        errors.extend(_check(item, hint, f"{path}.{key}", where))
    return errors


def _name(hint: Any) -> str:
    return getattr(hint, "__name__", repr(hint))

"""An event's JSON for the event log: the very text Dagster's `serialize_value` writes, in ~55% of
its time (benchmarks/event_json.py).

`serialize_value` walks an event generically: for every field of every object it formats a
descent path (used only in error messages), calls through a generator and a lazy wrapper the JSON
encoder drives. A window stores ~8 events a partition, each ~60 objects deep, so that walk was the
largest single cost of Dagster's part of a run. Here each class's packing is planned once, from
Dagster's own serializer for it (its storage name, renamed fields, custom field serializers, fields
skipped when empty or None, old fields), and applied without the walk's overhead; then the same
`json.dumps(..., sort_keys=True)`.

Only classes whose serializer is Dagster's plain `NamedTupleSerializer` (no hook of its own) and
whitelisted enums are planned, and of custom field serializers only the metadata's (a
materialization's metadata as Dagster's old entries); anything else (a serializer with its own
hooks, a set, a mapping with non-string keys, a pydantic model, a dataclass) is packed by
Dagster's `pack_value`, as it would be. `tests/test_dagster_storage.py` compares this text with
`serialize_value`'s for every kind of event a replay stores, and pins the Dagster functions it
replicates: an upgrade that changes them fails there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import Enum
from typing import Any

from dagster._core.definitions.metadata import MetadataFieldSerializer
from dagster_shared.serdes import serdes

Plan = Callable[[Any], Any]
_NOT_PLANNED = object()
_PLANS: dict[type, Plan | None] = {}  # per class: its packing, or None (Dagster's `pack_value` packs it)
# the methods of Dagster's object serializer a class's own serializer may override (then not planned)
_HOOKS = ("pack_items", "before_pack", "object_as_mapping", "get_storage_name")


def serialized(value: Any) -> str:
    """`dagster_shared.serdes.serialize_value(value)`, the same text."""
    return json.dumps(_packed(value), sort_keys=True)


def _packed(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if kind is list or kind is tuple:  # Dagster packs a plain tuple as a sequence: a list
        return [_packed(item) for item in value]
    if kind is dict:
        return {key: _packed(item) for key, item in value.items()}
    plan = _PLANS.get(kind, _NOT_PLANNED)
    if plan is _NOT_PLANNED:
        plan = _PLANS[kind] = _plan(kind)
    if plan is None:
        return serdes.pack_value(value)
    return plan(value)  # type: ignore[operator]  # a Plan, once _NOT_PLANNED is ruled out


def _plan(kind: type) -> Plan | None:
    whitelist = serdes._WHITELIST_MAP
    name = kind.__name__  # Dagster looks its serializers up by the class's name too
    if issubclass(kind, Enum):
        enum_serializer = whitelist.enum_serializers.get(name)
        if enum_serializer is None:
            return None
        return lambda value: {"__enum__": enum_serializer.pack(value, whitelist, "")}
    serializer = whitelist.object_serializers.get(name)
    if not isinstance(serializer, serdes.NamedTupleSerializer) or any(
            getattr(type(serializer), hook) is not getattr(serdes.NamedTupleSerializer, hook) for hook in _HOOKS):
        return None
    storage_name = serializer.get_storage_name()
    renamed, custom = serializer.storage_field_names, serializer.field_serializers
    skip_empty, skip_none = serializer.skip_when_empty_fields, serializer.skip_when_none_fields
    old_fields, empty = serializer.old_fields, serdes.EMPTY_VALUES_TO_SKIP
    as_mapping = serializer.object_as_mapping

    def pack(value: Any) -> dict[str, Any]:  # `ObjectSerializer.pack_items`, without the descent path
        out: dict[str, Any] = {"__class__": storage_name}
        for key, inner in as_mapping(value).items():
            field_serializer = custom.get(key)
            if type(field_serializer) is MetadataFieldSerializer:
                inner = _metadata_entries(inner)
            elif field_serializer:
                inner = field_serializer.pack(inner, whitelist_map=whitelist, descent_path="")
            if (key in skip_empty and inner in empty) or (key in skip_none and inner is None):
                continue
            out[renamed.get(key, key)] = _packed(inner)
        out.update(old_fields)
        return out

    return pack


def _metadata_entries(metadata: Any) -> list[dict[str, Any]]:
    """`MetadataFieldSerializer.pack`: a materialization's metadata as the entries Dagster stores
    (its values packed here, not by `pack_value`: a window's impact table rides on every partition's
    materialization)."""
    return [{"__class__": "EventMetadataEntry", "label": label, "entry_data": _packed(value), "description": None}
            for label, value in metadata.items()]

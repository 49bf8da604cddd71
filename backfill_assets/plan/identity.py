"""A plan's identity: the sha256 of what it states, without `approvals.granted`.

Canonical means the validated model dumped as sorted JSON with every value that equals its
default left out. Re-indenting or re-commenting the YAML keeps the identity, any change of
meaning voids every approval bound to it, and a release that adds an optional field (with a
default) leaves the identity of every existing plan unchanged. A default, once released, is
never changed; a change of meaning gets a new field instead; a renamed key keeps its released
spelling here.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from backfill_assets.plan.model import RENAMED, STORED, Plan


def _respelled(content: dict[str, Any], source: str, target: str) -> None:
    """Move the value at dotted path `source` to `target` (same parent), in place."""
    *parents, source_key = source.split(".")
    node = content
    for part in parents:
        node = node[part]
    node[target.split(".")[-1]] = node.pop(source_key)


def canonical_content(plan: Plan) -> dict[str, Any]:
    content = plan.model_dump(mode="json", exclude_defaults=True)
    for old, new in RENAMED.items():  # the identity keeps the spelling it was released with
        _respelled(content, new, old)
    approvals = content.get("approvals", {})
    approvals.pop("granted", None)
    return content


def canonical_text(plan: Plan) -> str:
    return json.dumps(canonical_content(plan), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True)


def plan_sha256(plan: Plan) -> str:
    return hashlib.sha256(canonical_text(plan).encode("ascii")).hexdigest()


def plan_from_canonical(text: str) -> Plan:
    """The plan of record read back: defaults are filled in by the model of this release. The record
    holds the released spelling for good, so it is renamed here, not by the model's one-release
    reading of old plan files."""
    content = json.loads(text)
    for old, new in RENAMED.items():
        _respelled(content, old, new)
    return Plan.model_validate(content, context=STORED)

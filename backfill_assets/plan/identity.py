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

from backfill_assets.plan.model import RENAMED, Plan


def canonical_content(plan: Plan) -> dict[str, Any]:
    content = plan.model_dump(mode="json", exclude_defaults=True)
    for old, new in RENAMED.items():  # the identity keeps the spelling it was released with
        *old_parents, old_key = old.split(".")
        *new_parents, new_key = new.split(".")
        source = content
        for part in new_parents:
            source = source[part]
        target = content
        for part in old_parents:
            target = target[part]
        target[old_key] = source.pop(new_key)
    approvals = content.get("approvals", {})
    approvals.pop("granted", None)
    return content


def canonical_text(plan: Plan) -> str:
    return json.dumps(canonical_content(plan), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True)


def plan_sha256(plan: Plan) -> str:
    return hashlib.sha256(canonical_text(plan).encode("ascii")).hexdigest()


def plan_from_canonical(text: str) -> Plan:
    """The plan of record read back: defaults are filled in by the model of this release."""
    return Plan.model_validate(json.loads(text))

"""A plan's identity: the sha256 of its canonical content without `approvals.granted`.

Canonical means the validated model dumped as sorted JSON, so re-indenting or re-commenting the
YAML keeps the identity while any change of meaning voids every approval bound to it.
"""

from __future__ import annotations

import hashlib
import json

from backfill_assets.plan.model import Plan


def canonical_content(plan: Plan) -> dict:
    content = plan.model_dump(mode="json")
    content["approvals"].pop("granted", None)
    return content


def plan_sha256(plan: Plan) -> str:
    text = json.dumps(canonical_content(plan), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()

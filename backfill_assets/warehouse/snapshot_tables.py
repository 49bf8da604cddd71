"""Where a plan's pre-write snapshot rows are kept: one schema, one table per plan and table.

A name alone, at the bottom of the warehouse, so the control record (which creates the schema) and
the change gate (which reads the rows) agree on it without knowing each other.
"""

from __future__ import annotations

import hashlib

from backfill_assets.identifiers import validated

SNAPSHOT_SCHEMA = "backfill_snapshots"


def snapshot_table(plan_id: str, table: str) -> str:
    # '-' is not allowed in a plain identifier; the digest keeps `fix-a` and `fix_a` apart
    digest = hashlib.sha256(plan_id.encode()).hexdigest()[:8]
    return validated(f"{plan_id.replace('-', '_')}_{digest}__{table}", "snapshot table")

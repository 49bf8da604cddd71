"""Where a plan's pre-write snapshot rows are kept: one schema, one table per plan and table.

A name alone, at the bottom of the warehouse, so the control record (which creates the schema) and
the change gate (which reads the rows) agree on it without knowing each other.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from backfill_assets.identifiers import validated

if TYPE_CHECKING:
    from backfill_assets.warehouse.engine import Session

SNAPSHOT_SCHEMA = "backfill_snapshots"
# PostgreSQL cuts a longer name to this many bytes, silently: a plan id of 40 characters made the
# snapshot of daily_revenue under one name and looked for it under another, so the plan could never
# be rolled back, and two tables' snapshots could share one cut name (found by an attack)
MAX_NAME_BYTES = 63


def _whole_name(plan_id: str, table: str) -> str:
    # '-' is not allowed in a plain identifier; the digest keeps `fix-a` and `fix_a` apart
    digest = hashlib.sha256(plan_id.encode()).hexdigest()[:8]
    return f"{plan_id.replace('-', '_')}_{digest}__{table}"


def snapshot_table(plan_id: str, table: str) -> str:
    """The plan's snapshot table of `table`: `<plan>_<digest>__<table>`, or, when that passes 63
    bytes, the plan id's first 40 characters and a digest of the plan and the table."""
    whole = _whole_name(plan_id, table)
    if len(whole.encode()) <= MAX_NAME_BYTES:
        return validated(whole, "snapshot table")
    digest = hashlib.sha256(f"{plan_id}\0{table}".encode()).hexdigest()[:16]
    return validated(f"{plan_id.replace('-', '_')[:40]}_{digest}", "snapshot table")


def snapshot_in(session: Session, plan_id: str, table: str) -> str:
    """The plan's snapshot table of `table` in this warehouse: a DuckDB warehouse (which keeps long
    names whole) snapshotted before names were kept within 63 bytes holds it under its whole name."""
    name, whole = snapshot_table(plan_id, table), _whole_name(plan_id, table)
    if whole != name and session.engine.table_exists(session, validated(whole, "snapshot table"), SNAPSHOT_SCHEMA):
        return whole
    return name

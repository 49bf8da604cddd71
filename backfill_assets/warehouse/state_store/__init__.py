"""The state store: every statement the control record runs, behind the engine seam.

The control record (`backfill_control`) is kept in the warehouse, written in the same transactions
as the data it describes. `control/` decides what to record and re-verifies what it reads (the
evidence chain, seals, signatures); the SQL that stores and reads it is here, one module per
concern (SQLMesh's `state_sync` shape), as functions of a `Session` and plain values returning
plain rows:

| module | tables |
| --- | --- |
| `schema` | creating and upgrading the record: every table, index and the id sequence, `meta` |
| `plans` | `plans`, `plan_versions`, `approvals` |
| `evidence` | the hash-chained `evidence` log |
| `ledger` | `writes`, `gate_results`, `watermarks` |
| `seals` | the columns each seal covers, rows by the chain row that sealed them |
| `snapshot_records` | `snapshots` (the records; the rows themselves are `warehouse/snapshots.py`'s) |
| `publications` | `publications` |
| `leases` | `leases` |
| `outbox` | `outbox`, `outbox_retries` |
| `trust` | `trust_roots` |

Transactions, `after_commit` and locks stay the callers' (`Session.transaction`, `Session.lock`);
the few constructs engines spell differently (the id sequence, upserts, RETURNING, a bound list,
a VALUES table) come from the `Engine`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.snapshot_tables import SNAPSHOT_SCHEMA

SCHEMA = "backfill_control"
IDS = f"{SCHEMA}.ids"  # the one sequence every row id of the record is drawn from

__all__ = ["IDS", "SCHEMA", "SNAPSHOT_SCHEMA", "next_id"]


def next_id(session: Session) -> int:
    return int(session.scalar(f"SELECT {session.engine.next_value_sql(IDS)}"))


def rows_in(session: Session, select: str, column: str, values: Sequence[Any],
            chunk: int = 500) -> list[tuple[Any, ...]]:
    """`select` (a statement ending in WHERE) for the rows whose `column` is one of `values`, a
    portable `IN` list a chunk (a parameter a value: engines limit their number; an `IN` list of a
    key column is an index lookup where a bound array may be a scan)."""
    found: list[tuple[Any, ...]] = []
    for i in range(0, len(values), chunk):
        part = list(values[i:i + chunk])
        found += session.rows(f"{select} {column} IN ({', '.join('?' for _ in part)})", part)
    return found

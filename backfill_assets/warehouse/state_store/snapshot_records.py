"""The `snapshots` table: the record of each pre-write snapshot (plan, table, partition, its
fingerprint and the table its rows were copied to). The rows are `warehouse/snapshots.py`'s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.state_store import SCHEMA


def records(session: Session, plan_id: str, table: str, keys: Sequence[str] | None = None) -> list[tuple[Any, ...]]:
    """(partition_key, row_count, fingerprint, evidence_seq) of the plan's snapshots of `table`
    (only of `keys`, when given)."""
    params: list[Any]
    only, params = "", []
    if keys is not None:
        within, params = session.engine.in_list_sql("partition_key", keys)
        only = f"AND {within}"
    return session.rows(f"SELECT partition_key, row_count, fingerprint, evidence_seq FROM {SCHEMA}.snapshots "
                        f"WHERE plan_id = ? AND table_name = ? {only}", [plan_id, table, *params])


def insert(session: Session, plan_id: str, table: str, snapshot_table: str, at: str, seq: int,
           taken: Sequence[tuple[str, int, str]]) -> None:
    """One record per (partition, rows, fingerprint) taken, in one statement, sealed by chain row `seq`."""
    rows, values = session.engine.rows_table_sql(taken, ("k", "n", "d"), "v")
    session.execute(f"INSERT INTO {SCHEMA}.snapshots (plan_id, table_name, partition_key, row_count, fingerprint, "
                    f"snapshot_table, recorded_at, evidence_seq) SELECT ?, ?, k, CAST(n AS BIGINT), d, ?, ?, "
                    f"CAST(? AS BIGINT) FROM {rows}",
                    [plan_id, table, snapshot_table, at, seq, *values])

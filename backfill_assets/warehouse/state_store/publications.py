"""The `publications` table: what each publish (or a rollback's restore) left in a published table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.state_store import IDS, SCHEMA


def latest(session: Session, asset: str, keys: Sequence[str]) -> list[tuple[Any, ...]]:
    """(partition_key, row_count, fingerprint, write_id, plan_id, evidence_seq) of the last
    publication of each of `keys` of the published table `asset` that has one: last in the chain's
    order, never the ids' (a trigger may set an id as it lands; a row's chain row is its seal's)."""
    within, listed = session.engine.in_list_sql("partition_key", keys)
    return session.rows(
        f"""SELECT partition_key, row_count, fingerprint, write_id, plan_id, evidence_seq FROM (
                SELECT partition_key, row_count, fingerprint, write_id, plan_id, evidence_seq,
                       row_number() OVER (PARTITION BY partition_key
                                          ORDER BY evidence_seq DESC NULLS FIRST, publish_id DESC) AS rk
                FROM {SCHEMA}.publications WHERE asset = ? AND {within}) AS p WHERE rk = 1""",
        [asset, *listed])


def from_writes(session: Session, asset: str, keys: Sequence[str]) -> list[tuple[Any, ...]]:
    """(partition_key, row_count, fingerprint, write_id, plan_id, evidence_seq) of every publication
    of `keys` of the published table `asset` that copied a write (a publish's, not a rollback's restore)."""
    within, listed = session.engine.in_list_sql("partition_key", keys)
    return session.rows(
        f"""SELECT partition_key, row_count, fingerprint, write_id, plan_id, evidence_seq
            FROM {SCHEMA}.publications WHERE asset = ? AND write_id IS NOT NULL AND {within}""", [asset, *listed])


def insert(session: Session, asset: str, at: str, seq: int,
           published: Sequence[tuple[str, int, str, int | None, str | None]]) -> None:
    """One row per (partition, rows, fingerprint, write id, plan id), sealed by chain row `seq`, in
    statements of at most 1,000 rows."""
    engine = session.engine
    for i in range(0, len(published), 1000):
        part = published[i:i + 1000]
        rows, values = engine.rows_table_sql(part, ("k", "n", "d", "w", "p"), "v")
        session.execute(
            f"INSERT INTO {SCHEMA}.publications (publish_id, asset, partition_key, row_count, fingerprint, write_id, "
            f"plan_id, recorded_at, evidence_seq) SELECT {engine.next_value_sql(IDS)}, ?, k, CAST(n AS BIGINT), d, "
            f"CAST(w AS BIGINT), p, ?, CAST(? AS BIGINT) "
            f"FROM {rows}", [asset, at, seq, *values])

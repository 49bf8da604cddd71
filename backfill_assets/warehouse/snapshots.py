"""Pre-write snapshots, taken once per plan and table for each partition, and their restore.

A snapshot is a copy of the partition's rows inside the warehouse (schema `backfill_snapshots`,
one table per plan and table) plus its fingerprint in the control record; a restore puts the rows
back and must reproduce that fingerprint exactly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import duckdb

from backfill_assets.control import evidence_log
from backfill_assets.control.schema import SCHEMA, SNAPSHOT_SCHEMA
from backfill_assets.errors import RollbackRefused
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.fingerprints import Fingerprint, as_date, fingerprint, fingerprints
from backfill_assets.warehouse.identifiers import checked, qualified, quote


def snapshot_table(plan_id: str, table: str) -> str:
    # '-' is not allowed in a plain identifier; the digest keeps `fix-a` and `fix_a` apart
    digest = hashlib.sha256(plan_id.encode()).hexdigest()[:8]
    return checked(f"{plan_id.replace('-', '_')}_{digest}__{table}", "snapshot table")


def snapshotted(con: duckdb.DuckDBPyConnection, plan_id: str, table: str) -> set[str]:
    rows = con.execute(f"SELECT partition_key FROM {SCHEMA}.snapshots WHERE plan_id = ? AND "
                       "table_name = ?", [plan_id, table]).fetchall()
    return {r[0] for r in rows}


def ensure_snapshot(con: duckdb.DuckDBPyConnection, spec: TableSpec, table: str, plan_id: str,
                    partition_key: str, actor: str) -> Fingerprint | None:
    """Copy the partition's current rows aside unless this plan already did; inside a transaction."""
    if partition_key in snapshotted(con, plan_id, table):
        return None
    snap = qualified(SNAPSHOT_SCHEMA, snapshot_table(plan_id, table))
    cols = ", ".join(quote(c) for c in spec.columns)
    con.execute(f"CREATE TABLE IF NOT EXISTS {snap} AS SELECT {cols} FROM {quote(table)} LIMIT 0")
    part = quote(spec.partition_column)
    con.execute(f"INSERT INTO {snap} SELECT {cols} FROM {quote(table)} WHERE {part} = ?",
                [as_date(partition_key)])
    before = fingerprint(con, table, spec.partition_column, partition_key)
    con.execute(f"INSERT INTO {SCHEMA}.snapshots VALUES (?, ?, ?, ?, ?, ?, ?)",
                [plan_id, table, partition_key, before.rows, before.digest,
                 snapshot_table(plan_id, table), evidence_log.now_iso()])
    evidence_log.append(con, plan_id=plan_id, kind="snapshot", actor=actor,
                        payload={"table": table, "partition": partition_key, "rows": before.rows,
                                 "fingerprint": before.digest})
    return before


def snapshot_fingerprints(con: duckdb.DuckDBPyConnection, plan_id: str,
                          table: str) -> dict[str, Fingerprint]:
    rows = con.execute(f"SELECT partition_key, row_count, fingerprint FROM {SCHEMA}.snapshots "
                       "WHERE plan_id = ? AND table_name = ? ORDER BY partition_key",
                       [plan_id, table]).fetchall()
    return {k: Fingerprint(n, d) for k, n, d in rows}


def restore(con: duckdb.DuckDBPyConnection, spec: TableSpec, table: str, plan_id: str,
            partition_keys: Sequence[str]) -> dict[str, tuple[Fingerprint, Fingerprint]]:
    """Put the snapshotted rows back; return {partition: (expected, restored)}. In a transaction."""
    expected = snapshot_fingerprints(con, plan_id, table)
    keys = [k for k in partition_keys if k in expected]
    if not keys:
        return {}
    snap = qualified(SNAPSHOT_SCHEMA, snapshot_table(plan_id, table))
    cols = ", ".join(quote(c) for c in spec.columns)
    part = quote(spec.partition_column)
    dates = [as_date(k) for k in keys]
    con.execute(f"DELETE FROM {quote(table)} WHERE {part} = ANY(?)", [dates])
    con.execute(f"INSERT INTO {quote(table)} ({cols}) SELECT {cols} FROM {snap} "
                f"WHERE {part} = ANY(?)", [dates])
    restored = fingerprints(con, table, spec.partition_column, keys)
    result = {k: (expected[k], restored[k]) for k in keys}
    bad = [k for k, (want, got) in result.items() if want != got]
    if bad:
        raise RollbackRefused(f"restored fingerprints of {table} differ for {', '.join(bad)}",
                              fix="nothing was changed; inspect backfill_snapshots before retrying")
    return result

"""Pre-write snapshots, taken once per plan, table and partition, and their restore.

A snapshot is a copy of the partition's rows inside the warehouse (schema `backfill_snapshots`,
one table per plan and table) plus its fingerprint in the control record; a restore puts the rows
back and must reproduce that fingerprint exactly, computed by the algorithm that recorded it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from backfill_assets.control import evidence_log, seals
from backfill_assets.control.schema import SCHEMA, SNAPSHOT_SCHEMA
from backfill_assets.errors import RollbackRefused
from backfill_assets.partitions import PartitionScheme
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.fingerprints import Fingerprint, fingerprints, fingerprints_like
from backfill_assets.warehouse.grouping import rows_per_partition
from backfill_assets.warehouse.identifiers import checked, qualified, quote


def snapshot_table(plan_id: str, table: str) -> str:
    # '-' is not allowed in a plain identifier; the digest keeps `fix-a` and `fix_a` apart
    digest = hashlib.sha256(plan_id.encode()).hexdigest()[:8]
    return checked(f"{plan_id.replace('-', '_')}_{digest}__{table}", "snapshot table")


def snapshotted(session: Session, plan_id: str, table: str,
                keys: Sequence[str] | None = None) -> dict[str, Fingerprint]:
    """The plan's snapshots of `table` (only of `keys`, when given), checked against their seals."""
    only, params = ("AND partition_key = ANY(?)", [list(keys)]) if keys is not None else ("", [])
    rows = session.rows(f"SELECT partition_key, row_count, fingerprint, evidence_seq FROM {SCHEMA}.snapshots "
                        f"WHERE plan_id = ? AND table_name = ? {only}", [plan_id, table, *params])
    seals.check(session, "snapshots", [r[3] for r in rows], f" of plan {plan_id}")
    return {k: Fingerprint(int(n), str(d)) for k, n, d, _ in rows}


def ensure_snapshots(session: Session, spec: TableSpec, scheme: PartitionScheme, table: str,
                     plan_id: str, keys: Sequence[str], recorded_at: str, actor: str) -> dict[str, Fingerprint]:
    """Copy aside the current rows of every key this plan has not snapshotted yet, their records
    sealed by one `snapshot` chain row.

    Inside the caller's transaction, before it changes those partitions. Returns what it took.
    """
    keys = list(dict.fromkeys(keys))
    taken = snapshotted(session, plan_id, table, keys)
    wanted = [k for k in keys if k not in taken]
    if not wanted:
        return {}
    snap = qualified(SNAPSHOT_SCHEMA, snapshot_table(plan_id, table))
    cols = ", ".join(quote(c) for c in spec.columns)
    session.execute(f"CREATE TABLE IF NOT EXISTS {snap} AS SELECT {cols} FROM {quote(table)} WHERE FALSE")
    before = fingerprints(session, table, spec.columns, scheme, spec.partition_column, wanted)
    where, params = scheme.many_predicate(quote(spec.partition_column), wanted)
    session.execute(f"INSERT INTO {snap} ({cols}) SELECT {cols} FROM {quote(table)} WHERE {where}",
                    params)
    values: list[object] = []
    for key in wanted:
        values += [key, before[key].rows, before[key].digest]
    seq = evidence_log.next_seq(session)
    session.execute(f"INSERT INTO {SCHEMA}.snapshots (plan_id, table_name, partition_key, row_count, fingerprint, "
                    f"snapshot_table, recorded_at, evidence_seq) SELECT ?, ?, k, CAST(n AS BIGINT), d, ?, ?, "
                    f"CAST(? AS BIGINT) FROM (VALUES {', '.join(['(?, ?, ?)'] * len(wanted))}) AS v(k, n, d)",
                    [plan_id, table, snapshot_table(plan_id, table), recorded_at, seq, *values])
    evidence_log.append(session, plan_id=plan_id, kind="snapshot", actor=actor, seq=seq, payload={
        "table": table, "partitions": {k: {"rows": before[k].rows, "fingerprint": before[k].digest} for k in wanted},
        "seals": {"snapshots": seals.of_seq(session, "snapshots", seq)}})
    return before


def incomplete(session: Session, spec: TableSpec, scheme: PartitionScheme, plan_id: str, table: str,
               keys: Sequence[str]) -> list[str]:
    """Keys whose snapshot record or snapshot rows are missing (a rollback must refuse them)."""
    recorded = snapshotted(session, plan_id, table)
    problems = [f"{k}: no snapshot record" for k in keys if k not in recorded]
    present = [k for k in keys if k in recorded]
    if not present:
        return problems
    name = snapshot_table(plan_id, table)
    if not session.engine.table_exists(session, name, SNAPSHOT_SCHEMA):
        return problems + [f"{k}: snapshot table {SNAPSHOT_SCHEMA}.{name} is gone" for k in present
                           if recorded[k].rows > 0]
    counts = rows_per_partition(session, name, spec.partition_column, scheme, present, SNAPSHOT_SCHEMA)
    problems += [f"{k}: snapshot holds {counts.get(k, 0)} row(s), {recorded[k].rows} were taken"
                 for k in present if counts.get(k, 0) != recorded[k].rows]
    return problems


def restore(session: Session, spec: TableSpec, scheme: PartitionScheme, table: str, plan_id: str,
            keys: Sequence[str]) -> dict[str, tuple[Fingerprint, Fingerprint]]:
    """Put the snapshotted rows back; return {key: (expected, restored)}. In a transaction."""
    expected = snapshotted(session, plan_id, table)
    keys = [k for k in keys if k in expected]
    if not keys:
        return {}
    snap = qualified(SNAPSHOT_SCHEMA, snapshot_table(plan_id, table))
    cols = ", ".join(quote(c) for c in spec.columns)
    where, params = scheme.many_predicate(quote(spec.partition_column), keys)
    session.execute(f"DELETE FROM {quote(table)} WHERE {where}", params)
    if session.engine.table_exists(session, snapshot_table(plan_id, table), SNAPSHOT_SCHEMA):
        session.execute(f"INSERT INTO {quote(table)} ({cols}) SELECT {cols} FROM {snap} WHERE {where}",
                        params)
    # by the algorithm of each record: a snapshot taken before the upgrade holds a legacy digest
    restored = fingerprints_like(session, table, spec.columns, scheme, spec.partition_column,
                                 {k: expected[k] for k in keys})
    result = {k: (expected[k], restored[k]) for k in keys}
    bad = [k for k, (want, got) in result.items() if want != got]
    if bad:
        raise RollbackRefused(f"restored fingerprints of {table} differ for {', '.join(bad)}",
                              fix="nothing was changed; inspect backfill_snapshots before retrying")
    return result

"""Pre-write snapshots in the control record: taken once per plan, table and partition, their
fingerprints sealed by the evidence row that records them, checked against those seals on every
read, and restored to exactly those fingerprints.

The rows themselves are the warehouse's (`warehouse/snapshots.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

from backfill_assets.control import evidence_log, seals
from backfill_assets.control.names import SCHEMA
from backfill_assets.errors import ForgedRecord
from backfill_assets.partitions import PartitionScheme
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.fingerprints import Fingerprint
from backfill_assets.warehouse.snapshot_tables import snapshot_in
from backfill_assets.warehouse.snapshots import copy_aside, missing_rows, put_back, refill
from backfill_assets.warehouse.state_store import snapshot_records as store


def snapshotted(session: Session, plan_id: str, table: str,
                keys: Sequence[str] | None = None) -> dict[str, Fingerprint]:
    """The plan's snapshots of `table` (only of `keys`, when given), checked against their seals."""
    rows = store.records(session, plan_id, table, keys)
    seals.verify_read(session, "snapshots", ("plan_id", "table_name", "partition_key", "row_count", "fingerprint"),
                      [(plan_id, table, *r) for r in rows], f" of plan {plan_id}")
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
    name = snapshot_in(session, plan_id, table)
    before = copy_aside(session, spec, scheme, table, plan_id, wanted)
    seq = evidence_log.next_seq(session)
    store.insert(session, plan_id, table, name, recorded_at, seq,
                 [(key, before[key].rows, before[key].digest) for key in wanted])
    evidence_log.append(session, plan_id=plan_id, kind="snapshot", actor=actor, seq=seq, payload={
        "table": table, "partitions": {k: {"rows": before[k].rows, "fingerprint": before[k].digest} for k in wanted},
        "seals": {"snapshots": seals.of_seq(session, "snapshots", seq, [
            {"table_name": table, "partition_key": key, "plan_id": plan_id, "row_count": before[key].rows,
             "fingerprint": before[key].digest, "snapshot_table": name,
             "recorded_at": recorded_at} for key in wanted])}})
    return before


NO_RECORD = "no snapshot record"


def incomplete(session: Session, spec: TableSpec, scheme: PartitionScheme, plan_id: str, table: str,
               keys: Sequence[str]) -> dict[str, str]:
    """Keys whose snapshot record or snapshot rows are missing, each with what is wrong (a rollback
    must refuse them, unless `refill_from_published` finds their rows)."""
    recorded = snapshotted(session, plan_id, table)
    problems = {k: NO_RECORD for k in keys if k not in recorded}
    taken = {k: recorded[k] for k in keys if k in recorded}
    return problems | missing_rows(session, spec, scheme, plan_id, table, taken)


def refill_from_published(session: Session, spec: TableSpec, scheme: PartitionScheme, plan_id: str,
                          keys: Sequence[str], *, write: bool) -> list[str]:
    """Of the target's `keys` whose snapshot rows are missing, those whose published copy is exactly
    the rows taken (the fingerprint sealed with the snapshot says so: the plan never published over
    it); with `write`, their snapshot rows put back from there, in the caller's transaction (a
    hurried user who deleted snapshot rows to free space left a cancelled plan no command could
    end: found by an attack)."""
    taken = snapshotted(session, plan_id, spec.table, keys)
    return refill(session, spec, scheme, plan_id, spec.table, spec.publish_table, taken, write=write) if taken else []


def restore(session: Session, spec: TableSpec, scheme: PartitionScheme, table: str, plan_id: str,
            keys: Sequence[str]) -> dict[str, tuple[Fingerprint, Fingerprint]]:
    """Put the snapshotted rows back; return {key: (expected, restored)}. In a transaction. Every
    key is one the rollback listed with its snapshot record: one gone since is refused, never left
    out (a whole sealed group deleted while the rollback waited for a partition's lock, on
    PostgreSQL, had three partitions keep the plan's bytes: found by an attack)."""
    expected = snapshotted(session, plan_id, table)
    lost = [k for k in keys if k not in expected]
    if lost:
        raise ForgedRecord(f"the snapshot record of {table} {lost[0]} (plan {plan_id}) is gone from "
                           f"{SCHEMA}.snapshots since the rollback listed it", fix=evidence_log.FORGED_FIX)
    if not keys:
        return {}
    return put_back(session, spec, scheme, table, plan_id, {k: expected[k] for k in keys})

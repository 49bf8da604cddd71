"""Writing the partitions a run was permitted, one transaction per partition.

Each partition's permission re-check, phase step, snapshot (first write under a plan), data
write, fingerprint and ledger row commit together, or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from backfill_assets import faults
from backfill_assets.control import evidence_log, ledger, record
from backfill_assets.control.schema import SCHEMA
from backfill_assets.errors import WarehouseError
from backfill_assets.partitions import PartitionScheme
from backfill_assets.permission import Permission, recheck
from backfill_assets.plan.phases import Phase
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.fingerprints import Fingerprint, fingerprints
from backfill_assets.warehouse.snapshots import ensure_snapshots
from backfill_assets.warehouse.writes import ensure_table, write_partition

RETRIES = 3  # a deadlock or serialization failure on a server engine: the partition runs again


@dataclass(frozen=True)
class PartitionWrite:
    partition_key: str
    write_id: int
    rows: int
    fingerprint: Fingerprint
    recorded_at: str


def ensure_tables(session: Session, spec: TableSpec) -> None:
    with session.transaction():
        session.lock(f"ddl:{spec.table}")
        ensure_table(session, spec)
        ensure_table(session, spec, spec.publish_table)


def _step_phase(session: Session, plan_id: str, keys: tuple[str, ...], actor: str) -> None:
    """A run's first write of a phase moves the plan on, in its own short transaction before the
    partitions' transactions (which then only hold the plan's row shared, never update it)."""
    with session.transaction():
        state = record.require(session, plan_id, exclusive=True)
        past_proof = [k for k in keys if k not in state.proof_keys]
        if state.phase is Phase.APPROVED:
            record.transition(session, plan_id, Phase.PROVING, actor, note=f"a proof run started ({keys[0]})")
        elif state.phase is Phase.PROVEN and past_proof:
            record.transition(session, plan_id, Phase.RUNNING, actor,
                              note=f"a run past the proof started ({past_proof[0]})")
        elif state.phase is Phase.RECONCILED:
            # a re-run after reconciliation must be reconciled again before publish
            record.transition(session, plan_id, Phase.RUNNING, actor,
                              note=f"a run re-materializing {keys[0]} after reconciliation started")


def write_partitions(session: Session, spec: TableSpec, scheme: PartitionScheme,
                     permission: Permission, *, run_id: str | None, actor: str) -> list[PartitionWrite]:
    ensure_tables(session, spec)
    plan = permission.plan
    version = plan.approved if plan is not None else None
    mode = version.plan.execution.mode if version else "overwrite"
    allow_empty = bool(version and version.plan.execution.allow_empty_partitions)
    if plan is not None:
        _step_phase(session, plan.plan_id, permission.keys, actor)
    done: list[PartitionWrite] = []
    for key in permission.keys:
        for attempt in range(RETRIES):
            try:
                done.append(_write_one(session, spec, scheme, permission, key, mode, allow_empty, run_id, actor))
                break
            except WarehouseError as exc:
                if not getattr(exc, "retryable", False) or attempt == RETRIES - 1:
                    raise
        faults.checkpoint("write.after_commit")
    return done


def _write_one(session: Session, spec: TableSpec, scheme: PartitionScheme, permission: Permission, key: str,
               mode: str, allow_empty: bool, run_id: str | None, actor: str) -> PartitionWrite:
    with session.transaction():
        session.lock(f"write:{spec.name}:{key}")  # two runs of one partition take turns
        current = recheck(session, spec, scheme, permission, key)
        at = evidence_log.now_iso()
        if current is not None:
            ensure_snapshots(session, spec, scheme, spec.table, current.plan_id, [key], at)
        faults.checkpoint("write.after_snapshot")
        rows = write_partition(session, spec, scheme, key, mode, allow_empty=allow_empty)
        fp = fingerprints(session, spec.table, spec.columns, scheme, spec.partition_column, [key])[key]
        write_id, at = ledger.record_write(session, plan_id=current.plan_id if current else None,
                                           asset=spec.name, key=key, mode=mode, run_id=run_id,
                                           code_version=spec.code_version, fingerprint=fp)
        if current is not None:
            evidence_log.append(session, plan_id=current.plan_id, kind="write", actor=actor, payload={
                "table": spec.name, "partition": key, "mode": mode, "run_id": run_id,
                "rows": fp.rows, "fingerprint": fp.digest, "code_version": spec.code_version,
                "sha256": current.approved_sha256})
        else:
            _advance_watermark(session, spec.name, key, scheme)
        faults.checkpoint("write.before_commit")
        return PartitionWrite(key, write_id, rows, fp, at)


def _advance_watermark(session: Session, asset: str, key: str, scheme: PartitionScheme) -> None:
    """Only plan-free (incremental) writes move the cursor, and only forward."""
    mark = session.scalar(f"SELECT partition_key FROM {SCHEMA}.watermarks WHERE asset = ?", [asset])
    if mark is not None and scheme.position(mark) >= scheme.position(key):
        return
    session.execute(f"DELETE FROM {SCHEMA}.watermarks WHERE asset = ?", [asset])
    session.execute(f"INSERT INTO {SCHEMA}.watermarks VALUES (?, ?, ?)", [asset, key, evidence_log.now_iso()])

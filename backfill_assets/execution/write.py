"""Writing the partitions a run was permitted: one transaction for the run's partitions (at most
PARTITIONS_PER_TRANSACTION of them).

The permission re-check, snapshots (first write under a plan), data writes, fingerprints, ledger
rows, the gates' verdicts on exactly those bytes and the evidence of all of it commit together, or
not at all: a crash leaves each partition old or new, never half, and never written without its
verdict; nothing can change the bytes between the write and their judgement. Apart from
computing each partition's rows, a transaction of thirty partitions costs about what one of a
single partition does (one statement per step, not per partition).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from backfill_assets import faults, lifecycle
from backfill_assets.control import evidence_log, ledger, record
from backfill_assets.control.snapshots import ensure_snapshots
from backfill_assets.errors import WarehouseError
from backfill_assets.execution.audit import judge
from backfill_assets.gates.results import GateResult
from backfill_assets.graph import TableGraph
from backfill_assets.partitions import PartitionScheme
from backfill_assets.permission import Permission, recheck
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.fingerprints import Fingerprint
from backfill_assets.warehouse.state_store import ledger as ledger_store
from backfill_assets.warehouse.writes import ensure_table, write_rows

RETRIES = 3  # a deadlock or serialization failure on a server engine: the transaction runs again
PARTITIONS_PER_TRANSACTION = 50  # bounds a transaction's size when a run names many partitions


@dataclass(frozen=True)
class Written:
    writes: list[PartitionWrite]
    results: dict[str, list[GateResult]]  # partition -> its gates' verdicts, judged in the write's transaction


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


def write_partitions(session: Session, spec: TableSpec, scheme: PartitionScheme,
                     permission: Permission, *, run_id: str | None, actor: str) -> Written:
    ensure_tables(session, spec)
    plan = permission.plan
    version = plan.approved if plan is not None else None
    mode = version.plan.execution.mode if version else "overwrite"
    allow_empty = bool(version and version.plan.execution.allow_empty_partitions)
    if plan is not None:
        # a run's first write of a phase moves the plan on, before any partition is written
        lifecycle.run_started(session, plan.plan_id, permission.keys, actor, spec.name, permission.launcher)
    done: list[PartitionWrite] = []
    results: dict[str, list[GateResult]] = {}
    keys = list(permission.keys)
    for i in range(0, len(keys), PARTITIONS_PER_TRANSACTION):
        part = keys[i:i + PARTITIONS_PER_TRANSACTION]
        for attempt in range(RETRIES):
            try:
                writes, judged = _write_batch(session, spec, scheme, permission, part, mode, allow_empty, run_id,
                                              actor)
                done += writes
                results.update(judged)
                break
            except WarehouseError as exc:
                if not getattr(exc, "retryable", False) or attempt == RETRIES - 1:
                    raise
        faults.checkpoint("write.after_commit")
    return Written(done, results)


def _write_batch(session: Session, spec: TableSpec, scheme: PartitionScheme, permission: Permission,
                 keys: list[str], mode: str, allow_empty: bool, run_id: str | None,
                 actor: str) -> tuple[list[PartitionWrite], dict[str, list[GateResult]]]:
    with session.transaction():
        if permission.plan is not None:
            # the plan's row first (shared), then the partitions: a rollback takes them in this
            # order too, so the two never wait on each other in a circle
            record.require(session, permission.plan.plan_id, lock=True)
        for key in sorted(keys):  # two runs of one partition take turns; one order: no deadlock
            session.lock(f"write:{spec.name}:{key}")
        # the target's write lock before the snapshot takes the evidence chain: a publish holds the
        # target (SHARE) and then takes the chain, so a write holding the chain while it waited for
        # the target met it in a circle, and PostgreSQL killed the publish (found by an attack)
        session.hold_table(spec.table, writing=True)
        current = recheck(session, spec, scheme, permission, keys)
        if current is not None:
            ensure_snapshots(session, spec, scheme, spec.table, current.plan_id, keys, evidence_log.now_iso(), actor)
        faults.checkpoint("write.after_snapshot")
        written = write_rows(session, spec, scheme, keys, mode, allow_empty=allow_empty)
        ids, at = ledger.record_writes(session, plan_id=current.plan_id if current else None, asset=spec.name,
                                       mode=mode, run_id=run_id, code_version=spec.code_version,
                                       code_identity=spec.code_identity,
                                       written={k: fp for k, (_, fp) in written.items()}, actor=actor,
                                       sha256=current.approved_sha256 if current else None,
                                       reads=_reads(permission.graph, spec, keys), publish_as=spec.publish_as,
                                       partition_column=spec.partition_column)
        if current is None:
            _advance_watermark(session, spec.name, max(keys, key=scheme.position), scheme)
        faults.checkpoint("write.before_judge")
        # judged in the same transaction, and the bytes judged fingerprinted again against the
        # write's: a writer that ignores our locks (a trigger, another session) fails the verdict
        results = judge(session, spec, scheme, current, {k: (ids[k], fp) for k, (_, fp) in written.items()},
                        actor, just_written=True)
        faults.checkpoint("write.before_commit")
    return [PartitionWrite(k, ids[k], rows, fp, at) for k, (rows, fp) in written.items()], results


def _reads(graph: TableGraph | None, spec: TableSpec, keys: Sequence[str]) -> dict[str, dict[str, list[str]]]:
    """{upstream table: {partition: the upstream partitions it read}}, for a table computed from a
    replayable table, recorded with the write: a rollback of those partitions, and a publish,
    find the write in the chain whatever definitions they load (they asked the loaded ones alone,
    and definitions without the month rolled the days back under it: found by an attack). Per
    partition: a write of January and February together, recorded as one list, had February taken
    for computed from January's days."""
    parent = graph.upstream(spec.name) if graph is not None and spec.name in graph.tables else None
    if graph is None or parent is None:
        return {}
    return {parent: {key: list(graph.upstream_keys(spec.name, key)) for key in keys}}


def _advance_watermark(session: Session, asset: str, key: str, scheme: PartitionScheme) -> None:
    """Only plan-free (incremental) writes move the cursor, and only forward."""
    mark = ledger_store.watermark(session, asset)
    if mark is not None and scheme.position(mark) >= scheme.position(key):
        return
    ledger_store.set_watermark(session, asset, key, evidence_log.now_iso())

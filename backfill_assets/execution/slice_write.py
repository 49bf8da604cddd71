"""Write a cleared slice of partitions and record what happened, one transaction per partition.

Each partition's snapshot (first write under a plan), data write, fingerprint and control rows
commit together; then the slice's gates run in the warehouse and their results are recorded
against the writes they judged.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb

from backfill_assets.control import evidence_log, record
from backfill_assets.control.schema import SCHEMA
from backfill_assets.gates.results import GateResult, Thresholds
from backfill_assets.plan.gate import Clearance
from backfill_assets.plan.phases import Phase
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.connection import transaction
from backfill_assets.warehouse.fingerprints import Fingerprint, fingerprint
from backfill_assets.warehouse.gate_sql import evaluate_slice
from backfill_assets.warehouse.snapshots import ensure_snapshot
from backfill_assets.warehouse.writes import ensure_table, write_partition


@dataclass(frozen=True)
class PartitionWrite:
    partition_key: str
    rows: int
    fingerprint: Fingerprint
    recorded_at: str


def default_thresholds(spec: TableSpec) -> Thresholds:
    """Gates of incremental runs: exact counts, no duplicates, every metric within 0.01%."""
    return Thresholds(0.0, 0, {m.name: 0.01 for m in spec.metrics})


def write_slice(con: duckdb.DuckDBPyConnection, spec: TableSpec, clearance: Clearance, *,
                run_id: str, actor: str) -> list[PartitionWrite]:
    with transaction(con):
        ensure_table(con, spec)
        ensure_table(con, spec, spec.publish_table)
    plan = clearance.plan
    mode = clearance.resolved.plan.execution.mode if clearance.resolved else "overwrite"
    allow_empty = bool(clearance.resolved and clearance.resolved.plan.execution.allow_empty_partitions)
    done: list[PartitionWrite] = []
    for key in clearance.partition_keys:
        with transaction(con):
            if plan is not None:
                phase = record.require(con, plan.plan_id).phase
                if phase is Phase.APPROVED:
                    record.transition(con, plan.plan_id, Phase.PROVING, actor,
                                      note=f"first proof write ({key})")
                elif phase is Phase.PROVEN and key not in plan.proof_keys:
                    record.transition(con, plan.plan_id, Phase.RUNNING, actor,
                                      note=f"first write past the proof ({key})")
                elif phase is Phase.RECONCILED:
                    # a re-run after reconciliation must be reconciled again before publish
                    record.transition(con, plan.plan_id, Phase.RUNNING, actor,
                                      note=f"re-materializing {key} after reconciliation")
                ensure_snapshot(con, spec, spec.table, plan.plan_id, key, actor)
            rows = write_partition(con, spec, key, mode, allow_empty=allow_empty)
            fp = fingerprint(con, spec.table, spec.partition_column, key)
            at = evidence_log.now_iso()
            con.execute(f"INSERT INTO {SCHEMA}.writes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [plan.plan_id if plan else None, spec.name, key, mode, run_id,
                         spec.code_version, fp.rows, fp.digest, at])
            if plan is not None:
                evidence_log.append(con, plan_id=plan.plan_id, kind="write", actor=actor,
                                    payload={"table": spec.name, "partition": key, "mode": mode,
                                             "run_id": run_id, "rows": fp.rows,
                                             "fingerprint": fp.digest,
                                             "code_version": spec.code_version})
            else:
                _advance_watermark(con, spec.name, key)
            done.append(PartitionWrite(key, rows, fp, at))
    return done


def _advance_watermark(con: duckdb.DuckDBPyConnection, asset: str, key: str) -> None:
    """Only incremental runs move the cursor, and only forward."""
    con.execute(
        f"INSERT INTO {SCHEMA}.watermarks VALUES (?, ?, ?) ON CONFLICT (asset) DO UPDATE SET "
        "partition_key = greatest(partition_key, excluded.partition_key), "
        "recorded_at = excluded.recorded_at", [asset, key, evidence_log.now_iso()])


def code_versions(con: duckdb.DuckDBPyConnection, spec: TableSpec,
                  plan_id: str | None, keys: Sequence[str]) -> dict[str, str | None]:
    """The code version of the latest write of each partition: the plan's window, or the keys."""
    if plan_id is not None:
        rows = con.execute(
            f"SELECT partition_key, arg_max(code_version, recorded_at) FROM {SCHEMA}.writes "
            "WHERE plan_id = ? AND asset = ? GROUP BY 1", [plan_id, spec.name]).fetchall()
    else:
        rows = con.execute(
            f"SELECT partition_key, arg_max(code_version, recorded_at) FROM {SCHEMA}.writes "
            "WHERE asset = ? AND partition_key = ANY(?) GROUP BY 1", [spec.name, list(keys)]
        ).fetchall()
    return dict(rows)


def gate_slice(con: duckdb.DuckDBPyConnection, spec: TableSpec, clearance: Clearance,
               writes: Sequence[PartitionWrite], actor: str) -> dict[str, list[GateResult]]:
    """Run every gate for the slice in the warehouse and record the results against the writes."""
    plan = clearance.plan
    thresholds = (Thresholds.from_plan(clearance.resolved.plan) if clearance.resolved
                  else default_thresholds(spec))
    keys = [w.partition_key for w in writes]
    versions = code_versions(con, spec, plan.plan_id if plan else None, keys)
    results = evaluate_slice(con, spec, keys, thresholds, versions)
    with transaction(con):
        for write in writes:
            for result in results[write.partition_key]:
                con.execute(
                    f"INSERT INTO {SCHEMA}.gate_results VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [plan.plan_id if plan else None, spec.name, write.partition_key, result.gate,
                     result.passed, json.dumps(result.to_json(), default=str), write.recorded_at,
                     evidence_log.now_iso()])
            if plan is not None:
                gates = results[write.partition_key]
                evidence_log.append(con, plan_id=plan.plan_id, kind="gates", actor=actor, payload={
                    "table": spec.name, "partition": write.partition_key,
                    "passed": all(r.passed for r in gates),
                    "failed": [r.gate for r in gates if not r.passed]})
    return results

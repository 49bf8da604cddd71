"""Rollback: every partition the plan wrote, target and published, back to its snapshot.

One transaction restores both tables; the restored fingerprints must equal those taken before the
plan's first write, or nothing changes. Refused when a later writer (another plan, or an
incremental run after the plan finished) has since written the same partitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from backfill_assets.control import evidence_log, record
from backfill_assets.control.record import PlanState
from backfill_assets.control.schema import SCHEMA
from backfill_assets.errors import RollbackRefused
from backfill_assets.plan.phases import Phase
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.connection import transaction
from backfill_assets.warehouse.fingerprints import Fingerprint, fingerprints
from backfill_assets.warehouse.snapshots import restore, snapshot_fingerprints, snapshotted


@dataclass
class RollbackReport:
    plan_id: str
    dry_run: bool
    tables: dict[str, dict[str, tuple[Fingerprint, Fingerprint]]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        verb = "would restore" if self.dry_run else "restored"
        out = []
        for table, parts in self.tables.items():
            span = f"{min(parts)}..{max(parts)}" if parts else ""
            if not self.dry_run:
                out.append(f"{verb} {len(parts)} partition(s) of {table} ({span}); every "
                           "fingerprint equals the one taken before the plan's first write")
                continue
            out.append(f"{verb} {len(parts)} partition(s) of {table} ({span}):")
            for key, (before, now) in parts.items():
                out.append(f"  {key}: now {now} -> {before}")
        out.append(f"plan {self.plan_id} " + ("unchanged (dry run)" if self.dry_run
                                              else "is rolled_back"))
        return out


def written_keys(con: duckdb.DuckDBPyConnection, state: PlanState) -> list[str]:
    """Every partition the plan snapshotted before writing, whatever its window says now."""
    return sorted(snapshotted(con, state.plan_id, state.target)
                  | {k for k, in con.execute(f"SELECT DISTINCT partition_key FROM {SCHEMA}.writes "
                                             "WHERE plan_id = ?", [state.plan_id]).fetchall()})


def later_writers(con: duckdb.DuckDBPyConnection, state: PlanState) -> list[tuple[str, str]]:
    return con.execute(
        f"""SELECT DISTINCT coalesce(plan_id, 'incremental runs'), partition_key
            FROM {SCHEMA}.writes
            WHERE asset = ? AND partition_key = ANY(?) AND plan_id IS DISTINCT FROM ?
              AND recorded_at > (SELECT min(recorded_at) FROM {SCHEMA}.writes WHERE plan_id = ?)
            ORDER BY 2""",
        [state.target, written_keys(con, state), state.plan_id, state.plan_id]).fetchall()


def rollback(con: duckdb.DuckDBPyConnection, spec: TableSpec, state: PlanState, actor: str, *,
             dry_run: bool = False) -> RollbackReport:
    if state.phase is Phase.ROLLED_BACK:
        raise RollbackRefused(f"plan {state.plan_id} is already rolled back", fix="nothing to do")
    later = later_writers(con, state)
    if later:
        who = sorted({w for w, _ in later})
        raise RollbackRefused(
            f"{', '.join(who)} wrote {len(later)} of plan {state.plan_id}'s partitions since "
            f"(first {later[0][1]}); restoring would erase that work",
            fix=f"roll back {who[0]} first, or replay the window with a new plan")
    report = RollbackReport(state.plan_id, dry_run)
    tables = [spec.table, spec.publish_table]
    if dry_run:
        for table in tables:
            expected = snapshot_fingerprints(con, state.plan_id, table)
            if expected:
                now = fingerprints(con, table, spec.partition_column, list(expected))
                report.tables[table] = {k: (v, now[k]) for k, v in expected.items()}
        return report
    with transaction(con):
        for table in tables:
            restored = restore(con, spec, table, state.plan_id, written_keys(con, state))
            if restored:
                report.tables[table] = restored
        record.transition(con, state.plan_id, Phase.ROLLED_BACK, actor,
                          note="restored from pre-write snapshots")
        evidence_log.append(con, plan_id=state.plan_id, kind="rollback", actor=actor, payload={
            t: {k: str(v[0]) for k, v in parts.items()} for t, parts in report.tables.items()})
    return report

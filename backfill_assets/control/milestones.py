"""The execution milestones the guard shows: read from the evidence log, never from the plan."""

from __future__ import annotations

import duckdb

from backfill_assets.control import evidence_log
from backfill_assets.plan.checklist import ExecutionState


def execution_state(con: duckdb.DuckDBPyConnection, plan_id: str, sha256: str) -> ExecutionState:
    proof = reconciled = published = None
    for row in evidence_log.rows(con, plan_id=plan_id):
        if row.payload.get("sha256", sha256) != sha256:
            continue  # evidence about an earlier version of the plan does not count
        if row.kind == "proof" and row.payload.get("passed"):
            proof = f"proof passed at {row.at} ({', '.join(row.payload.get('partitions', []))})"
        elif row.kind == "window_reconciled":
            reconciled = f"all gates passed at {row.at}"
        elif row.kind == "published":
            published = f"published at {row.at} by {row.actor}"
    return ExecutionState(proof=proof, reconciled=reconciled, published=published)


def pause_notice(con: duckdb.DuckDBPyConnection, plan_id: str) -> str | None:
    row = con.execute(
        "SELECT recorded_at, recipients FROM backfill_control.outbox "
        "WHERE plan_id = ? AND event = 'paused' "
        "ORDER BY recorded_at DESC LIMIT 1", [plan_id]).fetchone()
    return f"paused; notice sent at {row[0]} to {row[1]}" if row else None

"""Plans seen, their phase and transitions, read and written inside the caller's transaction."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

import duckdb

from backfill_assets.control import evidence_log
from backfill_assets.control.schema import SCHEMA
from backfill_assets.errors import UsageError
from backfill_assets.plan.approvals import ApprovalTally
from backfill_assets.plan.model import Approval, Plan
from backfill_assets.plan.phases import ACTIVE, Phase, check_transition


@dataclass(frozen=True)
class PlanState:
    plan_id: str
    sha256: str
    approved_sha256: str | None
    target: str
    window_start: dt.date
    window_end: dt.date
    proof_keys: tuple[str, ...]
    max_concurrent_partitions: int
    phase: Phase
    path: str
    owner: str

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE

    def covers(self, partition_key: str) -> bool:
        return self.window_start.isoformat() <= partition_key <= self.window_end.isoformat()

    @property
    def partition_keys(self) -> list[str]:
        days = (self.window_end - self.window_start).days
        return [(self.window_start + dt.timedelta(days=i)).isoformat() for i in range(days + 1)]


_COLUMNS = ("plan_id, sha256, approved_sha256, target, window_start, window_end, proof_keys, "
            "max_concurrent_partitions, phase, path, owner")


def _state(row: tuple) -> PlanState:
    return PlanState(row[0], row[1], row[2], row[3], row[4], row[5], tuple(row[6]), row[7],
                     Phase(row[8]), row[9], row[10])


def get(con: duckdb.DuckDBPyConnection, plan_id: str) -> PlanState | None:
    row = con.execute(f"SELECT {_COLUMNS} FROM {SCHEMA}.plans WHERE plan_id = ?",
                      [plan_id]).fetchone()
    return _state(row) if row else None


def require(con: duckdb.DuckDBPyConnection, plan_id: str) -> PlanState:
    state = get(con, plan_id)
    if state is None:
        raise UsageError(f"plan {plan_id} is not in the control record",
                         fix="approve it first with `backfill plan approve`")
    return state


def active_plans(con: duckdb.DuckDBPyConnection, target: str | None = None) -> list[PlanState]:
    phases = [p.value for p in ACTIVE]
    query = f"SELECT {_COLUMNS} FROM {SCHEMA}.plans WHERE list_contains(?, phase)"
    params: list[object] = [phases]
    if target is not None:
        query += " AND target = ?"
        params.append(target)
    return [_state(r) for r in con.execute(query + " ORDER BY plan_id", params).fetchall()]


def all_plans(con: duckdb.DuckDBPyConnection) -> list[PlanState]:
    return [_state(r) for r in
            con.execute(f"SELECT {_COLUMNS} FROM {SCHEMA}.plans ORDER BY plan_id").fetchall()]


def register(con: duckdb.DuckDBPyConnection, plan: Plan, sha: str, path: Path,
             actor: str) -> PlanState:
    """Record the plan as seen (insert, or refresh its content); evidence when it is new or edited."""
    existing = get(con, plan.plan_id)
    content = json.dumps(plan.model_dump(mode="json"), sort_keys=True)
    values = [sha, plan.target, plan.window.start, plan.window.end, plan.proof_keys,
              plan.execution.max_concurrent_partitions, str(path.resolve()), plan.owner, content,
              evidence_log.now_iso()]
    if existing is None:
        con.execute(
            f"INSERT INTO {SCHEMA}.plans (plan_id, sha256, target, window_start, window_end, "
            "proof_keys, max_concurrent_partitions, path, owner, plan_json, updated_at, phase) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [plan.plan_id, *values, Phase.DRAFTED.value],
        )
        evidence_log.append(con, plan_id=plan.plan_id, kind="plan_seen", actor=actor,
                            payload={"sha256": sha, "path": str(path.resolve())})
    elif existing.sha256 != sha or existing.path != str(path.resolve()):
        con.execute(
            f"UPDATE {SCHEMA}.plans SET sha256 = ?, target = ?, window_start = ?, "
            "window_end = ?, proof_keys = ?, max_concurrent_partitions = ?, path = ?, owner = ?, "
            "plan_json = ?, updated_at = ? WHERE plan_id = ?",
            [*values, plan.plan_id],
        )
        evidence_log.append(con, plan_id=plan.plan_id, kind="plan_edited", actor=actor,
                            payload={"from_sha256": existing.sha256, "sha256": sha})
    return require(con, plan.plan_id)


def record_approval(con: duckdb.DuckDBPyConnection, plan_id: str, approval: Approval) -> None:
    evidence_log.append(con, plan_id=plan_id, kind="approval", actor=approval.by,
                        payload=approval.model_dump(mode="json"))


def mark_approved(con: duckdb.DuckDBPyConnection, plan_id: str, tally: ApprovalTally,
                  actor: str) -> PlanState:
    """Bind the approved hash; move drafted plans to approved."""
    state = require(con, plan_id)
    con.execute(f"UPDATE {SCHEMA}.plans SET approved_sha256 = ? WHERE plan_id = ?",
                [tally.sha256, plan_id])
    if state.phase is Phase.DRAFTED:
        transition(con, plan_id, Phase.APPROVED, actor,
                   note=f"approved by {', '.join(tally.approvers)}")
    return require(con, plan_id)


def transition(con: duckdb.DuckDBPyConnection, plan_id: str, target: Phase, actor: str,
               note: str = "") -> PlanState:
    state = require(con, plan_id)
    check_transition(plan_id, state.phase, target)
    con.execute(f"UPDATE {SCHEMA}.plans SET phase = ?, updated_at = ? WHERE plan_id = ?",
                [target.value, evidence_log.now_iso(), plan_id])
    evidence_log.append(con, plan_id=plan_id, kind="transition", actor=actor,
                        payload={"from": state.phase.value, "to": target.value, "note": note})
    return require(con, plan_id)

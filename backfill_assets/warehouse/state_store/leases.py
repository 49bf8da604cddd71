"""The `leases` table: which process runs each plan, and its last heartbeat."""

from __future__ import annotations

from typing import Any

from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.state_store import SCHEMA


def lease_row(session: Session, plan_id: str, *, hold: bool = False) -> tuple[Any, ...] | None:
    """(plan_id, holder, host, pid, acquired_at, heartbeat_at) of the plan's lease; with `hold`, its
    row is held for update until the transaction ends."""
    clause = session.lock_rows_clause(True) if hold else ""
    return session.one(f"SELECT plan_id, holder, host, pid, acquired_at, heartbeat_at "
                       f"FROM {SCHEMA}.leases WHERE plan_id = ?{clause}", [plan_id])


def replace(session: Session, plan_id: str, holder: str, host: str, pid: int, acquired_at: str,
            heartbeat_at: float) -> None:
    """The plan's lease is this one, whoever held it before."""
    session.execute(f"DELETE FROM {SCHEMA}.leases WHERE plan_id = ?", [plan_id])
    session.execute(f"INSERT INTO {SCHEMA}.leases VALUES (?, ?, ?, ?, ?, ?)",
                    [plan_id, holder, host, pid, acquired_at, heartbeat_at])


def beat(session: Session, plan_id: str, host: str, pid: int, at: float) -> None:
    """The heartbeat of the plan's lease, if `host`:`pid` holds it."""
    session.execute(f"UPDATE {SCHEMA}.leases SET heartbeat_at = ? WHERE plan_id = ? AND pid = ? "
                    "AND host = ?", [at, plan_id, pid, host])


def remove(session: Session, plan_id: str, host: str, pid: int) -> None:
    """The plan's lease is gone, if `host`:`pid` holds it."""
    session.execute(f"DELETE FROM {SCHEMA}.leases WHERE plan_id = ? AND pid = ? AND host = ?",
                    [plan_id, pid, host])

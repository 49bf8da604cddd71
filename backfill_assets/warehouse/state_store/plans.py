"""The plan of record's tables: `plans` (one row per plan), `plan_versions` (content-addressed
versions) and `approvals` (the signatures recorded for a version).

Rows are returned as stored; `control/record.py` verifies them against the evidence chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.state_store import SCHEMA, next_id

#: a plan's row, in the order every read returns it
PLAN_COLUMNS = ("plan_id", "phase", "target", "owner", "approved_sha256", "hold", "updated_at")
_PLAN = ", ".join(PLAN_COLUMNS)


# --- plans ----------------------------------------------------------------------------------------

def plan_row(session: Session, plan_id: str, *, lock: bool = False, exclusive: bool = False) -> tuple[Any, ...] | None:
    """The plan's row; with `lock` held (shared) until the transaction ends, `exclusive` for the
    one about to change it."""
    clause = session.lock_rows_clause(exclusive) if lock or exclusive else ""
    return session.one(f"SELECT {_PLAN} FROM {SCHEMA}.plans WHERE plan_id = ?{clause}", [plan_id])


def plan_rows(session: Session) -> list[tuple[Any, ...]]:
    """Every plan's row, by id."""
    return session.rows(f"SELECT {_PLAN} FROM {SCHEMA}.plans ORDER BY plan_id")


def ids_in_phases(session: Session, phases: Sequence[str]) -> list[str]:
    """The ids of the plans in any of `phases`, by id."""
    return [str(r[0]) for r in session.rows(
        f"SELECT plan_id FROM {SCHEMA}.plans WHERE phase IN ({', '.join('?' for _ in phases)}) "
        "ORDER BY plan_id", list(phases))]


def insert_plan(session: Session, plan_id: str, phase: str, target: str, owner: str, at: str) -> None:
    """A new plan's row, with no plan of record and no hold."""
    session.execute(f"INSERT INTO {SCHEMA}.plans ({_PLAN}) VALUES (?, ?, ?, ?, NULL, NULL, ?)",
                    [plan_id, phase, target, owner, at])


def set_plan_of_record(session: Session, plan_id: str, sha: str, target: str, owner: str, at: str) -> None:
    session.execute(f"UPDATE {SCHEMA}.plans SET approved_sha256 = ?, target = ?, owner = ?, "
                    "updated_at = ? WHERE plan_id = ?", [sha, target, owner, at, plan_id])


def set_phase(session: Session, plan_id: str, phase: str, at: str) -> None:
    session.execute(f"UPDATE {SCHEMA}.plans SET phase = ?, updated_at = ? WHERE plan_id = ?",
                    [phase, at, plan_id])


def set_hold(session: Session, plan_id: str, hold: str | None, at: str) -> None:
    session.execute(f"UPDATE {SCHEMA}.plans SET hold = ?, updated_at = ? WHERE plan_id = ?",
                    [hold, at, plan_id])


# --- versions -------------------------------------------------------------------------------------

def version_row(session: Session, sha: str) -> tuple[Any, ...] | None:
    """(sha256, plan_id, content, partition_keys, source_file, evidence_seq) of a version."""
    return session.one(f"SELECT sha256, plan_id, content, partition_keys, source_file, evidence_seq "
                       f"FROM {SCHEMA}.plan_versions WHERE sha256 = ?", [sha])


def version_shas(session: Session) -> set[str]:
    return {str(sha) for (sha,) in session.rows(f"SELECT sha256 FROM {SCHEMA}.plan_versions")}


def latest_version_sha(session: Session, plan_id: str) -> str | None:
    """The sha256 of the plan's version recorded last."""
    sha: str | None = session.scalar(f"SELECT sha256 FROM {SCHEMA}.plan_versions WHERE plan_id = ? "
                                     "ORDER BY recorded_at DESC LIMIT 1", [plan_id])
    return sha


def insert_version(session: Session, sha: str, plan_id: str, content: str, keys_text: str,
                   source_file: str | None, at: str, seq: int) -> None:
    session.execute(f"INSERT INTO {SCHEMA}.plan_versions VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [sha, plan_id, content, keys_text, source_file, at, seq])


def unsealed_versions(session: Session) -> list[tuple[Any, ...]]:
    """(sha256, plan_id, partition_keys) of every version no chain row seals (schema 2's)."""
    return session.rows(f"SELECT sha256, plan_id, partition_keys FROM {SCHEMA}.plan_versions "
                        "WHERE evidence_seq IS NULL ORDER BY sha256")


def seal_version(session: Session, sha: str, seq: int) -> None:
    session.execute(f"UPDATE {SCHEMA}.plan_versions SET evidence_seq = ? WHERE sha256 = ?", [seq, sha])


# --- approvals ------------------------------------------------------------------------------------

def approval_rows(session: Session, sha: str) -> list[tuple[Any, ...]]:
    """(principal, statement, signature, key_fingerprint, trust_version, actor, approved_at) of each
    approval of a version, in the order recorded."""
    return session.rows(
        f"SELECT principal, statement, signature, key_fingerprint, trust_version, actor, approved_at "
        f"FROM {SCHEMA}.approvals WHERE sha256 = ? ORDER BY approval_id", [sha])


def approval_seqs(session: Session) -> set[int]:
    """The chain rows that recorded each approval held."""
    return {int(seq) for (seq,) in session.rows(f"SELECT evidence_seq FROM {SCHEMA}.approvals "
                                                "WHERE evidence_seq IS NOT NULL")}


def insert_approval(session: Session, sha: str, plan_id: str, principal: str, statement: str, signature: str,
                    key_fingerprint: str, trust_version: int, actor: str, approved_at: str, seq: int) -> None:
    session.execute(f"INSERT INTO {SCHEMA}.approvals VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [next_id(session), sha, plan_id, principal, statement, signature, key_fingerprint,
                     trust_version, actor, approved_at, seq])

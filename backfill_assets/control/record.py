"""The plan of record: plans, their versions and signed approvals, and the phase machine's funnel.

Once a version's approvals are complete, its canonical content lives here under its sha256 and
everything (the write permission, the coordinator, runs, reconcile, publish, rollback) reads the
window, proof partitions, mode and thresholds from here, never from a file path on one machine.
Approving an edited plan records the new version beside the old one; the plan of record moves to
it only when its own approvals are complete. Every phase change goes through `transition`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from backfill_assets.control import evidence_log
from backfill_assets.control.schema import SCHEMA
from backfill_assets.errors import UsageError
from backfill_assets.plan.identity import canonical_text, plan_from_canonical
from backfill_assets.plan.model import Plan
from backfill_assets.plan.phases import ACTIVE, PAST_PROOF, Phase, check_transition
from backfill_assets.warehouse.engine import Session


@dataclass(frozen=True)
class PlanVersion:
    """One version of a plan as recorded: its content and the partition keys it resolved to."""

    sha256: str
    plan: Plan
    partition_keys: tuple[str, ...]
    source_file: str | None

    @property
    def proof_keys(self) -> tuple[str, ...]:
        return tuple(self.plan.proof_keys)


@dataclass(frozen=True)
class PlanState:
    """A plan's row in the record with its plan of record (None until a version is approved)."""

    plan_id: str
    phase: Phase
    target: str
    owner: str
    approved_sha256: str | None
    hold: str | None
    updated_at: str
    version: PlanVersion | None

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE

    @property
    def approved(self) -> PlanVersion:
        if self.version is None:
            raise UsageError(f"plan {self.plan_id} has no approved version yet",
                             fix="collect its approvals with `backfill plan approve`")
        return self.version

    @property
    def partition_keys(self) -> tuple[str, ...]:
        return self.version.partition_keys if self.version else ()

    @property
    def proof_keys(self) -> tuple[str, ...]:
        return self.version.proof_keys if self.version else ()

    @property
    def past_proof(self) -> bool:
        return self.phase in PAST_PROOF

    def covers(self, key: str) -> bool:
        return self.version is not None and key in _key_set(self.version.sha256, self.partition_keys)


@lru_cache(maxsize=64)
def _key_set(sha: str, keys: tuple[str, ...]) -> frozenset[str]:
    return frozenset(keys)


@lru_cache(maxsize=64)
def _version_from(sha: str, plan_id: str, content: str, keys: str, source: str | None) -> PlanVersion:
    # versions are content-addressed and immutable, so parsing each once per process is safe
    return PlanVersion(sha, plan_from_canonical(content), tuple(json.loads(keys)), source)


_VERSIONS: dict[tuple[str, str], PlanVersion] = {}  # (warehouse, sha256): a recorded version never changes


def version(session: Session, sha: str) -> PlanVersion | None:
    cache_key = (session.engine.describe(), sha)
    found = _VERSIONS.get(cache_key)
    if found is not None:
        return found
    row = session.one(f"SELECT sha256, plan_id, content, partition_keys, source_file "
                      f"FROM {SCHEMA}.plan_versions WHERE sha256 = ?", [sha])
    if row is None:
        return None
    found = _version_from(*row)
    if len(_VERSIONS) < 256:
        _VERSIONS[cache_key] = found
    return found


_COLUMNS = "plan_id, phase, target, owner, approved_sha256, hold, updated_at"


def _state(session: Session, row: tuple) -> PlanState:
    approved = version(session, row[4]) if row[4] else None
    return PlanState(row[0], Phase(row[1]), row[2], row[3], row[4], row[5], row[6], approved)


def get(session: Session, plan_id: str, *, lock: bool = False, exclusive: bool = False) -> PlanState | None:
    """The plan's state; with `lock`, its row is held (shared) until the transaction ends: a
    writer's re-check, so a withdraw or rollback cannot slip between the check and the write;
    `exclusive` for the one about to change it."""
    clause = session.lock_rows_clause(exclusive) if lock or exclusive else ""
    row = session.one(f"SELECT {_COLUMNS} FROM {SCHEMA}.plans WHERE plan_id = ?{clause}", [plan_id])
    return _state(session, row) if row else None


def require(session: Session, plan_id: str, *, lock: bool = False, exclusive: bool = False) -> PlanState:
    state = get(session, plan_id, lock=lock, exclusive=exclusive)
    if state is None:
        raise UsageError(f"plan {plan_id} is not in the control record",
                         fix="approve it first with `backfill plan approve`")
    return state


def active_plans(session: Session, target: str | None = None) -> list[PlanState]:
    phases = [p.value for p in ACTIVE]
    query = f"SELECT {_COLUMNS} FROM {SCHEMA}.plans WHERE phase IN ({', '.join('?' for _ in phases)})"
    params: list[object] = list(phases)
    if target is not None:
        query += " AND target = ?"
        params.append(target)
    return [_state(session, r) for r in session.rows(query + " ORDER BY plan_id", params)]


def all_plans(session: Session, target: str | None = None) -> list[PlanState]:
    query, params = f"SELECT {_COLUMNS} FROM {SCHEMA}.plans", []
    if target is not None:
        query, params = query + " WHERE target = ?", [target]
    return [_state(session, r) for r in session.rows(query + " ORDER BY plan_id", params)]


def record_version(session: Session, plan: Plan, sha: str, keys: list[str], source_file: str | None,
                   actor: str) -> PlanState:
    """Remember a version of the plan (first approval of it); the plan row starts as drafted."""
    if version(session, sha) is None:
        session.execute(f"INSERT INTO {SCHEMA}.plan_versions VALUES (?, ?, ?, ?, ?, ?)",
                        [sha, plan.plan_id, canonical_text(plan), json.dumps(keys), source_file,
                         evidence_log.now_iso()])
        evidence_log.append(session, plan_id=plan.plan_id, kind="plan_version", actor=actor, payload={
            "sha256": sha, "partitions": len(keys), "first": keys[0], "last": keys[-1],
            "file": source_file})
    if get(session, plan.plan_id) is None:
        session.execute(f"INSERT INTO {SCHEMA}.plans ({_COLUMNS}) VALUES (?, ?, ?, ?, NULL, NULL, ?)",
                        [plan.plan_id, Phase.DRAFTED.value, plan.target, plan.owner,
                         evidence_log.now_iso()])
    return require(session, plan.plan_id)


@dataclass(frozen=True)
class RecordedApproval:
    principal: str
    signature: str
    key_fingerprint: str
    actor: str
    approved_at: str


def approvals(session: Session, sha: str) -> list[RecordedApproval]:
    return [RecordedApproval(*r) for r in session.rows(
        f"SELECT principal, signature, key_fingerprint, actor, approved_at FROM {SCHEMA}.approvals "
        "WHERE sha256 = ? ORDER BY approved_at, principal", [sha])]


def add_approval(session: Session, plan_id: str, sha: str, approval: RecordedApproval,
                 signers_sha256: str) -> bool:
    """Record a verified approval once; False when this principal already approved this version."""
    if any(a.principal == approval.principal for a in approvals(session, sha)):
        return False
    session.execute(f"INSERT INTO {SCHEMA}.approvals VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [sha, plan_id, approval.principal, approval.signature, approval.key_fingerprint,
                     signers_sha256, approval.actor, approval.approved_at])
    evidence_log.append(session, plan_id=plan_id, kind="approval", actor=approval.actor, payload={
        "sha256": sha, "principal": approval.principal, "key": approval.key_fingerprint,
        "allowed_signers_sha256": signers_sha256, "signature": approval.signature})
    return True


def adopt(session: Session, plan_id: str, sha: str, actor: str) -> PlanState:
    """Make `sha` the plan of record (its approvals are complete); drafted plans become approved."""
    state = require(session, plan_id, exclusive=True)
    chosen = version(session, sha)
    assert chosen is not None
    session.execute(f"UPDATE {SCHEMA}.plans SET approved_sha256 = ?, target = ?, owner = ?, "
                    "updated_at = ? WHERE plan_id = ?",
                    [sha, chosen.plan.target, chosen.plan.owner, evidence_log.now_iso(), plan_id])
    evidence_log.append(session, plan_id=plan_id, kind="plan_of_record", actor=actor, payload={
        "sha256": sha, "previous": state.approved_sha256})
    if state.phase is Phase.DRAFTED:
        return transition(session, plan_id, Phase.APPROVED, actor, note="approvals complete")
    return require(session, plan_id)


def transition(session: Session, plan_id: str, target: Phase, actor: str, note: str = "") -> PlanState:
    """The one place a plan's phase changes; recorded in the evidence in the same transaction."""
    with session.transaction():
        state = require(session, plan_id, exclusive=True)
        check_transition(plan_id, state.phase, target)
        session.execute(f"UPDATE {SCHEMA}.plans SET phase = ?, updated_at = ? WHERE plan_id = ?",
                        [target.value, evidence_log.now_iso(), plan_id])
        evidence_log.append(session, plan_id=plan_id, kind="transition", actor=actor, payload={
            "from": state.phase.value, "to": target.value, "note": note,
            "sha256": state.approved_sha256})
        return require(session, plan_id)


def set_hold(session: Session, plan_id: str, hold: str | None, actor: str, note: str = "") -> PlanState:
    """Pause (`paused`), cancel (`cancelled`) or resume (None) a plan's further runs."""
    with session.transaction():
        state = require(session, plan_id, exclusive=True)
        session.execute(f"UPDATE {SCHEMA}.plans SET hold = ?, updated_at = ? WHERE plan_id = ?",
                        [hold, evidence_log.now_iso(), plan_id])
        evidence_log.append(session, plan_id=plan_id, kind="hold", actor=actor, payload={
            "from": state.hold, "to": hold, "note": note})
        return require(session, plan_id)

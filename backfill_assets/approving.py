"""`plan approve`: record a signed approval, crash-safe and serialised, then mirror it into the file.

The control record is the source of truth. Under the plan's lock (DuckDB: the file lock; a
server engine: an advisory lock) the plan file is re-read, the signature verified, the approval
committed, and only then written into the file, atomically, keeping its comments. Every step is
idempotent: a retry after a crash at any point converges, and two approvals at once both land.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from backfill_assets import faults
from backfill_assets.control import approvers, record
from backfill_assets.control.record import RecordedApproval
from backfill_assets.control.schema import ensure_schema
from backfill_assets.errors import ApprovalError, PlanInvalidError
from backfill_assets.partitions import PartitionScheme
from backfill_assets.plan.approvals import mirror_into_file, signed_message, tally
from backfill_assets.plan.fit import fit
from backfill_assets.plan.identity import plan_sha256
from backfill_assets.plan.loading import load_plan
from backfill_assets.plan.model import Approval, Plan
from backfill_assets.plan.phases import ENDED, Phase
from backfill_assets.publish.notify import announce_pause
from backfill_assets.signing import sshsig
from backfill_assets.signing.allowed_signers import AllowedSigners
from backfill_assets.signing.principals import canonical_principal
from backfill_assets.table import TableSpec
from backfill_assets.warehouse import Warehouse
from backfill_assets.warehouse.engine import Session


@dataclass(frozen=True)
class Approved:
    plan_id: str
    sha256: str
    principal: str
    recorded_now: bool
    counted: int
    required: int
    plan_of_record: bool  # this version is now the plan of record
    added_to_file: int


def _check_fit(plan: Plan, path: Path, spec: TableSpec, scheme: PartitionScheme) -> list[str]:
    fitted = fit(plan, spec, scheme)
    if not fitted.ok:
        raise PlanInvalidError(f"{path} cannot be approved: it does not fit {spec.name}", fitted.problems)
    return fitted.keys


def _refuse_overlap(session: Session, plan: Plan, keys: list[str]) -> None:
    """Two active plans may not hold the same partitions of one table."""
    wanted = set(keys)
    for other in record.active_plans(session, target=plan.target):
        if other.plan_id != plan.plan_id and wanted & set(other.partition_keys):
            raise ApprovalError(
                f"plan {other.plan_id} ({other.phase}) already holds {plan.target} "
                f"{other.partition_keys[0]}..{other.partition_keys[-1]}, which overlaps "
                f"{keys[0]}..{keys[-1]}",
                fix=f"wait until {other.plan_id} is published, closed, withdrawn or rolled back, or "
                    "move the window")


def _refuse_takeover(session: Session, plan: Plan, sha: str) -> None:
    state = record.get(session, plan.plan_id)
    if state is None:
        return
    if state.phase in ENDED:
        raise ApprovalError(f"plan {plan.plan_id} has ended ({state.phase})",
                            fix="approve the change as a new plan with its own plan_id")
    if state.approved_sha256 not in (None, sha) and state.phase not in (Phase.DRAFTED, Phase.APPROVED):
        raise ApprovalError(
            f"plan {plan.plan_id} is {state.phase} at hash {state.approved_sha256[:12]}; an edited version "
            f"({sha[:12]}) cannot take over what it started",
            fix=f"finish or roll back {plan.plan_id}, then approve the change under a new plan_id")


def approve(warehouse: Warehouse, path: Path, principal: str, signature: str, signers: AllowedSigners,
            spec: TableSpec, scheme: PartitionScheme, actor: str) -> Approved:
    plan = load_plan(path)
    sha = plan_sha256(plan)
    name = canonical_principal(principal, "approver")
    if name == plan.owner:
        raise ApprovalError(f"{name} owns plan {plan.plan_id} and cannot approve it",
                            fix="ask someone other than the owner to approve")
    keys = _check_fit(plan, path, spec, scheme)
    verified = signers.verify_approval(name, signed_message(sha), signature)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    mine = RecordedApproval(name, verified.one_line, verified.fingerprint, actor, now.isoformat())
    with warehouse.session() as session:
        ensure_schema(session)
        with session.transaction():
            session.lock(f"approve:{plan.plan_id}")
            # only the team's pinned approvers file makes a signature count (control/approvers.py)
            approvers.require_pinned(session, signers, actor)
            # the file may have changed while we waited for the lock: what was signed must be it
            again = load_plan(path)
            if plan_sha256(again) != sha:
                raise ApprovalError(f"{path} changed while approving (now {plan_sha256(again)[:12]})",
                                    fix="read the plan again and sign its new sha256")
            _refuse_takeover(session, plan, sha)
            _refuse_overlap(session, plan, keys)
            record.record_version(session, plan, sha, keys, str(path.resolve()), actor)
            # signed entries already in the file (given offline with ssh-keygen) are recorded too
            for other in tally(again, signers).counted:
                record.add_approval(session, plan.plan_id, sha, RecordedApproval(
                    other.by, sshsig.one_line(other.signature),
                    sshsig.parse(other.signature).fingerprint, actor, other.at.isoformat()), signers.sha256)
            twin = next((a for a in record.approvals(session, sha) if a.key_fingerprint == mine.key_fingerprint
                         and a.principal != name), None)
            if twin is not None:  # one key listed under two names is still one person
                raise ApprovalError(f"{name}'s key ({mine.key_fingerprint}) already signed {twin.principal}'s "
                                    f"approval of {plan.plan_id}; a key counts once",
                                    fix="each approver signs with their own key; fix approvers/allowed_signers")
            recorded_now = record.add_approval(session, plan.plan_id, sha, mine, signers.sha256)
            faults.checkpoint("approve.before_commit")
            given = list({a.key_fingerprint: a for a in record.approvals(session, sha)
                          if a.principal != plan.owner}.values())
            state = record.require(session, plan.plan_id)
            adopted = False
            if len(given) >= plan.approvals.required and state.approved_sha256 != sha:
                was_active = state.active
                record.adopt(session, plan.plan_id, sha, actor)
                adopted = True
                if not was_active:
                    announce_pause(session, plan, actor)
        faults.checkpoint("approve.after_commit")
        # still holding the warehouse (and so the plan's turn): mirror the record into the file
        added = mirror_into_file(path, [
            Approval(by=a.principal, at=dt.datetime.fromisoformat(a.approved_at), plan_sha256=sha,
                     signature=a.signature) for a in record.approvals(session, sha)])
        faults.checkpoint("approve.after_mirror")
        state = record.require(session, plan.plan_id)
    return Approved(plan.plan_id, sha, name, recorded_now, len(given), plan.approvals.required,
                    state.approved_sha256 == sha and (adopted or state.approved_sha256 == sha), added)

"""`plan approve`: record a signed approval, crash-safe and serialised, then mirror it into the file.

The control record is the source of truth. Under the target's lock (DuckDB: the file lock; a
server engine: an advisory lock per target, so two overlapping plans approved at once cannot both
become active) the plan file is re-read, the signature verified under the pinned trust root, the
approval committed, and only then written into the file, atomically, keeping its comments. Every
step is idempotent: a retry after a crash at any point converges, and two approvals at once both
land. The owner signs too (their signature is required); approvers are counted by the policy.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from backfill_assets import faults, lifecycle
from backfill_assets.control import authority, record, trust_record
from backfill_assets.control.record import RecordedApproval
from backfill_assets.control.schema import ensure_schema
from backfill_assets.errors import ApprovalError, LockWaitTimeout, PlanInvalidError, PlanReadError, printable
from backfill_assets.plan.approvals import entry_of, file_candidates, mirror_into_file
from backfill_assets.plan.fit import fit
from backfill_assets.plan.identity import plan_sha256
from backfill_assets.plan.loading import load_plan
from backfill_assets.plan.model import Plan
from backfill_assets.plan.phases import ENDED, Phase
from backfill_assets.publish.notify import announce_freeze
from backfill_assets.signing.principals import canonical_principal
from backfill_assets.signing.statements import APPROVALS, PLAN_REPLACEMENT, Statement
from backfill_assets.terminal import shell_word
from backfill_assets.trust.root import Candidate, Counted, TrustRoot, tally
from backfill_assets.warehouse import Warehouse
from backfill_assets.warehouse.engine import Session

if TYPE_CHECKING:
    from backfill_assets.loaded_defs import LoadedTable


@dataclass(frozen=True)
class Approved:
    plan_id: str
    sha256: str
    principal: str
    recorded_now: bool
    described: str  # the tally: owner, approvers counted, what is missing
    plan_of_record: bool  # this version is now the plan of record
    added_to_file: int
    # why the plan file could not take the recorded signatures, and what makes it able to, if it could not
    unmirrored: tuple[str, str] | None = None


def _check_fit(plan: Plan, path: Path, table: LoadedTable) -> dict[str, list[str]]:
    fitted = fit(plan, table.spec, table.scheme(), table.graph, drafting=True)
    if not fitted.ok:
        raise PlanInvalidError(f"{path} cannot be approved: it does not fit {table.spec.name}", fitted.problems)
    return fitted.members


def _refuse_overlap(session: Session, plan: Plan, members: dict[str, list[str]]) -> None:
    """Two active plans may not hold the same partitions of one table (of any table of a graph)."""
    for asset, keys in members.items():
        wanted = set(keys)
        for other in record.active_plans(session, target=asset):
            held = other.keys_of(asset)
            if other.plan_id != plan.plan_id and wanted & set(held):
                raise ApprovalError(
                    f"plan {other.plan_id} ({other.phase}) already holds {asset} {held[0]}..{held[-1]}, which "
                    f"overlaps {keys[0]}..{keys[-1]}",
                    fix=f"wait until {other.plan_id} is published, closed, withdrawn or rolled back, or "
                        "move the window")


def takeover_refusal(session: Session, plan: Plan, sha: str) -> ApprovalError | None:
    """Why version `sha` of the plan may never become its plan of record, or None: the plan ended,
    started writing another version, or has a plan of record of another owner or target (a version
    naming another owner was made the plan of record without a signature of the owner it replaced:
    found by an attack). Asked by `plan approve`, and by the guard and `plan show` beside the record
    (which answered ALLOWED for such a version: found by an attack)."""
    state = record.get(session, plan.plan_id)
    if state is None:
        return None
    if state.phase in ENDED:
        return ApprovalError(f"plan {plan.plan_id} has ended ({state.phase})",
                             fix="approve the change as a new plan with its own plan_id")
    current = state.approved_sha256
    if current is None or current == sha:
        return None
    if state.phase not in (Phase.DRAFTED, Phase.APPROVED):
        return ApprovalError(
            f"plan {plan.plan_id} is {state.phase} at hash {current[:12]}; an edited version "
            f"({sha[:12]}) cannot take over what it started",
            fix=f"finish or roll back {plan.plan_id}, then approve the change under a new plan_id")
    of_record = record.version(session, current)
    if of_record is not None and (of_record.plan.owner, of_record.plan.target) != (plan.owner, plan.target):
        return ApprovalError(
            f"plan {plan.plan_id}'s plan of record ({of_record.sha256[:12]}) is {of_record.plan.owner}'s, of "
            f"{of_record.plan.target}; a version of {plan.owner}'s, of {plan.target}, cannot replace it",
            fix=f"keep owner {of_record.plan.owner} and target {of_record.plan.target}, or approve the change as "
                "a new plan with its own plan_id")
    return None


def _verified_one(root: TrustRoot, plan: Plan, sha: str, code: str, candidate: Candidate) -> Counted:
    """The signature given on the command line, or refuse saying why it does not count."""
    found = tally(root, [candidate], kind=APPROVALS,
                  expect={"plan": sha, "code": code, "warehouse": root.warehouse_id},
                  requirement=root.policy.requirement(plan.assets, plan.approvals.required), owner=plan.owner)
    mine = found.owner_signature or (found.counted[0] if found.counted else None)
    if mine is None:
        reason = found.void[0].reason if found.void else "it does not verify"
        raise ApprovalError(f"{candidate.principal}'s signature of plan {plan.plan_id} does not count: {reason}",
                            fix="sign the statement printed by `backfill plan statement PLAN` with a key listed for "
                                "you in the pinned allowed_signers")
    return mine


def approve(warehouse: Warehouse, path: Path, principal: str, statement: str, signature: str,
            table: LoadedTable, actor: str) -> Approved:
    plan = load_plan(path)
    sha = plan_sha256(plan)
    name = canonical_principal(principal, "approver")
    members = _check_fit(plan, path, table)
    keys, code = members[plan.target], table.code_identity(plan.assets)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
    with warehouse.session() as session:
        ensure_schema(session)
        with session.transaction():
            for asset in sorted(members):  # every table's turn, in one order: two approvals never wait in a circle
                session.lock(lifecycle.approval_lock(asset))
            # the plan's row before the chain (the order of publish, a cancel, a run): an approval
            # that completed a version took the chain, then the row, and deadlocked a publish
            record.get(session, plan.plan_id, exclusive=True)
            root = trust_record.require(session)
            mine = _verified_one(root, plan, sha, code, Candidate(name, statement, signature))
            # the file may have changed while we waited for the lock: what was signed must be it
            again = load_plan(path)
            if plan_sha256(again) != sha:
                raise ApprovalError(f"{printable(path)} changed while approving (now {plan_sha256(again)[:12]})",
                                    fix="read the plan again and sign its new statement")
            refused = takeover_refusal(session, plan, sha)
            if refused is not None:
                raise refused
            _refuse_overlap(session, plan, members)
            # only signatures that verify count as "already signed" (a row typed into the table is not one)
            recorded = tally(root, [Candidate(a.principal, a.statement, a.signature)
                                    for a in record.approvals(session, sha)], kind=APPROVALS,
                             expect={"plan": sha, "code": None, "warehouse": root.warehouse_id},
                             requirement=root.policy.requirement(plan.assets, plan.approvals.required), owner=None)
            twin = next((a for a in recorded.counted
                         if a.fingerprint == mine.fingerprint and a.principal != mine.principal), None)
            if twin is not None:  # one key listed under two names is still one person
                raise ApprovalError(f"{mine.principal}'s key ({mine.fingerprint}) already signed {twin.principal}'s "
                                    f"approval of {plan.plan_id}; a key counts once",
                                    fix="each approver signs with their own key; fix allowed_signers (re-pin it)")
            record.record_version(session, plan, sha, keys, str(path.resolve()), actor, members)
            # signed entries already in the file (given offline with ssh-keygen) are recorded too,
            # each only if it verifies under the pinned root
            offline, _ = file_candidates(again)
            valid = tally(root, offline, kind=APPROVALS,
                          expect={"plan": sha, "code": code, "warehouse": root.warehouse_id},
                          requirement=root.policy.requirement(plan.assets, plan.approvals.required), owner=plan.owner)
            for other in [*valid.counted, *([valid.owner_signature] if valid.owner_signature else [])]:
                record.add_approval(session, plan.plan_id, sha, _recorded(other, root.version, actor, now))
            recorded_now = record.add_approval(session, plan.plan_id, sha, _recorded(mine, root.version, actor, now))
            faults.checkpoint("approve.before_commit")
            state = record.require(session, plan.plan_id)
            assert state.version is not None or record.version(session, sha) is not None
            # another version the plan of record: only `plan replacement` statements naming its
            # adoption take over from it (a version it superseded came back on old signatures, with
            # the owner's key alone or none, and on statements dated ahead and held back: found by
            # attacks), and each signer whose statement does not is told
            since = record.replaced(session, plan.plan_id, sha)
            counted = authority.plan_tally(session, record.version(session, sha), code=code)  # type: ignore[arg-type]
            late = ""
            if since is not None and not (
                    mine.statement.kind == PLAN_REPLACEMENT and mine.statement.get("replaces") == since.mark):
                late = (f"; {mine.principal}'s signature is recorded but does not count: this version "
                        f"{'replaces' if state.approved_sha256 != sha else 'replaced'} the plan of record "
                        f"{since.sha256[:12]}, and only `plan replacement` statements naming its adoption count "
                        f"(`backfill plan statement {shell_word(path)}` prints one now)")
            if since is not None and not counted.approved:
                own = root.policy.requirement(plan.assets, plan.approvals.required)
                floor = authority.replaced_floor(session, root, since)
                if own.at_least(floor) != own:  # the signer cannot tell from the file why more are asked
                    late += (f"; it needs {floor.minimum} approver(s)"
                             + (f", one of each of {', '.join(floor.groups)}" if floor.groups else "")
                             + f" because the plan of record it replaces ({since.sha256[:12]}) or one before it "
                               "did: a replacement never lowers the bar")
            adopted = False
            if counted.approved and state.approved_sha256 != sha:
                was_active = state.active
                lifecycle.approvals_complete(session, plan.plan_id, sha, actor)
                adopted = True
                if not was_active:
                    announce_freeze(session, plan, actor)
        faults.checkpoint("approve.after_commit")
        # the record mirrored into the file in the target's turn: on DuckDB the warehouse is still
        # held; on PostgreSQL the commit let the turn go, and two approvals' read-then-rename of the
        # file interleaved, one putting back a file without the other's signature (found by an
        # attack), so it is taken again by a transaction that writes nothing (nothing to roll back
        # under the file's update). The approval committed whatever the file's folder says (a
        # read-only checkout, a full disk): the caller says so, not that nothing committed
        try:
            with session.transaction():
                for asset in sorted(members):
                    session.lock(lifecycle.approval_lock(asset))
                added, unmirrored = _mirrored(session, path, sha)
        except LockWaitTimeout as exc:  # the approval stands: the file waits for the next command
            added, unmirrored = 0, (f"another approval held the table's turn too long ({exc.message})",
                                    "run the same command again: it brings the file in line with the record")
        faults.checkpoint("approve.after_mirror")
        state = record.require(session, plan.plan_id)
    return Approved(plan.plan_id, sha, name, recorded_now, counted.describe() + late,
                    state.approved_sha256 == sha and (adopted or counted.approved), added, unmirrored)


def _mirrored(session: Session, path: Path, sha: str) -> tuple[int, tuple[str, str] | None]:
    """The record's approvals of `sha` written into the plan file: how many were added, and why the
    file could not take them (with the fix), if it could not."""
    try:
        return mirror_into_file(path, [entry_of(a.principal, Statement.parse(a.statement), a.signature)
                                       for a in record.approvals(session, sha)]), None
    except OSError as exc:
        return 0, (exc.strerror or type(exc).__name__, f"make {printable(path.parent)} writable (or free space)")
    except PlanReadError as exc:  # a file laid out by hand the signature cannot be put into
        return 0, (exc.message, exc.fix or "lay the file out as the template does")


def _recorded(counted: Counted, trust_version: int, actor: str, at: str) -> RecordedApproval:
    return RecordedApproval(counted.principal, counted.statement.text, counted.signature, counted.fingerprint,
                            trust_version, actor, at)

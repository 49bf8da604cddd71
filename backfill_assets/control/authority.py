"""Whether a plan is authorised now: its recorded signatures counted under the pinned trust root.

Every decision that lets a plan change data or what consumers see (the write permission, the
coordinator, publish, a rollback of what was published) asks here, and the answer is computed
from what authenticates itself: signatures over statements that bind the plan's sha256, the code
identity of its table, this warehouse's id and an expiry, counted under the trust root whose
history `trust_record` re-verifies. A forged row in `approvals` is a signature that does not
verify; a staging signature names another warehouse; an old one has expired; other code has
another identity. Verdicts are cached per process until the earliest expiry they rely on.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from backfill_assets.control import evidence_log, record, trust_record
from backfill_assets.control.record import Adoption, PlanVersion
from backfill_assets.errors import ForgedRecord
from backfill_assets.signing.statements import APPROVALS, PLAN_REPLACEMENT, ROLLBACK, ROLLBACK_KEEPING, Statement
from backfill_assets.trust.policy import Requirement
from backfill_assets.trust.root import Candidate, Tally, TrustRoot, tally
from backfill_assets.warehouse.engine import Session

_CACHE: dict[tuple[Any, ...], Tally] = {}


def plan_tally(session: Session, version: PlanVersion, *, code: str | None,
               now: dt.datetime | None = None) -> Tally:
    """The recorded approvals of `version`, counted now; `code` None leaves the code unchecked
    (the coordinator, which cannot load the table: the run's own permission checks it). Where the
    version replaces (or replaced) another as the plan of record (`record.replaced`), only the
    approvals the chain recorded after that one's adoption, of `plan replacement` statements naming
    it (`Adoption.mark`), count, never fewer than it needed: a signature made before an adoption
    cannot name it, whatever time its statement says."""
    now = now or dt.datetime.now(dt.UTC)
    root = trust_record.require(session)
    since = record.replaced(session, version.plan.plan_id, version.sha256)
    expect, kinds, requirement = _terms(session, root, version, code, since)
    recorded = record.approvals(session, version.sha256)
    plan = version.plan
    if since is not None:
        recorded = [a for a in recorded if (a.statement, a.signature) in since.approvals_after]
    cache_key = (session.engine.describe(), version.sha256, root.identity, root.warehouse_id, code, kinds,
                 expect.get("replaces"), tuple((a.principal, a.statement, a.signature) for a in recorded))
    cached = _CACHE.get(cache_key)
    if cached is not None and cached.expires is not None and now < cached.expires:
        return cached
    found = tally(root, [Candidate(a.principal, a.statement, a.signature) for a in recorded], kind=kinds,
                  expect=expect, requirement=requirement, owner=plan.owner, now=now)
    if found.approved:
        if len(_CACHE) > 256:
            _CACHE.clear()
        _CACHE[cache_key] = found
    return found


def _terms(session: Session, root: TrustRoot, version: PlanVersion, code: str | None, since: Adoption | None
           ) -> tuple[dict[str, str | None], tuple[str, ...], Requirement]:
    """What counting `version`'s approvals under `root` asks, where it replaces the plan of record
    adopted at `since` (or None): what the statements must bind, of which kinds, how many approvers."""
    expect: dict[str, str | None] = {"plan": version.sha256, "code": code, "warehouse": root.warehouse_id}
    kinds: tuple[str, ...] = APPROVALS
    requirement = root.policy.requirement(version.plan.assets, version.plan.approvals.required)
    if since is not None:
        expect, kinds = {**expect, "replaces": since.mark}, (PLAN_REPLACEMENT,)
        requirement = requirement.at_least(replaced_floor(session, root, since))
    return expect, kinds, requirement


def as_recorded(session: Session, version: PlanVersion, candidates: Sequence[Candidate], *, root: TrustRoot,
                now: dt.datetime) -> Tally:
    """`candidates` (the chain's approval rows of `version`, in order) counted as a decision at `now`
    under `root` (the trust root pinned then) counted them, the code left unchecked (each statement
    binds it; the evidence shows what): for the rendered evidence, which says of every signature
    whether it counted and of the version whether the quorum was met, months after the signatures
    expired. A signature recorded before the adoption of the plan of record a replacement replaces
    never counts (`plan_tally`), and its verdict says so."""
    since = record.replaced_at_adoption(session, version.plan.plan_id, version.sha256)
    expect, kinds, requirement = _terms(session, root, version, None, since)
    kept = [c for c in candidates if since is None or (c.statement, c.signature) in since.approvals_after]
    found = tally(root, kept, kind=kinds, expect=expect, requirement=requirement, owner=version.plan.owner,
                  now=now)
    if since is None or len(kept) == len(candidates):
        return found
    judged = dict(zip(kept, (v for _, v in found.verdicts), strict=True))
    before = (f"NOT counted, recorded before the plan of record it replaces ({since.sha256[:12]}) was adopted; "
              "only plan replacement statements naming that adoption count")
    return replace(found, verdicts=tuple((c, judged.get(c, before)) for c in candidates))


def replaced_floor(session: Session, root: TrustRoot, since: Adoption) -> Requirement:
    """What replacing the plan of record adopted at `since` needs at least: what every version made
    the plan of record up to it needed (a version that asked fewer approvers, or wrote fewer tables,
    replaced one that needed more; a third version dropped back below the first's bar: found by
    attacks). A version the chain adopted whose row is gone is a forged record (deleted, it lowered
    the bar)."""
    floor: Requirement | None = None
    for sha in since.adopted:
        adopted = record.version(session, sha)
        if adopted is None:
            raise ForgedRecord(f"plan version {sha[:12]}, which the evidence chain records as a plan of record, is "
                               "gone from the control record", fix=evidence_log.FORGED_FIX)
        floor = root.policy.requirement(adopted.plan.assets, adopted.plan.approvals.required).at_least(floor)
    assert floor is not None  # an adoption adopts a version
    return floor


def refusal(session: Session, version: PlanVersion, *, code: str | None, now: dt.datetime | None = None) -> str | None:
    """Why the plan's approvals do not authorise it now (one clause), or None."""
    found = plan_tally(session, version, code=code, now=now)
    if found.approved:
        return None
    why = "; ".join(found.missing())
    if found.void:
        why += " (void: " + "; ".join(f"{v.principal}: {v.reason}" for v in found.void[:3]) + ")"
    since = record.replaced(session, version.plan.plan_id, version.sha256)
    if since is not None:  # what its own file does not say: the plan of record it replaced asks more
        root = trust_record.require(session)
        own = root.policy.requirement(version.plan.assets, version.plan.approvals.required)
        floor = replaced_floor(session, root, since)
        if own.at_least(floor) != own:
            why += (f"; {floor.minimum} approver(s)" + (f", one of each of {', '.join(floor.groups)}" if floor.groups
                                                       else "")
                    + f" because the plan of record it replaces or replaced ({since.sha256[:12]}) or one before it "
                      "needed them: a replacement never lowers the bar")
    return f"its approvals do not hold now: needs {why}"


def rollback_statement(session: Session, version: PlanVersion, *, keep: Sequence[str] = (),
                       signed: dt.datetime | None = None) -> Statement:
    """What approvers sign to roll back a published plan whose own approvals no longer hold; one
    that leaves tables computed from its partitions as they are (`keep`) names them."""
    root = trust_record.require(session)
    signed = signed or dt.datetime.now(dt.UTC)
    if keep:
        return Statement.make(ROLLBACK_KEEPING, signed=signed, expires=signed + root.policy.valid_for,
                              plan=version.sha256, warehouse=root.warehouse_id, keep=kept_text(keep))
    return Statement.make(ROLLBACK, signed=signed, expires=signed + root.policy.valid_for,
                          plan=version.sha256, warehouse=root.warehouse_id)


def kept_text(keep: Sequence[str]) -> str:
    """The tables a rollback leaves computed, as its statement names them."""
    return ",".join(sorted(set(keep)))


def keep_options(keep: Sequence[str]) -> str:
    """The same tables as `backfill rollback`'s options, for a command a message names."""
    return "".join(f" --keep-computed {t}" for t in sorted(set(keep)))


def rollback_tally(session: Session, version: PlanVersion, candidates: list[Candidate],
                   keep: Sequence[str] = ()) -> Tally:
    """Signatures authorising the rollback of a published plan: the policy's approvers for its
    target (the owner's keys never count), over a `rollback` statement for this plan and warehouse;
    for a version that replaced a plan of record, never fewer than that one needed (`replaced_floor`:
    two rolled back what a three-approver plan of record's replacement published, found by an attack)."""
    root = trust_record.require(session)
    plan = version.plan
    requirement = root.policy.requirement(plan.assets, plan.approvals.required)
    since = record.replaced(session, plan.plan_id, version.sha256)
    if since is not None:
        requirement = requirement.at_least(replaced_floor(session, root, since))
    expect = {"plan": version.sha256, "warehouse": root.warehouse_id}
    if keep:  # a whole rollback's signatures never authorise one that leaves tables as they are
        return tally(root, candidates, kind=ROLLBACK_KEEPING, expect={**expect, "keep": kept_text(keep)},
                     requirement=requirement, owner=plan.owner, owner_required=False)
    return tally(root, candidates, kind=ROLLBACK, expect=expect, requirement=requirement, owner=plan.owner,
                 owner_required=False)

"""The plan's lifecycle: what each event does to a plan's phase and hold.

Callers say how to judge (a proof's verdict, a window's verdict, what a close finds changed); the
lifecycle reads that verdict inside the transaction that makes the move, holding the plan's row, so
no write and no other move lands between what it read and what it did. It decides the move and
records it with `control.record.transition` / `set_hold`, the low-level writers no
other module calls. The moves allowed at all are the phase machine's (`plan.phases`); this module
says which of them each event takes, so "why did the plan move?" has one answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from backfill_assets.control import evidence_log, lease, record
from backfill_assets.control.record import PlanState
from backfill_assets.errors import PlanRefused
from backfill_assets.plan.phases import Hold, Phase
from backfill_assets.tags import LAUNCHER_TAG
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.fingerprints import Fingerprint

# the phases in which a window verdict moves a plan: forward once it passes, back once it fails
WINDOW_JUDGED = frozenset({Phase.PROVEN, Phase.RUNNING, Phase.REPAIRING, Phase.RECONCILED, Phase.PUBLISHED})
# the phases a plan that wrote nothing may still be withdrawn from when it is cancelled
_WITHDRAWN_ON_CANCEL = frozenset({Phase.DRAFTED, Phase.APPROVED, Phase.PROVING})


class Judged(Protocol):
    """What a verdict (`execution.advance.Verdict`) tells the lifecycle: passed, or why not."""

    @property
    def passed(self) -> bool: ...

    @property
    def blockers(self) -> list[str]: ...


Judge = Callable[[PlanState], Judged]  # reads a verdict on the plan as it stands, in the caller's session


def approvals_complete(session: Session, plan_id: str, sha: str, actor: str) -> PlanState:
    """`sha` has every approval it needs: it becomes the plan of record; a drafted plan is approved."""
    state = record.adopt(session, plan_id, sha, actor)
    if state.phase is Phase.DRAFTED:
        return record.transition(session, plan_id, Phase.APPROVED, actor, note="approvals complete")
    return state


def run_started(session: Session, plan_id: str, keys: Sequence[str], actor: str, asset: str,
                launcher: str | None = None) -> PlanState:
    """A run of `asset` is about to write `keys`: its first write of a phase moves the plan on, in its
    own short transaction before the partitions' transactions (which then only hold the plan's row
    shared, never update it). Only a run the plan's lease lets write moves it (`launcher`: the
    label of the lease holder that launched it): a run refused by its first write transaction,
    the lease taken since its start, had moved a proven plan to running."""
    with session.transaction():
        state = record.require(session, plan_id, exclusive=True)
        lease.refuse_foreign_run(session, plan_id, {LAUNCHER_TAG: launcher} if launcher else {}, keys[0])
        # the proof partitions are the target's; every partition of a table downstream is past it
        past_proof = [k for k in keys if k not in state.proof_keys or asset != state.target]
        if state.phase is Phase.APPROVED:
            return record.transition(session, plan_id, Phase.PROVING, actor, note=f"a proof run started ({keys[0]})")
        if state.phase is Phase.PROVEN and past_proof:
            return record.transition(session, plan_id, Phase.RUNNING, actor,
                                     note=f"a run past the proof started ({past_proof[0]})")
        if state.phase is Phase.RECONCILED:
            # a re-run after reconciliation must be reconciled again before publish
            return record.transition(session, plan_id, Phase.RUNNING, actor,
                                     note=f"a run re-materializing {keys[0]} after reconciliation started")
        return state


def approval_lock(target: str) -> str:
    """The turn an approval takes on each table of its plan while it reads which plans are active."""
    return f"approve:{target}"


def _approvals_held(session: Session, state: PlanState) -> None:
    """Each table's approval turn, in the approvals' order, before the plan's row (as an approval
    takes them): a published plan going back to repairing holds its window again, so no approval
    over it may read the plan as published meanwhile. Without it an approval checked for overlaps
    while `reconcile` (or a sensor tick) sent the plan back, each read the other as not active, and
    both committed: two active plans over one partition (found by an attack)."""
    for asset in sorted(state.assets):
        session.lock(approval_lock(asset))


def _locked(session: Session, state: PlanState) -> PlanState:
    """The plan's row, held exclusively until the caller's transaction ends: a run's write
    transaction holds it shared, so none of the plan's writes is half-way while a verdict is read
    under it, and no other move can land between the verdict and the move it makes."""
    return record.require(session, state.plan_id, exclusive=True)


# Each verdict is read twice when it would move the plan: first without the lock, so a verdict that
# moves nothing (a window still being written, the sensor's usual tick) never waits for a run's
# open write or makes one wait; then again under the lock, and only that reading decides.


def proof_judged(session: Session, state: PlanState, judge: Judge, actor: str) -> PlanState:
    """The proof's verdict: a passed proof is recorded and the plan is proven; a failed one stays in
    proving (the proof runs again). `judge` reads the verdict; the move's reading is under the lock."""
    if state.phase is not Phase.PROVING or not judge(state).passed:
        return state
    with session.transaction():
        state = _locked(session, state)
        if state.phase is not Phase.PROVING or not judge(state).passed:
            return state
        evidence_log.append(session, plan_id=state.plan_id, kind="proof", actor=actor, payload={
            "passed": True, "partitions": list(state.proof_keys), "sha256": state.approved_sha256})
        return record.transition(session, state.plan_id, Phase.PROVEN, actor,
                                 note="proof idempotent and gates passed")


def _window_moves(state: PlanState, verdict: Judged) -> bool:
    if state.phase in (Phase.RECONCILED, Phase.PUBLISHED):
        return not verdict.passed
    return state.phase in WINDOW_JUDGED and verdict.passed


def held_by_another(session: Session, state: PlanState) -> tuple[PlanState, str, str] | None:
    """Another active plan holding a partition of `state`'s, with that table and partition: a plan approved over a
    published plan's window (allowed, a published plan no longer holds it) is its plan of record
    there, so the published plan may not hold it again by going back to repairing. It did, and the
    two plans each refused the other's runs, `status` naming a run of each (found by an attack)."""
    for asset in state.assets:
        mine = set(state.keys_of(asset))
        for other in record.active_plans(session, target=asset):
            common = [k for k in other.keys_of(asset) if k in mine] if other.plan_id != state.plan_id else []
            if common:
                return other, asset, common[0]
    return None


def window_judged(session: Session, state: PlanState, judge: Judge, actor: str) -> PlanState:
    """The whole window's verdict, read by `judge`; the move's reading is under the lock. A window
    that passed reconciles a plan writing it; one that no longer passes sends a reconciled plan back
    to running and a published one to repairing."""
    if state.phase not in WINDOW_JUDGED or not _window_moves(state, judge(state)):
        return state
    with session.transaction():
        held = state.phase in (Phase.RECONCILED, Phase.PUBLISHED)  # a move that may go on to repairing
        if held:
            _approvals_held(session, state)
        state = _locked(session, state)
        verdict = judge(state)
        if not _window_moves(state, verdict):
            return state
        if state.phase is Phase.PUBLISHED and (not held or held_by_another(session, state) is not None):
            return state  # stays published until the plan holding its partitions ends (status names it)
        if state.phase in (Phase.RECONCILED, Phase.PUBLISHED):
            back = Phase.RUNNING if state.phase is Phase.RECONCILED else Phase.REPAIRING
            return record.transition(session, state.plan_id, back, actor,
                                     note="no longer reconciled: " + verdict.blockers[0])
        if state.phase is Phase.PROVEN:
            state = record.transition(session, state.plan_id, Phase.RUNNING, actor,
                                      note="window already written by the proof")
        evidence_log.append(session, plan_id=state.plan_id, kind="window_reconciled", actor=actor,
                            payload={"partitions": len(state.partition_keys),
                                     "first": state.partition_keys[0],
                                     "last": state.partition_keys[-1],
                                     "sha256": state.approved_sha256})
        return record.transition(session, state.plan_id, Phase.RECONCILED, actor,
                                 note="every gate passed on every partition")


def publication_checked(session: Session, state: PlanState, published_as: str,
                        edits_now: Callable[[], Mapping[str, tuple[Fingerprint, Fingerprint]]],
                        actor: str) -> PlanState:
    """What consumers read of a published plan's table (`published_as`), against what was published:
    `edits_now` reads partition -> (now, published) of every edit (the move's reading under the
    lock). An edit sends the plan to repairing, so the next publish puts the checked bytes back."""
    if state.phase is not Phase.PUBLISHED or not edits_now():
        return state
    with session.transaction():
        _approvals_held(session, state)
        state = _locked(session, state)
        edits = edits_now() if state.phase is Phase.PUBLISHED else {}
        if not edits or held_by_another(session, state) is not None:
            return state
        first = next(iter(edits))
        return record.transition(session, state.plan_id, Phase.REPAIRING, actor, note=(
            f"{len(edits)} partition(s) of {published_as} edited since published (first {first}: "
            f"now {edits[first][0]}, published {edits[first][1]})"))


def published(session: Session, state: PlanState, actor: str, *, with_graph: bool) -> PlanState:
    """Publish copied the plan's window (and, `with_graph`, its graph's tables) for consumers."""
    return record.transition(session, state.plan_id, Phase.PUBLISHED, actor,
                             note=f"{len(state.partition_keys)} partition(s) published"
                             + (f" with {', '.join(state.assets[1:])}" if with_graph else ""))


def close_requested(session: Session, state: PlanState, changed_now: Callable[[PlanState], Sequence[str]],
                    actor: str, note: str = "") -> PlanState:
    """Consumers confirmed a published plan: it closes, unless partitions changed after publish
    (`changed_now`, read inside the move's transaction), which sends it to repairing instead. Any
    other phase stays (the caller says why it may not close)."""
    if state.phase is not Phase.PUBLISHED:
        return state
    with session.transaction():
        _approvals_held(session, state)
        state = _locked(session, state)
        if state.phase is not Phase.PUBLISHED:
            return state
        changed = changed_now(state)
        if changed and held_by_another(session, state) is not None:
            return state  # neither closed over changed partitions nor repairing another plan's (status names it)
        if changed:
            return record.transition(session, state.plan_id, Phase.REPAIRING, actor,
                                     note=f"{len(changed)} partition(s) changed after publish")
        return record.transition(session, state.plan_id, Phase.CLOSED, actor, note=note or "consumers confirmed")


def rolled_back(session: Session, state: PlanState, actor: str) -> PlanState:
    """Every table the plan wrote was restored from its snapshots, in the caller's transaction."""
    return record.transition(session, state.plan_id, Phase.ROLLED_BACK, actor,
                             note="restored from pre-write snapshots")


def withdrawn(session: Session, state: PlanState, actor: str, note: str = "") -> PlanState:
    """A plan that wrote nothing ends (the caller read the ledger under the plan's lock)."""
    return record.transition(session, state.plan_id, Phase.WITHDRAWN, actor, note=note or "withdrawn before writing")


def rollback_named_by_status(plan_id: str) -> str:
    """The way out of a cancelled plan, as a refusal names it: a cancelled plan only rolls back, and
    which rollback (`--keep-computed` for a table computed from its partitions since, approvers'
    signatures once consumers saw its data) `status` works out; a bare `backfill rollback PLAN`,
    named here before, is refused in those cases."""
    return f"roll it back: `backfill status {plan_id}` names the rollback that applies"


def cancel_withdraws(state: PlanState, wrote: int) -> bool:
    """A cancel of a plan that wrote nothing and never got past its proof is a withdrawal."""
    return not wrote and state.phase in _WITHDRAWN_ON_CANCEL


def paused(session: Session, state: PlanState, actor: str) -> PlanState:
    """`backfill pause`: the plan stops before its next run; `backfill run` resumes."""
    return _held(session, state, Hold.PAUSED, actor, "pause")


def cancelled(session: Session, state: PlanState, actor: str) -> PlanState:
    """`backfill cancel` of a plan that wrote: no new run may write; it only rolls back."""
    return _held(session, state, Hold.CANCELLED, actor, "cancel")


def _held(session: Session, state: PlanState, hold: Hold, actor: str, verb: str) -> PlanState:
    """The plan is judged again with its row held: a cancel that waited on a rollback (PostgreSQL)
    landed on the rolled-back plan, whose status then said to roll it back (found by an attack)."""
    with session.transaction():
        state = record.require(session, state.plan_id, exclusive=True)
        if not state.active:
            raise PlanRefused(f"plan {state.plan_id} is {state.phase}; there is nothing to {verb}",
                              fix=f"see `backfill status {state.plan_id}`")
        if state.hold is Hold.CANCELLED:
            # a cancel ends the plan's runs: a pause over it became a hold `backfill run` lifts, and
            # the cancelled plan wrote its window again (found by an attack)
            if hold is Hold.CANCELLED:
                return state
            raise PlanRefused(f"plan {state.plan_id} was cancelled; a cancelled plan only rolls back",
                              fix=rollback_named_by_status(state.plan_id))
        return record.set_hold(session, state.plan_id, hold, actor)


def run_resumed(session: Session, state: PlanState, actor: str) -> PlanState:
    """`backfill run` of a paused plan lifts the pause; any other hold stays. Judged again with the
    plan's row held: on the plan as the run read it, a cancel committed since was lifted with the
    pause, and the cancelled plan ran (found by an attack)."""
    if state.hold is not Hold.PAUSED:
        return state
    with session.transaction():
        state = record.require(session, state.plan_id, exclusive=True)
        if state.hold is not Hold.PAUSED:
            return state
        return record.set_hold(session, state.plan_id, None, actor, note="resumed by backfill run")

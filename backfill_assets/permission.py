"""The write permission: may this run write these partitions of this table?

The data decides, not who launched the run. A partition that already holds rows, or lies before
the incremental watermark, may be written only under an active plan of record that covers it, in
a phase that allows it (only the proof partitions until the proof passed), that fits the table.
The one plan-free write is an incremental run writing an empty partition at or after the
watermark. Tags are labels, never identity: they can only narrow what a run may do (a run tagged
`dagster/backfill` or `backfill_assets/plan` never writes plan-free; one tagged with a plan may
only write that plan's partitions); an untagged run may not write a partition an active plan
holds (the freeze lock).

`permit` decides before any write; `recheck` repeats the decision for the partitions of one write
transaction inside it, holding the plan's row, so a plan withdrawn, rolled back or closed between
the two cannot write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from backfill_assets.control import authority, record
from backfill_assets.control.record import PlanState
from backfill_assets.control.schema import SCHEMA
from backfill_assets.errors import PartitionRefused
from backfill_assets.partitions import PartitionScheme
from backfill_assets.plan.fit import Fit, fit
from backfill_assets.plan.phases import WRITABLE
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.grouping import rows_per_partition

BACKFILL_TAG = "dagster/backfill"
PLAN_TAG = "backfill_assets/plan"
REPLAYABLE_OP_TAG = "backfill_assets/replayable"


@dataclass(frozen=True)
class Permission:
    """What was allowed: the keys, and the plan they are written under (None: plan-free)."""

    target: str
    keys: tuple[str, ...]
    plan: PlanState | None = None

    @property
    def is_plan_write(self) -> bool:
        return self.plan is not None


def _refuse(message: str, plan_id: str | None, key: str, fix: str) -> PartitionRefused:
    return PartitionRefused(message, plan_id=plan_id, partition=key, fix=fix)


def occupied(session: Session, spec: TableSpec, scheme: PartitionScheme,
             keys: Sequence[str]) -> dict[str, int]:
    """Rows each key holds in the target now (one grouped count for the slice)."""
    if not keys or not session.engine.table_exists(session, spec.table):
        return {}
    return rows_per_partition(session, spec.table, spec.partition_column, scheme, keys)


def watermark(session: Session, asset: str) -> str | None:
    return session.scalar(f"SELECT partition_key FROM {SCHEMA}.watermarks WHERE asset = ?", [asset])


def _before(scheme: PartitionScheme, key: str, mark: str | None) -> bool:
    if mark is None or mark not in scheme:
        return False
    return scheme.position(key) < scheme.position(mark)


_FITS: dict[tuple[str, TableSpec, int], Fit] = {}


def _fit(plan: PlanState, spec: TableSpec, scheme: PartitionScheme) -> Fit:
    """A plan version's fit to a table is fixed while the table's keys are: computed once per run."""
    key = (str(plan.approved_sha256), spec, len(scheme.ordered_keys))  # a frozen spec: hashed by value
    if key not in _FITS:
        if len(_FITS) > 64:
            _FITS.clear()
        _FITS[key] = fit(plan.approved.plan, spec, scheme)
    return _FITS[key]


def _plan_refusal(plan: PlanState, key: str, spec: TableSpec, scheme: PartitionScheme,
                  *, starting: bool) -> PartitionRefused | None:
    """Why `plan` may not write `key` now, or None."""
    if plan.phase not in WRITABLE:
        return _refuse(f"plan {plan.plan_id} is {plan.phase}, so it cannot write {key} of {spec.name}",
                       plan.plan_id, key, f"see `backfill status {plan.plan_id}` for the next step")
    if starting and plan.hold:
        verb = "resume it with `backfill run" if plan.hold == "paused" else "roll it back with `backfill rollback"
        return _refuse(f"plan {plan.plan_id} is {plan.hold}: no new run may write {key}", plan.plan_id,
                       key, f"{verb} {plan.plan_id}`")
    if not plan.past_proof and key not in plan.proof_keys:
        return _refuse(f"plan {plan.plan_id} is {plan.phase}: only its proof partitions "
                       f"({', '.join(plan.proof_keys)}) may run until the proof passes, not {key}",
                       plan.plan_id, key, f"run `backfill run {plan.plan_id} --proof` first")
    fitted = _fit(plan, spec, scheme)
    if not fitted.ok:
        return _refuse(f"plan {plan.plan_id} does not fit {spec.name}: {fitted.problems[0]}",
                       plan.plan_id, key, "withdraw it (`backfill plan withdraw`) and approve a plan "
                       "that fits the table")
    return None


def _approval_refusal(session: Session, plan: PlanState, key: str, spec: TableSpec) -> PartitionRefused | None:
    """The signatures themselves, every time: they bind this plan, this table's code, this warehouse
    and an expiry; a row inserted into `approvals` is a signature that does not verify."""
    why = authority.refusal(session, plan.approved, code=spec.code_identity)
    if why:
        return _refuse(f"plan {plan.plan_id} may not write {key} of {spec.name}: {why}", plan.plan_id, key,
                       "have it signed again for the code loaded now (`backfill plan statement PLAN` shows what "
                       f"to sign), or see `backfill status {plan.plan_id}`")
    return None


def permit(session: Session, spec: TableSpec, scheme: PartitionScheme, keys: Sequence[str],
           tags: Mapping[str, str]) -> Permission:
    """Decide for a whole run before it writes anything; refuse naming the partition and the fix."""
    keys = list(dict.fromkeys(keys))
    if not keys:
        raise _refuse(f"a run of {spec.name} named no partition", None, "?",
                      "launch it for a partition or a partition range")
    wanted = tags.get(PLAN_TAG)
    tagged = BACKFILL_TAG in tags or wanted is not None
    plans = record.active_plans(session, target=spec.name)
    if wanted is not None and not any(p.plan_id == wanted for p in plans):
        state = record.get(session, wanted)
        why = f"is {state.phase}" if state else "is not in the control record"
        raise _refuse(f"plan {wanted} {why}, so it cannot write {spec.name}", wanted, keys[0],
                      "approve the plan (backfill plan approve) or name an active one")
    rows = occupied(session, spec, scheme, keys)
    mark = watermark(session, spec.name)
    chosen: PlanState | None = None
    for key in keys:
        covering = [p for p in plans if p.covers(key)]
        if len(covering) > 1:
            raise _refuse(f"plans {' and '.join(p.plan_id for p in covering)} both hold partition {key} "
                          f"of {spec.name}", None, key, "withdraw or roll back one of them")
        if covering:
            plan = covering[0]
            if wanted is not None and plan.plan_id != wanted:
                raise _refuse(f"partition {key} of {spec.name} belongs to plan {plan.plan_id}, not {wanted}",
                              wanted, key, f"run it under {plan.plan_id}")
            if not tagged:
                raise _refuse(f"partition {key} of {spec.name} is frozen by active plan {plan.plan_id} "
                              f"({plan.phase}); a run outside the plan may not write it", plan.plan_id, key,
                              f"write it as part of the plan: `backfill run {plan.plan_id} --partitions "
                              f"{key}`, or let the plan finish")
            if chosen is not None and chosen.plan_id != plan.plan_id:
                raise _refuse(f"partitions {keys[0]}..{key} span plans {chosen.plan_id} and {plan.plan_id}",
                              plan.plan_id, key, "launch one run per plan")
            refusal = _plan_refusal(plan, key, spec, scheme, starting=True)
            if refusal is None and chosen is None:
                refusal = _approval_refusal(session, plan, key, spec)
            if refusal is not None:
                raise refusal
            chosen = plan
            continue
        if wanted is not None:
            raise _refuse(f"plan {wanted} does not cover partition {key} of {spec.name}", wanted, key,
                          "name partitions inside the plan's window")
        held, early = rows.get(key, 0), _before(scheme, key, mark)
        if held or early or tagged:
            why = (f"it holds {held} row(s)" if held else f"it lies before the incremental watermark "
                   f"{mark}" if early else "backfill runs only write inside an approved plan")
            raise _refuse(f"no approved replay plan covers partition {key} of {spec.name}, and {why}: "
                          "rewriting it is a replay", None, key,
                          f"draft one with `backfill plan new plans/<id>.yaml --target {spec.name}`, have "
                          "it approved, then `backfill run` it")
        if chosen is not None:
            raise _refuse(f"partitions of {spec.name} mix plan {chosen.plan_id} and plan-free writes "
                          f"({key})", chosen.plan_id, key, "launch one run per plan")
    return Permission(spec.name, tuple(keys), chosen)


def recheck(session: Session, spec: TableSpec, scheme: PartitionScheme, permission: Permission,
            keys: Sequence[str]) -> PlanState | None:
    """Inside their write transaction: is the write of `keys` still allowed? Returns the plan."""
    if permission.plan is None:
        for plan in record.active_plans(session, target=spec.name):
            for key in keys:
                if plan.covers(key):
                    raise _refuse(f"partition {key} of {spec.name} was frozen by plan {plan.plan_id} "
                                  "while this run started", plan.plan_id, key, "write it as part of the plan")
        held, mark = occupied(session, spec, scheme, keys), watermark(session, spec.name)
        for key in keys:
            if held.get(key) or _before(scheme, key, mark):
                raise _refuse(f"partition {key} of {spec.name} was written by someone else while this run "
                              "started; rewriting it now is a replay", None, key, "use a replay plan")
        return None
    plan = record.require(session, permission.plan.plan_id, lock=True)
    for key in keys:
        if plan.approved_sha256 != permission.plan.approved_sha256 or not plan.covers(key):
            raise _refuse(f"plan {plan.plan_id}'s plan of record changed while this run started", plan.plan_id,
                          key, "launch the run again")
        refusal = _plan_refusal(plan, key, spec, scheme, starting=False)
        if refusal is not None:
            raise refusal
    refusal = _approval_refusal(session, plan, keys[0], spec) if keys else None
    if refusal is not None:
        raise refusal
    return plan

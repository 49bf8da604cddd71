"""The plan gate: may this run write these partitions of this table?

A backfill run (tagged `dagster/backfill` by Dagster, or `backfill_assets/plan` by our CLI) may
write a partition only if exactly one active, approved and unchanged plan covers it, and the
plan's phase allows it (only the proof partitions until the proof passed). An incremental run may
not write a partition that an active plan holds (the freeze lock). Every refusal names the plan,
the partition and the fix, and happens before any write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import duckdb

from backfill_assets.control import evidence_log, record
from backfill_assets.control.record import PlanState
from backfill_assets.errors import BackfillError, PartitionRefused, PlanRefused
from backfill_assets.plan.phases import PAST_PROOF
from backfill_assets.plan.resolved import ResolvedPlan, resolve

BACKFILL_TAG = "dagster/backfill"
PLAN_TAG = "backfill_assets/plan"
REPLAYABLE_OP_TAG = "backfill_assets/replayable"


def is_backfill_run(tags: Mapping[str, str]) -> bool:
    return BACKFILL_TAG in tags or PLAN_TAG in tags


@dataclass(frozen=True)
class Clearance:
    """What the gate allowed: the plan (None for an incremental run) and its resolved file."""

    partition_keys: tuple[str, ...]
    plan: PlanState | None = None
    resolved: ResolvedPlan | None = None

    @property
    def is_backfill(self) -> bool:
        return self.plan is not None


def _refuse(message: str, plan_id: str | None, partition: str, fix: str) -> PartitionRefused:
    return PartitionRefused(message, plan_id=plan_id, partition=partition, fix=fix)


def verify_unchanged(state: PlanState, con: duckdb.DuckDBPyConnection | None = None) -> ResolvedPlan:
    """Re-read the plan file: it must still be approved at the hash the control record bound.

    With a connection, only approvals that `backfill plan approve` recorded count: an entry typed
    into the file by hand does not.
    """
    try:
        resolved = resolve(state.path)
    except BackfillError as exc:
        raise _refuse(f"plan {state.plan_id} at {state.path} no longer validates ({exc.message})",
                      state.plan_id, "*", "fix the plan file and have it approved again") from None
    if resolved.sha256 != state.approved_sha256 or not resolved.tally.approved:
        raise _refuse(
            f"plan {state.plan_id} was edited since its approval (now {resolved.sha256[:12]}, "
            f"approved {str(state.approved_sha256)[:12]}); its approvals are void",
            state.plan_id, "*", f"run `backfill guard {state.path}` and collect approvals again")
    if con is not None:
        recorded = recorded_approvers(con, state.plan_id, resolved.sha256)
        counted = [a.by for a in resolved.tally.counted if a.by.casefold() in recorded]
        if len(counted) < resolved.tally.required:
            unrecorded = [a.by for a in resolved.tally.counted if a.by.casefold() not in recorded]
            raise _refuse(
                f"plan {state.plan_id} has {len(counted)} recorded approval(s) of "
                f"{resolved.tally.required}; not given with `backfill plan approve`: "
                f"{', '.join(unrecorded)}", state.plan_id, "*",
                "remove hand-written approvals and approve with `backfill plan approve`")
    return resolved


def recorded_approvers(con: duckdb.DuckDBPyConnection, plan_id: str, sha: str) -> set[str]:
    return {row.actor.casefold() for row in evidence_log.rows(con, plan_id, "approval")
            if row.payload.get("plan_sha256") == sha}


def ensure_approved_version(resolved: ResolvedPlan, state: PlanState) -> None:
    """The file a command was given must be the approved version of the plan."""
    if state.approved_sha256 is None:
        raise PlanRefused(f"plan {state.plan_id} has not been approved",
                          fix=f"run `backfill guard {resolved.path}` and collect the approvals")
    if resolved.sha256 != state.approved_sha256:
        raise PlanRefused(
            f"{resolved.path} is not the approved version of plan {state.plan_id} (hash "
            f"{resolved.sha256[:12]}, approved {state.approved_sha256[:12]} at {state.path})",
            fix="use the approved file, or have this version approved")


def clear_backfill(con: duckdb.DuckDBPyConnection, target: str, keys: Sequence[str],
                   tags: Mapping[str, str]) -> Clearance:
    plans = record.active_plans(con, target=target)
    wanted = tags.get(PLAN_TAG)
    if wanted is not None:
        plans = [p for p in plans if p.plan_id == wanted]
        if not plans:
            state = record.get(con, wanted)
            why = f"is {state.phase}" if state else "is not in the control record"
            raise _refuse(f"plan {wanted} {why}, so it cannot write {target}", wanted, keys[0],
                          "approve the plan (backfill plan approve) or pick an active one")
    chosen: PlanState | None = None
    for key in keys:
        covering = [p for p in plans if p.covers(key)]
        if not covering:
            raise _refuse(
                f"no approved replay plan covers partition {key} of {target}; backfill runs may "
                "only write inside an approved plan's window", None, key,
                f"draft one with `backfill plan new plans/<id>.yaml --target {target}` and have it "
                "approved, then relaunch")
        if len(covering) > 1:
            names = " and ".join(p.plan_id for p in covering)
            raise _refuse(f"plans {names} both hold partition {key} of {target}", None, key,
                          "roll back or close one of them")
        plan = covering[0]
        if chosen is not None and plan.plan_id != chosen.plan_id:
            raise _refuse(f"partitions {keys[0]}..{key} span plans {chosen.plan_id} and "
                          f"{plan.plan_id}", plan.plan_id, key, "launch one run per plan")
        chosen = plan
        if plan.phase not in PAST_PROOF and key not in plan.proof_keys:
            raise _refuse(
                f"plan {plan.plan_id} is {plan.phase}: only its proof partitions "
                f"({', '.join(plan.proof_keys)}) may run until the proof passes, not {key}",
                plan.plan_id, key, f"run `backfill run {plan.path} --proof` first")
    assert chosen is not None
    return Clearance(tuple(keys), chosen, verify_unchanged(chosen, con))


def clear_incremental(con: duckdb.DuckDBPyConnection, target: str, keys: Sequence[str]) -> Clearance:
    for plan in record.active_plans(con, target=target):
        held = [k for k in keys if plan.covers(k)]
        if held:
            raise _refuse(
                f"partition {held[0]} of {target} is frozen by active plan {plan.plan_id} "
                f"({plan.phase}); incremental runs may not write it", plan.plan_id, held[0],
                "let the plan finish (published, closed or rolled back), or run it as part of "
                "the plan's backfill")
    return Clearance(tuple(keys))


def clear(con: duckdb.DuckDBPyConnection, target: str, keys: Sequence[str],
          tags: Mapping[str, str]) -> Clearance:
    if not keys:
        raise _refuse(f"a run of {target} named no partition", None, "?",
                      "launch it for a partition or a partition range")
    if is_backfill_run(tags):
        return clear_backfill(con, target, keys, tags)
    return clear_incremental(con, target, keys)

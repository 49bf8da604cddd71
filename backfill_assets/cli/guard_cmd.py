"""`backfill guard PLAN_FILE`: the checklist; exit 0 only for a complete, fitting, signed plan.

The approvals are counted from the signatures in the file, verified against allowed_signers, so
the guard gives the same answer with or without a control record (a CI job, a laptop). The last
three ticks come from `status.plan_status` when the record knows the plan.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from backfill_assets.cli.common import add_home, home_of
from backfill_assets.errors import BackfillError
from backfill_assets.plan.approvals import load_signers, tally
from backfill_assets.plan.checklist import ExecutionState, Item, build, render
from backfill_assets.plan.loading import collect_problems, read_plan_document


def register(sub: argparse._SubParsersAction) -> None:
    guard = sub.add_parser("guard", help="the replay plan checklist; exit 0 only when it may run")
    guard.add_argument("plan_file")
    guard.add_argument("--allowed-signers")
    guard.add_argument("--defs", help="definitions to check the plan against (default: as `backfill run`)")
    add_home(guard)
    guard.set_defaults(handler=cmd_guard)


def _fit_problems(plan, defs: str | None) -> tuple[list, str | None]:
    """Problems fitting the plan to its table, or a note why it was not checked."""
    try:
        from backfill_assets.defs.loading import load_defs
        from backfill_assets.plan.fit import fit

        table = load_defs(defs).table(plan.target)
    except BackfillError as exc:
        if defs:
            raise
        return [], (f"not checked against {plan.target}: {exc.message}; run the guard where the "
                    "definitions are found (workspace.yaml) or pass --defs")
    return fit(plan, table.spec, table.scheme()).problems, None


def _pin_mismatch(session, signers) -> str | None:
    """Why the approvers file the guard read is not the one the record pins, or None."""
    from backfill_assets.control import approvers

    current = approvers.pinned(session)
    if current is None or signers is None or current.sha256 == signers.sha256:
        return None
    return (f"{signers.source} (sha256 {signers.sha256[:12]}) differs from the approvers the control record "
            f"pins: {current.describe()}")


def _execution(plan, home, signers=None) -> tuple[ExecutionState, str | None, str | None]:
    from backfill_assets.control import record
    from backfill_assets.control.schema import has_control_schema
    from backfill_assets.plan.identity import plan_sha256
    from backfill_assets.status import plan_status
    from backfill_assets.warehouse import open_warehouse

    warehouse = open_warehouse(home)
    if not warehouse.exists():
        return ExecutionState(), None, None
    # read-only: the guard is also a CI step and must not change anything
    with warehouse.session(read_only=True) as session:
        if not has_control_schema(session):
            return ExecutionState(), None, None
        mismatch = _pin_mismatch(session, signers)
        state = record.get(session, plan.plan_id)
        if state is None or state.approved_sha256 != plan_sha256(plan):
            return ExecutionState(), None, mismatch
        status = plan_status(session, state)
        notice = session.one("SELECT recorded_at, recipients FROM backfill_control.outbox WHERE plan_id = ? "
                             "AND event = 'paused' ORDER BY notice_id DESC LIMIT 1", [plan.plan_id])
    pending = f"not passing: {status.next}" if status.failed else None
    return ExecutionState(proof=status.proof, reconciled=status.window_reconciled, published=status.published,
                          **({"pending_reconcile": pending} if pending else {})), \
        (f"paused; notice queued at {notice[0]} for {notice[1]}" if notice else None), mismatch


def guard_items(plan_file: Path, home, signers_path: str | None = None, defs: str | None = None) -> list[Item]:
    plan, problems = collect_problems(read_plan_document(plan_file))
    approvals, execution, notice, note, mismatch = None, ExecutionState(), None, None, None
    if plan is not None:
        signers, why = load_signers(plan_file, signers_path)
        approvals = tally(plan, signers, why)
        fitting, note = _fit_problems(plan, defs)
        problems = problems + fitting
        execution, notice, mismatch = _execution(plan, home, signers)
    items = build(plan, problems, approvals, execution, notice)
    if note:  # unchecked is not allowed: ALLOWED says the plan fits its table
        items.append(Item("plan checked against its table", False, note, True))
    if mismatch:  # someone re-pinned the approvers, or approved against another file
        items.append(Item("approvers file is the one the control record pins", False,
                          mismatch + "; review the change, then re-pin with `backfill approvers pin FILE`", True))
    return items


def cmd_guard(args: argparse.Namespace) -> int:
    items = guard_items(Path(args.plan_file), home_of(args), args.allowed_signers, args.defs)
    print(render(items))
    blocking = [i for i in items if i.gating and not i.done]
    if blocking:
        print(f"REFUSED: {len(blocking)} gating item(s) open; fix them and run the guard again")
        return 1
    print("ALLOWED: the plan is complete, fits its table, and is signed by enough approvers")
    return 0


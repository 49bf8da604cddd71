"""`backfill guard PLAN_FILE`: the checklist; exit 0 only for a complete, approved, unchanged plan."""

from __future__ import annotations

import argparse
from pathlib import Path

from backfill_assets.cli.common import add_home, home_of
from backfill_assets.control import milestones, record
from backfill_assets.control.schema import has_control_schema
from backfill_assets.plan import collect_problems, read_plan_document, tally
from backfill_assets.plan.approvals import restrict_to_recorded
from backfill_assets.plan.checklist import ExecutionState, Item, build, render
from backfill_assets.plan.gate import recorded_approvers
from backfill_assets.warehouse.connection import connection


def register(sub: argparse._SubParsersAction) -> None:
    guard = sub.add_parser("guard", help="the replay plan checklist; exit 0 only when it may run")
    guard.add_argument("plan_file")
    add_home(guard)
    guard.set_defaults(handler=cmd_guard)


def guard_items(plan_file: Path, home) -> list[Item]:
    document = read_plan_document(plan_file)
    plan, problems = collect_problems(document)
    approvals = tally(plan) if plan else None
    execution, notice = ExecutionState(), None
    if plan is not None and approvals is not None and home.warehouse.exists():
        # read-only: the guard is also a CI step and must not change anything
        with connection(home.warehouse, read_only=True) as con:
            if has_control_schema(con) and record.get(con, plan.plan_id) is not None:
                execution = milestones.execution_state(con, plan.plan_id, approvals.sha256)
                notice = milestones.pause_notice(con, plan.plan_id)
                # where the control record knows the plan, hand-written approvals do not count
                approvals = restrict_to_recorded(
                    approvals, recorded_approvers(con, plan.plan_id, approvals.sha256))
    return build(plan, problems, approvals, execution, notice)


def cmd_guard(args: argparse.Namespace) -> int:
    items = guard_items(Path(args.plan_file), home_of(args))
    print(render(items))
    blocking = [i for i in items if i.gating and not i.done]
    if blocking:
        print(f"REFUSED: {len(blocking)} gating item(s) open; fix them and run the guard again")
        return 1
    print("ALLOWED: the plan is complete, approved and unchanged since approval")
    return 0

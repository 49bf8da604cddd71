"""`backfill guard PLAN_FILE`: the checklist; exit 0 only for a complete, fitting, signed plan.

The approvals are counted from the signatures in the file, under the trust root pinned in the
control record or, where none can be read (a CI job), the files named explicitly (the default
branch's `--allowed-signers` and `--policy`): never a file found next to the plan, which a pull
request could add. When both are there and differ, it refuses. The plan's fit to its table comes
from a child process that loads the definitions (`guard_fit.py`), so the repository's code never
runs where the signatures are counted. The last three ticks come from `status.plan_status` when
the record knows the plan.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from backfill_assets.cli.common import add_home, home_of
from backfill_assets.plan.checklist import ExecutionState, Item, build, render
from backfill_assets.plan.loading import collect_problems, read_plan_document

if TYPE_CHECKING:
    from backfill_assets.home import Home
    from backfill_assets.plan.model import Plan


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    guard = sub.add_parser("guard", help="the replay plan checklist; exit 0 only when it may run")
    guard.add_argument("plan_file")
    guard.add_argument("--allowed-signers", help="where no control record can be read (CI): the team's reviewed "
                                                 "allowed_signers, e.g. the default branch's; never the plan's folder")
    guard.add_argument("--policy", help="with --allowed-signers: the team's policy (default: policy.yaml beside it)")
    guard.add_argument("--warehouse", help="the production warehouse's id, to check what signatures bind in CI")
    guard.add_argument("--defs", help="definitions to check the plan against (default: as `backfill run`)")
    add_home(guard)
    guard.set_defaults(handler=cmd_guard)


def _execution(plan: Plan, home: Home) -> tuple[ExecutionState, str | None]:
    from backfill_assets.cli.common import committed_home
    from backfill_assets.control import record
    from backfill_assets.control.schema import has_control_schema
    from backfill_assets.plan.identity import plan_sha256
    from backfill_assets.status import plan_status
    from backfill_assets.warehouse import open_warehouse
    from backfill_assets.warehouse.state_store import outbox as outbox_store

    warehouse = open_warehouse(home)
    if not warehouse.exists() or committed_home(home) is not None:  # a pull request's record says nothing
        return ExecutionState(), None
    # read-only: the guard is also a CI step and must not change anything
    with warehouse.session(read_only=True) as session:
        if not has_control_schema(session):
            return ExecutionState(), None
        state = record.get(session, plan.plan_id)
        if state is None or state.approved_sha256 != plan_sha256(plan):
            return ExecutionState(), None
        status = plan_status(session, state)
        notice = outbox_store.last_of_event(session, plan.plan_id, ("frozen", "paused"))  # paused: before 0.3
    pending = f"not passing: {status.next}" if status.failed else None
    return ExecutionState(proof=status.proof, reconciled=status.window_reconciled, published=status.published,
                          **({"pending_reconcile": pending} if pending else {})), \
        (f"frozen; notice queued at {notice[0]} for {notice[1]}" if notice else None)


def guard_items(plan_file: Path, home: Home, signers_path: str | None = None, defs: str | None = None,
                policy_path: str | None = None, warehouse: str | None = None) -> list[Item]:
    # everything this process counts with is imported and read before the definitions are loaded,
    # and they are loaded in a child (guard_fit.py): a pull request's code never runs here
    import backfill_assets.status  # noqa: F401 - imported before the child runs
    from backfill_assets.cli.common import resolve_root
    from backfill_assets.cli.guard_fit import fit_in_child
    from backfill_assets.plan.approvals import file_tally

    plan, problems = collect_problems(read_plan_document(plan_file))
    approvals, execution, notice, note, view = None, ExecutionState(), None, None, None
    if plan is not None:
        view = resolve_root(home, signers_path, policy_path, warehouse)
        fitting, note, code = fit_in_child(plan_file, defs)
        problems = problems + fitting
        approvals = file_tally(plan, view.root, code) if view.root is not None else None
        execution, notice = _execution(plan, home)
    items = build(plan, problems, approvals, execution, notice,
                  approvals_note=view.problem if view is not None and view.root is None else None)
    if note:  # unchecked is not allowed: ALLOWED says the plan fits its table
        items.append(Item("plan checked against its table", False, note, True))
    if view is not None and view.root is not None:
        bound = "; ".join(f"{name} not checked here" for name in (approvals.unchecked if approvals else ()))
        items.append(Item("signatures counted under the team's trust root", view.problem is None,
                          (view.problem + "; review the change, then re-pin with `backfill approvers pin FILE`")
                          if view.problem else view.source + (f" ({bound})" if bound else ""), True))
    return items


def cmd_guard(args: argparse.Namespace) -> int:
    items = guard_items(Path(args.plan_file), home_of(args), args.allowed_signers, args.defs, args.policy,
                        args.warehouse)
    print(render(items))
    blocking = [i for i in items if i.gating and not i.done]
    if blocking:
        print(f"REFUSED: {len(blocking)} gating item(s) open; fix them and run the guard again")
        return 1
    print("ALLOWED: the plan is complete, fits its table, and is signed by enough approvers")
    return 0


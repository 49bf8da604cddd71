"""`backfill guard PLAN_FILE...`: the checklists; exit 0 only when every plan is complete, fits its
table and is signed.

The approvals are counted from the signatures in the file, under the trust root pinned in the
control record or, where none can be read (a CI job), the files named explicitly (the default
branch's `--allowed-signers` and `--policy`): never a file found next to the plan, which a pull
request could add. When both are there and differ, it refuses. The plan's fit to its table comes
from a child process that loads the definitions (`guard_fit.py`), so the repository's code never
runs where the signatures are counted, and only once every plan given counts as signed without it.
The last three ticks come from `status.plan_status` when the record knows the plan.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from backfill_assets.cli.common import Once, add_home, add_root_options, home_of
from backfill_assets.plan.checklist import ExecutionState, Item, build, render
from backfill_assets.plan.loading import collect_problems, read_plan_document

if TYPE_CHECKING:
    from backfill_assets.cli.common import Replacing
    from backfill_assets.home import Home
    from backfill_assets.plan.model import Plan
    from backfill_assets.trust.root import Tally, TrustRoot


class _HelpNotAllowed(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        parser.print_help()
        parser.exit(2)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    guard = sub.add_parser("guard", help="the replay plan checklist; exit 0 only when it may run", add_help=False)
    # its help exits 2, never 0: a file named `-h` among a pull request's plans got exit 0 in CI
    guard.add_argument("-h", "--help", action=_HelpNotAllowed, nargs=0, help="show this help and exit 2")
    guard.add_argument("plan_file", nargs="+", help="every plan to check, in one run (CI: all of them at once)")
    add_root_options(guard)
    guard.add_argument("--defs", action=Once, help="definitions to check the plan against (default: as `backfill run`)")
    add_home(guard, once=True)
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


def _counted(plan: Plan, root: TrustRoot, code: str | None, replacing: Replacing | None) -> Tally:
    from backfill_assets.plan.approvals import file_tally

    if replacing is None:
        return file_tally(plan, root, code)
    return file_tally(plan, root, code, replaces=replacing.mark, at_least=replacing.floor, refused=replacing.refused)


NOT_LOADED = ("not checked against its table: the definitions (which a pull request may change) load only "
              "once every plan given is complete and its signatures count; `backfill plan validate` checks "
              "a draft's fit")


def guard_all(plan_files: list[Path], home: Home, signers_path: str | None = None, defs: str | None = None,
              policy_path: str | None = None, warehouse: str | None = None) -> list[list[Item]]:
    """Each plan's checklist. Everything the verdicts count with is read and counted first; the
    definitions load in a child (guard_fit.py) only when every plan is complete and its signatures
    count without them. A pull request's code runs with the job's rights (a child can rewrite the
    files the guard reads next, patch its memory where ptrace is allowed, or stop it), so for a plan
    that is not signed it never runs at all; for a signed one it answers only the fit and the code
    identity, its own claim (found by an attack)."""
    import backfill_assets.status  # noqa: F401 - imported before any child runs
    from backfill_assets.cli.common import replaced_mark, resolve_root
    from backfill_assets.cli.guard_fit import fit_in_child

    read = [(path, *collect_problems(read_plan_document(path))) for path in plan_files]
    view = resolve_root(home, signers_path, policy_path, warehouse) if any(p for _, p, _ in read) else None
    root = view.root if view is not None else None
    # where the record can be read, a version replacing its plan of record counts only what names it
    marks = {path: replaced_mark(home, plan, root) if plan is not None and root is not None else None
             for path, plan, _ in read}
    first = [(path, plan, problems,
              _counted(plan, root, None, marks[path]) if plan is not None and root is not None else None,
              *(_execution(plan, home) if plan is not None else (ExecutionState(), None)))
             for path, plan, problems in read]
    signed = view is not None and view.problem is None and all(
        plan is not None and not problems and counted is not None and counted.approved
        for _, plan, problems, counted, _, _ in first)
    out = []
    for path, plan, problems, counted, execution, notice in first:
        note = None
        if plan is not None:
            if signed and root is not None:
                fitting, note, code = fit_in_child(path, defs)
                problems = problems + fitting
                counted = _counted(plan, root, code, marks[path])
            else:
                note = NOT_LOADED
        items = build(plan, problems, counted, execution, notice,
                      approvals_note=view.problem if view is not None and view.root is None else None)
        if note:  # unchecked is not allowed: ALLOWED says the plan fits its table
            items.append(Item("plan checked against its table", False, note, True))
        if view is not None and view.root is not None:
            bound = "; ".join(f"{name} not checked here" for name in (counted.unchecked if counted else ()))
            items.append(Item("signatures counted under the team's trust root", view.problem is None,
                              (f"{view.problem}; {view.fix}")
                              if view.problem else view.source + (f" ({bound})" if bound else ""), True))
        out.append(items)
    return out


def cmd_guard(args: argparse.Namespace) -> int:
    import os
    import sys

    from backfill_assets.cli.common import shown_path

    files = [Path(f) for f in args.plan_file]
    checked = guard_all(files, home_of(args), args.allowed_signers, args.defs, args.policy, args.warehouse)
    blocking = [[i for i in items if i.gating and not i.done] for items in checked]
    refused = sum(1 for open_items in blocking if open_items)
    verdict = 1 if refused else 0
    try:
        for path, items, open_items in zip(files, checked, blocking, strict=True):
            if len(files) > 1:
                print(f"{shown_path(path)}:")  # a file's name is a pull request's too
            print(render(items))
            if open_items:
                print(f"REFUSED: {len(open_items)} gating item(s) open; fix them and run the guard again")
            else:
                print("ALLOWED: the plan is complete, fits its table, and is signed by enough approvers")
        if len(files) > 1:
            print(f"{len(files) - refused} of {len(files)} plan(s) allowed")
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader left (`| head`): the exit code is still the verdict (0 had refused plans pass
        # a CI step, found by an attack)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return verdict

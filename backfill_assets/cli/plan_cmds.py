"""`backfill plan new | validate | approve | show`."""

from __future__ import annotations

import argparse
import dataclasses
import re
from importlib import resources
from pathlib import Path

from backfill_assets.cli.common import actor, add_home, home_of
from backfill_assets.control import record
from backfill_assets.control.schema import ensure_schema
from backfill_assets.errors import ApprovalError, PlanInvalidError, UsageError
from backfill_assets.plan import approvals, collect_problems, read_plan_document, resolve
from backfill_assets.plan.gate import recorded_approvers
from backfill_assets.plan.phases import Phase
from backfill_assets.publish.notify import announce_pause
from backfill_assets.warehouse.connection import connection, transaction


def register(sub: argparse._SubParsersAction) -> None:
    plan = sub.add_parser("plan", help="draft, validate, approve and show replay plans")
    plan_sub = plan.add_subparsers(dest="plan_command", required=True)

    new = plan_sub.add_parser("new", help="copy the template to PLAN_FILE, filling what is given")
    new.add_argument("plan_file")
    for option in ("id", "target", "start", "end", "owner"):
        new.add_argument(f"--{option}")
    new.set_defaults(handler=cmd_new)

    validate = plan_sub.add_parser("validate", help="schema and completeness, every problem")
    validate.add_argument("plan_file")
    validate.set_defaults(handler=cmd_validate)

    approve = plan_sub.add_parser("approve", help="append an approval bound to the plan's hash")
    approve.add_argument("plan_file")
    approve.add_argument("--by", required=True, help="who approves (not the owner)")
    add_home(approve)
    approve.set_defaults(handler=cmd_approve)

    close = plan_sub.add_parser("close", help="close a published plan (consumers confirmed)")
    close.add_argument("plan_file")
    close.add_argument("--note", default="")
    add_home(close)
    close.set_defaults(handler=cmd_close)

    show = plan_sub.add_parser("show", help="partitions, hash, approvals counted and void")
    show.add_argument("plan_file")
    show.set_defaults(handler=cmd_show)


def template_text() -> str:
    local = Path(__file__).resolve().parents[2] / "templates" / "backfill-plan.yaml"
    if local.exists():
        return local.read_text(encoding="utf-8")
    return resources.files("backfill_assets").joinpath("backfill-plan.yaml").read_text("utf-8")


def _fill(text: str, key: str, value: str, indent: str = "") -> str:
    pattern = re.compile(rf"^({indent}{key}:\s*)TODO", re.MULTILINE)
    return pattern.sub(lambda m: m.group(1) + value, text, count=1)


def cmd_new(args: argparse.Namespace) -> int:
    path = Path(args.plan_file)
    if path.exists():
        raise UsageError(f"{path} already exists", fix="choose another file name or delete it")
    text = template_text()
    fills = [("plan_id", args.id, ""), ("owner", args.owner, ""), ("target", args.target, ""),
             ("start", args.start, "  "), ("end", args.end, "  ")]
    for key, value, indent in fills:
        if value:
            text = _fill(text, key, value, indent)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    _plan, problems = collect_problems(read_plan_document(path))
    print(f"wrote {path}; {len(problems)} key(s) still to fill: run `backfill plan validate {path}`")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    resolved = resolve(args.plan_file)
    print(f"{args.plan_file}: complete (plan {resolved.plan_id}, sha256 {resolved.sha256[:12]}, "
          f"{len(resolved.partition_keys)} partition(s)); approvals "
          f"{len(resolved.tally.counted)}/{resolved.tally.required}")
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    path = Path(args.plan_file)
    try:
        resolved = resolve(path)
    except PlanInvalidError as exc:
        raise PlanInvalidError(f"{exc.path} cannot be approved", exc.problems) from None
    approvals.check_can_approve(resolved.plan, args.by)
    approval = approvals.new_approval(resolved.plan, args.by)
    original = path.read_text(encoding="utf-8")
    home = home_of(args)
    with connection(home.warehouse) as con:
        ensure_schema(con)
        _refuse_overlap(con, resolved.plan)
        _refuse_edit_of_running_plan(con, resolved)
        try:
            # the file and the record change together: a failure anywhere, the commit included,
            # puts the file back as it was
            with transaction(con):
                record.register(con, resolved.plan, resolved.sha256, path, actor())
                record.record_approval(con, resolved.plan_id, approval)
                approvals.write_approval(path, resolved.plan, approval)
                after = resolve(path)
                recorded = recorded_approvers(con, after.plan_id, after.sha256)
                after = dataclasses.replace(
                    after, tally=approvals.restrict_to_recorded(after.tally, recorded))
                if after.tally.approved:
                    was_active = record.require(con, after.plan_id).active
                    record.mark_approved(con, after.plan_id, after.tally, args.by)
                    if not was_active:
                        announce_pause(con, after.plan, actor=args.by)
        except BaseException:
            if path.read_text(encoding="utf-8") != original:
                path.write_text(original, encoding="utf-8")
            raise
    status = "approved" if after.tally.approved else "needs more approvals"
    print(f"{args.by} approved {after.plan_id} at {after.sha256[:12]}: "
          f"{len(after.tally.counted)}/{after.tally.required} counted, {status}")
    return 0


def _refuse_overlap(con, plan) -> None:
    """Two active plans may not hold the same partitions of one table."""
    for other in record.active_plans(con, target=plan.target):
        if other.plan_id == plan.plan_id:
            continue
        if other.window_start <= plan.window.end and plan.window.start <= other.window_end:
            raise ApprovalError(
                f"plan {other.plan_id} ({other.phase}) already holds {plan.target} "
                f"{other.window_start}..{other.window_end}, which overlaps "
                f"{plan.window.start}..{plan.window.end}",
                fix=f"wait until {other.plan_id} is published, closed or rolled back, or move "
                    "the window")


def _refuse_edit_of_running_plan(con, resolved) -> None:
    """Once a plan has written, its approved version is what its snapshots and proof belong to."""
    state = record.get(con, resolved.plan_id)
    if (state is not None and state.approved_sha256 not in (None, resolved.sha256)
            and state.phase not in (Phase.DRAFTED, Phase.APPROVED)):
        raise ApprovalError(
            f"plan {state.plan_id} is {state.phase} at hash {state.approved_sha256[:12]}; an edited "
            f"version ({resolved.sha256[:12]}) cannot take over what it started",
            fix=f"finish or roll back {state.plan_id}, then approve the change under a new plan_id")


def cmd_close(args: argparse.Namespace) -> int:
    plan = resolve(args.plan_file).plan
    with connection(home_of(args).warehouse) as con:
        ensure_schema(con)
        with transaction(con):
            state = record.transition(con, plan.plan_id, Phase.CLOSED, actor(),
                                      note=args.note or "consumers confirmed")
    print(f"plan {state.plan_id} is {state.phase}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    resolved = resolve(args.plan_file)
    plan, tally = resolved.plan, resolved.tally
    print(f"plan       {plan.plan_id}  (owner {plan.owner})")
    print(f"sha256     {resolved.sha256}")
    print(f"target     {plan.target}  <- source of truth {plan.source_of_truth}")
    print(f"window     {plan.window.start}..{plan.window.end}  "
          f"({len(resolved.partition_keys)} partitions)")
    print(f"partitions {', '.join(resolved.partition_keys)}")
    print(f"proof      {', '.join(resolved.proof_keys)}")
    print(f"mode       {plan.execution.mode} on ({', '.join(plan.execution.business_keys)}); "
          f"slices of {plan.execution.max_concurrent_partitions}")
    print(f"approvals  {len(tally.counted)}/{tally.required} counted"
          f"{' (approved)' if tally.approved else ''}")
    for a in tally.counted:
        print(f"  counted  {a.by} at {a.at.isoformat()}")
    for v in tally.void:
        print(f"  void     {v.approval.by} at {v.approval.at.isoformat()}: {v.reason}")
    return 0

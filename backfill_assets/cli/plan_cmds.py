"""`backfill plan new | validate | approve | show | close | withdraw`."""

from __future__ import annotations

import argparse
import re
from importlib import resources
from pathlib import Path

from backfill_assets.bounded import read_bounded
from backfill_assets.cli.common import (
    actor,
    add_defs,
    add_home,
    plan_state,
    warehouse_of,
    writing,
)
from backfill_assets.errors import (
    PlanInvalidError,
    PlanRefused,
    SignatureError,
    UsageError,
)
from backfill_assets.plan.approvals import load_signers, signing_command, tally
from backfill_assets.plan.identity import plan_sha256
from backfill_assets.plan.loading import collect_problems, load_plan, read_plan_document
from backfill_assets.signing.allowed_signers import AllowedSigners


def register(sub: argparse._SubParsersAction) -> None:
    plan = sub.add_parser("plan", help="draft, validate, approve, show, close and withdraw replay plans")
    plan_sub = plan.add_subparsers(dest="plan_command", required=True)

    new = plan_sub.add_parser("new", help="copy the template to PLAN_FILE, filling what is given")
    new.add_argument("plan_file")
    for option in ("id", "target", "start", "end", "owner"):
        new.add_argument(f"--{option}")
    new.set_defaults(handler=cmd_new)

    validate = plan_sub.add_parser("validate", help="schema, completeness and fit to the table")
    validate.add_argument("plan_file")
    add_defs(validate)
    validate.set_defaults(handler=cmd_validate)

    approve = plan_sub.add_parser("approve", help="sign the plan's sha256 and record the approval")
    approve.add_argument("plan_file")
    approve.add_argument("--by", required=True, help="the approving principal (not the owner)")
    how = approve.add_mutually_exclusive_group(required=True)
    how.add_argument("--key", help="your SSH private key: we sign for you (unencrypted keys)")
    how.add_argument("--signature", help="a signature file made with `ssh-keygen -Y sign -n backfill-plan`")
    approve.add_argument("--allowed-signers", help="default $BACKFILL_ALLOWED_SIGNERS or approvers/allowed_signers")
    add_defs(approve)
    add_home(approve)
    approve.set_defaults(handler=cmd_approve, relay=True)

    show = plan_sub.add_parser("show", help="partitions, hash, how to sign, approvals counted and void")
    show.add_argument("plan_file")
    show.add_argument("--allowed-signers")
    show.set_defaults(handler=cmd_show)

    close = plan_sub.add_parser("close", help="close a published plan whose window still passes")
    close.add_argument("plan")
    close.add_argument("--note", default="")
    add_defs(close)
    add_home(close)
    close.set_defaults(handler=cmd_close)

    withdraw = plan_sub.add_parser("withdraw", help="end a plan that wrote nothing (lifts freeze and pause)")
    withdraw.add_argument("plan")
    withdraw.add_argument("--note", default="")
    add_home(withdraw)
    withdraw.set_defaults(handler=cmd_withdraw, relay=True)


def template_text() -> str:
    return resources.files("backfill_assets").joinpath("templates/backfill-plan.yaml").read_text("utf-8")


def _fill(text: str, key: str, value: str, indent: str = "") -> str:
    pattern = re.compile(rf"^({indent}{key}:\s*)TODO", re.MULTILINE)
    return pattern.sub(lambda m: m.group(1) + value, text, count=1)


def cmd_new(args: argparse.Namespace) -> int:
    path = Path(args.plan_file)
    if path.exists():
        raise UsageError(f"{path} already exists", fix="choose another file name or delete it")
    text = template_text()
    for key, value, indent in [("plan_id", args.id, ""), ("owner", args.owner, ""), ("target", args.target, ""),
                               ("start", args.start, "  "), ("end", args.end, "  ")]:
        if value:
            if not re.match(r"^[\w./:@+-]{1,64}$", value):
                raise UsageError(f"--{key.replace('plan_id', 'id')} {value!r} is not a plain value",
                                 fix="use letters, digits and - _ . : @ +")
            text = _fill(text, key, value, indent)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    _plan, problems = collect_problems(read_plan_document(path))
    print(f"wrote {path}; {len(problems)} key(s) still to fill: run `backfill plan validate {path}`")
    return 0


def _table_for(plan_target: str, defs: str | None, *, required: bool):
    """The loaded table of the plan's target, or None (with why) when definitions cannot be found."""
    from backfill_assets.defs.loading import load_defs

    try:
        return load_defs(defs).table(plan_target), None
    except UsageError as exc:
        if required or defs:
            raise
        return None, exc.message


def cmd_validate(args: argparse.Namespace) -> int:
    path = Path(args.plan_file)
    plan, problems = collect_problems(read_plan_document(path))
    if plan is None:
        raise PlanInvalidError(str(path), problems)
    from backfill_assets.plan.fit import fit

    table, why = _table_for(plan.target, args.defs, required=False)
    if table is None:
        print(f"{path}: complete (plan {plan.plan_id}, sha256 {plan_sha256(plan)[:12]}); NOT checked against "
              f"{plan.target}: {why} (pass --defs)")
        return 0
    fitted = fit(plan, table.spec, table.scheme())
    if not fitted.ok:
        raise PlanInvalidError(f"{path} does not fit {plan.target}", fitted.problems)
    print(f"{path}: complete and fits {plan.target} (plan {plan.plan_id}, sha256 {plan_sha256(plan)[:12]}, "
          f"{len(fitted.keys)} partition(s))")
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    from backfill_assets.approving import approve
    from backfill_assets.signing import sshsig

    path = Path(args.plan_file)
    plan = load_plan(path)
    if args.allowed_signers:  # a file the user named that cannot be read is misuse, exit 2
        AllowedSigners.load(args.allowed_signers)
    signers, why = load_signers(path, args.allowed_signers)
    if signers is None:
        raise SignatureError(f"approvals cannot be verified: {why}",
                             fix="create approvers/allowed_signers (OpenSSH format) or pass --allowed-signers")
    table, _ = _table_for(plan.target, args.defs, required=True)
    sha = plan_sha256(plan)
    if args.key:
        signature = sshsig.sign(sha.encode("ascii"), Path(args.key).expanduser())
    else:
        try:
            signature = read_bounded(args.signature, 64 * 1024, "signature file",
                                     f"make it with: {signing_command(sha)}").decode("utf-8", errors="replace")
        except OSError as exc:
            raise UsageError(f"cannot read signature file {args.signature} ({exc.strerror})",
                             fix=f"make it with: {signing_command(sha)}") from None
    done = approve(warehouse_of(args), path, args.by, signature, signers, table.spec, table.scheme(), actor())
    state = "approved: it is the plan of record" if done.plan_of_record else "needs more approvals"
    print(f"{done.principal} approved {done.plan_id} at {done.sha256[:12]}"
          + ("" if done.recorded_now else " (already recorded; the file is in sync)")
          + f": {done.counted}/{done.required} counted, {state}")
    return 0


def _summary(keys: list[str], limit: int = 6) -> str:
    if len(keys) <= limit:
        return ", ".join(keys)
    return f"{', '.join(keys[:3])}, ... {', '.join(keys[-2:])}"


def cmd_show(args: argparse.Namespace) -> int:
    from backfill_assets.plan.loading import estimate_window

    path = Path(args.plan_file)
    plan = load_plan(path)
    signers, why = load_signers(path, args.allowed_signers)
    counted = tally(plan, signers, why)
    size = estimate_window(plan.window.start, plan.window.end)
    print(f"plan       {plan.plan_id}  (owner {plan.owner})")
    print(f"sha256     {counted.sha256}")
    print(f"target     {plan.target}  <- source of truth {plan.source_of_truth}")
    print(f"window     {plan.window.start}..{plan.window.end}"
          + (f"  ({size:,} partitions)" if size is not None else ""))
    print(f"proof      {_summary(plan.proof_keys)}")
    print(f"mode       {plan.execution.mode}; {plan.execution.partitions_per_run} partition(s) per run, "
          f"{plan.execution.runs_at_once} run(s) at once")
    print(f"approvals  {len(counted.counted)}/{counted.required} signed approvals counted"
          + (" (approved)" if counted.approved else ""))
    for a in counted.counted:
        print(f"  counted  {a.by} at {a.at.isoformat()}")
    for v in counted.void:
        print(f"  void     {v.approval.by} at {v.approval.at.isoformat()}: {v.reason}")
    print(f"to sign    {signing_command(counted.sha256)}")
    return 0


def cmd_close(args: argparse.Namespace) -> int:
    from backfill_assets.control import record
    from backfill_assets.defs.loading import load_defs
    from backfill_assets.execution.advance import advance
    from backfill_assets.plan.phases import Phase
    from backfill_assets.status import plan_status

    with writing(args) as session:
        state = plan_state(session, args.plan)
        table = load_defs(args.defs).table(state.target)
        state = advance(session, state, actor())
        status = plan_status(session, state, table.spec, table.scheme())
        from backfill_assets.publish.rule import check

        changed = check(session, table.spec, table.scheme(), list(state.partition_keys)).changed \
            if state.phase is Phase.PUBLISHED else {}
        if state.phase is not Phase.PUBLISHED or changed:
            if changed and state.phase is Phase.PUBLISHED:
                state = record.transition(session, state.plan_id, Phase.REPAIRING, actor(),
                                          note=f"{len(changed)} partition(s) changed after publish")
                status = plan_status(session, state, table.spec, table.scheme())
            raise PlanRefused(f"plan {state.plan_id} is {state.phase}, not a published plan whose window "
                              "still passes every gate", fix=status.next)
        state = record.transition(session, state.plan_id, Phase.CLOSED, actor(),
                                  note=args.note or "consumers confirmed")
    print(f"plan {state.plan_id} is {state.phase}")
    return 0


def cmd_withdraw(args: argparse.Namespace) -> int:
    from backfill_assets.execution.rollback import withdraw

    with writing(args) as session:
        state = withdraw(session, plan_state(session, args.plan), actor(), args.note)
    print(f"plan {state.plan_id} is {state.phase}: its freeze and publish pause are lifted")
    return 0


"""`backfill plan new | validate | approve | show | close | withdraw`."""

from __future__ import annotations

import argparse
import os
import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from backfill_assets.bounded import create_file, expanded, read_bounded
from backfill_assets.cli.common import (
    actor,
    add_defs,
    add_home,
    add_root_options,
    note_unverified_statement,
    plan_state,
    record_plan_state,
    shell_word,
    shown_path,
    warehouse_of,
    writing,
)
from backfill_assets.errors import (
    ApprovalError,
    PlanInvalidError,
    PlanRefused,
    SignatureError,
    UsageError,
)
from backfill_assets.plan.approvals import signing_command
from backfill_assets.plan.identity import plan_sha256
from backfill_assets.plan.loading import collect_problems, load_plan, read_plan_document
from backfill_assets.plan.model import PLAN_ID_PATTERN

if TYPE_CHECKING:
    from backfill_assets.control.record import PlanState
    from backfill_assets.loaded_defs import LoadedTable
    from backfill_assets.plan.model import Plan
    from backfill_assets.warehouse.engine import Session


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    plan = sub.add_parser("plan", help="draft, validate, approve, show, close and withdraw replay plans")
    plan_sub = plan.add_subparsers(dest="plan_command", required=True)

    new = plan_sub.add_parser("new", help="copy the template to PLAN_FILE, filling what is given")
    new.add_argument("plan_file")
    for option in ("id", "target", "start", "end", "owner"):
        new.add_argument(f"--{option}")
    add_defs(new)  # with --target: what the spec and the asset graph answer is filled in
    new.set_defaults(handler=cmd_new)

    validate = plan_sub.add_parser("validate", help="schema, completeness and fit to the table")
    validate.add_argument("plan_file")
    add_defs(validate)
    validate.set_defaults(handler=cmd_validate)

    statement = plan_sub.add_parser("statement", help="print the statement an approver signs for this plan")
    statement.add_argument("plan_file")
    statement.add_argument("--valid-days", type=int, help="expire sooner than the policy's limit")
    add_defs(statement)
    add_home(statement)
    statement.set_defaults(handler=cmd_statement, data_out=True)  # signed as printed: no advice rewritten

    approve = plan_sub.add_parser("approve", help="sign the plan's statement and record the signature")
    approve.add_argument("plan_file")
    approve.add_argument("--by", required=True, help="the signing principal: an approver, or the owner")
    how = approve.add_mutually_exclusive_group(required=True)
    how.add_argument("--key", help="your SSH private key: we sign the statement for you (unencrypted keys)")
    how.add_argument("--signature", help="your `ssh-keygen -Y sign -n backfill-plan` signature of --statement")
    approve.add_argument("--statement", help="with --signature: the statement you signed (`backfill plan statement`)")
    approve.add_argument("--allowed-signers", help="must be the pinned one (kept for scripts; it changes nothing)")
    add_defs(approve)
    add_home(approve)
    approve.set_defaults(handler=cmd_approve, relay=True, keep_open=True)

    show = plan_sub.add_parser("show", help="partitions, what a signature binds, approvals counted and void")
    show.add_argument("plan_file")
    add_root_options(show)
    add_defs(show)
    add_home(show, once=True)
    show.set_defaults(handler=cmd_show)

    close = plan_sub.add_parser("close", help="close a published plan whose window still passes")
    close.add_argument("plan")
    close.add_argument("--note", default="")
    add_defs(close)
    add_home(close)
    close.set_defaults(handler=cmd_close, keep_open=True)

    withdraw = plan_sub.add_parser("withdraw",
                                   help="end a plan that wrote nothing (lifts its claim and publish freeze)")
    withdraw.add_argument("plan")
    withdraw.add_argument("--note", default="")
    add_defs(withdraw)  # read by no step of its own: accepted as every plan command's, carried into its advice
    add_home(withdraw)
    withdraw.set_defaults(handler=cmd_withdraw, relay=True, keep_open=True)



def template_text() -> str:
    return resources.files("backfill_assets").joinpath("templates/backfill-plan.yaml").read_text("utf-8")


def _fill(text: str, key: str, value: str, indent: str = "") -> str:
    pattern = re.compile(rf"^({indent}{key}:\s*)TODO", re.MULTILINE)
    return pattern.sub(lambda m: m.group(1) + value, text, count=1)


def cmd_new(args: argparse.Namespace) -> int:
    path = Path(args.plan_file)
    if path.exists():
        raise UsageError(f"{shown_path(path)} already exists", fix="choose another file name or delete it")
    if args.id is not None and not re.match(PLAN_ID_PATTERN, args.id):
        raise UsageError(f"--id {args.id!r} is not a plan id",
                         fix="use 1-63 lowercase letters, digits, - and _, starting with a letter or digit")
    text = template_text()
    for key, value, indent in [("plan_id", args.id, ""), ("owner", args.owner, ""), ("target", args.target, ""),
                               ("start", args.start, "  "), ("end", args.end, "  ")]:
        if value:
            if not re.match(r"^[\w./:@+-]{1,64}$", value):
                raise UsageError(f"--{key.replace('plan_id', 'id')} {value!r} is not a plain value",
                                 fix="use letters, digits and - _ . : @ +")
            text = _fill(text, key, value, indent)
    filled: list[str] = []
    if args.target:
        table, why = _table_for(args.target, args.defs, required=False)
        if table is not None:
            from backfill_assets.cli.plan_draft import prefill

            text, filled = prefill(text, table, args.start, args.end)
        else:
            print(f"not pre-filled from the definitions: {why}")
    _create(path, text)
    _plan, problems = collect_problems(read_plan_document(path))
    if filled:
        print(f"filled from the definitions: {'; '.join(filled)}")
    # the name as typed: escaped on its line, quoted in the command to paste (a blank split it, `$(...)`
    # in it ran when pasted, a line break and ESC printed a line of their own: found by an attack)
    print(f"wrote {shown_path(path)}; {len(problems)} key(s) still to fill: run "
          f"`backfill plan validate {shell_word(path)}`")
    return 0


def _create(path: Path, text: str) -> None:
    """The new plan file, whole or not at all: a full disk left the template's first kilobyte, which
    the same `plan new` then refused as existing (found by an attack)."""
    from backfill_assets.environment import reason_of

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        create_file(path, text)
    except FileExistsError:
        raise UsageError(f"{shown_path(path)} already exists", fix="choose another file name or delete it") from None
    except OSError as exc:
        why = reason_of(str(exc)) or exc.strerror or type(exc).__name__
        raise UsageError(f"cannot write the plan file {shown_path(path)} ({why})",
                         fix="pass a path in a folder you can write, on a disk with free space") from None


def _table_for(plan_target: str, defs: str | None, *, required: bool) -> tuple[LoadedTable | None, str | None]:
    """The loaded table of the plan's target, or None (with why) when definitions cannot be found."""
    from backfill_assets.loaded_defs import DEFS_ENV, load_defs

    try:
        return load_defs(defs).table(plan_target), None
    except UsageError as exc:
        if required or defs or os.environ.get(DEFS_ENV):  # one setting, given either way
            raise
        return None, str(exc)  # with its own fix


def cmd_validate(args: argparse.Namespace) -> int:
    path = Path(args.plan_file)
    plan, problems = collect_problems(read_plan_document(path))
    if plan is None:
        raise PlanInvalidError(str(path), problems)
    from backfill_assets.plan.fit import fit

    table, why = _table_for(plan.target, args.defs, required=False)
    if table is None:
        print(f"{shown_path(path)}: complete (plan {plan.plan_id}, sha256 {plan_sha256(plan)[:12]}); NOT checked "
              f"against {plan.target}: {why}")
        return 0
    fitted = fit(plan, table.spec, table.scheme(), table.graph, drafting=True)
    if not fitted.ok:
        raise PlanInvalidError(f"{path} does not fit {plan.target}", fitted.problems)
    print(f"{shown_path(path)}: complete and fits {plan.target} (plan {plan.plan_id}, sha256 {plan_sha256(plan)[:12]}, "
          f"{len(fitted.keys)} partition(s))")
    for line in graph_lines(table, fitted.members):
        print(line)
    return 0


def graph_lines(table: LoadedTable, members: dict[str, list[str]]) -> list[str]:
    """What the plan writes beyond its target, and which consumers read it, for people to see
    before anyone signs."""
    from backfill_assets.graph import Member

    if table.graph is None:
        return []
    lines = []
    for asset, keys in list(members.items())[1:]:
        upstream = table.graph.upstream(asset)
        lines.append(f"  graph     {asset} {_span(keys)}, recomputed from {upstream}, gated, published with it")
    found = table.graph.consumers([Member(a, tuple(k)) for a, k in members.items()])
    for consumer in found:
        shown = "all of it (unpartitioned)" if consumer.keys is None else \
            "the dynamic partitions the Dagster instance lists then" if consumer.dynamic else _span(list(consumer.keys))
        lines.append(f"  consumer  {consumer.asset} {shown} reads {_read(table, consumer.reads)}: requested after "
                     "the publish")
    return lines


def _read(table: LoadedTable, asset: str) -> str:
    """What a consumer reads, said plainly when it is a replayable target: its own SQL there reads
    rows no gate passed yet between publishes (a failed write's, a plan's), which no check can stop."""
    graph = table.graph
    if graph is None or asset not in graph.tables:
        return asset
    return (f"{asset}, the target (rows no gate passed yet, between publishes; consumers read "
            f"{graph.spec(asset).publish_as})")


def _span(keys: list[str]) -> str:
    return "no partition" if not keys else keys[0] if len(keys) == 1 else f"{keys[0]}..{keys[-1]} ({len(keys)})"


def _statement_text(args: argparse.Namespace, sha: str) -> str:
    if not args.statement:
        raise UsageError("--signature needs --statement, the text you signed",
                         fix="print it with `backfill plan statement PLAN > statement.txt`, sign that file")
    try:
        return read_bounded(args.statement, 4096, "statement file",
                            "print it with `backfill plan statement PLAN`").decode("ascii", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read statement file {args.statement} ({exc.strerror})",
                         fix="print it with `backfill plan statement PLAN`") from None


def cmd_statement(args: argparse.Namespace) -> int:
    from backfill_assets.cli.common import reading
    from backfill_assets.control import trust_record
    from backfill_assets.plan.approvals import plan_statement

    path = Path(args.plan_file)
    plan = load_plan(path)
    table, _ = _table_for(plan.target, args.defs, required=True)
    assert table is not None  # required: _table_for raises instead
    with reading(args) as session:
        root = trust_record.require(session)
        replaces = _replaces(session, plan)
        note_unverified_statement(session, root.warehouse_id)
    print(plan_statement(plan, root, table.code_identity(plan.assets), valid_days=args.valid_days,
                         replaces=replaces).text, end="")
    return 0


def _replaces(session: Session, plan: Plan) -> str | None:
    """The plan of record this version would replace, as its statement names it (none in a
    warehouse that never recorded the plan)."""
    from backfill_assets.control import record
    from backfill_assets.warehouse.state_store import SCHEMA

    if not session.engine.table_exists(session, "plans", SCHEMA):
        return None
    return record.replaced_by(session, plan.plan_id, plan_sha256(plan))


def cmd_approve(args: argparse.Namespace) -> int:
    from backfill_assets.approving import approve
    from backfill_assets.cli.common import reading
    from backfill_assets.control import trust_record
    from backfill_assets.plan.approvals import plan_statement
    from backfill_assets.signing import sshsig

    path = Path(args.plan_file)
    plan = load_plan(path)
    table, _ = _table_for(plan.target, args.defs, required=True)
    assert table is not None  # required: _table_for raises instead
    sha = plan_sha256(plan)
    with reading(args) as session:
        root = trust_record.require(session)
        replaces = _replaces(session, plan)
    if args.allowed_signers:  # a file of one's own never changes whose signatures count
        from backfill_assets.signing.allowed_signers import AllowedSigners

        named = AllowedSigners.load(args.allowed_signers)
        if named.sha256 != root.signers.sha256:
            raise SignatureError(f"{named.source} (sha256 {named.sha256[:12]}) is not the pinned allowed_signers "
                                 f"({root.describe()})",
                                 fix="approvals count only under the pinned root; a change of it takes its "
                                     "quorum's signatures (`backfill approvers pin`)")
    if args.key:
        statement = plan_statement(plan, root, table.code_identity(plan.assets), replaces=replaces).text
        signature = sshsig.sign(statement.encode("ascii"), expanded(args.key, "--key"))
    else:
        statement = _statement_text(args, sha)
        try:
            signature = read_bounded(args.signature, 64 * 1024, "signature file",
                                     f"make it with: {signing_command()}").decode("utf-8", errors="replace")
        except OSError as exc:
            raise UsageError(f"cannot read signature file {args.signature} ({exc.strerror})",
                             fix=f"make it with: {signing_command()}") from None
    done = approve(warehouse_of(args), path, args.by, statement, signature, table, actor())
    state = "approved: it is the plan of record" if done.plan_of_record else "not approved yet"
    print(f"{done.principal} signed {done.plan_id} at {done.sha256[:12]}"
          + ("" if done.recorded_now else " (already recorded; the file is in sync)")
          + f": {done.described}; {state}")
    if done.plan_of_record and done.recorded_now:  # the signature that made it approved: its phase changed
        record_plan_state(args, done.plan_id, table.graph)
    if done.unmirrored:
        why, fix = done.unmirrored
        raise ApprovalError(f"{done.principal}'s approval is recorded in the warehouse, but {shown_path(path)} was not "
                            f"updated ({why}): the plan file the guard reads lacks it",
                            fix=f"{fix}, then run the same `backfill plan approve` again: it copies every recorded "
                                "signature into the file")
    return 0


def _summary(keys: list[str], limit: int = 6) -> str:
    if len(keys) <= limit:
        return ", ".join(keys)
    return f"{', '.join(keys[:3])}, ... {', '.join(keys[-2:])}"


def cmd_show(args: argparse.Namespace) -> int:
    from backfill_assets.cli.common import home_of, replaced_mark, resolve_root
    from backfill_assets.cli.guard_fit import fit_in_child
    from backfill_assets.plan.approvals import file_tally
    from backfill_assets.plan.loading import estimate_window

    path = Path(args.plan_file)
    plan = load_plan(path)
    sha = plan_sha256(plan)
    view = resolve_root(home_of(args), args.allowed_signers, args.policy, args.warehouse)
    # beside the record, a version replacing its plan of record counts only what names it
    replacing = replaced_mark(home_of(args), plan, view.root) if view.root is not None else None
    replaces, at_least, refused = (replacing.mark, replacing.floor, replacing.refused) if replacing is not None \
        else (None, None, None)
    # the definitions (a pull request's, on a reviewer's checkout) load in a child, as the guard's
    # do: never where the signatures are counted, and only once they count without them (that
    # child runs with the reviewer's rights: it printed a fake "(approved)" on their terminal
    # through /proc/PPID/fd/1 for a plan nobody signed, found by an attack)
    signed = view.root is not None and view.problem is None and \
        file_tally(plan, view.root, None, replaces=replaces, at_least=at_least, refused=refused).approved
    code: str | None = None
    why: str | None = ("not loaded: the definitions, which a pull request may change, load only once the plan's "
           "signatures count; `backfill plan statement` shows the code to sign")
    if signed:
        _, why, code = fit_in_child(path, args.defs)
    size = estimate_window(plan.window.start, plan.window.end)
    print(f"plan       {plan.plan_id}  (owner {plan.owner})")
    print(f"sha256     {sha}")
    print(f"target     {plan.target}  <- source of truth {plan.source_of_truth}")
    print(f"window     {plan.window.start}..{plan.window.end}"
          + (f"  ({size:,} partitions)" if size is not None else ""))
    for member in plan.graph:
        print(f"graph      {member.asset}  {member.window.start}..{member.window.end}  (recomputed from the "
              "target's replayed data, gated and published with it)")
    print(f"proof      {_summary(plan.proof_keys)}")
    print(f"mode       {plan.execution.mode}; {plan.execution.partitions_per_run} partition(s) per run, "
          f"{plan.execution.runs_at_once} run(s) at once")
    if plan.scenario is not None:
        print(f"scenario   {plan.scenario.label()}")
    if plan.expect is not None:  # judged by the gate changes_as_expected against the plan's snapshots
        print(f"expect     {plan.expect.describe()}")
    root = view.root
    print(f"signs      plan {sha[:12]}; " + (f"replacing {replaces[:12]} (adoption {replaces[65:77]}); "
                                               if replaces else "") + f"code {code or f'({why})'}; warehouse "
          + (root.warehouse_id if root and root.warehouse_id else "(not checked: no control record here; "
              "pass --warehouse ID)") + "; expires at most "
          + (f"{root.policy.model.approvals.valid_days} day(s)" if root else "(policy unknown)")
          + " after signing")
    print(f"root       {view.source}" + (f"; {view.problem}" if view.problem else ""))
    if root is None:
        print("approvals  not counted: no trust root")
    else:
        counted = file_tally(plan, root, code, replaces=replaces, at_least=at_least, refused=refused)
        print(f"approvals  {counted.describe(void=False)}" + (" (approved)" if counted.approved else ""))
        if counted.owner_signature:
            owner = counted.owner_signature
            print(f"  owner    {owner.principal} ({owner.fingerprint}) until {owner.until}")
        for c in counted.counted:
            print(f"  counted  {c.principal} ({c.fingerprint}) until {c.until}")
        for v in counted.void:
            print(f"  void     {v.principal}: {v.reason}")
    print(f"to sign    backfill plan statement {shell_word(path)} > statement.txt && {signing_command()}")
    print(f"then       backfill plan approve {shell_word(path)} --by NAME --signature statement.txt.sig "
          "--statement statement.txt   (or --key KEY: sign here)")
    return 0


def cmd_close(args: argparse.Namespace) -> int:
    from backfill_assets import lifecycle
    from backfill_assets.execution.advance import advance
    from backfill_assets.loaded_defs import load_defs
    from backfill_assets.plan.phases import Phase
    from backfill_assets.status import plan_status

    with writing(args) as session:
        state = plan_state(session, args.plan)
        table = load_defs(args.defs).table(state.target)
        # every table of the plan is checked before it closes: definitions without the month checked
        # the days alone, and a plan whose published month was edited by hand closed as confirmed
        # (found by an attack)
        lacking = [a for a in state.assets[1:] if table.graph is None or a not in table.graph.tables]
        if lacking:
            raise PlanRefused(f"plan {state.plan_id} also covers {', '.join(lacking)}, which the loaded "
                              "definitions do not declare; a plan closes only once every table it covers "
                              "was checked", fix="load the definitions that declare them (--defs)")
        state = advance(session, state, actor(), table.spec, table.scheme(), table.graph)
        status = plan_status(session, state, table.spec, table.scheme(), table.graph)
        from backfill_assets.execution.advance import published_edits
        from backfill_assets.publish.rule import plan_blockers, plan_sources_moved

        moved: list[str] = []

        def changed_now(now: PlanState) -> list[str]:
            found = plan_blockers(session, now, table.spec, table.scheme(), table.graph)
            # and what consumers read, edited since published: `advance` sends such a plan to
            # repairing, but not while another plan holds one of its partitions, and the close then
            # confirmed the edited published day (found by an attack); and the source, moved since the
            # gates compared it (late data)
            moved[:] = plan_sources_moved(session, now, table.spec, table.scheme(), table.graph)
            return [*found.changed, *(f"{a} {k}" for a, (_, o) in found.others.items() for k in o.changed),
                    *published_edits(session, now, table.spec, table.scheme(), table.graph), *moved]

        after = lifecycle.close_requested(session, state, changed_now, actor(), args.note or "")
        if after.phase is not Phase.CLOSED:
            if after.phase is not state.phase:  # sent to repairing: the way on is repairing's
                status = plan_status(session, after, table.spec, table.scheme(), table.graph)
            raise PlanRefused(f"plan {after.plan_id} is {after.phase}, not a published plan whose window "
                              "still passes every gate" + (f" ({moved[0]})" if moved else ""), fix=status.next)
        state = after
    print(f"plan {state.plan_id} is {state.phase}")
    record_plan_state(args, state.plan_id, table.graph)
    return 0


def cmd_withdraw(args: argparse.Namespace) -> int:
    from backfill_assets.execution.rollback import withdraw

    with writing(args) as session:
        state = withdraw(session, plan_state(session, args.plan), actor(), args.note)
    print(f"plan {state.plan_id} is {state.phase}: its claim and publish freeze are lifted")
    record_plan_state(args, state.plan_id)
    return 0


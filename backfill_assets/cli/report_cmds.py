"""`backfill reconcile | publish | status | diff | evidence`."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from backfill_assets import terminal as output
from backfill_assets.bounded import read_bounded, refuse_non_regular, replace_file
from backfill_assets.cli.common import (
    actor,
    add_defs,
    add_home,
    home_of,
    plan_state,
    reading,
    record_plan_state,
    table_of,
    tables_if_found,
    writing,
)
from backfill_assets.cli.partition_args import add_partition_args, chosen
from backfill_assets.cli.partition_args import given as partition_args_given
from backfill_assets.errors import PublishBlocked, RunNotRecorded, UsageError
from backfill_assets.warehouse import release_kept

if TYPE_CHECKING:
    from backfill_assets.control.record import PlanState
    from backfill_assets.home import Home
    from backfill_assets.loaded_defs import LoadedDefs


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rec = sub.add_parser("reconcile", help="every gate of the window on the data as it is now")
    rec.add_argument("plan")
    rec.add_argument("--json", action="store_true")
    add_defs(rec)
    add_home(rec)
    rec.set_defaults(handler=cmd_reconcile)

    pub = sub.add_parser("publish", help="reopen publish now, or say what blocks it")
    pub.add_argument("plan")
    add_defs(pub)
    add_home(pub)
    pub.set_defaults(handler=cmd_publish, relay=True, keep_open=True)

    status = sub.add_parser("status", help="phase, partitions, gates, publish, what to do next")
    status.add_argument("plan", nargs="?", help="a plan file or id (default: every plan)")
    status.add_argument("--json", action="store_true")
    add_defs(status)  # the definitions a run was given: the graph and the published tables' check answer to them
    add_home(status)
    status.set_defaults(handler=cmd_status)

    diff = sub.add_parser("diff", help="what the plan changed: before (its snapshots) against now")
    diff.add_argument("plan")
    add_partition_args(diff, "only")
    diff.add_argument("--asset", help="a table of the plan's graph (default: every table, the target first)")
    diff.add_argument("--json", action="store_true")
    diff.add_argument("--top", type=int, default=10, help="keys shown per partition (largest changes)")
    add_defs(diff)
    add_home(diff)
    diff.set_defaults(handler=cmd_diff)

    ev = sub.add_parser("evidence", help="render the release-gate evidence, or `verify` the log")
    ev.add_argument("plan", help="a plan file or id, or the word `verify`")
    ev.add_argument("--out", help="write the YAML here instead of stdout")
    ev.add_argument("--against", help="with verify: a rendered evidence file whose pinned head must still "
                                      "be in the log")
    add_home(ev)
    ev.set_defaults(handler=cmd_evidence, data_out=True)  # rendered evidence: no advice rewritten


def cmd_reconcile(args: argparse.Namespace) -> int:
    from backfill_assets.loaded_defs import load_defs

    return reconcile_plan(args, load_defs(args.defs))


def reconcile_plan(args: argparse.Namespace, loaded: LoadedDefs, *, brief: bool = False) -> int:
    """`brief` (a step of `run --and-publish`): a window that passed is one line, not its table."""
    from backfill_assets.execution.reconcile import reconcile

    with writing(args) as session:
        state = plan_state(session, args.plan)
        table = loaded.table(state.target)
        result = reconcile(session, table.spec, table.scheme(), state, actor(), graph=table.graph,
                           every_current=not brief)
    # the UI shows the gates' last word, as a run's would be shown: right after the plan's runs, the
    # verdicts that changed; alone, every verdict the UI does not show as the gates gave it (one
    # the UI was not shown before, when its instance could not take it, is shown now: found by an
    # attack)
    from backfill_assets.defs.verdicts_shown import out_of_date

    if result.changed if brief else result.current:
        _show_in_ui(home_of(args), state.plan_id,
                    lambda instance: out_of_date(instance, result.changed if brief else result.current))
    if getattr(args, "json", False):
        print(json.dumps({"plan_id": state.plan_id, "phase": result.state.phase.value,
                          "passed": result.passed, "partitions": result.rows()}, indent=2, default=str))
    else:
        if not (brief and result.passed):
            print(result.table())
        print(f"{'all gates passed' if result.passed else 'NOT reconciled'}; plan {state.plan_id} is "
              f"{result.state.phase}" + _ended_step(result.state, result.passed))
    return 0 if result.passed else 1


def _ended_step(state: PlanState, passed: bool) -> str:
    """What a reconcile of a plan that ended says to do: it writes nothing more, so its window is
    replayed by a new plan ("NOT reconciled; plan a1 is withdrawn" named no way on: found by an attack)."""
    from backfill_assets.plan.phases import ENDED, Phase
    from backfill_assets.status import redraft

    if state.phase not in ENDED or (passed and state.phase is Phase.CLOSED):  # a closed plan that passes is done
        return ""
    return f": it writes nothing more; to replay its window, draft a new plan: {redraft(state)}"


def _show_in_ui(home: Home, plan_id: str, pick: Callable[[Any], list[Any]]) -> None:
    """Verdicts this command recorded (`pick`: those to show, given the instance), shown in the
    Dagster UI by a run of their own; a Dagster instance that cannot take them (a read-only
    DAGSTER_HOME, a full disk) is one line: the verdicts are committed, and the command says so
    rather than that nothing was, and how to show them later."""
    from backfill_assets.dagster_setup import instance_for
    from backfill_assets.defs.verdicts_shown import report
    from backfill_assets.execution.runner import our_run_tags

    try:
        with output.dagster_output(home):
            instance = instance_for(home)
            report(instance, pick(instance), our_run_tags(plan_id, actor()))
    except Exception as exc:  # noqa: BLE001 - the UI is a view of the ledger, which holds the verdicts
        reason = str(getattr(exc, "message", None) or exc).strip().splitlines()
        output.say(f"backfill: note: the verdicts are recorded, but the Dagster UI was not shown them "
                   f"({type(exc).__name__}: {reason[0] if reason else 'no detail'}); `backfill reconcile {plan_id}` "
                   "shows them there once it can (`backfill status` shows them now)")


def cmd_publish(args: argparse.Namespace) -> int:
    from backfill_assets.execution.runner import enable_event_batching
    from backfill_assets.loaded_defs import load_defs

    enable_event_batching()  # the window's materializations stored in a few writes, not one each
    os.environ["BACKFILL_HOME"] = str(home_of(args).root)
    return publish_plan(args, load_defs(args.defs))


def publish_plan(args: argparse.Namespace, loaded: LoadedDefs, *, chained: bool = False) -> int:
    """Publish the plan's window, or raise what blocks it (`BACKFILL_HOME` set, events batched).
    `chained` (the last step of `run --and-publish`, right after its reconcile passed): the publish
    run is launched without first moving the plan or asking what blocks it, which the run asks
    under its lock anyway, and the database stays open for the plan's state after it."""
    from backfill_assets.dagster_setup import instance_for
    from backfill_assets.defs.sensor import publish_run_tags
    from backfill_assets.execution.advance import advance, published_edits
    from backfill_assets.execution.runner import failure_messages
    from backfill_assets.impact import consumers_line
    from backfill_assets.plan.phases import ENDED, Phase
    from backfill_assets.publish import rule
    from backfill_assets.status import plan_status

    home = home_of(args)
    blocked: PublishBlocked | None = None
    with writing(args) as session:
        state = plan_state(session, args.plan)
        table = loaded.table(state.target)
        if not chained:  # (reconcile has just moved the plan as the gates found it)
            state = advance(session, state, actor(), table.spec, table.scheme(), table.graph)
        if state.phase is not Phase.RECONCILED:
            status = plan_status(session, state, table.spec, table.scheme(), table.graph)
            # still published over consumers' copy edited since: another plan holds some of its
            # partitions, so it may not go back to repairing yet; "already published", exit 0, left
            # the edit in place with no word of what to do (found by an attack)
            edited = published_edits(session, state, table.spec, table.scheme(), table.graph) \
                if state.phase is Phase.PUBLISHED else []
            if edited:
                raise PublishBlocked(f"plan {state.plan_id} is published, but {edited[0]} was edited since; it "
                                     "cannot be published again while another plan holds some of its partitions",
                                     fix=status.next)
            if state.phase in (Phase.PUBLISHED, Phase.CLOSED):
                print(f"plan {state.plan_id} is already {state.phase}: {status.published or 'published'}")
                return 0
            if state.phase in ENDED:
                raise PublishBlocked(f"plan {state.plan_id} is {state.phase}: it has nothing to publish",
                                     fix=status.next)
            raise PublishBlocked(f"plan {state.plan_id} is {state.phase}: publish reopens only after every "
                                 f"gate of the window passed ({'; '.join(status.blockers[:3]) or 'not reconciled'})",
                                 fix=status.next)
        # what blocks it, said before a Dagster run is launched (the run checks it all again under
        # its lock); computed once: the status of a reconciled plan would fingerprint it all again.
        # Not right after this process's reconcile passed: the run refuses what changed since, as
        # this would (0.22 s at 2,526 partitions)
        found = None if chained else \
            rule.plan_blockers(session, state, table.spec, table.scheme(), table.graph)
        if found is not None and found.problems:
            rule.record_changed(session, table.spec, found, actor())
            status = plan_status(session, state, table.spec, table.scheme(), table.graph)
            blocked = PublishBlocked("; ".join(found.problems[:5]), fix=status.next)
    if blocked is not None:
        assert found is not None
        if found.any_changed:  # recorded as failed `unchanged_since_checked`: the UI shows it as the run would
            from backfill_assets.defs.verdicts_shown import changed_evaluations

            evaluations = changed_evaluations(
                {table.spec.name: found.changed, **{a: o.changed for a, (_, o) in found.others.items()}})
            _show_in_ui(home, state.plan_id, lambda _instance: evaluations)
        raise blocked
    import dagster as dg

    from backfill_assets.dagster_inprocess import execute_selection
    from backfill_assets.graph import implicit_job

    job = implicit_job(loaded.definitions)
    from backfill_assets.execution.runner import fail_dead_runs, our_run_tags

    instance = instance_for(home)  # one instance: the publish run, then the plan's state
    fail_dead_runs(instance)
    try:
        with output.dagster_output(home):
            result = execute_selection(job, [dg.AssetKey(table.spec.publish_as.split("/"))], instance=instance,
                                       tags={**publish_run_tags(state), **our_run_tags(state.plan_id, actor())},
                                       run_config=output.run_config())
    except Exception as exc:
        _refuse_if_published(args, state.plan_id, str(exc).splitlines()[0] if str(exc) else type(exc).__name__, exc)
        raise
    if not result.success:
        why = "; ".join(failure_messages(result)[:2])
        _refuse_if_published(args, state.plan_id, why)
        raise PublishBlocked(f"the publish run {result.run_id[:8]} failed, nothing was published: " + why,
                             fix="see `backfill status`")
    print(f"published {table.spec.publish_as} for {state.partition_keys[0]}..{state.partition_keys[-1]} "
          f"(run {result.run_id[:8]}); downstream owners notified")
    for asset in state.assets[1:]:  # in the same transaction
        keys = state.keys_of(asset)
        print(f"published {loaded.graph.spec(asset).publish_as} for {keys[0]}..{keys[-1]} with it, in the same "
              "transaction")
    events = result.get_asset_materialization_events()
    seen = consumers_line(events)
    if seen:
        print(seen)
    for event in events:
        replaced = event.materialization.metadata.get("replaced_edits")
        if replaced is not None:
            print(f"note: {table.spec.publish_as} had been edited outside backfill since its last publish "
                  f"({replaced.value}); this publish put the checked bytes back")
            break  # every partition's materialization carries the same note
    # the database is let go before the plan's state fingerprints the published table: the pages the
    # publish run loaded leave memory first (peak RSS at 2,526 partitions: 295-297 -> 277-282 MB);
    # not in `run --and-publish`, whose peak is reconcile's, and whose publish remembers what it checked
    if not chained:
        release_kept()
    record_plan_state(args, state.plan_id, table.graph, instance)
    return 0


def _refuse_if_published(args: argparse.Namespace, plan_id: str, why: str, cause: BaseException | None = None) -> None:
    """The publish run failed: what is true of the plan now, not "nothing was published". A run can
    fail after its transaction committed (Dagster could not store the run's events: a disk that
    filled just then), when the plan is published and consumers read its bytes, which the command
    denied (found by an attack); or the sensor published it meanwhile. Unreadable now: unknown."""
    from backfill_assets.control import record
    from backfill_assets.plan.phases import Phase

    try:
        with reading(args) as session:
            state = record.get(session, plan_id)
    except Exception as exc:  # noqa: BLE001 - said in the line, with the run's own failure
        raise PublishBlocked(f"the publish run failed ({why}), and whether plan {plan_id} is published is unknown: "
                             f"its record cannot be read now ({str(exc).splitlines()[0] if str(exc) else exc!r})",
                             fix="`backfill status` says, once the warehouse can be read") from cause
    if state is not None and state.phase in (Phase.PUBLISHED, Phase.CLOSED):
        # what consumers read is not claimed: on PostgreSQL an insider's edit of the published table
        # committed meanwhile had this say they read the checked bytes (found by an attack)
        raise RunNotRecorded(
            f"plan {plan_id} is published (the warehouse committed its publish), but this command's publish run "
            f"failed ({why})",
            fix=f"`backfill status {plan_id}` says what consumers read now and what comes next; if Dagster could "
                "not store the run (a full disk under DAGSTER_HOME?), fix that: the Dagster UI lacks this run"
        ) from cause


def cmd_status(args: argparse.Namespace) -> int:
    from backfill_assets.cli.notices_cmd import undelivered_line
    from backfill_assets.control import record
    from backfill_assets.control.evidence_log import can_verify
    from backfill_assets.control.outbox import notices
    from backfill_assets.status import plan_status, reconciled_seq, sensor_gave_up

    tables = tables_if_found(args.defs)
    with reading(args) as session:
        if not can_verify(session):  # as `approvers show` says it: the rows as typed, not as the chain vouches
            output.note(output.UNVERIFIED.format(what="status", fix="ask it where the key is"))
        states = [plan_state(session, args.plan)] if args.plan else record.all_plans(session)
        statuses = [plan_status(session, s, *table_of(tables, s.target)) for s in states]
        told = {s.plan_id: undelivered_line(session, s.plan_id) for s in states}
        waiting = {s.plan_id: sum(1 for n in notices(session, s.plan_id) if n.undelivered) for s in states}
        waiting_for_sensor = {s.plan_id: seq for s in states if (seq := reconciled_seq(session, s)) is not None}
    dead, given_up = _runs_of_the_home(home_of(args), waiting_for_sensor)
    if given_up:
        from backfill_assets.defs.sensor import PUBLISH_ATTEMPTS

        statuses = [sensor_gave_up(s, PUBLISH_ATTEMPTS) if s.plan_id in given_up else s for s in statuses]
    if args.json:
        shown = [{**s.to_json(), "undelivered_notices": waiting[s.plan_id], "notices": told[s.plan_id]}
                 for s in statuses]
        print(json.dumps(shown[0] if args.plan else shown, indent=2))
        return 0
    for run_id in dead:
        print(f"dead run   {run_id[:8]}: its process was killed; marked failed in Dagster (every partition "
              "it touched is wholly old or new)")
    if not statuses:
        print("no plans in the control record")
    for s in statuses:
        window = f"{s.window[0]}..{s.window[1]}" if s.window else "-"
        print(f"plan       {s.plan_id}: {s.phase}" + (f" ({s.hold})" if s.hold else ""))
        print(f"window     {window} of {s.target}, {s.partitions} partitions")
        print(f"approvals  {', '.join(s.approvals) or 'none recorded'}")
        print(f"written    {s.written}  passed {s.reconciled}  failed {len(s.failed)}")
        for key, gates in list(s.failed.items())[:10]:
            print(f"  {key}: {', '.join(gates)}")
        if len(s.failed) > 10:
            print(f"  ... {len(s.failed) - 10} more")
        for asset, member in s.graph.items():  # the other tables of the plan's graph
            print(f"graph      {asset} {member['window'][0]}..{member['window'][1]}: {member['partitions']} "
                  f"partition(s), written {member['written']}, passed {member['written'] - len(member['failed'])}, "
                  f"failed {len(member['failed'])}")
            for key, gates in list(member["failed"].items())[:10]:
                print(f"  {asset} {key}: {', '.join(gates)}")
        if s.running:
            print(f"running    {s.running}")
        if s.cutover:
            print(f"cutover    {s.cutover}")
        print(f"publish    {s.publish}")
        if told[s.plan_id]:
            print(f"notices    {told[s.plan_id]}")
        print(f"next       {s.next}")
    return 0


def _runs_of_the_home(home: Home, reconciled: dict[str, int]) -> tuple[list[str], set[str]]:
    """What the home's Dagster instance says, where there is one: runs of ours whose process died,
    marked failed now; and the plans (of `reconciled`: plan -> its reconciliation's chain row) whose
    reopen sensor's publish runs all failed, so that it requests no more."""
    if not (home.dagster_home / "dagster.yaml").exists() or not os.access(home.dagster_home, os.W_OK):
        return [], set()  # a reading command on a read-only home shows the plans all the same
    import dagster as dg

    from backfill_assets.dagster_setup import open_instance, stored_elsewhere
    from backfill_assets.environment import fault_of
    from backfill_assets.execution.runner import fail_dead_runs

    try:
        if stored_elsewhere(home):
            return [], set()  # a copied home's: another home's runs are not this command's to judge
        instance = open_instance(home.dagster_home)
        with instance:
            dead = fail_dead_runs(instance)
            if not reconciled:
                return dead, set()
            from backfill_assets.defs.sensor import publish_run_key

            return dead, {p for p, seq in reconciled.items() if publish_run_key(instance, p, seq) is None}
    except (dg.DagsterInvalidConfigError, UsageError):
        return [], set()  # a reading command shows the plans anyway; `backfill run` names the problem
    except Exception as exc:
        if fault_of(exc, str(home.dagster_home)) is None:
            raise
        return [], set()  # a full disk: the dead runs are marked by the next command that can write


def cmd_diff(args: argparse.Namespace) -> int:
    from backfill_assets.impact import plan_impact
    from backfill_assets.loaded_defs import load_defs

    loaded = load_defs(args.defs)
    with reading(args) as session:
        state = plan_state(session, args.plan)
        asset = args.asset or state.target
        if asset not in state.assets:
            raise UsageError(f"plan {state.plan_id} does not write {asset} (it writes {', '.join(state.assets)})",
                             fix="name a table of the plan with --asset")
        table = loaded.table(asset)
        keys = chosen(args, list(state.keys_of(asset)), state.plan_id)
        if args.top < 0:
            raise UsageError(f"--top {args.top} is negative", fix="pass 0 or more keys per partition")
        reports = [(asset, plan_impact(session, table.spec, table.scheme(), state, keys, top=args.top))]
        if not args.asset and not partition_args_given(args):  # the whole graph, each table after the one it reads
            for other in state.assets[1:]:
                member = loaded.table(other)
                reports.append((other, plan_impact(session, member.spec, member.scheme(), state, None,
                                                   top=args.top)))
    if args.json:
        document = reports[0][1].to_json()
        if len(reports) > 1:
            document["graph"] = {a: r.to_json() for a, r in reports[1:]}
        print(json.dumps(document, indent=2, default=str))
        return 0
    for i, (name, report) in enumerate(reports):
        if len(reports) > 1:
            print(("" if i == 0 else "\n") + f"== {name}")
        print(report.text())
    return 0


def _pinned_head(path: str) -> tuple[int, str]:
    try:
        text = read_bounded(path, 64 * 1024 * 1024, "evidence file",
                            "pass a file written by `backfill evidence PLAN --out FILE`").decode("utf-8")
        chain = (yaml.safe_load(text) or {}).get("chain") or {}
        return int(chain["head_seq"]), str(chain["head_hash"])
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError, UnicodeDecodeError):
        raise UsageError(f"{path} is not a rendered evidence file with a chain head",
                         fix="pass a file written by `backfill evidence PLAN --out FILE`") from None


def cmd_evidence(args: argparse.Namespace) -> int:
    from backfill_assets import evidence

    if args.plan == "verify":
        from backfill_assets.control.integrity import verify_record

        pinned = _pinned_head(args.against) if args.against else None
        with reading(args) as session:
            found = verify_record(session, pinned)
        print(f"evidence chain verified: {found.describe()}"
              + (f"; row {pinned[0]} pinned by {args.against} is there" if pinned else ""))
        return 0
    with reading(args) as session:
        state = plan_state(session, args.plan)
        document, verified = evidence.render(session, state, actor())
    text = evidence.to_yaml(document)
    if args.out:
        out = Path(args.out)
        if args.out.endswith(("/", os.sep)):  # Path drops the slash: `reports/` was written as a file `reports`
            raise UsageError(f"--out {args.out} names a folder: --out takes a file",
                             fix=f"pass a file's path in it, e.g. --out {out}/{args.plan}.yaml")
        if out.is_symlink():  # the rename would replace the link itself (one to a folder: found by an attack)
            raise UsageError(f"--out {out} is a symbolic link: it is left as it is",
                             fix=f"pass the path it names ({os.path.realpath(out)}), or a new file's path")
        if not out.is_dir():  # a folder is refused below, by the write itself
            # opening a FIFO for writing waits for a reader
            refuse_non_regular(out, "--out", "pass --out a regular file's path")
        if out.exists() and not out.is_dir() and not evidence.rendered_before(out):
            # the warehouse, the evidence key or a plan tab-completed in a hurry was written over with
            # exit 0, and gone for good (found by an attack)
            raise UsageError(f"--out {out} exists and is not an evidence file `backfill evidence` wrote: it is "
                             "left as it is", fix="pass --out a new file's path (or one it wrote before)")
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            replace_file(out, text)
        except OSError as exc:
            raise UsageError(f"cannot write the evidence to {args.out} ({exc.strerror})",
                             fix="pass --out a file path in a folder you can write") from None
        print(f"wrote evidence for {state.plan_id} to {args.out}")
    else:
        print(text, end="")
    if verified is not True:
        raise evidence.ChainNotVerified(str(verified))
    return 0

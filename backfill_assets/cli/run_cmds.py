"""`backfill run` and `backfill rollback`."""

from __future__ import annotations

import argparse
import os

from backfill_assets.cli.common import actor, add_home, home_of
from backfill_assets.control import gate_record, record
from backfill_assets.control.record import PlanState
from backfill_assets.control.schema import ensure_schema, has_control_schema
from backfill_assets.errors import PlanRefused, WindowError
from backfill_assets.execution import rollback as rollback_mod
from backfill_assets.execution.stages import partitions_stage, proof_stage, window_stage
from backfill_assets.plan import resolve
from backfill_assets.plan.gate import ensure_approved_version, verify_unchanged
from backfill_assets.plan.phases import PAST_PROOF, Phase
from backfill_assets.warehouse.connection import connection


def register(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="run the plan through Dagster: --proof first, then the window")
    run.add_argument("plan_file")
    mode = run.add_mutually_exclusive_group()
    mode.add_argument("--proof", action="store_true", help="the proof slice, twice")
    mode.add_argument("--partitions", help="re-materialize these keys of the window: K1,K2")
    run.add_argument("--dry-run", action="store_true", help="print the slices, write nothing")
    run.add_argument("--defs", help="definitions to load (module:attr; default $BACKFILL_DEFS or "
                                    "examples.definitions:defs)")
    add_home(run)
    run.set_defaults(handler=cmd_run)

    rollback = sub.add_parser("rollback", help="restore every partition the plan wrote")
    rollback.add_argument("plan_file")
    rollback.add_argument("--dry-run", action="store_true")
    rollback.add_argument("--defs")
    add_home(rollback)
    rollback.set_defaults(handler=cmd_rollback)


def _context(args: argparse.Namespace):
    # Dagster loads only for commands that run it; `backfill guard` stays light
    from backfill_assets.execution.registry import ensure_window_inside_partitions, load_defs
    from backfill_assets.execution.runner import enable_event_batching

    home = home_of(args)
    # in-process runs resolve the warehouse from BACKFILL_HOME, like the UI's runs do
    os.environ["BACKFILL_HOME"] = str(home.root)
    enable_event_batching()
    resolved = resolve(args.plan_file)
    loaded = load_defs(args.defs)
    table = loaded.table(resolved.plan.target)
    plan = resolved.plan
    ensure_window_inside_partitions(plan, table)
    if plan.source_of_truth != table.spec.source:
        raise PlanRefused(f"source_of_truth {plan.source_of_truth} is not the source of "
                          f"{plan.target} ({table.spec.source})",
                          fix=f"set source_of_truth: {table.spec.source}")
    for metric in plan.checks.metrics:
        table.spec.metric(metric.name)
    if set(plan.execution.business_keys) != set(table.spec.business_keys):
        raise PlanRefused(
            f"the plan's business_keys ({', '.join(plan.execution.business_keys)}) are not "
            f"{plan.target}'s ({', '.join(table.spec.business_keys)})",
            fix=f"set execution.business_keys: [{', '.join(table.spec.business_keys)}]")
    return home, resolved, loaded, table


def _plan_progress(home, plan_id: str) -> tuple[PlanState | None, set[str]]:
    """The plan's record and its reconciled partitions, read without writing (dry runs too)."""
    if not home.warehouse.exists():
        return None, set()
    with connection(home.warehouse, read_only=True) as con:
        if not has_control_schema(con):
            return None, set()
        state = record.get(con, plan_id)
        if state is None:
            return None, set()
        latest = gate_record.latest(con, state.target, state.partition_keys, state.plan_id)
    return state, {k for k, e in latest.items() if e is not None and e.passed}


def cmd_run(args: argparse.Namespace) -> int:
    from backfill_assets.dagster_setup import instance_for
    from backfill_assets.execution.runner import execute, settle

    home, resolved, loaded, table = _context(args)
    plan = resolved.plan
    size = plan.execution.max_concurrent_partitions
    state, reconciled = _plan_progress(home, plan.plan_id)
    if args.partitions:
        keys = [k.strip() for k in args.partitions.split(",") if k.strip()]
        outside = [k for k in keys if k not in plan.partition_keys]
        if outside or not keys:
            raise WindowError(f"partitions {', '.join(outside) or '(none)'} are not in the window "
                              f"{plan.window.start}..{plan.window.end}",
                              fix="name keys inside the plan's window, comma-separated")
        stage = partitions_stage(keys, size)
    elif args.proof:
        stage = proof_stage(plan.proof_keys, size)
    else:
        stage = window_stage(plan.partition_keys, plan.proof_keys, reconciled, size)
    if args.dry_run:
        print(f"plan {plan.plan_id}: {plan.target} mode {plan.execution.mode}, window "
              f"{plan.window.start}..{plan.window.end}, slices of {size} (dry run: nothing written)")
        print(stage.describe())
        return 0

    if state is None or state.approved_sha256 is None:
        raise PlanRefused(f"plan {plan.plan_id} has not been approved",
                          fix=f"run `backfill guard {args.plan_file}` and collect the approvals")
    ensure_approved_version(resolved, state)
    verify_unchanged(state)
    if args.proof and state.phase not in (Phase.APPROVED, Phase.PROVING):
        raise PlanRefused(f"plan {plan.plan_id} is {state.phase}; the proof is not open",
                          fix="the proof runs once, between approval and the window")
    if not args.proof and state.phase not in PAST_PROOF:
        if not (args.partitions and set(stage.partitions) <= set(plan.proof_keys)
                and state.phase in (Phase.APPROVED, Phase.PROVING)):
            raise PlanRefused(f"plan {plan.plan_id} is {state.phase}: the window runs only after "
                              "the proof passed", fix=f"run `backfill run {args.plan_file} --proof`")
    if not stage.partitions:
        print(f"nothing to run: every partition of {plan.plan_id} is already written and reconciled")
    else:
        print(stage.describe())
        instance = instance_for(home)
        reports = execute(stage, table, loaded.definitions, instance, str(home.warehouse), state,
                          actor(), print)
        print(f"{sum(len(r.run_ids) for r in reports)} Dagster run(s) on {home.dagster_home}")
        if not all(r.ok for r in reports):
            settle(str(home.warehouse), plan.plan_id, actor())
            return 1
    after = settle(str(home.warehouse), plan.plan_id, actor())
    if args.proof:
        if after.phase in (Phase.APPROVED, Phase.PROVING):
            from backfill_assets.execution.progress import proof_verdict

            with connection(home.warehouse) as con:
                verdict = proof_verdict(con, after)
            for line in verdict.blockers:
                print(f"  {line}")
            print(f"proof NOT passed; plan {plan.plan_id} stays {after.phase}")
            return 1
        print(f"proof passed: fingerprints identical on both runs; plan {plan.plan_id} is "
              f"{after.phase}")
        return 0
    print(f"plan {plan.plan_id} is {after.phase}"
          + ("; the reopen sensor (or `backfill publish`) reopens publish"
             if after.phase is Phase.RECONCILED else ""))
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    home, resolved, _loaded, table = _context(args)
    with connection(home.warehouse) as con:
        ensure_schema(con)
        state = record.require(con, resolved.plan_id)
        report = rollback_mod.rollback(con, table.spec, state, actor(), dry_run=args.dry_run)
    for line in report.lines():
        print(line)
    return 0

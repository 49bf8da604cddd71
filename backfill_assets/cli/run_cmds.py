"""`backfill run | pause | cancel | rollback`."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from backfill_assets import lifecycle
from backfill_assets import terminal as output
from backfill_assets.cli import partition_args
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
    warehouse_of,
    writing,
)
from backfill_assets.cli.partition_args import add_partition_args
from backfill_assets.cli.signatures import add_signature_options, candidates
from backfill_assets.control import lease, ledger, record
from backfill_assets.errors import BackfillError, PlanRefused, UsageError
from backfill_assets.plan.phases import PAST_PROOF, Hold, Phase

if TYPE_CHECKING:
    from backfill_assets.execution.stages import Stage
    from backfill_assets.loaded_defs import LoadedDefs
    from backfill_assets.warehouse.engine import Session


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser("run", help="run the plan through Dagster: --proof first, then the window")
    run.add_argument("plan", help="the plan's file or plan_id")
    run.add_argument("--proof", action="store_true", help="the proof partitions, twice")
    add_partition_args(run, "re-materialize")
    run.add_argument("--asset", help="with --partition(s): the table of the plan's graph they belong to "
                                     "(default: the plan's target)")
    run.add_argument("--dry-run", action="store_true", help="print the runs, write nothing")
    run.add_argument("--and-publish", action="store_true",
                     help="from where the plan stands, in this one command: the proof (when it has not "
                          "passed), the window, reconcile, publish; stops at the first step that does not pass")
    add_defs(run)
    add_home(run)
    run.set_defaults(handler=cmd_run, relay=True)

    for name, text in (("pause", "stop the plan before its next run; `backfill run` resumes"),
                       ("cancel", "end the plan's runs for good; then roll it back (or withdraw it)")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("plan")
        add_home(cmd)
        cmd.set_defaults(handler=cmd_pause if name == "pause" else cmd_cancel, keep_open=True)

    rollback = sub.add_parser("rollback", help="restore every partition the plan wrote")
    rollback.add_argument("plan")
    rollback.add_argument("--dry-run", action="store_true")
    rollback.add_argument("--keep-computed", action="append", default=[], metavar="TABLE",
                          help="leave TABLE's partitions computed since from the plan's as they are (a rollup loaded "
                               "without a plan, which the rollback otherwise refuses)")
    add_signature_options(rollback)  # a published plan whose approvals expired: approvers sign the rollback
    add_defs(rollback)
    add_home(rollback)
    rollback.set_defaults(handler=cmd_rollback, relay=True, keep_open=True)


def _stages(args: argparse.Namespace, session: Session, state: record.PlanState, loaded: LoadedDefs) -> list[Stage]:
    """What this run does: the proof; named partitions of one table; or the rest of the window and
    then each table of the plan's graph, in dependency order (each skips what already passed)."""
    from backfill_assets.execution.stages import downstream_stage, partitions_stage, proof_stage, window_stage

    execution = state.approved.plan.execution
    size = execution.partitions_per_run
    asset = args.asset or state.target
    if asset not in state.assets:
        raise UsageError(f"plan {state.plan_id} does not write {asset} (it writes {', '.join(state.assets)})",
                         fix="name a table of the plan with --asset")
    scheme = loaded.table(asset).scheme()
    keys = partition_args.chosen(args, list(state.keys_of(asset)), state.plan_id)
    if keys is not None:
        return [partitions_stage(keys, size, scheme, None if asset == state.target else asset)]
    if args.asset:
        raise UsageError("--asset names the table of --partition(s)", fix="pass the partitions to re-run too")
    if args.proof:
        return [proof_stage(state.proof_keys, size, scheme)]

    def passed(table: str) -> set[str]:
        latest = ledger.latest(session, table, list(state.keys_of(table)), state.plan_id, figures=False)
        return {k for k, e in latest.items() if e is not None and e.passed}

    from backfill_assets.execution.advance import STALE, window_verdict

    stages = [window_stage(state.partition_keys, state.proof_keys, passed(state.target), size, scheme)]
    # a downstream partition whose gates passed but which was computed before a partition it reads
    # was written again (a day re-run after its month), or which reads one this command re-runs, is
    # not done: skipped, `run` said "nothing to run: every partition ... passed" and exited 0 with
    # the month stale and the plan unreconciled (found by an attack)
    stale = window_verdict(session, state).failed_downstream if len(state.assets) > 1 else {}
    rerun = {state.target: set(stages[0].partitions)}
    graph = loaded.table(state.target).graph
    for table in state.assets[1:]:
        redo = {k for k, notes in stale.get(table, {}).items() if any(n.startswith(STALE) for n in notes)}
        upstream = graph.upstream(table) if graph is not None else None
        again = rerun.get(upstream, set()) if upstream is not None else set()
        if graph is not None and again:
            redo |= {k for k in state.keys_of(table) if again & set(graph.upstream_keys(table, k))}
        stage = downstream_stage(table, state.keys_of(table), passed(table) - redo, size, loaded.table(table).scheme())
        rerun[table] = set(stage.partitions)
        stages.append(stage)
    return stages


def _refuse_phase(args: argparse.Namespace, state: record.PlanState, stage: Stage, empty_proof: bool = False) -> None:
    """`empty_proof`: the proof's partitions were written twice with no rows (`advance.proof_verdict`)."""
    pid = state.plan_id
    if state.phase not in (Phase.APPROVED, Phase.PROVING, *PAST_PROOF):
        raise PlanRefused(f"plan {pid} is {state.phase}; it cannot run", fix=f"see `backfill status {pid}`")
    if state.hold is Hold.CANCELLED:
        raise PlanRefused(f"plan {pid} was cancelled", fix=lifecycle.rollback_named_by_status(pid))
    if args.proof and state.phase not in (Phase.APPROVED, Phase.PROVING):
        raise PlanRefused(f"plan {pid} is {state.phase}; the proof is not open",
                          fix="the proof runs once, between approval and the window")
    proof_only = stage.asset is None and set(stage.partitions) <= set(state.proof_keys)
    if not args.proof and state.phase not in PAST_PROOF and not (partition_args.given(args) and proof_only):
        raise PlanRefused(f"plan {pid} is {state.phase}: the window runs only after the proof passed"
                          + (" on data (its partitions wrote no rows)" if empty_proof else ""),
                          fix=f"run `backfill run {pid} --proof`" + (
                              " once the source holds rows there; `backfill status` names the other ways on"
                              if empty_proof else ""))


def cmd_run(args: argparse.Namespace) -> int:
    from backfill_assets.execution.runner import enable_event_batching
    from backfill_assets.loaded_defs import load_defs

    if args.proof and partition_args.given(args):
        raise UsageError("--proof runs the proof partitions; it takes no --partition(s)",
                         fix="pass either --proof or the partitions to re-run")
    if args.and_publish and (args.proof or args.dry_run or partition_args.given(args) or args.asset):
        raise UsageError("--and-publish runs the whole plan from where it stands; it takes no --proof, "
                         "--dry-run, --partition(s) or --asset",
                         fix="run those steps on their own, or drop them from this command")
    home = home_of(args)
    os.environ["BACKFILL_HOME"] = str(home.root)  # in-process runs resolve the warehouse like UI runs
    enable_event_batching()
    loaded = load_defs(args.defs)
    if args.and_publish:
        from backfill_assets.warehouse import kept_open

        # its steps' sessions join one open database (DuckDB): each session opened it again, and
        # asked again what the catalog holds and which chain it is (~0.4 s of 7 at 365 partitions);
        # it is let go between two steps, where others waiting for the file are let in
        with kept_open():
            return _run_and_publish(args, loaded)
    return _run(args, loaded)


def _run_and_publish(args: argparse.Namespace, loaded: LoadedDefs) -> int:
    """Each step is what its own command does, in one process (one Python start, one load of the
    definitions, one Dagster instance: ~1 s a command saved); the proof still passes before the
    window starts, and publish still decides on everything again."""
    from backfill_assets.cli.report_cmds import publish_plan, reconcile_plan
    from backfill_assets.errors import PublishBlocked
    from backfill_assets.execution.advance import advance, published_edits
    from backfill_assets.status import plan_status

    with writing(args) as session:
        state = plan_state(session, args.plan)
        if state.phase is Phase.PUBLISHED:
            # looked at first, as `backfill publish` does: a published table edited since moves the
            # plan to repairing, and the steps below put the checked bytes back (found by an attack)
            table = loaded.table(state.target)
            state = advance(session, state, actor(), table.spec, table.scheme(), table.graph)
            edited = published_edits(session, state, table.spec, table.scheme(), table.graph) \
                if state.phase is Phase.PUBLISHED else []
            if edited:  # still published over the edit: another plan holds some of its partitions
                raise PublishBlocked(
                    f"plan {state.plan_id} is published, but {edited[0]} was edited since; it cannot be published "
                    "again while another plan holds some of its partitions",
                    fix=plan_status(session, state, table.spec, table.scheme(), table.graph).next)
    if state.phase in (Phase.PUBLISHED, Phase.CLOSED):  # a retry after success succeeds
        print(f"plan {state.plan_id} is already {state.phase}: nothing to run or publish")
        return 0
    steps: list[Callable[[bool], int]] = []
    if state.phase in (Phase.APPROVED, Phase.PROVING):
        proof = argparse.Namespace(**{**vars(args), "proof": True})
        steps.append(lambda first: _run(proof, loaded, chained=True, resume=first))
    steps += [lambda first: _run(args, loaded, chained=True, resume=first),
              lambda _: reconcile_plan(args, loaded, brief=True),
              lambda _: publish_plan(args, loaded, chained=True)]
    published = failing = False
    try:
        for number, step in enumerate(steps):
            if number:  # a pause or cancel from another shell stops what comes next (found by an attack)
                engine = warehouse_of(args).engine
                before_publish = number == len(steps) - 1
                if not before_publish:
                    # the database goes between steps with the blocks the step before read (peak RSS
                    # at 2,526 partitions 441 -> 413 MB, for ~0.1 s at 365) and what it checked: each
                    # step checks its own. Not before publish, which reads none of reconcile's source
                    # blocks and finds the seals reconcile verified and made still remembered (its
                    # whole-record check at 2,526: 0.50 -> 0.27 s; peak RSS unchanged)
                    engine.let_go()
                engine.yield_to_waiters()
                with writing(args) as session:
                    _refuse_new_hold(plan_state(session, args.plan))
            code = step(number == 0)
            if code:
                failing = True  # the step said why: its one line
                return code
        published = True  # publish recorded the plan's state as it ended
        return 0
    except BaseException:
        failing = True
        raise
    finally:
        if not published:  # the state each step left, on the assets once (~0.2 s a recording)
            record_plan_state(args, state.plan_id, loaded.table(state.target).graph, failing=failing)


def _refuse_new_hold(state: record.PlanState) -> None:
    """Only the first step of `--and-publish` resumes a plan paused before the command started; a
    later step treated a pause typed meanwhile as its own `backfill run` and lifted it."""
    if state.hold is Hold.PAUSED:
        raise PlanRefused(f"plan {state.plan_id} was paused while this command ran: it stops here",
                          fix=f"`backfill run {state.plan_id} --and-publish` resumes it")
    if state.hold is Hold.CANCELLED:
        raise PlanRefused(f"plan {state.plan_id} was cancelled while this command ran: it stops here",
                          fix=lifecycle.rollback_named_by_status(state.plan_id))


def _run(args: argparse.Namespace, loaded: LoadedDefs, *, chained: bool = False, resume: bool = True) -> int:
    """`chained`: a step of --and-publish, whose next step is not the reopen sensor; `resume`: a
    pause is lifted, as a `backfill run` typed to resume it (not a later step of --and-publish)."""
    from backfill_assets.dagster_setup import instance_for
    from backfill_assets.execution.advance import advance, proof_verdict
    from backfill_assets.execution.runner import execute, fail_dead_runs, run_range, worker_run

    home = home_of(args)
    warehouse = warehouse_of(args)
    with writing(args) as session:
        state = plan_state(session, args.plan)
        table = loaded.table(state.target)
        stages = _stages(args, session, state, loaded)
        if args.dry_run:
            execution = state.approved.plan.execution
            print(f"plan {state.plan_id}: {state.target} mode {execution.mode}, window "
                  f"{state.partition_keys[0]}..{state.partition_keys[-1]} ({len(state.partition_keys)} "
                  f"partitions), {execution.partitions_per_run} per run (dry run: nothing written)")
            for asset in state.assets[1:]:
                keys = state.keys_of(asset)
                print(f"  then {asset} {keys[0]}..{keys[-1]} ({len(keys)} partitions), recomputed from "
                      f"{loaded.graph.upstream(asset)}")
            for stage in stages:
                print(stage.describe())
            return 0
        empty_proof = state.phase is Phase.PROVING and proof_verdict(session, state).empty_proof
        for stage in stages:
            _refuse_phase(args, state, stage, empty_proof)
        if not resume:
            _refuse_new_hold(state)
        from backfill_assets.control import authority
        from backfill_assets.permission import code_identity

        why = authority.refusal(session, state.approved, code=code_identity(state, table.spec, table.graph))
        if why:  # every run's permission says the same; this says it before anything starts
            raise PlanRefused(f"plan {state.plan_id} may not run: {why}",
                              fix="have it signed again (`backfill plan statement PLAN` shows what to sign)")
        if not any(stage.partitions for stage in stages):
            instance = instance_for(home)  # opened once: dead runs, then the plan's state
            fail_dead_runs(instance)
            print(f"nothing to run: every partition of {state.plan_id} is already written and passed")
            # the run a paused plan's status names resumes it even so: a pause kept here had
            # `status` name the same run again and again (found by an attack)
            state = lifecycle.run_resumed(session, state, actor())
            state = advance(session, state, actor(), table.spec, table.scheme(), table.graph)
            print(f"plan {state.plan_id} is {state.phase}")
            if not chained:  # --and-publish records it once, as it ends
                record_plan_state(args, state.plan_id, table.graph, instance)
            return 0
        from backfill_assets.control import evidence_log

        evidence_log.ready_to_append(session)  # every write appends: its faults are one line here
        held = lease.acquire(session, state.plan_id, f"backfill run by {actor()}")
        state = lifecycle.run_resumed(session, state, actor())
    try:
        instance = instance_for(home)
    except BaseException:
        # a full disk or a read-only DAGSTER_HOME: one line, and the lease taken a moment ago is
        # given back, so nothing this command did stays
        with warehouse.session() as session:
            lease.release(session, held)
        raise
    execution = state.approved.plan.execution
    parallel = execution.runs_at_once if warehouse.engine.name != "duckdb" else 1
    if execution.runs_at_once > 1 and parallel == 1:
        print(f"runs_at_once {execution.runs_at_once}: the embedded DuckDB takes one writer at a time, so "
              "runs go one after another (use a server engine to run them at once)")
    pool, reports = None, []
    try:
        fail_dead_runs(instance)
        for stage in stages:
            if stage.partitions:
                print(stage.describe(), flush=True)
        with output.dagster_output(home) as log:
            if parallel > 1:
                import multiprocessing
                from concurrent.futures import ProcessPoolExecutor

                pool = ProcessPoolExecutor(parallel, mp_context=multiprocessing.get_context("spawn"))
                url = os.environ.get("BACKFILL_WAREHOUSE_URL")

                def run_wave(wave: list[list[str]], asset: str) -> list[tuple[str, list[str]]]:
                    from concurrent.futures.process import BrokenProcessPool

                    futures = [pool.submit(worker_run, args.defs, str(home.root), url, state.plan_id,
                                           asset, keys, actor(), output.verbose(),
                                           lease.launcher_label(held), lease.identity(held)) for keys in wave]
                    try:
                        return [f.result() for f in futures]
                    except BrokenProcessPool:
                        # a worker killed (kill -9, the OOM killer): the pool ends the others' runs,
                        # each transaction rolled back (an internal error, found by an attack)
                        raise BackfillError(
                            f"a run worker of plan {state.plan_id} died while its run of {asset} "
                            f"{wave[0][0]}..{wave[-1][-1]} was in progress (killed?), and the wave's other "
                            "runs were stopped; every partition is wholly old or new",
                            fix=f"`backfill run {state.plan_id}` resumes with the partitions not yet "
                                "written") from None
            else:
                def run_wave(wave: list[list[str]], asset: str) -> list[tuple[str, list[str]]]:
                    return [run_range(loaded, loaded.table(asset), instance, state.plan_id, keys, actor(),
                                      output.run_config()) for keys in wave]
            for stage in stages:
                if not stage.partitions:
                    continue
                done = execute(stage, warehouse, state, held, run_wave, parallel)
                reports += done
                if not all(r.ok for r in done) or len(done) < len(stage.runs) * stage.repeats:
                    break  # halted: a table downstream reads only what passed its gates
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        with warehouse.session() as session:
            lease.release(session, held)
            # in the same connection (opening one costs ~15 ms on DuckDB); not on the way out of an error
            after = advance(session, record.require(session, state.plan_id), actor(), table.spec,
                            table.scheme(), table.graph) if reports else None
            verdict = proof_verdict(session, after) if args.proof and after else None
    assert after is not None
    if not chained:  # --and-publish records it once, as it ends
        record_plan_state(args, after.plan_id, table.graph, instance)
    print(f"{sum(len(r.run_ids) for r in reports)} Dagster run(s) on {home.dagster_home}")
    if not all(r.ok for r in reports):
        print(f"plan {after.plan_id} is {after.phase}; Dagster's log: {log}")
        return 1
    if args.proof:
        if after.phase in (Phase.APPROVED, Phase.PROVING):
            for line in verdict.blockers if verdict else []:
                print(f"  {line}")
            print(f"proof NOT passed; plan {after.plan_id} stays {after.phase}")
            return 1
        print(f"proof passed: fingerprints identical on both runs; plan {after.plan_id} is {after.phase}")
        return 0
    print(f"plan {after.plan_id} is {after.phase}"
          + ("; the reopen sensor (or `backfill publish`) reopens publish"
             if after.phase is Phase.RECONCILED and not chained else ""))
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    with writing(args) as session:
        state = lifecycle.paused(session, plan_state(session, args.plan), actor())
    print(f"plan {state.plan_id} is paused: it stops before its next run (runs in flight finish); "
          f"`backfill run {state.plan_id}` resumes")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from backfill_assets.warehouse.state_store import ledger as ledger_store

    with writing(args) as session:
        state = plan_state(session, args.plan)
        wrote = ledger_store.count_keys_of_plan(session, state.plan_id)
        if lifecycle.cancel_withdraws(state, wrote):
            from backfill_assets.execution.rollback import withdraw

            try:
                state = withdraw(session, state, actor(), "cancelled before writing")
            except PlanRefused:
                # a run's first write committed while the withdrawal waited for the plan's row (read
                # under it, as the withdrawal reads it): the plan wrote, so the cancel holds it. It
                # refused as a withdrawal, and the plan it was typed to stop ran on (found by an attack)
                wrote = ledger_store.count_keys_of_plan(session, state.plan_id)
                if not wrote:
                    raise
            else:
                print(f"plan {state.plan_id} wrote nothing and is withdrawn")
                return 0
        state = lifecycle.cancelled(session, state, actor())
    # the phase as the cancel found it under the plan's lock (one that waited on a publish finds
    # the plan published, and is refused: nothing to cancel)
    print(f"plan {state.plan_id} ({state.phase}) is cancelled: no new run may write; it wrote {wrote} partition(s); "
          f"next: {_rollback_step(args, state.plan_id)}")
    return 0


def _rollback_step(args: argparse.Namespace, plan_id: str) -> str:
    """The rollback a cancelled plan takes, as `status` names it (`--keep-computed` for a table
    computed from its partitions since, approvers' signatures once consumers saw its data): a bare
    `backfill rollback PLAN` was named, which those refuse. Read after the cancel committed, so a
    refusal here names `status` rather than fail a cancel that holds."""
    from backfill_assets.status import plan_status

    try:
        with reading(args) as session:
            state = plan_state(session, plan_id)
            step = plan_status(session, state, *table_of(tables_if_found(), state.target)).next
    except BackfillError:
        return lifecycle.rollback_named_by_status(plan_id)
    return f"{step} (see `--dry-run` first)" if step.startswith("roll it back") else step


def cmd_rollback(args: argparse.Namespace) -> int:
    from backfill_assets.control.authority import keep_options, rollback_statement
    from backfill_assets.execution.rollback import rollback
    from backfill_assets.loaded_defs import load_defs

    loaded = load_defs(args.defs)
    with writing(args) as session:
        state = plan_state(session, args.plan)
        keep = args.keep_computed or ()
        if keep:  # refused before a statement naming them is printed for approvers to sign (found by an attack)
            from backfill_assets.execution.rollback import kept_tables

            table = loaded.table(state.target)
            kept_tables(state, table.spec, table.scheme(), table.graph, keep)
        if args.print_statement:
            print(rollback_statement(session, state.approved, keep=keep).text, end="")
            return 0
        table = loaded.table(state.target)
        given = candidates(args, lambda: rollback_statement(session, state.approved, keep=keep),
                           printed_by=f"backfill rollback {state.plan_id} --print-statement{keep_options(keep)}") \
            if args.sign or args.signature else []
        report = rollback(session, table.spec, table.scheme(), state, actor(), dry_run=args.dry_run,
                          signatures=given, graph=table.graph, keep_computed=args.keep_computed)
    for line in report.lines():
        print(line)
    if not args.dry_run:
        record_plan_state(args, state.plan_id, table.graph)
    return 0

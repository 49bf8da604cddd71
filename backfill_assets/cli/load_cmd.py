"""`backfill load TARGET --start A --end B`: a new table's history, without a plan.

The data decides: partitions that hold no rows and were never written are new, and any run may fill
them. The load refuses before launching anything when one of them is history (it holds rows, or
was written before) or lies in an active plan's window, naming the first; then it runs ranges of
the target and its published asset, gated and published like the daily schedule's runs, shows its
progress, and halts at the first range whose gates fail. Each run's permission decides again,
inside each write transaction. A load retried after one was killed converges: partitions whose
latest write was plan-free, passed its gates and still holds its bytes are not history to it;
they are not written again, and those not yet published are published (under the same rule).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from backfill_assets import terminal as output
from backfill_assets.cli.common import actor, add_defs, add_home, home_of, writing
from backfill_assets.errors import PlanRefused, UsageError
from backfill_assets.terminal import NEW_PLAN_FILE, shell_word

if TYPE_CHECKING:
    from backfill_assets.loaded_defs import LoadedDefs
    from backfill_assets.partitions import PartitionScheme
    from backfill_assets.table import TableSpec
    from backfill_assets.warehouse.engine import Session


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    load = sub.add_parser("load", help="fill a table's never-written partitions without a plan, in ranged runs")
    load.add_argument("target", help="the replayable table")
    load.add_argument("--start", required=True, help="first partition key")
    load.add_argument("--end", required=True, help="last partition key (inclusive)")
    load.add_argument("--per-run", type=int, help="partitions a run writes (default: the target's backfill policy)")
    load.add_argument("--dry-run", action="store_true", help="print the runs, write nothing")
    add_defs(load)
    add_home(load)
    load.set_defaults(handler=cmd_load, relay=True)


def _span(scheme: PartitionScheme, start: str, end: str, target: str) -> list[str]:
    for key in (start, end):
        if key not in scheme:
            raise UsageError(f"{key!r} is not a partition of {target}",
                             fix=f"name keys of its partitions ({scheme.ordered_keys[0]}..{scheme.ordered_keys[-1]})")
    first, last = scheme.position(start), scheme.position(end)
    if first > last:
        raise UsageError(f"--start {start} comes after --end {end}", fix="swap them")
    return list(scheme.ordered_keys[first:last + 1])


def _per_run(args: argparse.Namespace, loaded: LoadedDefs, target: str) -> int:
    if args.per_run is not None:
        if not 1 <= args.per_run <= 1000:
            raise UsageError(f"--per-run {args.per_run} is out of range", fix="give 1..1000")
        return int(args.per_run)
    import dagster as dg

    policy = loaded.definitions.resolve_assets_def(dg.AssetKey(target.split("/"))).backfill_policy
    return (policy.max_partitions_per_run if policy else None) or 1


def _loaded_before(session: Session, spec: TableSpec, scheme: PartitionScheme,
                   keys: Sequence[str]) -> tuple[set[str], list[str]]:
    """Of `keys` (history), those whose latest write was plan-free, passed its gates and still holds
    its bytes (a load's, or the schedule's), and of them those not published as written: a retried
    load converges on them instead of calling them history. Publish decides on them again."""
    from backfill_assets.control import ledger
    from backfill_assets.warehouse.fingerprints import fingerprints, fingerprints_like

    latest = ledger.latest(session, spec.name, keys, figures=False)
    passed = {k: e.fingerprint for k, e in latest.items() if e is not None and e.plan_id is None and e.passed
              and not e.fingerprint.legacy and all(fp == e.fingerprint.digest for fp in e.checked.values())}
    if not passed:
        return set(), []
    now = fingerprints_like(session, spec.table, spec.columns, scheme, spec.partition_column, passed)
    done = {k for k, fp in passed.items() if now[k] == fp}
    published = fingerprints(session, spec.publish_table, spec.columns, scheme, spec.partition_column,
                             sorted(done)) if done and session.engine.table_exists(session, spec.publish_table) else {}
    return done, [k for k in keys if k in done and published.get(k) != passed[k]]


def cmd_load(args: argparse.Namespace) -> int:
    from backfill_assets.control import ledger, record
    from backfill_assets.dagster_setup import instance_for
    from backfill_assets.execution.runner import Progress, enable_event_batching, fail_dead_runs, run_range
    from backfill_assets.execution.stages import Stage, runs_of
    from backfill_assets.loaded_defs import load_defs
    from backfill_assets.permission import history

    home = home_of(args)
    os.environ["BACKFILL_HOME"] = str(home.root)  # in-process runs resolve the warehouse like UI runs
    enable_event_batching()
    loaded = load_defs(args.defs)
    table = loaded.table(args.target)
    spec, scheme = table.spec, table.scheme()
    keys = _span(scheme, args.start, args.end, spec.name)
    with writing(args) as session:
        held = next(((k, p) for k in keys for p in record.active_plans(session, target=spec.name)
                     if p.covers(k, spec.name)), None)
        if held is not None:
            raise PlanRefused(f"{held[0]} of {spec.name} lies in plan {held[1].plan_id}'s window",
                              fix=f"load around it, or run it with the plan (`backfill status {held[1].plan_id}`)")
        old = history(session, spec, scheme, keys)
        # what an earlier load of these keys wrote, gated and left unchanged (one killed before its
        # publish, or halted): not written again; published, if it is not yet
        done, unpublished = _loaded_before(session, spec, scheme, [k for k in keys if k in old])
    old = {k: why for k, why in old.items() if k not in done}
    if old:
        first = next(k for k in keys if k in old)
        raise PlanRefused(f"{len(old)} of the {len(keys)} partition(s) of {spec.name} are history "
                          f"({first} {old[first]}); only partitions never written load without a plan",
                          fix=f"load the new ones around them, and replay history with a plan (`backfill plan new "
                              f"{NEW_PLAN_FILE} --target {spec.name}`)")
    todo = [k for k in keys if k not in done]
    stage = Stage(f"load {spec.name}", runs_of(todo, _per_run(args, loaded, spec.name), scheme))
    already = (f"{len(done)} partition(s) loaded before, gated and unchanged: not written again"
               + (f"; {len(unpublished)} of them published now" if unpublished else "")) if done else ""
    if args.dry_run:
        print("\n".join(filter(None, [stage.describe() if todo else "", already.replace(" now", " by the load")]))
              + "\n(dry run: nothing written)")
        return 0
    if todo:
        output.say(stage.describe())
    if already:
        output.say(already)
    if not todo and not unpublished:
        print(f"nothing to load: the {len(keys)} partition(s) of {spec.name} were loaded and published before")
        return 0
    instance = instance_for(home)
    progress = Progress(len(todo), stage.name, output.write, output.terminal_is_tty())
    runs, halted = 0, None
    fail_dead_runs(instance)
    part: Sequence[str]  # a run's keys, then the halted run's
    with output.dagster_output(home) as log:
        for first, last in scheme.runs(unpublished):
            span = list(scheme.ordered_keys[scheme.position(first):scheme.position(last) + 1])
            _, errors = run_range(loaded, table, instance, None, span, actor(), output.run_config(),
                                  assets=[spec.publish_as])
            if errors:
                for error in errors[:3]:
                    print(f"  publish failed: {error}")
                print(f"the partitions loaded before were not published; Dagster's log: {log}")
                return 1
        for part in stage.runs:
            _, errors = run_range(loaded, table, instance, None, list(part), actor(), output.run_config(),
                                  assets=[spec.name, spec.publish_as])
            runs += 1
            progress.advance(len(part))
            if errors:
                halted = (list(part), errors)
                break
    if halted is None:
        print(f"loaded {len(todo)} partition(s) of {spec.name} in {runs} run(s), gated and published to "
              f"{spec.publish_as}" + (f" ({len(done)} loaded before)" if done else ""))
        return 0
    part, errors = halted
    with writing(args) as session:
        latest = ledger.latest(session, spec.name, part, figures=False)
    failed = {k: e.failed for k, e in latest.items() if e is not None and not e.passed}
    passed = [k for k, e in latest.items() if e is not None and e.passed]
    if passed:
        # the run wrote its whole range before its failing gates failed it, so its publish step was
        # skipped: the partitions that passed are published apart, under the same rule
        instance = instance_for(home)
        with output.dagster_output(home):
            for first, last in scheme.runs(passed):
                span = list(scheme.ordered_keys[scheme.position(first):scheme.position(last) + 1])
                run_range(loaded, table, instance, None, span, actor(), output.run_config(),
                          assets=[spec.publish_as])
    for error in errors[:3]:
        print(f"  run failed: {error}")
    for key, gates in list(failed.items())[:10]:
        print(f"  {key}: {', '.join(gates)} failed")
    print(f"halted at {part[0]}..{part[-1]}; Dagster's log: {log}")
    if failed:
        from backfill_assets.status import draft_window

        bad = [k for k in part if k in failed]
        # static keys are text: quoted, as the shell reads them back (a blank split the command, found
        # by an attack)
        print(f"those partitions hold rows now, so rewriting them is a replay: fix the cause, then `backfill plan "
              f"new {NEW_PLAN_FILE} --target {spec.name}{draft_window(bad[0], bad[-1])}`")
        after = scheme.position(part[-1]) + 1
        if after <= scheme.position(keys[-1]):
            print(f"the rest loads with `backfill load {spec.name} --start {shell_word(scheme.ordered_keys[after])} "
                  f"--end {shell_word(keys[-1])}`")
    return 1

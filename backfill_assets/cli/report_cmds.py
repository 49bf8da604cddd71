"""`backfill reconcile | publish | status | evidence`."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import yaml

from backfill_assets import evidence
from backfill_assets.cli.common import actor, add_home, home_of
from backfill_assets.control import evidence_log, gate_record, record
from backfill_assets.control.schema import ensure_schema
from backfill_assets.errors import PublishBlocked, UsageError
from backfill_assets.execution.progress import advance, proof_verdict, window_verdict
from backfill_assets.execution.reconcile import reconcile
from backfill_assets.plan import load_plan, resolve
from backfill_assets.plan.gate import ensure_approved_version, verify_unchanged
from backfill_assets.plan.phases import Phase
from backfill_assets.publish import rule
from backfill_assets.warehouse.connection import connection


def register(sub: argparse._SubParsersAction) -> None:
    rec = sub.add_parser("reconcile", help="every gate of the window on the data as it is now")
    rec.add_argument("plan_file")
    rec.add_argument("--json", action="store_true")
    rec.add_argument("--defs")
    add_home(rec)
    rec.set_defaults(handler=cmd_reconcile)

    pub = sub.add_parser("publish", help="reopen publish now, or say what blocks it")
    pub.add_argument("plan_file")
    pub.add_argument("--defs")
    add_home(pub)
    pub.set_defaults(handler=cmd_publish)

    status = sub.add_parser("status", help="phase, partitions, gates, publish, what to do next")
    status.add_argument("plan_file")
    status.add_argument("--json", action="store_true")
    add_home(status)
    status.set_defaults(handler=cmd_status)

    ev = sub.add_parser("evidence", help="render the release-gate evidence, or `verify` the log")
    ev.add_argument("plan_file", help="a plan file, or the word `verify`")
    ev.add_argument("--out", help="write the YAML here instead of stdout")
    ev.add_argument("--against", help="with verify: a rendered evidence file whose pinned head "
                                      "must still be in the log")
    add_home(ev)
    ev.set_defaults(handler=cmd_evidence)


def _state(con, plan_file: str):
    plan = load_plan(plan_file)
    return plan, record.require(con, plan.plan_id)


def cmd_reconcile(args: argparse.Namespace) -> int:
    from backfill_assets.execution.registry import load_defs

    home = home_of(args)
    resolved = resolve(args.plan_file)
    table = load_defs(args.defs).table(resolved.plan.target)
    with connection(home.warehouse) as con:
        ensure_schema(con)
        state = record.require(con, resolved.plan_id)
        ensure_approved_version(resolved, state)
        # thresholds come from the approved file the control record points at, never a copy
        approved = verify_unchanged(state, con)
        result = reconcile(con, table.spec, state, approved, actor())
    if args.json:
        print(json.dumps({"plan_id": state.plan_id, "phase": result.state.phase.value,
                          "passed": result.passed, "partitions": result.rows()}, indent=2))
    else:
        print(result.table())
        print(f"{'all gates passed' if result.passed else 'NOT reconciled'}; plan "
              f"{state.plan_id} is {result.state.phase}")
    return 0 if result.passed else 1


def cmd_publish(args: argparse.Namespace) -> int:
    from backfill_assets.dagster_setup import instance_for
    from backfill_assets.defs.sensor import publish_run_tags
    from backfill_assets.execution.registry import load_defs
    from backfill_assets.execution.runner import QUIET

    home = home_of(args)
    os.environ["BACKFILL_HOME"] = str(home.root)
    resolved = resolve(args.plan_file)
    loaded = load_defs(args.defs)
    table = loaded.table(resolved.plan.target)
    with connection(home.warehouse) as con:
        ensure_schema(con)
        state = record.require(con, resolved.plan_id)
        ensure_approved_version(resolved, state)
        state = advance(con, state, actor())
        if state.phase is Phase.PUBLISHED:
            print(f"plan {state.plan_id} is already published")
            return 0
        if state.phase is not Phase.RECONCILED:
            verdict = (proof_verdict(con, state) if state.phase in (Phase.APPROVED, Phase.PROVING)
                       else window_verdict(con, state))
            blockers = verdict.blockers or [f"the plan is {state.phase}"]
            raise PublishBlocked(f"publish of plan {state.plan_id} is blocked: "
                                 + "; ".join(blockers[:6]),
                                 fix="finish the proof and the window (backfill run), then retry")
        problems = rule.blockers(con, table.spec, state.partition_keys, publish_run_tags(state))
    if problems:
        raise PublishBlocked("; ".join(problems[:6]), fix="re-materialize and reconcile first")
    job = loaded.definitions.resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(instance=instance_for(home), asset_selection=[table.publish.key],
                                    tags={**publish_run_tags(state),
                                          "backfill_assets/actor": actor()},
                                    raise_on_error=False, run_config=QUIET)
    if not result.success:
        raise PublishBlocked(f"the publish run {result.run_id} failed; nothing was published",
                             fix="see the run in the Dagster UI")
    print(f"published {table.spec.publish_as} for {state.window_start}..{state.window_end} "
          f"(run {result.run_id}); downstream owners notified")
    return 0


def _next_step(phase: Phase, plan_file: str) -> str:
    return {
        Phase.DRAFTED: f"collect approvals: backfill plan approve {plan_file} --by NAME",
        Phase.APPROVED: f"run the proof: backfill run {plan_file} --proof",
        Phase.PROVING: f"finish the proof: backfill run {plan_file} --proof",
        Phase.PROVEN: f"run the window: backfill run {plan_file}",
        Phase.RUNNING: f"finish the window (backfill run {plan_file}); fix failing partitions "
                       f"and re-run them with --partitions",
        Phase.RECONCILED: f"publish reopens by the sensor, or now: backfill publish {plan_file}",
        Phase.PUBLISHED: "done; close the plan when consumers confirm",
        Phase.CLOSED: "nothing: the plan is closed",
        Phase.ROLLED_BACK: "nothing: the plan was rolled back; draft a new plan to retry",
    }[phase]


def cmd_status(args: argparse.Namespace) -> int:
    home = home_of(args)
    plan = load_plan(args.plan_file)
    with connection(home.warehouse) as con:
        ensure_schema(con)
        state = record.require(con, plan.plan_id)
        latest = gate_record.latest(con, state.target, state.partition_keys, state.plan_id)
        published = [r for r in evidence_log.rows(con, plan.plan_id, "published")]
    written = [k for k, e in latest.items() if e is not None]
    passed = [k for k, e in latest.items() if e is not None and e.passed]
    failed = {k: e.failed for k, e in latest.items() if e is not None and not e.passed}
    report = {
        "plan_id": state.plan_id, "phase": state.phase.value, "target": state.target,
        "window": [state.window_start.isoformat(), state.window_end.isoformat()],
        "partitions": len(state.partition_keys), "written": len(written),
        "reconciled": len(passed), "failed": failed,
        "publish": ("reopened at " + published[-1].at) if published else
                   ("paused" if state.active else "not paused"),
        "next": _next_step(state.phase, args.plan_file),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"plan       {state.plan_id}: {state.phase}")
    print(f"window     {report['window'][0]}..{report['window'][1]} of {state.target}, "
          f"{report['partitions']} partitions")
    print(f"written    {len(written)}  reconciled {len(passed)}  failed {len(failed)}")
    for key, gates in failed.items():
        print(f"  {key}: {', '.join(gates)}")
    print(f"publish    {report['publish']}")
    print(f"next       {report['next']}")
    return 0


def _pinned_head(path: str) -> tuple[int, str]:
    try:
        chain = (yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}).get("chain") or {}
        return int(chain["head_seq"]), str(chain["head_hash"])
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError):
        raise UsageError(f"{path} is not a rendered evidence file with a chain head",
                         fix="pass a file written by `backfill evidence PLAN --out FILE`") from None


def cmd_evidence(args: argparse.Namespace) -> int:
    home = home_of(args)
    if args.plan_file == "verify":
        if not home.warehouse.exists():
            raise UsageError(f"no warehouse at {home.warehouse}", fix="pass --home")
        pinned = _pinned_head(args.against) if args.against else None
        with connection(home.warehouse, read_only=True) as con:
            count = evidence_log.verify(con, pinned)
        print(f"evidence chain verified: {count} row(s) intact"
              + (f", up to row {pinned[0]} pinned by {args.against}" if pinned else ""))
        return 0
    with connection(home.warehouse) as con:
        ensure_schema(con)
        _plan, state = _state(con, args.plan_file)
        document = evidence.render(con, state, actor())
    text = evidence.to_yaml(document)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote evidence for {state.plan_id} to {args.out}")
    else:
        print(text, end="")
    return 0

"""Attacks on the fixes of 413da7f..6f572ce: the leases' pid-reuse rule, the rollback refused while
a table was computed since, and what they leave."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.test_leases import _HOLD


@pytest.mark.separate_processes
def test_a_live_holder_stays_the_holder_when_the_clock_steps_forward(world):
    """A `backfill run` holds the plan's lease on this host and is busy in a slice (no heartbeat);
    the wall clock then steps forward ten minutes (chrony correcting a VM paused meanwhile, NTP's
    first sync in a fresh container). Its start time, as /proc computes it from the boot time, moves
    ten minutes later with the clock, after the heartbeat it wrote: the live holder was taken for a
    process that got a dead holder's pid, and a second `backfill run` of the plan took its lease
    and ran beside it. The step is emulated by moving the heartbeat back ten minutes, which is the
    same distance between the holder's start as /proc then says it and the heartbeat."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(world.home), world.url or "", "fix"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONWARNINGS": "ignore"})
    try:
        assert holder.stdout.readline().strip() == "held"
        world.run_sql("UPDATE backfill_control.leases SET heartbeat_at = heartbeat_at - 600 WHERE plan_id = 'fix'")
        assert world.cli("run", "fix", "--proof") != 0  # the holder runs: no second run of the plan
        assert world.sql("SELECT pid FROM backfill_control.leases WHERE plan_id = 'fix'") == [(holder.pid,)]
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


def test_a_live_cli_run_is_not_failed_when_the_clock_steps_forward(world):
    """A run this process made (our CLI's tags), its creation ten minutes before this process's
    start as /proc says it after a forward step of the wall clock: `fail_dead_runs` marked the live
    run failed."""
    import datetime as dt

    import dagster as dg
    import sqlalchemy as db
    from dagster._core.storage.dagster_run import DagsterRun
    from dagster._core.storage.runs.schema import RunsTable

    from backfill_assets.execution.runner import fail_dead_runs
    from backfill_assets.tags import cli_run_tags

    script = ("import json, sys; from backfill_assets.execution import runner; "
              "print(json.dumps(getattr(runner, 'our_run_tags', runner.cli_run_tags)(None, 'ops')), flush=True); "
              "sys.stdin.read()")
    other = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    try:
        import json
        tags = json.loads(other.stdout.readline())
        assert tags.keys() >= cli_run_tags(None, "ops").keys()
        run = world.instance.add_run(DagsterRun(job_name="__ASSET_JOB", status=dg.DagsterRunStatus.STARTED,
                                                tags=tags))
        made = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(minutes=10)
        with world.instance.run_storage.connect() as conn:  # the clock stepped ten minutes since
            conn.execute(db.update(RunsTable).where(RunsTable.c.run_id == run.run_id).values(create_timestamp=made))
        assert fail_dead_runs(world.instance) == []
    finally:
        other.stdin.close()
        other.wait(timeout=60)


def test_a_cancelled_plan_whose_days_a_month_was_computed_from_has_a_way_out(world, monkeypatch, capsys):
    """A plan over 2026-01-05..08 is published; the team deploys its monthly rollup and loads
    January's month from the published days. A published day is then edited, so the plan goes back
    to repairing, and the operator cancels it: a cancelled plan only rolls back, and its rollback was
    refused for good while the month computed from its days stood (its writer, a load without a
    plan, has no rollback; a new plan listing the month is refused while the cancelled plan holds its
    window): no command ended the plan. Naming the month with --keep-computed leaves it as it is,
    said and recorded; a name of no table is one line."""
    from tests.test_graph import FULL_DEFS, MONTH, _january_and_a_plan_over_its_days, defs_of, run
    from tests.world import BUGGY

    _january_and_a_plan_over_its_days(world)
    assert world.cli("publish", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    assert run(world, defs_of(world, BUGGY), ["monthly_revenue", "published_monthly_revenue"], [MONTH],
               {"dagster/backfill": "ui-bf"}).success
    month = world.sql("SELECT sum(net_revenue) FROM published_monthly_revenue")
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 WHERE order_date = DATE '2026-01-06'")
    world.cli("reconcile", "fix")
    assert world.phase("fix") == "repairing"
    assert world.cli("cancel", "fix") == 0
    capsys.readouterr()
    assert world.cli("rollback", "fix") == 1
    said = capsys.readouterr()
    assert said.err.count("\n") == 1 and "--keep-computed monthly_revenue" in said.err, said.err
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revnue") == 2
    said = capsys.readouterr()
    assert said.err.count("\n") == 1 and "monthly_revnue" in said.err and "monthly_revenue" in said.err, said.err
    assert world.phase("fix") == "repairing"  # cancelled: a hold on it
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue") == 0
    said = capsys.readouterr()
    assert "left 1 partition(s) of monthly_revenue (2026-01-01) as computed" in said.out, said.out
    assert world.phase("fix") == "rolled_back"
    assert world.sql("SELECT sum(net_revenue) FROM published_monthly_revenue") == month  # left as it was
    [payload] = world.sql("SELECT payload FROM backfill_control.evidence WHERE kind = 'rollback'")
    assert '"kept_computed":{"monthly_revenue":["2026-01-01"]}' in payload[0], payload[0]

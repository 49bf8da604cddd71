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

"""A plan's run lease: renewal fails once another runner took the lease over, and every run of the
plan (UI, `dagster asset materialize`, a test's own run) honours it while `backfill run` holds it.

The other runner is a real process; a take-over from "another host" runs in its own UTS namespace
(`unshare -u`) under another hostname, as a runner on a second machine would."""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import subprocess
import sys

import pytest

from backfill_assets.control import lease
from backfill_assets.control.schema import ensure_schema
from tests.world import DEMO_DEFS, failure_text, keys

pytestmark = pytest.mark.separate_processes  # other processes take and hold the plan's lease

OTHER_HOST = "other-host"

_TAKE_OVER = """
import sys
from pathlib import Path
from backfill_assets.control import lease
from backfill_assets.home import Home
from backfill_assets.warehouse import open_warehouse
home, url, plan_id = sys.argv[1:4]
with open_warehouse(Home(Path(home)), url or None).session() as session:
    taken = lease.acquire(session, plan_id, "backfill run by ops@other-host")
print(taken.describe(), flush=True)
"""

_HOLD = """
import sys
from pathlib import Path
from backfill_assets.control import lease
from backfill_assets.home import Home
from backfill_assets.warehouse import open_warehouse
home, url, plan_id = sys.argv[1:4]
warehouse = open_warehouse(Home(Path(home)), url or None)
with warehouse.session() as session:
    held = lease.acquire(session, plan_id, "backfill run by ops@vm")
print("held", flush=True)
sys.stdin.read()  # the test's barrier: hold until told to stop
with warehouse.session() as session:
    lease.release(session, held)
"""


def take_over_from_another_host(world, plan_id: str = "fix") -> str:
    """A runner on another host takes the lease of a runner that stopped renewing it: its
    heartbeat is set past the time-to-live (what five minutes of silence leaves), then a real
    process under another hostname acquires it."""
    world.run_sql("UPDATE backfill_control.leases SET heartbeat_at = heartbeat_at - ? WHERE plan_id = ?",
                  [lease.TTL_SECONDS + 60, plan_id])
    done = subprocess.run(["unshare", "-u", "sh", "-c", f'hostname {OTHER_HOST} && exec "$0" "$@"',
                           sys.executable, "-c", _TAKE_OVER, str(world.home), world.url or "", plan_id],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_a_lease_of_another_host_lives_a_time_to_live_from_its_heartbeat_on_either_side():
    """A lease planted with a heartbeat ten years ahead held every run of the plan off for ever,
    with a fix saying it expires by itself (found by an attack): leases are not sealed."""
    now = 1_800_000_000.0
    held = lease.Lease("fix", "backfill run by ops", OTHER_HOST, 4242, "2027-01-15T08:00:00+00:00", now)
    ttl = lease.TTL_SECONDS
    assert [dataclasses.replace(held, heartbeat_at=now + d).alive(now) for d in (-ttl - 1, -ttl + 1, 0, 30, ttl - 1)] \
        == [False, True, True, True, True]  # a clock a little ahead of ours still holds it
    assert not dataclasses.replace(held, heartbeat_at=now + ttl + 1).alive(now)
    assert not dataclasses.replace(held, heartbeat_at=now + 10 * 365 * 86400).alive(now)


def test_renewing_a_lease_taken_over_by_another_host_fails_naming_the_new_holder(engine_world):
    world = engine_world
    warehouse = world.warehouse()
    with warehouse.session() as session:
        ensure_schema(session)
        held = lease.acquire(session, "fix", "backfill run by test")
        lease.renew(session, held)  # ours: renewed
    holder = take_over_from_another_host(world)
    with warehouse.session() as session, pytest.raises(lease.LeaseLost, match=f"now held by .*on {OTHER_HOST}"):
        lease.renew(session, held)
    assert OTHER_HOST in holder
    assert world.sql("SELECT host FROM backfill_control.leases WHERE plan_id = 'fix'") == [(OTHER_HOST,)]


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_runner_whose_lease_was_taken_over_stops_before_its_next_slice(engine_world, capfd):
    """On PostgreSQL (on DuckDB the runner's open file keeps any other process out): the runner
    writes its first slice, another host takes the lease over meanwhile, the runner stops."""
    from backfill_assets.control import record
    from backfill_assets.execution.runner import execute, run_range
    from backfill_assets.execution.stages import window_stage
    from backfill_assets.loaded_defs import load_defs

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",), per_run=1)
    assert world.cli("run", "fix", "--proof") == 0
    loaded = load_defs(DEMO_DEFS)
    table = loaded.table("daily_revenue")
    warehouse = world.warehouse()
    with warehouse.session() as session:
        state = record.require(session, "fix")
        held = lease.acquire(session, "fix", "backfill run by test")
    stage = window_stage(state.partition_keys, state.proof_keys, set(), 1, table.scheme())
    waves: list[list[str]] = []

    def run_wave(wave, asset):
        waves.append(wave[0])
        outcome = [run_range(loaded, table, world.instance, "fix", span, "test", {}) for span in wave]
        if len(waves) == 1:
            take_over_from_another_host(world)
        return outcome

    capfd.readouterr()
    reports = execute(stage, warehouse, state, held, run_wave)
    said = capfd.readouterr().err
    assert waves == [["2026-01-02"]]  # the second slice never ran
    assert reports[-1].errors == ["lease lost"]
    assert "the lease of plan fix is now held by backfill run by ops@other-host" in said
    assert "stopped before 2026-01-03" in said
    assert world.sql("SELECT DISTINCT partition_key FROM backfill_control.writes WHERE plan_id = 'fix' "
                     "ORDER BY 1") == [("2026-01-01",), ("2026-01-02",)]


def test_while_backfill_run_holds_the_lease_no_other_run_of_the_plan_writes(engine_world):
    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert world.cli("run", "fix", "--proof") == 0  # its own runs pass: they carry its label
    before = world.fingerprints("daily_revenue", keys(1, 4))
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(world.home), world.url or "", "fix"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONWARNINGS": "ignore"})
    try:
        assert holder.stdout.readline().strip() == "held"  # the barrier: the lease is held now
        refused = world.plan_run("fix", keys(2, 3))  # as the UI or `dagster asset materialize` would
        assert not refused.success
        assert re.search(rf"plan fix is being run by backfill run by ops@vm \(pid {holder.pid} on ",
                         failure_text(refused)), failure_text(refused)
        assert world.fingerprints("daily_revenue", keys(1, 4)) == before
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
    assert world.plan_run("fix", keys(2, 3)).success  # the lease released: the plan's runs go again


def test_a_run_carrying_the_holders_launcher_label_is_still_refused_outside_its_process(world):
    """The refusal names the holder (pid, host), and the label the holder's runs carry is made of
    those: an operator who copied it into a UI run's tags wrote beside the live `backfill run`
    (found by an attack). A tag is a label, not identity: a run is the holder's only when it
    executes in the holder's process or a worker process it started."""
    from backfill_assets.tags import LAUNCHER_TAG, PLAN_TAG

    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert world.cli("run", "fix", "--proof") == 0
    before = world.fingerprints("daily_revenue", keys(1, 4))
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(world.home), world.url or "", "fix"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONWARNINGS": "ignore"})
    try:
        assert holder.stdout.readline().strip() == "held"
        label = f"{socket.gethostname()}:{holder.pid}"
        copied = world.materialize(keys(2, 3), tags={PLAN_TAG: "fix", LAUNCHER_TAG: label})
        assert not copied.success
        assert f"plan fix is being run by backfill run by ops@vm (pid {holder.pid}" in failure_text(copied)
        assert world.fingerprints("daily_revenue", keys(1, 4)) == before
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0


def test_a_lease_naming_a_pid_a_later_process_took_ends_with_its_holder(world):
    """The holder on this host was killed, and its pid went to another process (a container's
    restarted processes take the same small pids): the plan stayed blocked until someone deleted
    the lease's row. The lease names its holder's process as the pid alone does not (the boot's id
    and its start in ticks since boot, which no clock step moves); a lease naming another process
    than the one with its pid now has ended, one naming it still holds, and one of a release
    before, which names none, holds while its pid runs."""
    from backfill_assets.environment import process_identity

    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    other = subprocess.Popen(["sleep", "60"])
    try:
        with world.warehouse().session() as session:
            ensure_schema(session)
        named = process_identity(other.pid)
        assert named is not None
        boot, ticks = named.rsplit(":", 1)
        world.run_sql("INSERT INTO backfill_control.leases VALUES (?, ?, ?, ?, ?, ?)",
                      ["fix", "backfill run by ops@vm", socket.gethostname(), other.pid,
                       f"2026-01-15T08:00:00+00:00 process {named}", 0.0])
        assert world.cli("run", "fix", "--proof") != 0  # `other` is the holder
        world.run_sql("UPDATE backfill_control.leases SET acquired_at = ? WHERE plan_id = 'fix'",
                      ["2026-01-15T08:00:00+00:00"])
        assert world.cli("run", "fix", "--proof") != 0  # a lease naming no process holds while its pid runs
        world.run_sql("UPDATE backfill_control.leases SET acquired_at = ? WHERE plan_id = 'fix'",
                      [f"2026-01-15T08:00:00+00:00 process {boot}:{int(ticks) - 100}"])  # the holder before `other`
        assert world.cli("run", "fix", "--proof") == 0
    finally:
        other.kill()
        other.wait()


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


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_run_whose_lease_was_taken_over_writes_no_later_transaction(engine_world):
    """A worker of a `backfill run` killed with kill -9 goes on with its run, whose partitions are
    written a transaction at a time; another host takes the lease over meanwhile: the worker's next
    transaction was written beside the new holder's run (the lease was asked at the run's start
    only; found by an attack). Each write asks it again."""
    from backfill_assets.errors import PartitionRefused
    from backfill_assets.execution.write import write_partitions
    from backfill_assets.permission import PLAN_TAG, permit
    from backfill_assets.tags import LAUNCHER_TAG
    from tests.world import FIXED

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert world.cli("run", "fix", "--proof") == 0
    warehouse = world.warehouse()
    with warehouse.session() as session:
        held = lease.acquire(session, "fix", "backfill run by test")
        tags = {PLAN_TAG: "fix", LAUNCHER_TAG: lease.launcher_label(held)}
        permission = permit(session, FIXED, world.scheme, keys(2, 4), tags)  # the run's start: its lease
        lease.refuse_foreign_run(session, "fix", tags, "2026-01-02")
    take_over_from_another_host(world)
    with warehouse.session() as session, pytest.raises(PartitionRefused, match=f"is being run by .*on {OTHER_HOST}"):
        write_partitions(session, FIXED, world.scheme, permission, run_id=None, actor="a worker")
    assert world.sql("SELECT count(*) FROM backfill_control.writes WHERE plan_id = 'fix' "
                     "AND partition_key <> '2026-01-01'") == [(0,)]


def test_a_run_refused_for_the_lease_taken_since_its_start_moves_the_plan_no_phase(world):
    """A run of a proven plan launched from the UI passed the lease check at its start (no holder
    yet); a `backfill run` then took the lease. The run's first write moved the plan from proven to
    running before its write transaction asked the lease again and refused it: a run that wrote
    nothing changed the plan's phase (left from an attack on the per-write lease check). The
    phase's move asks the lease under the same lock."""
    from backfill_assets.errors import PartitionRefused
    from backfill_assets.execution.write import write_partitions
    from backfill_assets.permission import PLAN_TAG, permit
    from tests.world import FIXED

    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert world.cli("run", "fix", "--proof") == 0 and world.phase() == "proven"
    warehouse = world.warehouse()
    with warehouse.session() as session:
        tags = {PLAN_TAG: "fix"}  # the UI's run: no launcher label
        permission = permit(session, FIXED, world.scheme, keys(2, 4), tags)
        lease.refuse_foreign_run(session, "fix", tags, "2026-01-02")  # no holder at the run's start
        lease.acquire(session, "fix", "backfill run by ops")  # a `backfill run` starts meanwhile
    with warehouse.session() as session, pytest.raises(PartitionRefused, match="is being run by"):
        write_partitions(session, FIXED, world.scheme, permission, run_id=None, actor="the ui")
    assert world.phase() == "proven"

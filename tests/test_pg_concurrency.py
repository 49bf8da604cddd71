"""Issue 21: what two sessions at once do on PostgreSQL, proven with real second sessions and a
barrier on the server's own view of who waits for a lock, never a timing sleep."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from backfill_assets import faults
from backfill_assets.execution.write import write_partitions
from backfill_assets.permission import PLAN_TAG, permit
from tests.conftest import BIN
from tests.test_graph import (
    FULL_DEFS,
    MONTH,
    _cancelled_under_a_month,
    _january_and_a_plan_over_its_days,
    _published_by_region,
    defs_of,
    run,
)
from tests.test_pg_rollback import ran_fix
from tests.world import BUGGY, FIXED, failure_text, keys

pytestmark = pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)


ROW = ("tuple", "transactionid")  # waiting for a row another transaction holds
ADVISORY = ("advisory",)


def wait_for_waiters(world, count: int, kinds: tuple[str, ...], timeout: float = 60.0) -> None:
    """Until `count` other sessions wait on a lock of these kinds: the server says so, no guessing
    how long that takes."""
    query = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
             f"AND wait_event_type = 'Lock' AND wait_event IN ({', '.join('?' for _ in kinds)})")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if world.sql(query, list(kinds))[0][0] >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"{count} session(s) never waited on a lock of {kinds}")


def test_a_rollback_restores_a_partition_the_plan_wrote_while_it_waited(engine_world):
    world = engine_world
    assert world.materialize(keys(1, 4), spec=BUGGY, publish=True).success
    history = world.fingerprints("daily_revenue", keys(1, 4))
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    assert world.plan_run("fix", keys(1, 1)).success  # the plan has written 01-01 and 01-02
    outcome: dict[str, int] = {}
    rollback = threading.Thread(target=lambda: outcome.update(code=world.cli("rollback", "fix")))
    with world.warehouse().session() as writer, writer.transaction():
        # a run of the plan writing 01-03 right now: its write transaction is open
        permission = permit(writer, FIXED, world.scheme, ["2026-01-03"], {PLAN_TAG: "fix"})
        write_partitions(writer, FIXED, world.scheme, permission, run_id=None, actor="a run")
        rollback.start()
        wait_for_waiters(world, 1, ROW)  # the rollback waits for the plan's row
    rollback.join(timeout=120)
    assert outcome["code"] == 0 and world.phase() == "rolled_back"
    # 01-03, written while the rollback waited, is restored with the rest
    assert world.fingerprints("daily_revenue", keys(1, 4)) == history


def test_two_overlapping_plans_approved_at_once_never_both_become_active(engine_world, cli_server):
    world = engine_world
    first = world.plan("first", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    second = world.plan("second", start="2026-01-03", end="2026-01-06", proof=("2026-01-03",))
    for path in (first, second):
        world.approve(path, "alice")  # the owner and alice: bob's signature completes either
    env = {**os.environ, "BACKFILL_HOME": str(world.home), "BACKFILL_WAREHOUSE_URL": world.url,
           "BACKFILL_DEFS": "backfill_assets.demo.daily", "PYTHONWARNINGS": "ignore"}
    with world.warehouse().session() as holder, holder.transaction():
        holder.lock("approve:daily_revenue")  # what an approval of this table holds in its transaction
        started = [cli_server.start([str(BIN / "backfill"), "--home", str(world.home), "plan", "approve", str(p),
                                     "--by", "bob", "--key", str(world.keys["bob"])], env, world.root)
                   for p in (first, second)]
        wait_for_waiters(world, 2, ADVISORY)  # both approvals queue behind the table's turn
    results = [(p.wait(timeout=240), *p.communicate()) for p in started]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 1], results
    refused = next(err for code, _, err in results if code == 1)
    assert "overlaps" in refused and refused.count("\n") == 1, refused
    phases = sorted(world.phase(name) for name in ("first", "second"))
    assert phases == ["approved", "drafted"], phases


def test_a_window_verdict_is_read_with_no_write_of_the_plan_half_way(engine_world):
    """The lifecycle reads the window's verdict inside the transaction that moves the plan, holding
    its row: a write of the plan that was open while the verdict was asked for lands first, and a
    failing write is seen, never reconciled over (before, the verdict was read without the lock and
    the move waited for it alone: the plan became reconciled with a failing latest write)."""
    from backfill_assets.control import record
    from backfill_assets.execution.advance import advance, window_verdict
    from tests.world import BUGGY

    world = engine_world
    assert world.materialize(keys(1, 4), spec=BUGGY, publish=True).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    assert world.plan_run("fix", ["2026-01-01", "2026-01-03", "2026-01-04"]).success
    assert world.phase() == "running"
    with world.warehouse().session() as session:
        assert window_verdict(session, record.require(session, "fix")).passed  # it would reconcile now
    moved: dict[str, str] = {}

    def judge_and_move() -> None:
        with world.warehouse().session() as session:
            moved["phase"] = advance(session, record.require(session, "fix"), "test").phase.value

    judging = threading.Thread(target=judge_and_move)
    with world.warehouse().session() as writer, writer.transaction():
        # a run of the plan re-writing 01-03 is open: two source rows without a region arrived
        # with it, so its contract gate fails
        writer.execute("INSERT INTO orders SELECT order_id + 1000000, customer_id, NULL, order_ts, order_date, "
                       "amount, status FROM orders WHERE order_date = ? LIMIT 2", [dt.date(2026, 1, 3)])
        permission = permit(writer, FIXED, world.scheme, ["2026-01-03"], {PLAN_TAG: "fix"})
        write_partitions(writer, FIXED, world.scheme, permission, run_id=None, actor="a run")
        judging.start()
        wait_for_waiters(world, 1, ROW + ADVISORY)  # the move waits for the writer (the plan row, or the chain)
    judging.join(timeout=120)
    assert moved["phase"] == "running" and world.phase() == "running"
    with world.warehouse().session() as session:
        verdict = window_verdict(session, record.require(session, "fix"))
    assert not verdict.passed and "2026-01-03" in verdict.failed


def test_a_verdict_that_moves_nothing_never_waits_for_an_open_write(engine_world):
    """The reopen sensor judges each active plan on every tick with a short lock wait: while a run
    of the plan holds a write open and the window is not all written, the verdict moves nothing, so
    it is read without the plan's lock and the tick goes on (it had waited, timed out and skipped
    the whole tick, every tick of a backfill)."""
    from backfill_assets.control import record
    from backfill_assets.execution.advance import advance

    world = engine_world
    assert world.materialize(keys(1, 4), spec=BUGGY, publish=True).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    assert world.plan_run("fix", ["2026-01-01"]).success
    assert world.phase() == "running"
    with world.warehouse().session() as writer, writer.transaction():
        permission = permit(writer, FIXED, world.scheme, ["2026-01-03"], {PLAN_TAG: "fix"})
        write_partitions(writer, FIXED, world.scheme, permission, run_id=None, actor="a run")
        # the sensor's session, with a shorter wait: had it waited, LockWaitTimeout would end the test
        with world.warehouse().session(wait_seconds=2.0) as sensor:
            assert advance(sensor, record.require(sensor, "fix"), "reopen-sensor").phase.value == "running"


def test_two_approvals_mirrored_at_once_both_stay_in_the_plan_file(engine_world, monkeypatch):
    """alice's approval has read the plan file to add her signature when bob's commits and mirrors
    his: the commit had let the target's turn go, so bob's file was written, then alice's over it,
    without bob's signature (the record kept it; found by an attack). Her update now holds the turn,
    which bob waits for."""
    from backfill_assets import faults

    world = engine_world
    path = world.plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    world.approve(path, "carol")  # the owner's and carol's: alice's and bob's come at once
    seen = faults.reached("approve.mirror_read")  # this process's count, which earlier tests moved
    monkeypatch.setenv(faults.STALL_ENV, f"approve.mirror_read@{seen + 1}=60")
    codes: dict[str, int] = {}

    def approve(who: str) -> None:
        codes[who] = world.cli("plan", "approve", str(path), "--by", who, "--key", str(world.keys[who]))

    alice = threading.Thread(target=approve, args=("alice",))
    alice.start()
    deadline = time.monotonic() + 60
    while faults.reached("approve.mirror_read") <= seen and time.monotonic() < deadline:
        time.sleep(0.02)
    bob = threading.Thread(target=approve, args=("bob",))
    bob.start()
    # bob either finishes (the turn not taken again) or waits for alice's update to end
    deadline = time.monotonic() + 60
    while bob.is_alive() and not world.sql(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND wait_event = 'advisory'")[0][0] and time.monotonic() < deadline:
        time.sleep(0.05)
    monkeypatch.setenv(faults.RELEASE_ENV, "approve.mirror_read")
    alice.join(timeout=120)
    bob.join(timeout=120)
    assert codes == {"alice": 0, "bob": 0}
    signed = {g["by"] for g in yaml.safe_load(path.read_text())["approvals"]["granted"]}
    assert signed == {"olivia", "carol", "alice", "bob"}


def test_an_approval_whose_file_update_times_out_says_it_is_recorded(engine_world, monkeypatch, capsys):
    """A team's database sets `lock_timeout`; another approval holds the table's turn when this one,
    committed, comes to update the plan file: it gave up waiting with the lock's error, as if nothing
    had been recorded. It says the approval is recorded, and that the same command syncs the file."""
    import psycopg

    from backfill_assets import faults
    from tests.pg_server import admin_sql

    world = engine_world
    path = world.plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    world.approve(path, "carol")
    database = world.url.rsplit("/", 1)[1]
    admin_sql(world.url, f'ALTER DATABASE "{database}" SET lock_timeout = 300')
    seen = faults.reached("approve.after_commit")  # this process's count, which earlier tests moved
    monkeypatch.setenv(faults.STALL_ENV, "approve.after_commit=60")
    codes: dict[str, int] = {}
    alice = threading.Thread(target=lambda: codes.update(alice=world.cli(
        "plan", "approve", str(path), "--by", "alice", "--key", str(world.keys["alice"]))))
    alice.start()
    deadline = time.monotonic() + 60
    while faults.reached("approve.after_commit") <= seen and time.monotonic() < deadline:
        time.sleep(0.02)
    with psycopg.connect(world.url, autocommit=True) as other:  # another approval of the table, in its turn
        other.execute("SELECT pg_advisory_lock(hashtextextended('approve:daily_revenue', 0))")
        monkeypatch.setenv(faults.RELEASE_ENV, "approve.after_commit")
        alice.join(timeout=120)
    said = capsys.readouterr()
    assert codes == {"alice": 1}, said.err
    assert said.err.count("\n") == 1 and "recorded" in said.err and "run the same command again" in said.err, said.err
    assert "alice" not in {g["by"] for g in yaml.safe_load(path.read_text())["approvals"]["granted"]}
    monkeypatch.delenv(faults.STALL_ENV)
    assert world.cli("plan", "approve", str(path), "--by", "alice", "--key", str(world.keys["alice"])) == 0
    assert "alice" in {g["by"] for g in yaml.safe_load(path.read_text())["approvals"]["granted"]}


def test_a_statement_the_teams_statement_timeout_cancels_says_nothing_was_committed_and_what_to_do(
        engine_world, capsys):
    """A team's database sets `statement_timeout`; a statement waiting for another session's lock
    past it is cancelled: the command printed PostgreSQL's text (`canceling statement due to
    statement timeout`) with no word of what was committed or what to do."""
    import psycopg

    from tests.pg_server import admin_sql, as_admin

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    database = world.url.rsplit("/", 1)[1]
    admin_sql(world.url, f'ALTER DATABASE "{database}" SET statement_timeout = 300')
    with psycopg.connect(as_admin(world.url)) as other:  # another session's long lock on the plans
        other.execute("LOCK TABLE backfill_control.plans IN ACCESS EXCLUSIVE MODE")
        capsys.readouterr()
        code = world.cli("cancel", "fix")
        other.rollback()
    said = capsys.readouterr()
    assert code != 0 and said.err.count("\n") == 1, said.err
    assert "statement_timeout" in said.err and "committed nothing" in said.err, said.err
    assert world.phase("fix") == "approved"


# --- lock order, a killed worker, verdicts landing while publish decides (found by an attack) ---------

def test_a_publish_never_deadlocks_with_another_plans_first_write_of_its_target(engine_world, monkeypatch, capfd):
    """Plan `fix` (January 1-4) is reconciled and published while plan `next` (January 5-8, same
    target) writes its proof: that write snapshots first, taking the evidence chain, then writes the
    target; publish holds the target in SHARE mode, then takes the chain for its own records. The
    two waited on each other in a circle and PostgreSQL killed the publish: `backfill: deadlock
    detected`, with no word of what to do (publish is not run again)."""
    world = engine_world
    window = ran_fix(world)
    world.approved_plan("next", start="2026-01-05", end="2026-01-08", proof=("2026-01-05",))
    seen = faults.reached("write.after_snapshot")  # this process's count, which earlier tests moved
    monkeypatch.setenv(faults.STALL_ENV, f"write.after_snapshot@{seen + 1}=60")
    wrote: dict[str, object] = {}

    def write() -> None:
        try:
            with world.warehouse().session() as writer:
                permission = permit(writer, FIXED, world.scheme, ["2026-01-05"], {PLAN_TAG: "next"})
                wrote["written"] = write_partitions(writer, FIXED, world.scheme, permission, run_id=None,
                                                    actor="a run")
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            wrote["error"] = exc

    writer = threading.Thread(target=write)
    writer.start()
    deadline = time.monotonic() + 60
    while faults.reached("write.after_snapshot") <= seen and time.monotonic() < deadline:
        time.sleep(0.02)
    assert faults.reached("write.after_snapshot") == seen + 1, wrote
    published: dict[str, int] = {}
    capfd.readouterr()
    publisher = threading.Thread(target=lambda: published.update(code=world.cli("publish", "fix")))
    publisher.start()
    try:
        # the publish waits for the chain the write holds (before: then the write waited for the
        # target the publish held) or for the target the write holds (the write goes on)
        wait_for_waiters(world, 1, ADVISORY + ("relation",))
    finally:
        monkeypatch.setenv(faults.RELEASE_ENV, "write.after_snapshot")
    publisher.join(timeout=120)
    writer.join(timeout=120)
    err = capfd.readouterr().err
    assert "error" not in wrote, wrote
    assert published.get("code") == 0, err
    assert world.phase("fix") == "published" and world.phase("next") == "proving"
    assert world.fingerprints("published_revenue", window) == world.fingerprints("daily_revenue", window)


def test_a_deadlock_says_to_run_the_command_again(engine_world):
    """Whichever command PostgreSQL ends to break a circle of waits says, in its one line, that
    nothing committed and to run it again (it said `deadlock detected` and no more)."""
    from backfill_assets.errors import WarehouseError

    world = engine_world
    ended: list[BaseException] = []
    both = threading.Barrier(2)

    def take(first: str, second: str) -> None:
        try:
            with world.warehouse().session() as session, session.transaction():
                session.lock(first)
                both.wait(timeout=30)
                session.lock(second)
        except WarehouseError as exc:
            ended.append(exc)

    threads = [threading.Thread(target=take, args=pair) for pair in (("a", "b"), ("b", "a"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(ended) == 1, ended
    line = str(ended[0])
    assert "deadlock detected" in line and "run the command again" in line and "\n" not in line, line


def test_two_run_workers_first_writes_of_a_table_both_make_the_plans_snapshot_table(engine_world):
    """Two run workers of one plan write their first partitions of a table at once (a graph plan's
    months, each worker a month): each snapshot creates the plan's snapshot table if it does not
    exist. PostgreSQL let the second CREATE TABLE IF NOT EXISTS wait for the first's uncommitted
    table, then fail: `duplicate key value violates unique constraint "pg_type_typname_nsp_index"`,
    the worker's run failed and `backfill run` halted."""
    from backfill_assets.control.snapshots import ensure_snapshots
    from backfill_assets.errors import WarehouseError
    from backfill_assets.warehouse.snapshot_tables import SNAPSHOT_SCHEMA, snapshot_in
    from tests.test_pg_concurrency import ROW

    world = engine_world
    assert world.materialize(keys(1, 8), publish=True).success
    world.approved_plan("next", start="2026-01-05", end="2026-01-08", proof=("2026-01-05",))
    first_done, outcome = threading.Event(), {}

    def snapshot(key: str, hold: bool) -> None:
        try:
            with world.warehouse().session() as session, session.transaction():
                session.lock(f"write:{FIXED.name}:{key}")
                ensure_snapshots(session, FIXED, world.scheme, FIXED.table, "next", [key], "2026-12-07T00:00:00",
                                 "a run worker")
                if hold:
                    first_done.set()
                    wait_for_waiters(world, 1, ROW + ADVISORY)
            outcome[key] = "ok"
        except WarehouseError as exc:
            outcome[key] = str(exc)

    first = threading.Thread(target=snapshot, args=("2026-01-05", True))
    first.start()
    assert first_done.wait(timeout=60)
    second = threading.Thread(target=snapshot, args=("2026-01-06", False))
    second.start()
    first.join(timeout=120)
    second.join(timeout=120)
    assert outcome == {"2026-01-05": "ok", "2026-01-06": "ok"}, outcome
    with world.warehouse().session() as session:
        name = snapshot_in(session, "next", FIXED.table)
    assert world.sql(f"SELECT count(DISTINCT order_date) FROM {SNAPSHOT_SCHEMA}.{name}")[0][0] == 2
    assert world.cli("evidence", "verify") == 0


def test_a_reconcile_failing_while_publish_decides_never_has_the_failed_partition_published(engine_world,
                                                                                          monkeypatch):
    """`backfill publish fix` has read every gate's latest result (all passed) and holds the plan's
    row and the target; a `backfill reconcile fix` of that moment finds 2026-01-02's source changed
    and records its failing results, which waited for nothing the publish held: the publish then
    copied and committed, and consumers read a partition whose latest verdict, committed before the
    publish, failed (on DuckDB the two take turns on the file). The results now wait for the
    publish (the chain), so they come after what it published, and the plan goes to repairing."""
    from backfill_assets.publish import rule
    from tests.test_pg_concurrency import ROW

    world = engine_world
    ran_fix(world)
    assert world.phase("fix") == "reconciled"
    decided, go_on = threading.Event(), threading.Event()
    original = rule.blockers

    def blockers_then_wait(session, *args, **kwargs):
        found = original(session, *args, **kwargs)
        if session.in_transaction and not decided.is_set():  # the copy's transaction, after its read
            decided.set()
            assert go_on.wait(timeout=120)
        return found

    monkeypatch.setattr(rule, "blockers", blockers_then_wait)
    codes: dict[str, int] = {}
    publisher = threading.Thread(target=lambda: codes.update(publish=world.cli("publish", "fix")))
    publisher.start()
    try:
        assert decided.wait(timeout=120)
        # late source rows of 2026-01-02 arrive: the day's gates fail on the data as it is now
        world.run_sql("INSERT INTO orders SELECT order_id + 1000000, customer_id, region, order_ts, order_date, "
                      "amount, status FROM orders WHERE order_date = DATE '2026-01-02'")
        reconciler = threading.Thread(target=lambda: codes.update(reconcile=world.cli("reconcile", "fix")))
        reconciler.start()
        wait_for_waiters(world, 1, ROW + ADVISORY)  # the reconcile waits for something the publish holds
    finally:
        go_on.set()
    publisher.join(timeout=120)
    reconciler.join(timeout=120)
    chain = world.sql("SELECT seq, kind, payload FROM backfill_control.evidence WHERE plan_id = 'fix' "
                      "AND kind IN ('gates', 'published') ORDER BY seq")
    published = [seq for seq, kind, _ in chain if kind == "published"]
    failing = [seq for seq, kind, payload in chain
               if kind == "gates" and "2026-01-02" in (json.loads(payload) if isinstance(payload, str) else payload
                                                      ).get("failed", {})]
    assert failing, chain
    if published:  # what consumers were given was decided on the latest verdicts as it committed
        assert published[0] < failing[-1], (published, failing)
        assert world.phase("fix") == "repairing"
    assert world.cli("evidence", "verify") == 0


def test_a_run_worker_killed_mid_write_stops_the_run_in_one_line_and_the_run_resumes(engine_world, monkeypatch,
                                                                                    capfd):
    """`backfill run` with two run workers; a hurried user kill -9s one while it writes (here: each
    worker at its first write's commit). The command ended in `internal error: BrokenProcessPool`
    and a traceback in the log; it now says which runs died and that `backfill run` resumes."""

    world = engine_world
    assert world.materialize(keys(1, 4)).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",), per_run=1,
                        runs_at_once=2)
    assert world.cli("run", "fix", "--proof") == 0
    capfd.readouterr()
    monkeypatch.setenv(faults.CRASH_ENV, "write.before_commit@1")  # the workers' environment, not this process's
    code = world.cli("run", "fix")
    err = capfd.readouterr().err
    monkeypatch.delenv(faults.CRASH_ENV)
    assert code == 1, (code, err)
    lines = [line for line in err.splitlines() if line.startswith("backfill:")]
    assert len(lines) == 1 and "internal error" not in err and "backfill run" in lines[0], err
    assert world.cli("run", "fix") == 0
    assert world.phase() == "reconciled"
    assert world.cli("evidence", "verify") == 0


# --- the chain's reads, holds and the undeclared upstream under many sessions (found by an attack) ----

def _stall(monkeypatch, point: str, seconds: int = 120) -> int:
    seen = faults.reached(point)  # this process's count, which earlier tests moved
    monkeypatch.setenv(faults.STALL_ENV, f"{point}@{seen + 1}={seconds}")
    monkeypatch.delenv(faults.RELEASE_ENV, raising=False)
    return seen


def _until_reached(point: str, seen: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while faults.reached(point) <= seen and time.monotonic() < deadline:
        time.sleep(0.02)
    assert faults.reached(point) > seen, f"{point} never reached"


def _second_waits_for_first(world, monkeypatch, point: str, first, second, kinds: tuple[str, ...]) -> None:
    """`first()` run until it stops at the crash point `point`, then `second()` until the server says
    it waits on a lock of `kinds`; then `first` goes on, and both end (each in a thread of its own)."""
    seen = _stall(monkeypatch, point)
    one = threading.Thread(target=first)
    one.start()
    two = None
    try:
        _until_reached(point, seen)
        two = threading.Thread(target=second)
        two.start()
        wait_for_waiters(world, 1, kinds)
    finally:
        monkeypatch.setenv(faults.RELEASE_ENV, point)
    one.join(timeout=240)
    if two is not None:
        two.join(timeout=240)
    monkeypatch.delenv(faults.STALL_ENV)


def test_a_month_written_while_a_rollback_waits_is_never_left_computed_from_the_restored_days(
        engine_world, monkeypatch, capsys):
    """Plan fix over 2026-01-05..08 of the days is published; the team deploys the monthly rollup
    and a UI backfill loads January's month (new: no plan needed) from the published days. Its
    write transaction holds the days in SHARE mode and has read them when `backfill rollback fix`
    starts: the rollback reads the chain (no month yet), then waits for the days to restore them.
    The month commits (and is published); the rollback then restores the days. Consumers read a
    month computed from the plan's days beside the restored days, and nothing records it: a later
    publish of the month counts the plan's writes as undone, so sees nothing wrong."""
    world = engine_world
    _january_and_a_plan_over_its_days(world)
    assert world.cli("publish", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)  # the team deploys the monthly rollup
    outcome: dict[str, object] = {}
    # the month's write holds the days (SHARE) at its stall; the rollback waits for them
    _second_waits_for_first(
        world, monkeypatch, "write.after_snapshot",
        lambda: outcome.update(month=run(world, defs_of(world, BUGGY), ["monthly_revenue", "published_monthly_revenue"],
                                         [MONTH], {"dagster/backfill": "ui-bf"}).success),
        lambda: outcome.update(rollback=world.cli("rollback", "fix")), ("relation",))
    said = capsys.readouterr()
    # whichever came first, consumers never read a month that does not add up to the days beside it
    run(world, defs_of(world, BUGGY), ["published_monthly_revenue"], [MONTH], {"dagster/backfill": "ui-bf2"})
    month_now = _published_by_region(world, "published_monthly_revenue", "month")
    assert month_now in ({}, _published_by_region(world, "published_revenue", "order_date")), (outcome, said.err)
    # the month held the days first: it is in the chain the rollback reads, which refuses in one line
    assert outcome == {"month": True, "rollback": 1}, (outcome, said.err)
    if outcome["rollback"] != 0:
        refusal = [line for line in said.err.splitlines() if line.startswith("backfill:")]
        assert len(refusal) == 1 and "monthly_revenue 2026-01-01" in refusal[0] and "Traceback" not in said.err, \
            said.err
        assert world.phase("fix") == "published"


def test_a_month_loaded_by_definitions_without_its_days_asks_the_chain_which_tables_backfill_writes(
        engine_world):
    """Plan fix over 2026-01-05..08 of the days is run and cancelled: consumers never saw its days.
    An insider (who can write backfill_control, not read the evidence key) relabels the ledger's
    writes of daily_revenue while a code location declaring the month alone loads January's month:
    the check that its source is a table backfill writes asked the ledger alone, found it a raw
    source, and the month was computed from the cancelled plan's days with no reads recorded. The
    rows put back, a Materialize of the published month passes every check, and consumers read a
    month that does not add up to the days beside it."""
    from tests.test_graph import _days_plan, _january_days_published, _month_alone_defs

    world = engine_world
    _january_days_published(world)
    world.approve(_days_plan(world))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("cancel", "fix") == 0
    world.run_sql("UPDATE backfill_control.writes SET asset = 'daily_revenue_x' WHERE asset = 'daily_revenue'")
    loaded = run(world, _month_alone_defs(world), ["monthly_revenue"], [MONTH], {"dagster/backfill": "ui-bf"})
    world.run_sql("UPDATE backfill_control.writes SET asset = 'daily_revenue' WHERE asset = 'daily_revenue_x'")
    run(world, _month_alone_defs(world), ["published_monthly_revenue"], [MONTH], {"dagster/backfill": "ui-bf2"})
    month = _published_by_region(world, "published_monthly_revenue", "month")
    assert month in ({}, _published_by_region(world, "published_revenue", "order_date")), month
    assert not loaded.success, failure_text(loaded)


def test_a_cancel_typed_while_a_proofs_first_write_commits_cancels_the_plan(engine_world, monkeypatch, capfd):
    """`backfill run fix --proof` is writing its first partition (its transaction open, the plan's
    row held shared) when `backfill cancel fix` reads that the plan wrote nothing and is proving: a
    cancel of such a plan is a withdrawal, which waits for the plan's row, then finds the write and
    refuses (`withdrawing would leave them; roll it back instead`). The cancel typed to stop the plan
    did not: the plan stayed unheld and the proof wrote on."""
    world = engine_world
    assert world.materialize(["2026-01-01", "2026-01-02"]).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    codes: dict[str, int] = {}
    _second_waits_for_first(world, monkeypatch, "write.after_snapshot",  # the cancel waits for the plan's row
                            lambda: codes.update(proof=world.cli("run", "fix", "--proof")),
                            lambda: codes.update(cancel=world.cli("cancel", "fix")), ("tuple", "transactionid"))
    said = capfd.readouterr()
    # (the cancel's line went to the proof's Dagster log: a command in this process writes there while a
    # run of the in-process `backfill run` goes)
    assert codes.get("cancel") == 0, (codes, said.err[-300:])
    found = world.sql("SELECT hold FROM backfill_control.plans WHERE plan_id = 'fix'")
    assert found and found[0][0] == "cancelled", (found, said.err)


def _backfill(world, tmp_path: Path, *args: str, env: dict[str, str] | None = None, wait: bool = True):
    full = {**os.environ, "PYTHONWARNINGS": "ignore", "BACKFILL_DEFS": "backfill_assets.demo.daily",
            "BACKFILL_HOME": str(world.home), **(env or {})}
    if world.url:
        full["BACKFILL_WAREHOUSE_URL"] = world.url
    command = [str(Path(sys.executable).parent / "backfill"), "--home", str(world.home), *args]
    if not wait:
        return subprocess.Popen(command, env=full, cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    return subprocess.run(command, env=full, cwd=tmp_path, text=True, capture_output=True, timeout=300)


def _until(predicate, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("never reached")


def test_a_cancel_typed_while_the_plans_run_goes_names_a_next_step_that_is_not_refused(engine_world, tmp_path):
    """`backfill run fix` is between its slices (its run lease held) when another shell types
    `backfill cancel fix`. The cancel commits and names the next step as `status` does; every
    command it names must be one a cancelled plan accepts, and once the run stops the rollback
    `status` names succeeds and the chain verifies. It named `wait: ... (or `backfill pause fix`)`,
    which a cancelled plan refuses, pointing at `status`, which named the pause again (on DuckDB the
    run holds the file between its slices: the cancel waits for it)."""
    world = engine_world
    assert world.materialize(keys(1, 4), spec=BUGGY).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",), per_run=1)
    assert world.cli("run", "fix", "--proof") == 0
    release = tmp_path / "release"
    run = _backfill(world, tmp_path, "run", "fix", wait=False,
                    env={"BACKFILL_STALL_AT": "run.after_wave@1=120", "BACKFILL_STALL_RELEASE_FILE": str(release)})
    try:
        _until(lambda: run.poll() is not None or (
            world.sql("SELECT count(*) FROM backfill_control.writes WHERE plan_id = 'fix'")[0][0] >= 2
            and world.sql("SELECT count(*) FROM backfill_control.leases WHERE plan_id = 'fix'")[0][0] == 1))
        assert run.poll() is None, run.communicate()
        cancel = _backfill(world, tmp_path, "cancel", "fix")
        assert cancel.returncode == 0, cancel.stderr
        step = cancel.stdout.split("next:", 1)[1]
        named = re.findall(r"`(backfill [^`]*)`", step)
        assert named, cancel.stdout
        for command in named:
            words = command.split()[1:]
            if words[0] in ("pause", "status"):  # commands that change nothing a rollback needs
                done = _backfill(world, tmp_path, *words)
                assert done.returncode == 0, (cancel.stdout, command, done.stderr)
    finally:
        release.touch()
        out, err = run.communicate(timeout=240)
    status = _backfill(world, tmp_path, "status", "fix")
    assert "backfill rollback fix" in status.stdout, status.stdout
    assert _backfill(world, tmp_path, "rollback", "fix").returncode == 0
    assert world.phase() == "rolled_back"
    assert _backfill(world, tmp_path, "evidence", "verify").returncode == 0


def test_two_keep_computed_rollbacks_at_once_one_wins_whole_the_other_refuses_in_one_line(
        engine_world, monkeypatch, capsys):
    world = engine_world
    _cancelled_under_a_month(world, monkeypatch)
    month = world.sql("SELECT sum(net_revenue) FROM published_monthly_revenue")
    capsys.readouterr()
    codes: dict[str, int] = {}
    keep = ("rollback", "fix", "--keep-computed", "monthly_revenue")
    _second_waits_for_first(world, monkeypatch, "rollback.before_commit",
                            lambda: codes.update(first=world.cli(*keep)), lambda: codes.update(second=world.cli(*keep)),
                            ("advisory", "tuple", "transactionid", "relation"))
    said = capsys.readouterr()
    assert codes == {"first": 0, "second": 1}, (codes, said.err)
    refusals = [line for line in said.err.splitlines() if line.startswith("backfill:")]
    assert len(refusals) == 1 and "Traceback" not in said.err, said.err
    assert world.phase("fix") == "rolled_back"
    assert world.sql("SELECT count(*) FROM backfill_control.evidence WHERE kind = 'rollback'")[0][0] == 1
    assert world.sql("SELECT sum(net_revenue) FROM published_monthly_revenue") == month
    assert world.cli("evidence", "verify") == 0


def test_an_approval_a_pause_and_a_publish_of_three_plans_at_once_each_append_to_one_chain(
        engine_world, monkeypatch, capsys):
    from tests.world import keys

    world = engine_world
    assert world.materialize(keys(1, 10), publish=True).success
    world.approved_plan("a", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    assert world.cli("run", "a", "--proof") == 0
    world.approved_plan("c", start="2026-01-08", end="2026-01-09", proof=("2026-01-08",))
    assert world.cli("run", "c", "--proof") == 0 and world.cli("run", "c") == 0
    assert world.phase("c") == "reconciled"
    path = world.plan("b", start="2026-01-05", end="2026-01-06", proof=("2026-01-05",))
    from tests.world import OWNER
    world.sign_into_file(path, OWNER, "alice")
    capsys.readouterr()
    seen = _stall(monkeypatch, "approve.before_commit")
    codes: dict[str, int] = {}
    approve = threading.Thread(target=lambda: codes.update(approve=world.cli(
        "plan", "approve", str(path), "--by", "bob", "--key", str(world.keys["bob"]))))
    approve.start()
    others = []
    try:
        _until_reached("approve.before_commit", seen)
        others = [threading.Thread(target=lambda: codes.update(pause=world.cli("pause", "a"))),
                  threading.Thread(target=lambda: codes.update(publish=world.cli("publish", "c")))]
        for t in others:
            t.start()
        wait_for_waiters(world, 2, ("advisory", "tuple", "transactionid", "relation"))
    finally:
        monkeypatch.setenv(faults.RELEASE_ENV, "approve.before_commit")
    for t in [approve, *others]:
        t.join(timeout=240)
    monkeypatch.delenv(faults.STALL_ENV)
    said = capsys.readouterr()
    assert codes == {"approve": 0, "pause": 0, "publish": 0}, (codes, said.err)
    assert world.phase("c") == "published" and world.phase("b") == "approved", said.err
    seqs = [s for (s,) in world.sql("SELECT seq FROM backfill_control.evidence ORDER BY seq")]
    assert seqs == list(range(1, len(seqs) + 1))
    assert world.cli("evidence", "verify") == 0
    for plan in ("a", "b", "c"):
        assert world.cli("status", plan) == 0, capsys.readouterr().err


def test_a_status_read_while_plans_change_three_times_is_never_called_forged(engine_world, monkeypatch, capsys,
                                                                            tmp_path):
    """`backfill status` reads the chain index, then the plans' rows; each time a plan's change (a
    pause, a cancel) commits between the two reads, it reads again, and the third disagreement was
    called a forged record: on a busy warehouse an operator was told the record had been tampered
    with while every change was a command of theirs."""
    from tests.test_pg_concurrency import _backfill, _until
    from tests.world import keys

    world = engine_world
    assert world.materialize(keys(1, 10), publish=True).success
    world.approved_plan("a", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    world.approved_plan("b", start="2026-01-05", end="2026-01-06", proof=("2026-01-05",))
    assert world.cli("run", "a", "--proof") == 0 and world.cli("run", "b", "--proof") == 0
    capsys.readouterr()
    point = "record.all_plans.after_index"
    seen = faults.reached(point)
    monkeypatch.setenv(faults.STALL_ENV, ",".join(f"{point}@{seen + i}=120" for i in (1, 2, 3)))
    monkeypatch.delenv(faults.RELEASE_ENV, raising=False)
    codes: dict[str, int] = {}
    reader = threading.Thread(target=lambda: codes.update(status=world.cli("status")))
    reader.start()
    try:
        for i, change in enumerate((("pause", "a"), ("cancel", "a"), ("pause", "b")), start=1):
            _until_reached(point, seen + i - 1)  # the reader has read the index, not yet the plans
            if i == 3:  # it waits for the reader's last read, or commits between its two statements
                last = _backfill(world, tmp_path, *change, wait=False)
                _until(lambda last=last: last.poll() is not None or world.sql(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND wait_event = 'advisory'")[0][0] >= 1)
                monkeypatch.setenv(faults.RELEASE_ENV, point)
                _, err = last.communicate(timeout=240)
                assert last.returncode == 0, err
                break
            done = _backfill(world, tmp_path, *change)
            assert done.returncode == 0, done.stderr
            with world.warehouse().session() as held, held.transaction():
                held.execute("LOCK TABLE backfill_control.plans IN ACCESS EXCLUSIVE MODE")
                monkeypatch.setenv(faults.RELEASE_ENV, point)
                wait_for_waiters(world, 1, ("relation",))  # past the stall, waiting to read the plans
                monkeypatch.delenv(faults.RELEASE_ENV)
    finally:
        monkeypatch.setenv(faults.RELEASE_ENV, point)
        reader.join(timeout=240)
    monkeypatch.delenv(faults.STALL_ENV)
    said = capsys.readouterr()
    assert codes == {"status": 0}, (codes, said.err)
    assert "forged" not in said.err.lower() and world.cli("evidence", "verify") == 0


def test_a_session_the_server_ends_between_an_approvals_transactions_is_one_line_not_an_internal_error(
        engine_world, tmp_path):
    """`backfill plan approve` committed the approval; before its next transaction (the plan file's
    update) an operator's `pg_terminate_backend` (or a server restart) ended its session. The command
    ended in `internal error: AdminShutdown ...` (a bug, with a traceback): the BEGIN the session sends
    itself was not turned into the one-line error its statements give. It now says in one line that
    PostgreSQL ended the session, that the open transaction committed nothing, and to run the command
    again, which then succeeds (found by an attack)."""
    from tests.pg_server import admin_sql
    from tests.world import OWNER

    world = engine_world
    path = world.plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    world.sign_into_file(path, OWNER, "alice")
    release = tmp_path / "release"
    stall = {"BACKFILL_STALL_AT": "approve.after_commit=120", "BACKFILL_STALL_RELEASE_FILE": str(release)}
    approve = ("plan", "approve", str(path), "--by", "bob", "--key", str(world.keys["bob"]))
    proc = _backfill(world, tmp_path, *approve, env=stall, wait=False)
    try:
        _until(lambda: proc.poll() is not None or world.phase() == "approved")
        admin_sql(world.url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                             "current_database() AND pid <> pg_backend_pid() AND application_name = 'backfill-assets'")
    finally:
        release.touch()
        out, err = proc.communicate(timeout=120)
    assert proc.returncode not in (0, 3), (proc.returncode, err)
    assert err.count("\n") == 1 and "internal error" not in err and "committed nothing" in err, err
    status = _backfill(world, tmp_path, "status", "fix")
    assert status.returncode == 0 and "`backfill run fix --proof`" in status.stdout, status.stdout
    again = _backfill(world, tmp_path, *approve)
    assert again.returncode == 0, again.stderr
    assert _backfill(world, tmp_path, "evidence", "verify").returncode == 0


def test_a_lock_timeout_the_team_sets_is_one_line_when_a_control_table_is_busy_as_a_transaction_begins(
        engine_world, tmp_path):
    """The team set `lock_timeout` on the database (as the README invites); an operator's maintenance
    (`VACUUM FULL`, a schema change) held a control table (the run leases') while the hurried user typed `backfill pause
    fix`. Every transaction begins by locking the control tables, and that statement, sent by the
    session itself, ended the command in `internal error: LockNotAvailable` (a bug, with a traceback)
    where every other lock wait says in one line that it gave up waiting. It now does, says nothing
    was committed and to run it again, and once the table is free the pause goes through (found by
    an attack)."""
    import psycopg

    from tests.pg_server import admin_sql, as_admin

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    admin_sql(world.url, f"ALTER DATABASE \"{world.url.rsplit('/', 1)[1]}\" SET lock_timeout = '1s'")
    with psycopg.connect(as_admin(world.url)) as maintenance:  # its transaction holds the table
        maintenance.execute("LOCK TABLE backfill_control.leases IN ACCESS EXCLUSIVE MODE")
        busy = _backfill(world, tmp_path, "pause", "fix")
    assert busy.returncode not in (0, 3), (busy.returncode, busy.stderr)
    assert busy.stderr.count("\n") == 1 and "internal error" not in busy.stderr and "lock_timeout" in busy.stderr, \
        busy.stderr
    assert world.phase() == "approved" and world.sql(
        "SELECT hold FROM backfill_control.plans WHERE plan_id = 'fix'")[0][0] is None
    assert _backfill(world, tmp_path, "pause", "fix").returncode == 0
    assert _backfill(world, tmp_path, "evidence", "verify").returncode == 0

"""Issue 21: what two sessions at once do on PostgreSQL, proven with real second sessions and a
barrier on the server's own view of who waits for a lock, never a timing sleep."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time

import pytest
import yaml

from backfill_assets.execution.write import write_partitions
from backfill_assets.permission import PLAN_TAG, permit
from tests.conftest import BIN
from tests.world import BUGGY, FIXED, keys

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
    monkeypatch.setenv(faults.STALL_ENV, "approve.mirror_read@1=60")
    codes: dict[str, int] = {}

    def approve(who: str) -> None:
        codes[who] = world.cli("plan", "approve", str(path), "--by", who, "--key", str(world.keys[who]))

    alice = threading.Thread(target=approve, args=("alice",))
    alice.start()
    deadline = time.monotonic() + 60
    while faults.reached("approve.mirror_read") < 1 and time.monotonic() < deadline:
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
    monkeypatch.setenv(faults.STALL_ENV, "approve.after_commit=60")
    codes: dict[str, int] = {}
    alice = threading.Thread(target=lambda: codes.update(alice=world.cli(
        "plan", "approve", str(path), "--by", "alice", "--key", str(world.keys["alice"]))))
    alice.start()
    deadline = time.monotonic() + 60
    while faults.reached("approve.after_commit") < 1 and time.monotonic() < deadline:
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

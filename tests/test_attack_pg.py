"""Attacks by two or more commands at once on PostgreSQL (operators, the sensor, run workers) and a
hurried user: each test failed on the code before its fix."""

from __future__ import annotations

import json
import threading
import time

import pytest

from backfill_assets import faults
from backfill_assets.execution.write import write_partitions
from backfill_assets.permission import PLAN_TAG, permit
from tests.test_pg_concurrency import ADVISORY, wait_for_waiters
from tests.test_pg_rollback import ran_fix
from tests.world import FIXED, keys

pytestmark = pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)


def test_a_publish_never_deadlocks_with_another_plans_first_write_of_its_target(engine_world, monkeypatch, capfd):
    """Plan `fix` (January 1-4) is reconciled and published while plan `next` (January 5-8, same
    target) writes its proof: that write snapshots first, taking the evidence chain, then writes the
    target; publish holds the target in SHARE mode, then takes the chain for its own records. The
    two waited on each other in a circle and PostgreSQL killed the publish: `backfill: deadlock
    detected`, with no word of what to do (publish is not run again)."""
    world = engine_world
    window = ran_fix(world)
    world.approved_plan("next", start="2026-01-05", end="2026-01-08", proof=("2026-01-05",))
    monkeypatch.setenv(faults.STALL_ENV, "write.after_snapshot@1=60")
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
    while faults.reached("write.after_snapshot") < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert faults.reached("write.after_snapshot") == 1, wrote
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
    import yaml

    world = engine_world
    assert world.materialize(keys(1, 4)).success
    path = world.plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",), per_run=1)
    doc = yaml.safe_load(path.read_text())
    doc["execution"]["runs_at_once"] = 2
    path.write_text(yaml.safe_dump(doc))
    world.approve(path)
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

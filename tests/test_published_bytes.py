"""Issue 21: the bytes consumers see are the bytes that were proven.

The copy into the published table is proven in its own transaction, recorded, and checked again
later: a published table narrower than the contract is refused, an edit of it after publish is
found, and the gates judge a write inside the write's own transaction.
"""

from __future__ import annotations

import signal

from tests.world import BUGGY, keys

REVENUE = "orders BIGINT, gross DECIMAL(18,2), refunds DECIMAL(18,2), customers BIGINT"


def reconciled(world, start: str = "2026-01-01", end: str = "2026-01-04") -> None:
    world.approved_plan("fix", start=start, end=end, proof=(start,))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.phase() == "reconciled"


def test_a_published_table_narrower_than_the_contract_is_refused_and_unchanged(engine_world, capfd):
    world = engine_world
    # net_revenue DECIMAL(18,0): 7990.39 would reach consumers as 7990
    world.run_sql(f"CREATE TABLE published_revenue (order_date DATE, region VARCHAR, {REVENUE}, "
                  "net_revenue DECIMAL(18,0))")
    reconciled(world)
    capfd.readouterr()
    assert world.cli("publish", "fix") == 1
    err = capfd.readouterr().err
    assert "would not hold the bytes the gates checked" in err and "net_revenue" in err, err
    assert err.count("\n") == 1
    assert world.sql("SELECT count(*) FROM published_revenue") == [(0,)]
    assert world.phase() == "reconciled"
    # made what the contract declares, it publishes
    world.run_sql("DROP TABLE published_revenue")
    assert world.cli("publish", "fix") == 0
    assert world.fingerprints("published_revenue", keys(1, 4)) == world.fingerprints("daily_revenue", keys(1, 4))


def test_an_edit_of_the_published_table_after_publish_is_found_and_put_right(engine_world, capfd):
    world = engine_world
    reconciled(world)
    assert world.cli("publish", "fix") == 0
    proven = world.fingerprints("published_revenue", keys(1, 4))
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 "
                  "WHERE order_date = '2026-01-03' AND region = 'north'")
    capfd.readouterr()
    assert world.cli("status", "fix") == 0
    assert "EDITED since: published_revenue 1 partition(s), first 2026-01-03" in capfd.readouterr().out
    assert world.cli("plan", "close", "fix") == 1  # not while consumers see other bytes
    assert world.phase() == "repairing"
    capfd.readouterr()
    assert world.cli("reconcile", "fix") == 0  # the target still passes: back to reconciled, to republish
    assert world.phase() == "reconciled"
    assert world.cli("publish", "fix") == 0
    out = capfd.readouterr().out
    assert "had been edited outside backfill since its last publish (2026-01-03)" in out, out
    assert world.fingerprints("published_revenue", keys(1, 4)) == proven
    assert world.cli("plan", "close", "fix") == 0
    edited = world.sql("SELECT payload FROM backfill_control.evidence WHERE kind = 'published_edited'")
    assert len(edited) == 1 and "2026-01-03" in edited[0][0]


def test_a_write_and_its_verdict_commit_together(world, cli):
    """Killed between writing a partition and judging it, nothing of either is left: a partition is
    never written without the verdict on exactly its bytes."""
    assert world.materialize(keys(1, 2), spec=BUGGY).success
    before = world.fingerprints("daily_revenue", keys(1, 2))
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-02",))
    writes = world.sql("SELECT count(*) FROM backfill_control.writes")
    crashed = cli("run", "fix", "--proof", env={"BACKFILL_CRASH_AT": "write.before_judge"})
    assert crashed.code == -signal.SIGKILL, crashed
    assert world.fingerprints("daily_revenue", keys(1, 2)) == before
    assert world.sql("SELECT count(*) FROM backfill_control.writes") == writes
    assert world.cli("run", "fix", "--proof") == 0
    ids = world.sql("SELECT write_id FROM backfill_control.writes WHERE plan_id = 'fix' ORDER BY 1")
    judged = world.sql("SELECT DISTINCT write_id FROM backfill_control.gate_results WHERE plan_id = 'fix' ORDER BY 1")
    assert ids == judged and len(ids) == 2

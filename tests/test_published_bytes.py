"""Issue 21: the bytes consumers see are the bytes that were proven.

The copy into the published table is proven in its own transaction, recorded, and checked again
later: a published table narrower than the contract is refused, an edit of it after publish is
found, and the gates judge a write inside the write's own transaction.
"""

from __future__ import annotations

import signal

import pytest

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
    assert "EDITED since: 1 partition(s), first 2026-01-03" in capfd.readouterr().out
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


def test_a_published_table_dropped_or_reshaped_after_publish_is_an_edit(engine_world, capfd):
    """Consumers no longer see the proven bytes when the table is gone, or has grown a column beside
    an edited value: status, plan close and reconcile find it as they find an edited value."""
    world = engine_world
    reconciled(world)
    assert world.cli("publish", "fix") == 0

    def found(why: str) -> None:
        capfd.readouterr()
        assert world.cli("status", "fix") == 0
        out = capfd.readouterr().out
        assert "EDITED since: 4 partition(s)" in out and why in out, out
        assert "plan close" not in out  # the next step is the repair, not closing
        assert world.cli("plan", "close", "fix") == 1
        assert world.phase() == "repairing"
        assert world.cli("reconcile", "fix") == 0 and world.phase() == "reconciled"

    world.run_sql("DROP TABLE published_revenue")
    found("published_revenue was dropped")
    assert world.cli("publish", "fix") == 0  # made again from the contract, with the checked bytes
    assert world.fingerprints("published_revenue", keys(1, 4)) == world.fingerprints("daily_revenue", keys(1, 4))

    world.run_sql("ALTER TABLE published_revenue ADD COLUMN note VARCHAR")
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 "
                  "WHERE order_date = '2026-01-03' AND region = 'north'")
    found("reshaped (unexpected column note)")
    capfd.readouterr()
    assert world.cli("publish", "fix") == 1  # not into a table the contract does not describe
    assert "unexpected column note" in capfd.readouterr().err
    assert world.phase() == "reconciled"


def test_a_rollback_of_published_data_is_no_edit_of_the_published_table(engine_world, capfd):
    """Rollback puts the snapshot's bytes back where consumers read: that is their last publication
    now, so the next plan's publish does not report (and record in the evidence) an edit."""
    world = engine_world
    assert world.materialize(keys(1, 4), spec=BUGGY, publish=True).success
    before = world.fingerprints("published_revenue", keys(1, 4))
    reconciled(world)
    assert world.cli("publish", "fix") == 0
    assert world.cli("rollback", "fix") == 0
    assert world.fingerprints("published_revenue", keys(1, 4)) == before
    world.approved_plan("again", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert world.cli("run", "again", "--proof") == 0 and world.cli("run", "again") == 0
    capfd.readouterr()
    assert world.cli("publish", "again") == 0
    assert "edited outside backfill" not in capfd.readouterr().out
    assert world.sql("SELECT count(*) FROM backfill_control.evidence WHERE kind = 'published_edited'") == [(0,)]
    # an edit after the rollback is still found: the rollback's record is what it is compared with
    assert world.cli("rollback", "again") == 0
    world.run_sql("DELETE FROM published_revenue WHERE order_date = '2026-01-02' AND region = 'north'")
    world.approved_plan("third", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert world.cli("run", "third", "--proof") == 0 and world.cli("run", "third") == 0
    capfd.readouterr()
    assert world.cli("publish", "third") == 0
    assert capfd.readouterr().out.count("since its last publish (2026-01-02)") == 1
    assert world.cli("evidence", "verify") == 0


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_bytes_changed_inside_the_write_fail_unchanged_since_checked_at_write_time(engine_world):
    """A trigger someone put on the target changes rows as the write inserts them: the gates judge
    the bytes the table holds, so they must be compared with what the write produced there and then
    (not the write's fingerprint with itself), or a publish could later copy bytes never judged."""
    world = engine_world
    assert world.materialize(keys(1, 2), spec=BUGGY).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    world.run_sql("CREATE FUNCTION nudge() RETURNS trigger AS $$ BEGIN "
                  "IF NEW.region = 'north' THEN NEW.orders := NEW.orders + 1; END IF; RETURN NEW; END $$ "
                  "LANGUAGE plpgsql")
    world.run_sql("CREATE TRIGGER nudge BEFORE INSERT ON daily_revenue FOR EACH ROW EXECUTE FUNCTION nudge()")
    assert world.cli("run", "fix", "--proof") != 0
    [(passed, figures)] = world.sql(
        "SELECT passed, figures FROM backfill_control.gate_results WHERE plan_id = 'fix' "
        "AND gate = 'unchanged_since_checked' ORDER BY result_id DESC LIMIT 1")
    assert not passed and "not what its write produced" in figures, figures
    assert world.phase() == "proving"

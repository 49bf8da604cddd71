"""A home the previous release wrote holds legacy (md5-sum) fingerprints in its records. A rollback
still verifies a snapshot taken before the upgrade, by the algorithm that recorded it; publish and
the unchanged_since_checked gate trust no legacy fingerprint (other rows with the same sum can be
found, tests/test_fingerprint_collisions.py) until the partition is written again."""

from __future__ import annotations

from backfill_assets.demo.revenue import DAILY_REVENUE
from backfill_assets.warehouse.fingerprints import LEGACY_EMPTY, fingerprints_like
from backfill_assets.warehouse.snapshots import snapshot_table
from tests.world import BUGGY, keys

WINDOW = keys(1, 4)


def legacy_prints(world, table: str, partitions: list[str], schema: str | None = None):
    """What the previous release computed for these partitions: the md5 sum."""
    with world.warehouse().session() as session:
        return fingerprints_like(session, table, DAILY_REVENUE.columns, world.scheme, "order_date",
                                 dict.fromkeys(partitions, LEGACY_EMPTY), schema)


def snapshots_as_the_previous_release_recorded_them(world, plan_id: str = "fix") -> None:
    taken = legacy_prints(world, snapshot_table(plan_id, "daily_revenue"), WINDOW, "backfill_snapshots")
    for key, fp in taken.items():
        world.run_sql("UPDATE backfill_control.snapshots SET fingerprint = ? WHERE plan_id = ? AND "
                      "table_name = 'daily_revenue' AND partition_key = ?", [fp.digest, plan_id, key])


def test_a_rollback_verifies_a_snapshot_taken_before_the_upgrade_by_the_algorithm_that_took_it(world, run_cli):
    assert world.materialize(WINDOW, spec=BUGGY).success
    before = world.fingerprints("daily_revenue", WINDOW)
    world.approved_plan("fix", start=WINDOW[0], end=WINDOW[-1], proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    snapshots_as_the_previous_release_recorded_them(world)
    dry = run_cli("rollback", "fix", "--dry-run")
    assert dry.code == 0 and "(unchanged)" not in dry.out and "md5-sum #" in dry.out
    # rows changed in a snapshot are still caught by the legacy sum (a forgery would need a search)
    world.run_sql(f"UPDATE backfill_snapshots.{snapshot_table('fix', 'daily_revenue')} "
                  "SET net_revenue = net_revenue + 1 WHERE order_date = '2026-01-03' AND region = 'north'")
    refused = run_cli("rollback", "fix")
    assert refused.code == 1 and "restored fingerprints of daily_revenue differ for 2026-01-03" in refused.err
    world.run_sql(f"UPDATE backfill_snapshots.{snapshot_table('fix', 'daily_revenue')} "
                  "SET net_revenue = net_revenue - 1 WHERE order_date = '2026-01-03' AND region = 'north'")
    rolled = run_cli("rollback", "fix")
    assert rolled.code == 0, rolled.err
    assert world.fingerprints("daily_revenue", WINDOW) == before and world.phase() == "rolled_back"


def test_publish_trusts_no_write_fingerprinted_before_the_upgrade_until_it_is_written_again(world, run_cli):
    world.approved_plan("fix", start=WINDOW[0], end=WINDOW[-1], proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.phase() == "reconciled"
    # the previous release recorded 2026-01-03's write, and the gates' checked data, by the md5 sum
    old = legacy_prints(world, "daily_revenue", ["2026-01-03"])["2026-01-03"]
    world.run_sql("UPDATE backfill_control.writes SET fingerprint = ? WHERE partition_key = '2026-01-03'",
                  [old.digest])
    world.run_sql("UPDATE backfill_control.gate_results SET checked_fingerprint = ? "
                  "WHERE partition_key = '2026-01-03'", [old.digest])
    published = world.fingerprints("published_revenue", WINDOW)
    refused = run_cli("publish", "fix")
    assert refused.code == 1
    assert (f"2026-01-03: its write's fingerprint ({old}) predates sha256 fingerprints and cannot show "
            "the data unchanged; re-run it") in refused.err
    assert world.fingerprints("published_revenue", WINDOW) == published
    judged = run_cli("reconcile", "fix")
    assert judged.code == 1 and "fingerprinted before the upgrade" in judged.out
    assert world.cli("run", "fix", "--partitions", "2026-01-03") == 0
    assert world.cli("publish", "fix") == 0
    assert world.fingerprints("published_revenue", WINDOW) == world.fingerprints("daily_revenue", WINDOW)

"""A home the previous release wrote holds legacy (md5-sum) fingerprints in its records. A rollback
still verifies a snapshot taken before the upgrade, by the algorithm that recorded it; publish and
the unchanged_since_checked gate trust no legacy fingerprint (other rows with the same sum can be
found, tests/test_fingerprint_collisions.py) until the partition is written again. The homes are
made as 0.2 left them and upgraded the way a team upgrades (tests/release_0_2.py)."""

from __future__ import annotations

from backfill_assets.warehouse.snapshots import snapshot_table
from tests.release_0_2 import as_release_0_2, upgrade
from tests.world import BUGGY, failure_text, keys

WINDOW = keys(1, 4)


def test_a_rollback_verifies_a_snapshot_taken_before_the_upgrade_by_the_algorithm_that_took_it(world, run_cli):
    assert world.materialize(WINDOW, spec=BUGGY, publish=True).success
    before = world.fingerprints("daily_revenue", WINDOW)
    world.approved_plan("fix", start=WINDOW[0], end=WINDOW[-1], proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0 and world.cli("plan", "close", "fix") == 0
    as_release_0_2(world, legacy_fingerprints=True)
    upgrade(world, run_cli)
    # its 0.2 approvals sign a hash alone, so rolling back what consumers saw is signed anew
    signed = ("--sign", f"alice={world.keys['alice']}", "--sign", f"bob={world.keys['bob']}")
    dry = run_cli("rollback", "fix", "--dry-run")
    assert dry.code == 0 and "(unchanged)" not in dry.out and "md5-sum #" in dry.out, dry
    # rows changed in a snapshot are still caught by the legacy sum (a forgery would need a search)
    world.run_sql(f"UPDATE backfill_snapshots.{snapshot_table('fix', 'daily_revenue')} "
                  "SET net_revenue = net_revenue + 1 WHERE order_date = '2026-01-03' AND region = 'north'")
    refused = run_cli("rollback", "fix", *signed)
    assert refused.code == 1 and "restored fingerprints of daily_revenue differ for 2026-01-03" in refused.err
    world.run_sql(f"UPDATE backfill_snapshots.{snapshot_table('fix', 'daily_revenue')} "
                  "SET net_revenue = net_revenue - 1 WHERE order_date = '2026-01-03' AND region = 'north'")
    rolled = run_cli("rollback", "fix", *signed)
    assert rolled.code == 0, rolled.err
    assert world.fingerprints("daily_revenue", WINDOW) == before and world.phase() == "rolled_back"


def test_publish_trusts_no_write_fingerprinted_before_the_upgrade_until_it_is_written_again(world, run_cli):
    assert world.materialize(WINDOW).success  # the daily job wrote them under 0.2; not published yet
    as_release_0_2(world, legacy_fingerprints=True)
    upgrade(world, run_cli)
    refused = world.publish(WINDOW)
    assert not refused.success
    assert "predates sha256 fingerprints and cannot show the data unchanged" in failure_text(refused)
    assert world.rows("published_revenue", "2026-01-03") == 0
    # written again under a replay plan (they hold rows), they publish
    world.approved_plan("fix", start=WINDOW[0], end=WINDOW[-1], proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0
    assert world.fingerprints("published_revenue", WINDOW) == world.fingerprints("daily_revenue", WINDOW)

"""What a careless or hostile edit cannot do: write outside a partition, publish on loosened
thresholds, mix code versions, take over a running plan, forge approvals or cut the evidence."""

from __future__ import annotations

import dataclasses

import duckdb
import pytest
import yaml

from backfill_assets.errors import WriteRefused
from backfill_assets.warehouse.connection import connection, transaction
from backfill_assets.warehouse.snapshots import snapshot_table
from backfill_assets.warehouse.writes import ensure_table, write_partition
from tests.world import FIXED, failure_text, keys


def test_a_recomputation_that_returns_other_days_is_refused(world):
    assert world.materialize(keys(1, 3)).success
    before = world.fingerprints("daily_revenue", keys(1, 3))
    leaky = dataclasses.replace(FIXED, select_sql=FIXED.select_sql.replace(
        "WHERE order_date = $partition", "WHERE order_date >= $partition"))
    with connection(world.warehouse) as con:
        with pytest.raises(WriteRefused, match=r"yielded \d+ row\(s\) whose order_date is not"):
            with transaction(con):
                write_partition(con, leaky, "2026-01-02", "overwrite")
    assert world.fingerprints("daily_revenue", keys(1, 3)) == before


def test_merge_stays_inside_its_partition_whatever_the_business_keys(world):
    assert world.materialize(keys(1, 3)).success
    by_region = dataclasses.replace(FIXED, business_keys=("region",))
    others = world.fingerprints("daily_revenue", ["2026-01-01", "2026-01-03"])
    with connection(world.warehouse) as con:
        ensure_table(con, by_region)
        with transaction(con):
            write_partition(con, by_region, "2026-01-02", "merge")
    assert world.fingerprints("daily_revenue", ["2026-01-01", "2026-01-03"]) == others
    assert world.rows("daily_revenue", "2026-01-02") == 5


def test_reconcile_and_publish_refuse_a_copy_with_loosened_thresholds(world, cli):
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    assert cli("run", str(path), "--proof").code == 0
    assert cli("run", str(path)).code == 0
    world.sql("UPDATE daily_revenue SET net_revenue = net_revenue * 1.5 "
              "WHERE order_date = '2026-01-02'")
    loose = yaml.safe_load(path.read_text())
    for metric in loose["checks"]["metrics"]:
        metric["tolerance_pct"] = 100
    copy = world.root / "loose.yaml"
    copy.write_text(yaml.safe_dump(loose))
    for command in ("reconcile", "publish"):
        refused = cli(command, str(copy))
        assert refused.code == 1 and "is not the approved version of plan fix" in refused.err
    assert cli("reconcile", str(path)).code == 1  # the approved thresholds still fail it
    assert world.sql("SELECT phase FROM backfill_control.plans")[0][0] == "running"
    assert world.sql("SELECT count(*) FROM published_revenue")[0][0] == 0


def test_a_window_that_mixes_code_versions_does_not_reconcile(world, cli):
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-01",))
    assert cli("run", str(path), "--proof").code == 0
    v3 = dataclasses.replace(FIXED, code_version="3")
    assert world.plan_run("fix", keys(2, 3), spec=v3).success
    result = cli("reconcile", str(path))
    assert result.code == 1
    status = cli("status", str(path))
    assert "fix: running" in status.out
    published = cli("publish", str(path))
    assert published.code == 1 and "the window mixes code versions" in published.err


def test_an_edited_plan_cannot_take_over_a_running_one_and_rollback_restores_everything(world, cli):
    window = keys(1, 4)
    for key in window:
        assert world.materialize(key).success
    before = world.fingerprints("daily_revenue", window)
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert cli("run", str(path), "--proof").code == 0
    assert cli("run", str(path)).code == 0
    doc = yaml.safe_load(path.read_text())
    doc["window"]["start"] = "2026-01-03"
    doc["execution"]["proof_partitions"] = ["2026-01-03"]
    doc["approvals"]["granted"] = []
    path.write_text(yaml.safe_dump(doc))
    refused = cli("plan", "approve", str(path), "--by", "carol")
    assert refused.code == 1 and "cannot take over what it started" in refused.err
    assert world.sql("SELECT window_start FROM backfill_control.plans")[0][0].isoformat() == \
        "2026-01-01"
    rolled = cli("rollback", str(path))
    assert rolled.code == 0, rolled.err
    assert "restored 4 partition(s) of daily_revenue" in rolled.out
    assert world.fingerprints("daily_revenue", window) == before


def test_snapshot_tables_of_similar_plan_ids_do_not_collide():
    assert snapshot_table("fix-a", "daily_revenue") != snapshot_table("fix_a", "daily_revenue")


def test_hand_written_approvals_do_not_count(world, cli):
    path = world.plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    assert world.cli("plan", "approve", str(path), "--by", "alice") == 0
    doc = yaml.safe_load(path.read_text())
    doc["approvals"]["granted"].append(dict(doc["approvals"]["granted"][0], by="mallory"))
    path.write_text(yaml.safe_dump(doc))
    # the file now holds two approvals, but only alice's was given through `plan approve`
    guard = cli("guard", str(path))
    assert guard.code == 1 and "1/2 counted (alice)" in guard.out
    assert "mallory (not given with `backfill plan approve`" in guard.out
    assert world.sql("SELECT phase FROM backfill_control.plans")[0][0] == "drafted"
    result = world.backfill(keys(1, 1))
    assert not result.success and world.rows("daily_revenue", "2026-01-01") == 0
    # even if the record were approved by other means, the gate re-checks the recorded approvals
    world.sql("UPDATE backfill_control.plans SET phase = 'approved', approved_sha256 = sha256")
    forced = world.backfill(keys(1, 1))
    assert not forced.success
    assert "not given with `backfill plan approve`: mallory" in failure_text(forced)
    assert world.rows("daily_revenue", "2026-01-01") == 0


def test_plan_business_keys_must_be_the_tables(world, cli):
    path = world.plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    path.write_text(path.read_text().replace("- region", "- customer_id"))
    world.approve(path)
    result = cli("run", str(path), "--proof")
    assert result.code == 1
    assert "business_keys (order_date, customer_id) are not daily_revenue's" in result.err


def test_evidence_cut_off_after_rendering_is_detected(world, cli):
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-01", proof=("2026-01-01",))
    assert cli("run", str(path), "--proof").code == 0
    out = world.root / "evidence.yaml"
    assert cli("evidence", str(path), "--out", str(out)).code == 0
    assert cli("evidence", "verify", "--against", str(out)).code == 0
    con = duckdb.connect(str(world.warehouse))
    last = con.execute("SELECT max(seq) FROM backfill_control.evidence").fetchone()[0]
    con.execute("DELETE FROM backfill_control.evidence WHERE seq >= ?", [last - 2])
    con.close()
    assert cli("evidence", "verify").code == 0  # a chain alone cannot see its end cut off
    cut = cli("evidence", "verify", "--against", str(out))
    assert cut.code == 1 and f"evidence row {last} does not verify" in cut.err

"""The plan gate on every execution path, with a real Dagster instance and DuckDB file."""

from __future__ import annotations

import yaml

from backfill_assets.gates.results import GATE_NAMES
from examples.definitions import defs as demo_defs
from tests.world import BUGGY, failure_text, keys


def test_definitions_load_with_stable_asset_and_check_keys():
    graph = demo_defs.resolve_asset_graph()
    assert sorted(k.to_user_string() for k in graph.get_all_asset_keys()) == [
        "daily_revenue", "orders", "published_revenue"]
    checks = sorted(c.name for c in graph.asset_check_keys)
    assert checks == sorted(GATE_NAMES)
    assert demo_defs.resolve_sensor_def("daily_revenue__reopen_publish") is not None


def test_backfill_over_unapproved_window_writes_nothing(world):
    result = world.backfill(keys(1, 1))
    assert not result.success
    text = failure_text(result)
    assert "no approved replay plan covers partition 2026-01-01 of daily_revenue" in text
    assert "backfill plan new" in text
    assert world.rows("daily_revenue", "2026-01-01") == 0
    assert world.sql("SELECT count(*) FROM backfill_control.writes")[0][0] == 0


def test_approved_window_before_proof_writes_only_the_proof_partitions(world):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-06", proof=("2026-01-02",))
    refused = world.backfill(keys(3, 3))
    assert not refused.success
    assert "only its proof partitions (2026-01-02) may run until the proof passes" in \
        failure_text(refused)
    assert world.rows("daily_revenue", "2026-01-03") == 0
    proof = world.backfill(keys(2, 2))
    assert proof.success
    assert world.rows("daily_revenue", "2026-01-02") == 5
    phase = world.sql("SELECT phase FROM backfill_control.plans WHERE plan_id = 'fix'")[0][0]
    assert phase == "proving"


def test_backfill_outside_every_window_is_refused_even_with_an_active_plan(world):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    result = world.backfill(keys(5, 5))
    assert not result.success and "no approved replay plan covers partition 2026-01-05" in \
        failure_text(result)


def test_edited_plan_is_refused_at_run_time(world):
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-06", proof=("2026-01-02",))
    path.write_text(path.read_text().replace("max_concurrent_partitions: 2",
                                             "max_concurrent_partitions: 3"))
    result = world.backfill(keys(2, 2))
    assert not result.success
    assert "was edited since its approval" in failure_text(result)
    assert world.rows("daily_revenue", "2026-01-02") == 0


def test_scheduled_run_on_frozen_partition_writes_nothing_and_cursor_ignores_backfills(world):
    seeded = world.materialize(keys(1, 1), spec=BUGGY)  # incremental, before any plan
    assert seeded.success
    before = world.fingerprints("daily_revenue", keys(1, 1))
    cursor = world.sql("SELECT partition_key FROM backfill_control.watermarks")
    assert cursor == [("2026-01-01",)]

    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    frozen = world.materialize(keys(1, 1), spec=BUGGY)
    assert not frozen.success
    assert "frozen by active plan fix" in failure_text(frozen)
    assert world.fingerprints("daily_revenue", keys(1, 1)) == before

    assert world.plan_run("fix", keys(1, 1)).success  # the backfill writes the frozen partition
    assert world.sql("SELECT partition_key FROM backfill_control.watermarks") == cursor
    outside = world.materialize(keys(6, 6))  # an incremental day outside the window still runs
    assert outside.success
    assert world.sql("SELECT partition_key FROM backfill_control.watermarks") == [("2026-01-06",)]


def test_a_second_plan_overlapping_an_active_one_cannot_be_approved(world, capsys):
    world.approved_plan("first", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    second = world.plan("second", start="2026-01-04", end="2026-01-06", proof=("2026-01-05",))
    assert world.cli("plan", "approve", str(second), "--by", "alice") == 1
    err = capsys.readouterr().err
    assert "plan first (approved) already holds daily_revenue 2026-01-01..2026-01-04" in err
    assert yaml.safe_load(second.read_text())["approvals"]["granted"] == []
    # once the first plan is finished the second may be approved
    world.sql("UPDATE backfill_control.plans SET phase = 'closed' WHERE plan_id = 'first'")
    assert world.cli("plan", "approve", str(second), "--by", "alice") == 0

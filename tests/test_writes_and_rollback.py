"""Idempotent, atomic writes by mode; snapshots; rollback to the exact pre-backfill state."""

from __future__ import annotations

import dataclasses

import pytest

from backfill_assets.control import record
from backfill_assets.errors import RollbackRefused, WriteRefused
from backfill_assets.execution.rollback import rollback
from backfill_assets.warehouse.connection import connection, transaction
from backfill_assets.warehouse.fingerprints import fingerprint
from backfill_assets.warehouse.writes import ensure_table, write_partition
from tests.world import BUGGY, FIXED, failure_text, keys


@pytest.mark.parametrize("mode", ["overwrite", "merge", "replay"])
def test_same_partition_twice_under_each_mode_leaves_identical_fingerprints(world, mode):
    if mode != "replay":  # replay only adds missing events; it would keep the buggy rows
        assert world.materialize(keys(2, 2), spec=BUGGY).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",),
                        mode=mode)
    assert world.plan_run("fix", keys(2, 2)).success
    first = world.fingerprints("daily_revenue", keys(2, 2))
    assert world.plan_run("fix", keys(2, 2)).success
    second = world.fingerprints("daily_revenue", keys(2, 2))
    assert first == second and first["2026-01-02"].rows == 5
    prints = world.sql("SELECT fingerprint FROM backfill_control.writes WHERE plan_id = 'fix'")
    assert len(prints) == 2 and prints[0] == prints[1]
    duplicates = world.sql("SELECT count(*) - count(DISTINCT (order_date, region)) "
                           "FROM daily_revenue")[0][0]
    assert duplicates == 0


def test_overwrite_replaces_buggy_values_and_merge_updates_them(world):
    world.materialize(keys(2, 3), spec=BUGGY)
    buggy = world.sql("SELECT sum(net_revenue) FROM daily_revenue WHERE order_date = '2026-01-02'")
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",),
                        mode="merge")
    assert world.plan_run("fix", keys(2, 2)).success
    fixed = world.sql("SELECT sum(net_revenue) FROM daily_revenue WHERE order_date = '2026-01-02'")
    source = world.sql("SELECT sum(amount) - coalesce(sum(amount) FILTER (WHERE status = "
                       "'refunded'), 0) FROM orders WHERE order_date = '2026-01-02'")
    assert fixed == source and fixed != buggy


def test_a_failure_inside_the_write_leaves_the_old_partition(world):
    assert world.materialize(keys(2, 2), spec=BUGGY).success
    before = world.fingerprints("daily_revenue", keys(2, 2))
    # the recomputation stages fine, then its INSERT fails after the DELETE ran
    broken = dataclasses.replace(FIXED, select_sql=FIXED.select_sql.replace(
        "count(*) AS orders", "'many' AS orders"))
    with connection(world.warehouse) as con:
        ensure_table(con, broken)
        with pytest.raises(Exception, match="(?i)convert|cast"), transaction(con):
            write_partition(con, broken, "2026-01-02", "overwrite")
    assert world.fingerprints("daily_revenue", keys(2, 2)) == before


def test_empty_recomputation_over_existing_rows_is_refused(world):
    assert world.materialize(keys(2, 2), spec=BUGGY).success
    before = world.fingerprints("daily_revenue", keys(2, 2))
    world.sql("DELETE FROM orders WHERE order_date = '2026-01-02'")
    with connection(world.warehouse) as con, pytest.raises(WriteRefused, match="yielded no rows"):
        with transaction(con):
            write_partition(con, FIXED, "2026-01-02", "overwrite")
    assert world.fingerprints("daily_revenue", keys(2, 2)) == before
    # through Dagster the same refusal fails the run, naming the fix
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    result = world.plan_run("fix", keys(2, 2))
    assert not result.success and "allow_empty_partitions" in failure_text(result)


def run_whole_plan(world, name="fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",)):
    path = world.approved_plan(name, start=start, end=end, proof=proof)
    assert world.cli("run", str(path), "--proof") == 0
    assert world.cli("run", str(path)) == 0
    assert world.cli("publish", str(path)) == 0
    return path


def test_rollback_after_a_full_run_restores_the_exact_pre_backfill_fingerprints(world, monkeypatch):
    monkeypatch.setenv("BACKFILL_DEFS", "examples.definitions:defs")
    window = keys(1, 4)
    # the buggy release wrote and published the window as daily incremental runs
    for key in window:
        assert world.materialize(key, spec=BUGGY, publish=True).success
    target_before = world.fingerprints("daily_revenue", window)
    published_before = world.fingerprints("published_revenue", window)
    assert all(fp.rows == 5 for fp in target_before.values())

    path = run_whole_plan(world)
    assert world.fingerprints("daily_revenue", window) != target_before
    assert world.fingerprints("published_revenue", window) != published_before

    assert world.cli("rollback", str(path), "--dry-run") == 0
    assert world.fingerprints("daily_revenue", window) != target_before  # dry run changed nothing
    assert world.cli("rollback", str(path)) == 0
    assert world.fingerprints("daily_revenue", window) == target_before
    assert world.fingerprints("published_revenue", window) == published_before
    assert world.sql("SELECT phase FROM backfill_control.plans")[0][0] == "rolled_back"
    assert world.cli("rollback", str(path)) == 1  # twice is refused


def test_rollback_is_refused_when_a_later_plan_wrote_the_same_partitions(world, monkeypatch):
    monkeypatch.setenv("BACKFILL_DEFS", "examples.definitions:defs")
    run_whole_plan(world, "first")
    run_whole_plan(world, "second", start="2026-01-03", end="2026-01-05", proof=("2026-01-03",))
    with connection(world.warehouse) as con:
        state = record.require(con, "first")
        before = fingerprint(con, "daily_revenue", "order_date", "2026-01-03")
        with pytest.raises(RollbackRefused, match="second wrote"):
            rollback(con, FIXED, state, "test")
        assert fingerprint(con, "daily_revenue", "order_date", "2026-01-03") == before
        assert record.require(con, "first").phase.value == "published"

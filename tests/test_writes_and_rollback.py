"""Idempotent, atomic writes by mode; snapshots; rollback whole to the exact pre-backfill state,
or refused."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from backfill_assets.errors import IdentifierError, WarehouseError, WriteRefused
from backfill_assets.warehouse.writes import ensure_table, write_rows
from tests.world import BUGGY, FIXED, failure_text, keys, per_partition

DAYS = keys(1, 3)


@pytest.mark.parametrize("mode", ["overwrite", "merge", "replay"])
def test_the_same_partition_twice_under_each_mode_leaves_identical_fingerprints(world, mode):
    if mode != "replay":  # replay only adds missing events; it would keep the buggy rows
        assert world.materialize(keys(2, 2), spec=BUGGY).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",), mode=mode)
    assert world.plan_run("fix", keys(2, 2)).success
    first = world.fingerprints("daily_revenue", keys(2, 2))
    assert world.plan_run("fix", keys(2, 2)).success
    assert world.fingerprints("daily_revenue", keys(2, 2)) == first and first["2026-01-02"].rows == 5
    prints = world.sql("SELECT fingerprint FROM backfill_control.writes WHERE plan_id = 'fix'")
    assert len(prints) == 2 and prints[0] == prints[1]
    assert world.sql("SELECT count(*) - count(DISTINCT (order_date, region)) FROM daily_revenue") == [(0,)]


@pytest.mark.parametrize("mode", ["overwrite", "merge", "replay"])
def test_several_partitions_in_one_transaction_match_one_at_a_time(engine_world, mode):
    """A run writes its partitions in one transaction: the result, and the fingerprints it records,
    are what writing them one by one gives, on each engine."""
    from backfill_assets.warehouse.fingerprints import fingerprints

    world = engine_world

    days = keys(1, 4)
    if mode != "replay":
        assert world.materialize(days, spec=BUGGY).success
    one_by_one = {}

    class Undo(Exception):
        """Rolls the one-by-one writes back, to write the same days at once below."""

    with world.warehouse().session() as session:
        ensure_table(session, FIXED)
        with pytest.raises(Undo), session.transaction():
            for day in days:
                one_by_one.update(write_rows(session, FIXED, world.scheme, [day], mode))
            expected = fingerprints(session, "daily_revenue", FIXED.columns, world.scheme, "order_date", days)
            raise Undo
    assert {k: fp for k, (_, fp) in one_by_one.items()} == expected
    with world.warehouse().session() as session, session.transaction():
        together = write_rows(session, FIXED, world.scheme, days, mode)
    assert together == one_by_one
    assert world.fingerprints("daily_revenue", days) == expected
    with world.warehouse().session() as session, session.transaction():
        again = write_rows(session, FIXED, world.scheme, days, mode)  # idempotent: nothing moves
    assert {k: fp for k, (_, fp) in again.items()} == expected
    assert world.fingerprints("daily_revenue", days) == expected


def test_a_leak_in_one_partition_of_a_transaction_writes_none_of_them(world):
    days = keys(1, 3)
    assert world.materialize(days, spec=BUGGY).success
    before = world.fingerprints("daily_revenue", days)
    # only 2026-01-02's recomputation leaks into the next day
    day = per_partition(FIXED)
    leaky = dataclasses.replace(day, select_sql=day.select_sql.replace(
        "WHERE order_date = $partition",
        "WHERE order_date = $partition OR (order_date = $partition + 1 AND $partition = DATE '2026-01-02')"))
    with world.warehouse().session() as session:
        with pytest.raises(WriteRefused, match="partition 2026-01-02 yielded 5 row"), session.transaction():
            write_rows(session, leaky, world.scheme, days, "overwrite")
    assert world.fingerprints("daily_revenue", days) == before


def test_overwrite_replaces_buggy_values_and_merge_updates_them(world):
    assert world.materialize(keys(2, 3), spec=BUGGY).success
    buggy = world.sql("SELECT sum(net_revenue) FROM daily_revenue WHERE order_date = '2026-01-02'")
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",), mode="merge")
    assert world.plan_run("fix", keys(2, 2)).success
    fixed = world.sql("SELECT sum(net_revenue) FROM daily_revenue WHERE order_date = '2026-01-02'")
    source = world.sql("SELECT sum(amount) - coalesce(sum(amount) FILTER (WHERE status = 'refunded'), 0) "
                       "FROM orders WHERE order_date = '2026-01-02'")
    assert fixed == source and fixed != buggy


def test_a_failure_inside_the_write_leaves_the_old_partition(world):
    assert world.materialize(keys(2, 2), spec=BUGGY).success
    before = world.fingerprints("daily_revenue", keys(2, 2))
    # the recomputation stages fine, then its INSERT fails after the DELETE ran
    broken = dataclasses.replace(FIXED, select_sql=FIXED.select_sql.replace("count(*) AS orders", "'many' AS orders"))
    with world.warehouse().session() as session:
        ensure_table(session, broken)
        with pytest.raises(WarehouseError, match="(?i)convert|cast"), session.transaction():
            write_rows(session, broken, world.scheme, ["2026-01-02"], "overwrite")
    assert world.fingerprints("daily_revenue", keys(2, 2)) == before


def test_an_empty_recomputation_over_existing_rows_is_refused(world):
    assert world.materialize(keys(2, 2), spec=BUGGY).success
    before = world.fingerprints("daily_revenue", keys(2, 2))
    world.run_sql("DELETE FROM orders WHERE order_date = '2026-01-02'")
    with world.warehouse().session() as session, pytest.raises(WriteRefused, match="yielded no rows"):
        with session.transaction():
            write_rows(session, FIXED, world.scheme, ["2026-01-02"], "overwrite")
    assert world.fingerprints("daily_revenue", keys(2, 2)) == before
    # through Dagster the same refusal fails the run, naming the fix
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    result = world.plan_run("fix", keys(2, 2))
    assert not result.success and "allow_empty_partitions" in failure_text(result)
    assert world.fingerprints("daily_revenue", keys(2, 2)) == before


def run_whole_plan(world, name="fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",)):
    world.approved_plan(name, start=start, end=end, proof=proof)
    assert world.cli("run", name, "--proof") == 0
    assert world.cli("run", name) == 0
    assert world.cli("publish", name) == 0


def test_rollback_restores_the_exact_pre_backfill_fingerprints(world, run_cli):
    window = keys(1, 4)
    # the buggy release wrote and published the window as daily incremental runs
    assert world.materialize(window, spec=BUGGY, publish=True).success
    target_before = world.fingerprints("daily_revenue", window)
    published_before = world.fingerprints("published_revenue", window)
    assert all(fp.rows == 5 for fp in target_before.values())
    run_whole_plan(world)
    assert world.fingerprints("daily_revenue", window) != target_before
    dry = run_cli("rollback", "fix", "--dry-run")
    assert dry.code == 0
    for key in window:  # the dry run names each partition: now -> the snapshot it would restore
        assert f"  {key}: now {world.fingerprints('daily_revenue', [key])[key]} -> {target_before[key]}" in dry.out
    assert "plan fix unchanged (dry run)" in dry.out
    assert world.fingerprints("daily_revenue", window) != target_before  # the dry run changed nothing
    assert world.phase() == "published"
    rolled = run_cli("rollback", "fix")
    assert rolled.code == 0 and "restored 4 partition(s) of daily_revenue" in rolled.out
    assert world.fingerprints("daily_revenue", window) == target_before
    assert world.fingerprints("published_revenue", window) == published_before
    assert world.phase() == "rolled_back"
    again = run_cli("rollback", "fix")
    assert again.code == 1 and "already rolled_back" in again.err


def test_rollback_is_refused_when_a_later_plan_wrote_the_same_partitions(world, run_cli):
    run_whole_plan(world, "first")
    run_whole_plan(world, "second", start="2026-01-03", end="2026-01-05", proof=("2026-01-03",))
    before = world.fingerprints("daily_revenue", keys(1, 5))
    refused = run_cli("rollback", "first")
    assert refused.code == 1 and "second wrote" in refused.err and "roll back second first" in refused.err
    assert world.fingerprints("daily_revenue", keys(1, 5)) == before
    assert world.phase("first") == "published"


def test_rollback_of_an_earlier_plan_is_allowed_once_the_later_plan_was_rolled_back(world, run_cli):
    assert world.materialize(keys(1, 5), spec=BUGGY, publish=True).success
    history = world.fingerprints("daily_revenue", keys(1, 5))
    run_whole_plan(world, "first")
    run_whole_plan(world, "second", start="2026-01-03", end="2026-01-05", proof=("2026-01-03",))
    assert run_cli("rollback", "first").code == 1  # second's work would be erased
    assert run_cli("rollback", "second").code == 0  # its partitions hold first's rows again
    rolled = run_cli("rollback", "first")
    assert rolled.code == 0, rolled.err
    assert world.fingerprints("daily_revenue", keys(1, 5)) == history
    assert world.phase("first") == world.phase("second") == "rolled_back"


@pytest.mark.parametrize("damage", [
    "DELETE FROM backfill_control.snapshots WHERE partition_key = '2026-01-03' AND table_name = 'daily_revenue'",
    "DELETE FROM backfill_snapshots.{snapshot} WHERE order_date = '2026-01-03'",
])
def test_rollback_is_whole_or_refused_when_a_snapshot_is_missing(world, run_cli, damage):
    from backfill_assets.warehouse.snapshots import snapshot_table

    window = keys(1, 4)
    assert world.materialize(window, spec=BUGGY).success
    run_whole_plan(world)
    after = world.fingerprints("daily_revenue", window)
    world.run_sql(damage.format(snapshot=snapshot_table("fix", "daily_revenue")))
    refused = run_cli("rollback", "fix")
    # a snapshot record removed is a row gone from its seal; snapshot rows removed, a partition short
    why = "differ from what that row sealed" if "control.snapshots" in damage else "cannot be rolled back whole"
    assert refused.code == 1 and why in refused.err and refused.err.count("\n") == 1, refused.err
    assert "2026-01-03" in refused.err or "snapshots" in refused.err
    assert world.fingerprints("daily_revenue", window) == after  # nothing restored, not even the rest
    assert world.phase() == "published"


def test_a_plan_that_wrote_nothing_is_withdrawn_and_lifts_its_freeze(world, run_cli):
    assert world.materialize(keys(1, 1)).success
    world.approved_plan("fix", start="2026-01-02", end="2026-01-03", proof=("2026-01-02",))
    assert not world.materialize(keys(2, 2)).success  # frozen
    assert run_cli("plan", "withdraw", "fix").code == 0
    assert world.phase() == "withdrawn"
    assert world.materialize(keys(2, 2)).success  # the incremental day runs again
    kinds = [r[0] for r in world.sql("SELECT kind FROM backfill_control.evidence WHERE plan_id = 'fix' "
                                     "ORDER BY seq")]
    assert kinds[-2:] == ["transition", "notification"]  # recorded, and owners told the pause ended


def test_withdraw_refuses_a_plan_that_wrote_and_names_rollback(world, run_cli):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    assert world.plan_run("fix", keys(2, 2)).success
    assert world.plan_run("fix", keys(2, 2)).success  # the same partition twice: two writes
    refused = run_cli("plan", "withdraw", "fix")
    assert refused.code == 1 and "backfill rollback fix" in refused.err
    assert "has written 1 partition(s)" in refused.err, refused.err  # partitions, not writes
    assert world.phase() == "proving"


def test_partition_parameters_in_literals_and_comments_are_not_bound_when_partitions_are_staged_together(
        engine_world):
    """The partitions of a transaction are staged by one statement, each recomputation's
    `$partition` renamed apart: a `$partition` inside a string literal is text, and one inside a
    comment is not a parameter, on each engine; a `%` in a literal stays one (psycopg reads `%`
    everywhere in a statement with parameters)."""
    world = engine_world
    select_sql = FIXED.select_sql.replace(
        "SELECT", "SELECT /* $partition_end */ -- $partition_start\n", 1)
    noted = dataclasses.replace(
        FIXED, select_sql=f"SELECT order_date, region || ' $partition 100%' AS region, orders, gross, refunds, "
                          f"net_revenue, customers FROM ({select_sql}) AS fixed")
    days = keys(1, 3)
    with world.warehouse().session() as session:
        ensure_table(session, noted)
        with session.transaction():
            written = write_rows(session, noted, world.scheme, days, "overwrite")
    assert [rows for rows, _ in written.values()] == [5, 5, 5]
    regions = world.sql("SELECT DISTINCT region FROM daily_revenue ORDER BY 1")
    assert regions and all(r.endswith(" $partition 100%") for r, in regions), regions


def test_a_daily_date_table_binds_the_window_end_as_partition_end(world):
    """The README promises `$partition_start` / `$partition_end` for every time window; on a daily
    DATE table the end was bound to NULL, so a window-style select_sql staged no rows."""
    windowed = dataclasses.replace(FIXED, range_form=False)  # one window a partition
    by_partition = per_partition(FIXED)
    with world.warehouse().session() as session:
        ensure_table(session, windowed)
        with session.transaction():
            by_window = write_rows(session, windowed, world.scheme, keys(1, 2), "overwrite")
        with session.transaction():
            by_day = write_rows(session, by_partition, world.scheme, keys(1, 2), "overwrite")
    assert by_window == by_day and [rows for rows, _ in by_day.values()] == [5, 5]


@pytest.mark.parametrize("days", [keys(1, 8), ["2026-01-01", "2026-01-02", "2026-01-05", "2026-01-07"]])
def test_the_range_form_writes_what_the_per_partition_form_writes(engine_world, days):
    """One statement for a run's days (one scan of orders per run of consecutive days) yields the
    rows, counts and fingerprints of one recomputation a day, on each engine, for runs with gaps."""
    world = engine_world
    assert FIXED.range_form
    with world.warehouse().session() as session:
        ensure_table(session, FIXED)
        with session.transaction():
            by_range = write_rows(session, FIXED, world.scheme, days, "overwrite")
        ranged = session.rows("SELECT * FROM daily_revenue ORDER BY order_date, region")
        with session.transaction():
            by_day = write_rows(session, per_partition(FIXED), world.scheme, days, "overwrite")
        daily = session.rows("SELECT * FROM daily_revenue ORDER BY order_date, region")
    assert by_range == by_day and ranged == daily
    assert [rows for rows, _ in by_range.values()] == [5] * len(days)


def test_a_range_form_recomputation_yielding_rows_of_no_partition_of_the_run_is_refused(world):
    days = keys(2, 3)
    assert world.materialize(days, spec=BUGGY).success
    before = world.fingerprints("daily_revenue", keys(1, 4))
    wide = dataclasses.replace(FIXED, select_sql=FIXED.select_sql.replace(
        "order_date < $partition_end", "order_date <= $partition_end"))  # one day too many
    with world.warehouse().session() as session:
        with pytest.raises(WriteRefused, match="2026-01-02..2026-01-03 yielded 5 row.*in none of them"), \
                session.transaction():
            write_rows(session, wide, world.scheme, days, "overwrite")
    assert world.fingerprints("daily_revenue", keys(1, 4)) == before
    with pytest.raises(IdentifierError, match="range_form.*binds partition"):
        dataclasses.replace(FIXED, select_sql=per_partition(FIXED).select_sql)


def _cancelled_with_its_snapshot_rows_deleted(world, run_cli) -> str:
    """A plan's proof written over published days, the plan cancelled, and its snapshot's rows
    deleted by hand (to free space on a full disk); the snapshot table's name."""
    assert world.materialize(DAYS, publish=True).success
    world.approved_plan("fix", start=DAYS[0], end=DAYS[-1], proof=(DAYS[1],))
    assert run_cli("run", "fix", "--proof").code == 0
    assert run_cli("cancel", "fix").code == 0
    [(table,)] = world.sql("SELECT DISTINCT snapshot_table FROM backfill_control.snapshots")
    world.run_sql(f'DELETE FROM backfill_snapshots."{table}"')
    return str(table)


def test_a_cancelled_plan_whose_snapshot_rows_were_deleted_still_has_a_way_out(world, run_cli):
    """`rollback`, the only way out, was refused (restore from backup), `plan withdraw` too (the plan
    wrote), `run` too (cancelled), while `status` named the rollback and the plan kept its window
    frozen (found by an attack). The published copy, exactly the rows taken, refills the snapshot."""
    table = _cancelled_with_its_snapshot_rows_deleted(world, run_cli)
    dry = run_cli("rollback", "fix", "--dry-run")
    assert dry.code == 0 and "would refill the snapshot of 1 partition(s) of daily_revenue" in dry.out, dry
    assert world.sql(f'SELECT count(*) FROM backfill_snapshots."{table}"')[0][0] == 0  # a dry run writes nothing
    status = json.loads(run_cli("status", "fix", "--json").out)
    named = re.findall(r"`(backfill [^`]+)`", status["next"])
    assert named, status["next"]
    outcomes = {command: run_cli(*command.split()[1:]) for command in named}
    assert any(r.code == 0 for r in outcomes.values()), {c: (r.code, r.err) for c, r in outcomes.items()}
    assert world.phase() == "rolled_back"
    assert world.fingerprints("daily_revenue", DAYS) == world.fingerprints("published_revenue", DAYS)
    [(payload,)] = world.sql("SELECT payload FROM backfill_control.evidence WHERE kind = 'rollback'")
    assert json.loads(payload)["refilled"] == {"daily_revenue": {"from": "published_revenue", "partitions": [DAYS[1]]}}


def test_snapshot_rows_deleted_are_not_refilled_from_a_published_copy_that_differs(world, run_cli):
    """The published copy stands in for deleted snapshot rows only when it is exactly the rows
    taken: edited, the rollback refuses as before and changes nothing."""
    table = _cancelled_with_its_snapshot_rows_deleted(world, run_cli)
    world.run_sql("UPDATE published_revenue SET gross = gross + 1 WHERE order_date = ?", [DAYS[1]])
    before = world.fingerprints("daily_revenue", DAYS)
    refused = run_cli("rollback", "fix")
    assert refused.code == 1 and "cannot be rolled back whole" in refused.err, refused.err
    assert world.fingerprints("daily_revenue", DAYS) == before
    assert world.sql(f'SELECT count(*) FROM backfill_snapshots."{table}"')[0][0] == 0
    assert world.phase() != "rolled_back"

"""Attack j: the chain's `reads`, the undeclared-upstream refusal, rollback keeping computed, holds,
plan text, a version's file."""

from __future__ import annotations

from tests.test_graph import (
    FULL_DEFS,
    MONTH,
    _days_plan,
    _january_days_published,
    _month_alone_defs,
    _published_by_region,
    defs_of,
    run,
)
from tests.world import BUGGY, failure_text


def test_an_insider_hiding_the_days_ledger_rows_lets_a_month_alone_location_read_a_cancelled_plans_days(
        world, monkeypatch):
    """`_undeclared_upstream` asks the ledger's rows alone whether the month's `source` is a table
    backfill writes. An insider who can write the warehouse (not read the key) moves the days'
    `writes` rows aside while a code location declaring the month alone loads January's month
    from a cancelled plan's days, then puts them back (they verify against their seals again): the
    month records no reads, and its publish put before consumers a month that does not add up to
    the days they read."""
    _january_days_published(world)
    world.approve(_days_plan(world))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("cancel", "fix") == 0
    world.run_sql("CREATE TABLE main.hidden_writes AS SELECT * FROM backfill_control.writes "
                  "WHERE asset = 'daily_revenue'")
    world.run_sql("DELETE FROM backfill_control.writes WHERE asset = 'daily_revenue'")
    loaded = run(world, _month_alone_defs(world), ["monthly_revenue"], [MONTH], {"dagster/backfill": "ui-bf"})
    world.run_sql("INSERT INTO backfill_control.writes SELECT * FROM main.hidden_writes")
    world.run_sql("DROP TABLE main.hidden_writes")
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    published = run(world, defs_of(world, BUGGY), ["published_monthly_revenue"], [MONTH],
                    {"dagster/backfill": "ui-bf2"})
    month = _published_by_region(world, "published_monthly_revenue", "month")
    assert month in ({}, _published_by_region(world, "published_revenue", "order_date")), (
        loaded.success, failure_text(loaded), published.success, failure_text(published))

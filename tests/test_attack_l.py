"""Attack l: a team's own project against the undeclared/published-source checks, the chain's reads
and the rollback's holds."""

from __future__ import annotations

import dataclasses

import dagster as dg

from tests.test_graph import (DAILY_DEFS, MONTH, _days_plan, _published_by_region, run)
from tests.world import BUGGY, START, failure_text, keys


def _month_from_published_alone_defs(world):
    """A second code location: the team's monthly rollup alone, reading the days consumers read
    (`source` published_revenue, the daily table's `publish_as` in the other location)."""
    from backfill_assets.defs.replayable import make_replayable_table
    from backfill_assets.defs.resources import backfill_resources
    from backfill_assets.demo.definitions import MONTHS
    from backfill_assets.demo.revenue import MONTHLY_REVENUE

    month = dataclasses.replace(MONTHLY_REVENUE, source="published_revenue",
                                select_sql=MONTHLY_REVENUE.select_sql.replace("daily_revenue", "published_revenue"))
    rollup = make_replayable_table(month, MONTHS, group_name="revenue")
    return dg.Definitions(assets=[*rollup.assets], resources=backfill_resources(str(world.home), world.url or ""),
                          executor=dg.in_process_executor)


def test_a_month_alone_location_reading_an_adopted_published_table_is_never_left_beside_a_plans_days(
        world, monkeypatch, capsys):
    """The team adopts its existing `published_revenue` (consumers read it) as the daily table's
    `publish_as`; the days are loaded into the target but not yet published. A second code location
    declaring the month alone, its `source` published_revenue, loads and publishes January's month:
    no publication into published_revenue is in the ledger or the chain yet, so the check that a
    source is a table backfill publishes into takes it for a raw source; the month records no reads.
    A plan over the days (their own location) then publishes 2026-01-05..08 into published_revenue:
    consumers read a month computed from days they no longer see."""
    from backfill_assets.demo.sample import generate_orders

    with world.warehouse().session() as session:
        generate_orders(session, start=START, days=31, rows_per_day=40, seed=11)
    assert world.materialize(keys(1, 31), spec=BUGGY).success  # the target only
    # the team's own table, which consumers read already (adopted as publish_as)
    world.run_sql("INSERT INTO published_revenue SELECT * FROM daily_revenue")
    monkeypatch.setenv("BACKFILL_DEFS", DAILY_DEFS)
    loaded = run(world, _month_from_published_alone_defs(world), ["monthly_revenue", "published_monthly_revenue"],
                 [MONTH], {"dagster/backfill": "ui-bf"})
    if not loaded.success:  # refused: its source is the table the days are published into
        assert "published_revenue" in failure_text(loaded), failure_text(loaded)
        return
    assert _published_by_region(world, "published_monthly_revenue", "month") == \
        _published_by_region(world, "published_revenue", "order_date")
    world.approve(_days_plan(world))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    capsys.readouterr()
    code = world.cli("publish", "fix")
    said = capsys.readouterr()
    assert _published_by_region(world, "published_monthly_revenue", "month") == \
        _published_by_region(world, "published_revenue", "order_date"), (code, said.out, said.err)

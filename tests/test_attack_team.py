"""Attacks by a team's own Dagster project (round team-55): each test failed on the code before its fix."""

import datetime as dt

import dagster as dg

from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.defs.resources import WarehouseResource
from backfill_assets.demo.definitions import MONTHS, ORDERS, PARTITIONS
from backfill_assets.demo.revenue import DAILY_REVENUE, MONTHLY_REVENUE
from backfill_assets.demo.sample import generate_orders
from tests.world import START, failure_text

FEBRUARY = "2026-02-01"


def _days(first: dt.date, last: dt.date) -> list[str]:
    return [(first + dt.timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]


def _run(world, defs: dg.Definitions, assets: list[str], partitions: list[str]):
    tags = ({"dagster/partition": partitions[0]} if len(partitions) == 1 else
            {"dagster/asset_partition_range_start": partitions[0],
             "dagster/asset_partition_range_end": partitions[-1]})
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(instance=world.instance, asset_selection=[dg.AssetKey(a) for a in assets],
                                  tags=tags, raise_on_error=False)


def test_a_month_whose_partition_mapping_names_other_days_than_its_sql_reads_publishes_failed_days(world):
    """A team engineer declares the month with a partition mapping override (here "the month before":
    `TimeWindowPartitionMapping(start_offset=-1, end_offset=-1)`, kept from a prior-month baseline
    asset) while its SQL reads its own month's days, as the demo's does. Every check that a month
    reads only days whose gates passed and that consumers saw asks the mapping: February's month is
    checked against January's days (all passed), computed from February's days (one failed its
    duplicates gate and was never published), passes its own gates (it adds up to those days) and
    reaches consumers. The days a month's gates compare it with are its window's, whatever the mapping."""
    with world.warehouse().session() as session:
        generate_orders(session, start=START, days=59, rows_per_day=12, seed=5)
    daily = make_replayable_table(DAILY_REVENUE, PARTITIONS, group_name="revenue")
    month = make_replayable_table(MONTHLY_REVENUE, MONTHS, group_name="revenue",
                                  source_partition_mapping=dg.TimeWindowPartitionMapping(start_offset=-1,
                                                                                         end_offset=-1))
    defs = dg.Definitions(assets=[ORDERS, *daily.assets, *month.assets],
                          resources={"warehouse": WarehouseResource(home=str(world.home))},
                          executor=dg.in_process_executor)
    good = _days(START, dt.date(2026, 2, 9))
    assert _run(world, defs, ["daily_revenue", "published_revenue"], good).success
    # February 10th's orders hold an event twice: its day is written, its duplicates gate fails
    world.run_sql("INSERT INTO orders SELECT * FROM orders WHERE order_date = '2026-02-10' LIMIT 1")
    rest = _days(dt.date(2026, 2, 10), dt.date(2026, 2, 28))
    written = _run(world, defs, ["daily_revenue"], rest)
    assert not written.success and "duplicate" in failure_text(written).lower() + str(
        world.sql("SELECT gate FROM backfill_control.gate_results WHERE NOT passed"))
    assert world.rows("published_revenue", "2026-02-10") == 0  # consumers never saw the failed day

    computed = _run(world, defs, ["monthly_revenue", "published_monthly_revenue"], [FEBRUARY])
    assert not computed.success and "reads daily_revenue" in failure_text(computed), failure_text(computed)
    seen = world.sql("SELECT count(*) FROM published_monthly_revenue WHERE month = ?", [FEBRUARY]) \
        if world.sql("SELECT count(*) FROM information_schema.tables WHERE table_name = "
                     "'published_monthly_revenue'")[0][0] else [(0,)]
    assert seen == [(0,)], (
        f"consumers read February's month ({seen[0][0]} rows, run success={computed.success}) computed from "
        "2026-02-10, whose gates failed and which was never published")

"""Definitions of the demo pipeline, loaded by workspace.yaml and the `backfill` CLI.

orders -> daily_revenue (replayable) -> monthly_revenue (replayable, read from daily_revenue) and
each one's published table -> revenue_report (a plain pandas asset reading the published months).
A plan over daily_revenue covers monthly_revenue too: one approval, one run, one publish.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.defs.resources import WarehouseResource, backfill_resources
from backfill_assets.demo.revenue import DAILY_REVENUE, MONTHLY_REVENUE
from backfill_assets.table import TableSpec

PARTITIONS = dg.DailyPartitionsDefinition(start_date="2026-01-01")
MONTHS = dg.MonthlyPartitionsDefinition(start_date="2026-01-01")

ORDERS = dg.AssetSpec(
    "orders", partitions_def=PARTITIONS, group_name="revenue", kinds={"sql"},
    description="Raw order events per day (written by `backfill sample`), the source of truth.",
)


@dg.asset(deps=[MONTHLY_REVENUE.publish_as], group_name="revenue", kinds={"pandas"})
def revenue_report(warehouse: WarehouseResource) -> dg.Output[Any]:
    """Net revenue per month and region as consumers see it: a plain pandas asset downstream of the
    published months, refreshed by the reopen sensor after a plan's publish."""
    import pandas as pd

    with warehouse.session() as session:
        rows = session.rows("SELECT month, region, net_revenue FROM published_monthly_revenue ORDER BY 1, 2")
    frame = pd.DataFrame(rows, columns=["month", "region", "net_revenue"])
    total = float(frame["net_revenue"].astype(float).sum()) if len(frame) else 0.0
    return dg.Output(frame, metadata={"rows": len(frame), "net_revenue": dg.MetadataValue.float(total)})


def build_definitions(spec: TableSpec = DAILY_REVENUE, home: str = "", url: str = "", *,
                      monthly: TableSpec | None = None) -> dg.Definitions:
    """The daily table alone, or with `monthly` (its rollup) and the pandas report over it."""
    table = make_replayable_table(spec, PARTITIONS, group_name="revenue")
    daily = dg.define_asset_job("daily_revenue_incremental", selection=[table.target.key, table.publish.key],
                                partitions_def=PARTITIONS)
    assets: list[dg.AssetSpec | dg.AssetsDefinition] = [ORDERS, *table.assets]
    sensors = table.sensors
    if monthly is not None:
        rollup = make_replayable_table(monthly, MONTHS, group_name="revenue")
        assets += [*rollup.assets, revenue_report]
        sensors.append(rollup.sensor)  # its relay is the daily table's: one per warehouse
    return dg.Definitions(
        assets=assets,
        sensors=sensors,
        jobs=[daily],
        schedules=[dg.build_schedule_from_partitioned_job(daily, hour_of_day=2)],
        resources=backfill_resources(home, url),
        # one process per run: a range run's steps are one asset, so a step subprocess only costs
        executor=dg.in_process_executor,
    )


defs = build_definitions(monthly=MONTHLY_REVENUE)

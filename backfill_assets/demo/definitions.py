"""Definitions of the demo pipeline, loaded by workspace.yaml and the `backfill` CLI."""

from __future__ import annotations

import dagster as dg

from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.defs.resources import backfill_resources
from backfill_assets.demo.revenue import DAILY_REVENUE
from backfill_assets.table import TableSpec

PARTITIONS = dg.DailyPartitionsDefinition(start_date="2026-01-01")

ORDERS = dg.AssetSpec(
    "orders", partitions_def=PARTITIONS, group_name="revenue", kinds={"sql"},
    description="Raw order events per day (written by `backfill sample`), the source of truth.",
)


def build_definitions(spec: TableSpec = DAILY_REVENUE, home: str = "", url: str = "") -> dg.Definitions:
    table = make_replayable_table(spec, PARTITIONS, group_name="revenue")
    daily = dg.define_asset_job("daily_revenue_incremental", selection=[table.target.key, table.publish.key],
                                partitions_def=PARTITIONS)
    return dg.Definitions(
        assets=[ORDERS, *table.assets],
        sensors=[table.sensor],
        jobs=[daily],
        schedules=[dg.build_schedule_from_partitioned_job(daily, hour_of_day=2)],
        resources=backfill_resources(home, url),
        # one process per run: a range run's steps are one asset, so a step subprocess only costs
        executor=dg.in_process_executor,
    )


defs = build_definitions()

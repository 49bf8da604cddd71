"""The benchmarks' Dagster definitions: the demo's `daily_revenue`, with partitions from 2019.

The demo's partitions start on 2026-01-01 and a plan's window must end by today, so windows of
365 or 2,500 days do not fit in them. This is the same table (the demo's TableSpec, its select,
gates and publish asset) built with `make_replayable_table`, over daily partitions from
2019-01-01. `BENCH_PARTITIONS_PER_RUN` sets the target's BackfillPolicy.multi_run(N) (what a UI
backfill uses; default 30, the product's default). The CLI loads it with
`--defs benchmarks/bench_defs.py` (or BACKFILL_DEFS); the daemon with a workspace naming this file.
"""

from __future__ import annotations

import datetime as dt
import os

import dagster as dg

from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.defs.resources import backfill_resources
from backfill_assets.demo.revenue import DAILY_REVENUE

START = dt.date(2019, 1, 1)
PARTITIONS = dg.DailyPartitionsDefinition(start_date=START.isoformat())
PER_RUN = int(os.environ.get("BENCH_PARTITIONS_PER_RUN", "30"))
EXECUTOR = dg.in_process_executor if os.environ.get("BENCH_EXECUTOR") == "in_process" else None

ORDERS = dg.AssetSpec("orders", partitions_def=PARTITIONS, group_name="revenue", kinds={"sql"},
                      description="Generated order events per day.")

table = make_replayable_table(DAILY_REVENUE, PARTITIONS, group_name="revenue", partitions_per_run=PER_RUN)
defs = dg.Definitions(assets=[ORDERS, *table.assets], sensors=table.sensors, resources=backfill_resources(),
                      executor=EXECUTOR)

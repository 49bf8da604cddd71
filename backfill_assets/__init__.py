"""backfill-assets: plan-gated, reconciled, reversible backfills on Dagster and DuckDB.

The public surface a team uses to declare a replayable table; everything else is reached through
the `backfill` command.
"""

from backfill_assets.defs.replayable import ReplayableTable, make_replayable_table
from backfill_assets.defs.resources import PlanGateResource, WarehouseResource, backfill_resources
from backfill_assets.table import Column, Metric, TableSpec

__all__ = [
    "Column",
    "Metric",
    "PlanGateResource",
    "ReplayableTable",
    "TableSpec",
    "WarehouseResource",
    "backfill_resources",
    "make_replayable_table",
]

"""backfill-assets: plan-gated, reconciled, reversible backfills on Dagster.

The public surface a team uses to declare a replayable table; everything else is reached through
the `backfill` command. Imported lazily, so `backfill guard` (a CI step) does not load Dagster.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Column": "backfill_assets.table",
    "Metric": "backfill_assets.table",
    "TableSpec": "backfill_assets.table",
    "ReplayableTable": "backfill_assets.defs.replayable",
    "make_replayable_table": "backfill_assets.defs.replayable",
    "WarehouseResource": "backfill_assets.defs.resources",
    "backfill_resources": "backfill_assets.defs.resources",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'backfill_assets' has no attribute {name!r}")

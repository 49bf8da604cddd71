"""What a replayable table's target, publish asset and sensor read from Dagster at run time: who
acts, and the table's partitions as they are now.

Below the factory (`replayable.py`), so the definitions it builds take these from here rather than
from it, or from a shared dict it fills in after building them.
"""

from __future__ import annotations

import dagster as dg

from backfill_assets.partitions import PartitionScheme, scheme_for
from backfill_assets.table import TableSpec
from backfill_assets.tags import ACTOR_TAG


def run_actor(context: dg.AssetExecutionContext) -> str:
    """Who acts in a run: the run itself, and who launched it when Dagster or our CLI says so."""
    tags = context.run.tags
    launched = tags.get("dagster/user") or tags.get(ACTOR_TAG) or \
        ("the Dagster UI" if tags.get("dagster/from_ui") else None)
    return f"dagster run {context.run.run_id[:8]}" + (f" launched by {launched}" if launched else "")


def table_scheme(spec: TableSpec, partitions_def: dg.PartitionsDefinition) -> PartitionScheme:
    """Built afresh each time: a time-window definition gains a key every period."""
    return scheme_for(partitions_def, spec.column(spec.partition_column).type, name=spec.name)

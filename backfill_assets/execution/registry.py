"""Finding a team's definitions and replayable tables from the CLI.

The CLI loads the same module `workspace.yaml` loads (default `examples.definitions:defs`,
or `--defs` / $BACKFILL_DEFS), so its runs execute exactly the assets the UI shows.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

import dagster as dg

from backfill_assets.defs.replayable import REGISTRY, ReplayableTable
from backfill_assets.errors import UsageError, WindowError
from backfill_assets.plan.model import Plan

DEFAULT_DEFS = "examples.definitions:defs"


@dataclass(frozen=True)
class LoadedDefs:
    definitions: dg.Definitions
    tables: dict[str, ReplayableTable]

    def table(self, name: str) -> ReplayableTable:
        if name not in self.tables:
            known = ", ".join(sorted(self.tables)) or "none"
            raise UsageError(f"{name} is not a replayable table in the loaded definitions",
                             fix=f"set target to one of: {known}")
        return self.tables[name]


def load_defs(reference: str | None = None) -> LoadedDefs:
    reference = reference or os.environ.get("BACKFILL_DEFS") or DEFAULT_DEFS
    module_name, _, attr = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import definitions module {module_name} ({exc})",
                         fix="pass --defs package.module:attribute") from None
    definitions = getattr(module, attr or "defs", None)
    if not isinstance(definitions, dg.Definitions):
        raise UsageError(f"{reference} is not a dagster Definitions object",
                         fix="point --defs at the Definitions your workspace.yaml loads")
    names = {k.to_user_string() for k in definitions.resolve_asset_graph().get_all_asset_keys()}
    return LoadedDefs(definitions, {n: t for n, t in REGISTRY.items() if n in names})


def ensure_window_inside_partitions(plan: Plan, table: ReplayableTable) -> None:
    partitions_def = table.target.partitions_def
    assert partitions_def is not None
    known = set(partitions_def.get_partition_keys())
    outside = [k for k in plan.partition_keys if k not in known]
    if outside:
        keys = partitions_def.get_partition_keys()
        span = f"{keys[0]}..{keys[-1]}" if keys else "none yet"
        raise WindowError(
            f"window {plan.window.start}..{plan.window.end} of plan {plan.plan_id} reaches outside "
            f"{plan.target}'s partitions ({span}): {', '.join(outside[:3])}"
            + (" ..." if len(outside) > 3 else ""),
            fix="move the window inside the asset's partitions")

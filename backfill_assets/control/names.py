"""Where the control record lives and how its rows are numbered.

The bottom of `control/`: every module that reads or writes the record names its schema from here,
so the module that creates and upgrades the record (`schema.py`) can use them all without any of
them importing it back. Both are the state store's (`warehouse/state_store/`), named here for
`control/`'s callers.
"""

from __future__ import annotations

from backfill_assets.warehouse.state_store import SCHEMA, SNAPSHOT_SCHEMA, next_id

__all__ = ["SCHEMA", "SNAPSHOT_SCHEMA", "next_id"]

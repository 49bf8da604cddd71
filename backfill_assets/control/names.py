"""Where the control record lives and how its rows are numbered.

The bottom of `control/`: every module that reads or writes the record names its schema from here,
so the module that creates and upgrades the record (`schema.py`) can use them all without any of
them importing it back.
"""

from __future__ import annotations

from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.snapshot_tables import SNAPSHOT_SCHEMA

SCHEMA = "backfill_control"

__all__ = ["SCHEMA", "SNAPSHOT_SCHEMA", "next_id"]


def next_id(session: Session) -> int:
    return int(session.scalar(f"SELECT nextval('{SCHEMA}.ids')"))

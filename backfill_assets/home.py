"""Where state lives: BACKFILL_HOME (the warehouse) and DAGSTER_HOME (the Dagster instance)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

WAREHOUSE_FILE = "warehouse.duckdb"


@dataclass(frozen=True)
class Home:
    root: Path

    @property
    def warehouse(self) -> Path:
        return self.root / WAREHOUSE_FILE

    @property
    def dagster_home(self) -> Path:
        configured = os.environ.get("DAGSTER_HOME")
        return Path(configured) if configured else self.root / "dagster"


def resolve_home(explicit: str | os.PathLike[str] | None = None) -> Home:
    """--home wins, then $BACKFILL_HOME, then ./.backfill (read at call time, never at import)."""
    raw = explicit or os.environ.get("BACKFILL_HOME") or ".backfill"
    return Home(Path(raw).expanduser().resolve())

"""The one resource a replayable table needs: the warehouse, chosen by configuration."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import dagster as dg

from backfill_assets.control.schema import ensure_schema
from backfill_assets.home import Home, resolve_home
from backfill_assets.warehouse import Warehouse, open_warehouse
from backfill_assets.warehouse.engine import Session


class WarehouseResource(dg.ConfigurableResource):
    """The warehouse runs write to: `url` (e.g. postgresql://...), else $BACKFILL_WAREHOUSE_URL,
    else the embedded DuckDB file in `home` (default $BACKFILL_HOME or ./.backfill).

    Both are resolved when a session opens, never at import. Sessions are short: with DuckDB the
    webserver, the daemon, runs and the CLI share one file lock.
    """

    home: str = ""
    url: str = ""

    def warehouse(self) -> Warehouse:
        home = Home(Path(self.home).expanduser().resolve()) if self.home else resolve_home()
        return open_warehouse(home, self.url or None)

    @contextmanager
    def session(self, wait_seconds: float | None = None) -> Iterator[Session]:
        with self.warehouse().session(wait_seconds=wait_seconds) as session:
            ensure_schema(session)
            yield session


def backfill_resources(home: str = "", url: str = "") -> dict[str, object]:
    return {"warehouse": _warehouse(home, url)}


@lru_cache(maxsize=32)
def _warehouse(home: str, url: str) -> WarehouseResource:
    # one object per configuration: Dagster merges definitions (two components of one project)
    # only when a resource key holds the very same object in each
    return WarehouseResource(home=home, url=url)

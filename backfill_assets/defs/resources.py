"""The two resources a replayable table needs: the warehouse and the plan gate."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import dagster as dg
import duckdb
from dagster_duckdb import DuckDBResource

from backfill_assets.control.schema import ensure_schema
from backfill_assets.home import resolve_home
from backfill_assets.plan import gate
from backfill_assets.plan.gate import Clearance
from backfill_assets.warehouse.connection import LOCK_WAIT_SECONDS, connection


class WarehouseResource(DuckDBResource):
    """dagster-duckdb's resource, pointed at $BACKFILL_HOME/warehouse.duckdb by default.

    `database` left empty resolves BACKFILL_HOME when a connection is opened, not at import. The
    connection waits for the single-writer lock instead of failing, since the webserver, daemon,
    runs and CLI share the file.
    """

    database: str = ""

    @property
    def path(self) -> str:
        return self.database or str(resolve_home().warehouse)

    @contextmanager
    def get_connection(self, wait_seconds: float = LOCK_WAIT_SECONDS
                       ) -> Iterator[duckdb.DuckDBPyConnection]:
        with connection(self.path, wait_seconds=wait_seconds) as con:
            ensure_schema(con)
            yield con


class PlanGateResource(dg.ConfigurableResource):
    """Asked by every replayable target before it writes. See `backfill_assets.plan.gate`."""

    def clear(self, con: duckdb.DuckDBPyConnection, target: str, keys: Sequence[str],
              tags: Mapping[str, str]) -> Clearance:
        return gate.clear(con, target, keys, tags)


def backfill_resources(database: str = "") -> dict[str, object]:
    return {"warehouse": WarehouseResource(database=database), "plan_gate": PlanGateResource()}

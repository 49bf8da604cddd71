"""The warehouse: every SQL statement the product runs, behind one seam (`engine.Engine`).

`open_warehouse()` picks the engine from configuration: `$BACKFILL_WAREHOUSE_URL`
(`postgresql://...`) or, by default, the embedded DuckDB file in BACKFILL_HOME.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from backfill_assets.errors import UsageError
from backfill_assets.home import Home, resolve_home
from backfill_assets.warehouse.engine import Engine, Session


def engine_for(url: str) -> Engine:
    if url.startswith("duckdb:///"):
        from backfill_assets.warehouse.duckdb_engine import DuckDBEngine

        # SQLAlchemy's convention: duckdb:///relative.db, duckdb:////absolute/path.db
        return DuckDBEngine(url[len("duckdb:///"):])
    if url.startswith(("postgresql://", "postgres://")):
        from backfill_assets.warehouse.postgres_engine import PostgresEngine

        return PostgresEngine(url)
    raise UsageError(f"warehouse URL {url.split('@')[-1]!r} names no engine we know",
                     fix="use duckdb:///PATH or postgresql://USER@HOST:PORT/DB")


@dataclass(frozen=True)
class Warehouse:
    engine: Engine
    home: Home

    @contextmanager
    def session(self, *, read_only: bool = False,
                wait_seconds: float | None = None) -> Iterator[Session]:
        with self.engine.session(read_only=read_only, wait_seconds=wait_seconds) as session:
            session.home = self.home
            session.read_only = read_only
            yield session

    def exists(self) -> bool:
        return self.engine.exists()


def open_warehouse(home: Home | None = None, url: str | None = None) -> Warehouse:
    home = home or resolve_home()
    return Warehouse(engine_for(url or home.warehouse_url), home)


__all__ = ["Engine", "Session", "Warehouse", "engine_for", "open_warehouse"]

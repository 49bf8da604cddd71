"""The warehouse: every SQL statement the product runs, behind one seam (`engine.Engine`).

`open_warehouse()` picks the engine from configuration: `$BACKFILL_WAREHOUSE_URL`
(`postgresql://...`) or, by default, the embedded DuckDB file in BACKFILL_HOME.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from backfill_assets.errors import UsageError
from backfill_assets.home import Home, duckdb_file, resolve_home
from backfill_assets.warehouse.engine import Engine, Session


def engine_for(url: str) -> Engine:
    path = duckdb_file(url)
    if path is not None:
        from backfill_assets.warehouse.duckdb_engine import DuckDBEngine

        # SQLAlchemy's convention: duckdb:////absolute/path.db (four slashes: three, then the path's
        # own). duckdb:///data/x.duckdb would be relative to whichever folder each process starts
        # in, so the UI, the daemon and the CLI would silently write different files: refused.
        if not path.startswith("/") and not (len(path) > 2 and path[1] == ":"):  # C:/ on Windows
            raise UsageError(f"warehouse URL {url!r} names a relative path, which each process would resolve "
                             "from its own current folder",
                             fix=f"use an absolute path (duckdb:////abs/{path or 'warehouse.duckdb'}), or leave "
                                 "BACKFILL_WAREHOUSE_URL unset for the file in BACKFILL_HOME")
        return DuckDBEngine(path)
    if url.startswith(("postgresql://", "postgres://")):
        from backfill_assets.warehouse.postgres_engine import PostgresEngine

        return PostgresEngine(url)
    raise UsageError(f"warehouse URL {url.split('@')[-1]!r} names no engine we know",
                     fix="use duckdb:///PATH or postgresql://USER@HOST:PORT/DB")


# A slice: the partitions one statement judges, compares or diffs (the gates, the impact, `backfill
# diff`), bounded so a statement's key list and its plan stay small. Not to be confused with a run
# (`partitions_per_run`, a Dagster run's partitions) or a write transaction (PARTITIONS_PER_TRANSACTION).
SLICE_PARTITIONS = 200


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


@contextmanager
def kept_open() -> Iterator[None]:
    """Connections kept open between this process's sessions while it lasts (DuckDB: the database
    stays loaded and the file locked, `duckdb_engine.kept_open`; PostgreSQL: the connection and
    its server process's catalog caches, `postgres_engine.kept_open`)."""
    from backfill_assets.warehouse.duckdb_engine import kept_open as duckdb_kept_open
    from backfill_assets.warehouse.postgres_engine import kept_open as postgres_kept_open

    with duckdb_kept_open(), postgres_kept_open():
        yield


def release_kept() -> None:
    """Close what `kept_open` keeps, and keep nothing more until it ends: before a wait on
    anything outside the warehouse."""
    from backfill_assets.warehouse.duckdb_engine import release_kept as duckdb_release_kept
    from backfill_assets.warehouse.postgres_engine import release_kept as postgres_release_kept

    duckdb_release_kept()
    postgres_release_kept()


def open_warehouse(home: Home | None = None, url: str | None = None) -> Warehouse:
    home = home or resolve_home()
    return Warehouse(engine_for(url or home.warehouse_url), home)


__all__ = ["SLICE_PARTITIONS", "Engine", "Session", "Warehouse", "engine_for", "kept_open", "open_warehouse",
           "release_kept"]

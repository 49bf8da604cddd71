"""The one resource a replayable table needs: the warehouse, chosen by configuration.

A team that already has a connection passes its resource key instead: dagster-duckdb's
`DuckDBResource` for DuckDB, or for PostgreSQL its own resource that holds a `postgresql://` URL in a
field named `url`, `dsn`, `connection_string`, `conn_string` or `database_url` (Dagster ships no
PostgreSQL resource for data; teams write these). Runs, the sensor and publish then open that
database through our engine (visible, bounded lock waits); it must be the one the CLI and the run
coordinator read (`BACKFILL_WAREHOUSE_URL`, else `$BACKFILL_HOME/warehouse.duckdb`), since the
control record lives beside the data and both halves must see one record.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import dagster as dg

from backfill_assets.control.schema import ensure_schema
from backfill_assets.errors import UsageError
from backfill_assets.home import DUCKDB_URL, Home, duckdb_file, resolve_home
from backfill_assets.warehouse import Warehouse, open_warehouse
from backfill_assets.warehouse.engine import Session


# generic only to a type checker: a subscript here would put a pydantic `ConfigurableResource[...]` class in the MRO
class WarehouseResource(dg.ConfigurableResource):  # type: ignore[type-arg]
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


DEFAULT_KEY = "warehouse"


def backfill_resources(home: str = "", url: str = "", key: str = DEFAULT_KEY) -> dict[str, object]:
    return {key: _warehouse(home, url)}


def as_warehouse(resource: object, key: str) -> WarehouseResource:
    """The warehouse behind the resource a table was given by `key`: ours, or a team's
    `DuckDBResource` (its database file, which must be the backfill warehouse)."""
    if isinstance(resource, WarehouseResource):
        # one that names its own home or URL is held to the same rule as a team's resource: a run
        # on another database would write, and seal, history the CLI never reads
        if not (resource.home or resource.url):
            return resource
        named = resource.url or Home(Path(resource.home).expanduser().resolve()).warehouse_url
        if named.startswith(("postgresql://", "postgres://")):
            return _same_postgres(named, key)
        file = duckdb_file(named)
        return _same_duckdb(named if file is None else file, key, "WarehouseResource")
    from dagster_duckdb import DuckDBResource

    postgres = _postgres_url_of(resource)
    if postgres is not None:
        return _same_postgres(postgres, key)
    if not isinstance(resource, DuckDBResource):
        raise UsageError(f"resource {key!r} is a {type(resource).__name__}; a replayable table writes through "
                         "a WarehouseResource, dagster-duckdb's DuckDBResource, or a resource holding a "
                         f"postgresql:// URL in one of {', '.join(URL_FIELDS)}",
                         fix=f"bind {key!r} to one of them, or pass warehouse_key= naming one")
    return _same_duckdb(str(resource.database or ""), key, "DuckDBResource")


def _same_duckdb(database: str, key: str, kind: str) -> WarehouseResource:
    if database in ("", ":memory:") or database.startswith(("md:", "motherduck:")):
        raise UsageError(f"{kind} {key!r} opens {database or 'an in-memory database'}, which the CLI "
                         "and other processes cannot open", fix="give it the path of a DuckDB file")
    path = Path(database).expanduser()
    if not path.is_absolute():
        # relative to whichever folder each process starts in: the UI, the daemon and the CLI
        # would each write their own file
        raise UsageError(f"{kind} {key!r} names the relative path {database!r}",
                         fix="give it an absolute path (e.g. under $BACKFILL_HOME)")
    wanted = resolve_home().warehouse_url
    url = f"{DUCKDB_URL}{path.resolve()}"
    wanted_file = duckdb_file(wanted)
    if wanted_file is None or Path(wanted_file).resolve() != path.resolve():
        raise UsageError(f"{kind} {key!r} opens {path}, but the CLI and the run coordinator read the "
                         f"warehouse {wanted.split('@')[-1]}", fix=f"set BACKFILL_WAREHOUSE_URL={url} where "
                         "Dagster and the CLI run (or point the resource at that warehouse)")
    return _warehouse("", url)


URL_FIELDS = ("url", "dsn", "connection_string", "conn_string", "database_url")


def _postgres_url_of(resource: object) -> str | None:
    for name in URL_FIELDS:
        value = getattr(resource, name, None)
        if isinstance(value, str) and value.startswith(("postgresql://", "postgres://")):
            return value
    return None


def _address(url: str) -> dict[str, str]:
    """Where libpq connects for `url`, as libpq itself reads it: every connection parameter but the
    password (user, host, port, database, `options=-csearch_path=...`, which resolves tables
    elsewhere, `service`, ...). Read by libpq, not by their spelling: a trailing slash names the
    database `db/`, a blank `?dbname=` the user's own database, a query parameter overrides the
    URL's part (the last of two wins), and an omitted host is the unix socket or $PGHOST, not
    `localhost`. Two URLs with one reading reach one database in one environment."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(url)
    except ProgrammingError as exc:
        raise UsageError(f"the PostgreSQL URL {url.split('@')[-1]!r} does not parse: {str(exc).splitlines()[0]}",
                         fix="give a postgresql://USER@HOST:PORT/DB URL") from None
    return {k: str(v) for k, v in params.items() if k != "password"}


def _same_postgres(url: str, key: str) -> WarehouseResource:
    wanted = resolve_home().warehouse_url
    seen = _address(url)
    known = _address(wanted) if wanted.startswith(("postgresql://", "postgres://")) else None
    if known != seen:
        differing = "" if known is None else \
            f" (differs in {', '.join(sorted(k for k in {*seen, *known} if seen.get(k) != known.get(k)))})"
        raise UsageError(f"resource {key!r} opens postgresql://{seen.get('user', '')}@{seen.get('host', '(default)')}:"
                         f"{seen.get('port', '(default)')}/{seen.get('dbname', '(default)')}{differing}, but the CLI "
                         f"and the run coordinator read the warehouse {wanted.split('@')[-1]}",
                         fix="set BACKFILL_WAREHOUSE_URL to the resource's URL where Dagster and the CLI run "
                             "(or point the resource at that warehouse)")
    return _warehouse("", url)


@lru_cache(maxsize=32)
def _warehouse(home: str, url: str) -> WarehouseResource:
    # one object per configuration: Dagster merges definitions (two components of one project)
    # only when a resource key holds the very same object in each
    return WarehouseResource(home=home, url=url)

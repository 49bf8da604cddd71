"""Short-lived DuckDB connections that wait politely for the single-writer lock.

DuckDB allows one writing process per file; the webserver, the daemon, each run's process and the
CLI compete for it. Connections are therefore opened per unit of work and retried while another
process holds the lock.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from backfill_assets.errors import WarehouseError

LOCK_WAIT_SECONDS = 120.0


def _is_lock_error(exc: Exception) -> bool:
    text = str(exc)
    return "lock" in text.lower() and ("Could not set lock" in text or "Conflicting" in text)


def open_connection(path: str | Path, *, read_only: bool = False,
                    wait_seconds: float = LOCK_WAIT_SECONDS) -> duckdb.DuckDBPyConnection:
    path = Path(path)
    if read_only and not path.exists():
        raise WarehouseError(f"no warehouse at {path}", fix="run a backfill command with --home "
                             "pointing at the right BACKFILL_HOME")
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait_seconds
    delay = 0.05
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as exc:
            if not _is_lock_error(exc) or time.monotonic() > deadline:
                raise WarehouseError(
                    f"cannot open the warehouse {path}: {exc}".splitlines()[0],
                    fix="wait for the other process holding it (a run, the daemon) to finish",
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


@contextmanager
def connection(path: str | Path, *, read_only: bool = False,
               wait_seconds: float = LOCK_WAIT_SECONDS) -> Iterator[duckdb.DuckDBPyConnection]:
    con = open_connection(path, read_only=read_only, wait_seconds=wait_seconds)
    try:
        yield con
    finally:
        con.close()


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """BEGIN ... COMMIT, rolled back on any exception: the unit of 'old or new, never half'."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")

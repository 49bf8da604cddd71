"""A cheaper sqlite event log for Dagster's instance: the one place we extend a Dagster internal.

Dagster's sqlite event log opens a new connection for every event and commits it with a full
fsync: with a check evaluation per gate per partition that is most of a backfill's cost on a
laptop (benchmarks/scale.py). This subclass of `ConsolidatedSqliteEventLogStorage` keeps one pooled
engine per process, in WAL mode with `synchronous=NORMAL` (a crash of the process loses nothing;
a power cut can lose the last events, never corrupt the file). Everything else is Dagster's.

`tests/test_dagster_storage.py` fails loudly when an upgrade moves what this relies on; the
tested range is pinned in pyproject.toml. With a Postgres-backed instance it is not used.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as db
from dagster._core.storage.event_log import ConsolidatedSqliteEventLogStorage
from sqlalchemy.pool import QueuePool

BUSY_TIMEOUT_SECONDS = 30


class PooledSqliteEventLogStorage(ConsolidatedSqliteEventLogStorage):
    _engine_lock = threading.Lock()

    def __init__(self, base_dir: str, inst_data: Any = None) -> None:
        self._engines: dict[int, db.engine.Engine] = {}
        self._tables_seen: dict[str, bool] = {}
        super().__init__(base_dir, inst_data=inst_data)

    def _engine(self) -> db.engine.Engine:
        pid = os.getpid()  # a forked process must not share its parent's connections
        engine = self._engines.get(pid)
        if engine is None:
            with self._engine_lock:
                engine = self._engines.get(pid)
                if engine is None:
                    engine = db.create_engine(self._conn_string, poolclass=QueuePool, pool_size=4,
                                              max_overflow=8,
                                              connect_args={"timeout": BUSY_TIMEOUT_SECONDS,
                                                            "check_same_thread": False})
                    db.event.listen(engine, "connect", _pragmas)
                    self._engines[pid] = engine
        return engine

    @contextmanager
    def _connect(self) -> Iterator[db.engine.Connection]:
        with self._engine().connect() as conn:
            with conn.begin():
                yield conn

    def has_table(self, table_name: str) -> bool:
        # Dagster asks before every check evaluation, with a new engine each time; a table that
        # exists keeps existing (nothing drops Dagster's tables under a running instance)
        found = self._tables_seen.get(table_name)
        if found is None:
            found = super().has_table(table_name)
            if found:
                self._tables_seen[table_name] = True
        return found

    def dispose(self) -> None:
        for engine in self._engines.values():
            engine.dispose()
        self._engines.clear()
        super().dispose()


def _pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()

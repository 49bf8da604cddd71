"""Cheaper event and run storage for Dagster's instance: the one place we use Dagster internals for it.

Dagster's sqlite event log opens a new connection for every event and commits it with a full
fsync: with a check evaluation per gate per partition that is most of a backfill's cost on a
laptop (benchmarks/scale.py). This subclass of `ConsolidatedSqliteEventLogStorage` keeps one pooled
engine per process, in WAL mode with `synchronous=NORMAL` (a crash of the process loses nothing;
a power cut can lose the last events, never corrupt the file), and stores a batch of events in
one transaction (Dagster's base class stores a batch one event at a time): their event log rows in
one INSERT executed for all, each event serialized once for every row that holds it (Dagster
serializes a planned check again for each partition of the run), into the text Dagster writes,
made in about half its time (`event_json.py`). Inside a batch, each
asset's row of the asset index is written once, by the last writer of each of its columns, instead
of once an event (a failed INSERT, then an UPDATE with the event serialized again), and the check
evaluations update their execution rows with one UPDATE executed for all; the rows are those
Dagster's own storage leaves (a test compares them).

`log_check_evaluations` sends a range run's per-partition gate results to the instance as one
batch (Dagster batches only materializations): the UI shows exactly the same check executions,
stored in one write instead of one per gate and partition, on any event storage that writes
batches (this one; the others store them one by one, as before). Each evaluation names its
partition's latest materialization as its target (`with_targets`), as Dagster does for a yielded
`AssetCheckResult`: Dagster's per-partition check status (the UI's Checks list and each check's
partition bar) counts an evaluation only when it targets the partition's latest materialization,
so without it a range run's results, failed gates included, vanished from both (issue 24).

`FileComputeLogManager` captures a step's stdout and stderr to their files, as Dagster's local
manager does, without mirroring them back to the process's own stdout: Dagster's mirror starts a
`tail -F` and a Python watcher per stream for every run (four processes, ~50 ms of CPU a run), and
our CLI's terminal shows our lines only; the UI reads the files as before.

On PostgreSQL, dagster-postgres's storages connect anew for every statement (SQLAlchemy's
`NullPool`): `PooledPostgresRunStorage` and `PooledPostgresEventLogStorage` keep one connection a
process each (checked before use), made on first use so a SQLite instance never imports them.

Each storage checks its schema against Dagster's migration scripts when an instance opens: alembic
reads the ~90 scripts again for every storage of every instance (~0.1 s of a command's ~0.2 s
instance, most of a new home's). `keep_migration_scripts` makes a process read Dagster's script
folder once: its revisions are the same files for the process's life.

A `base_dir` may be relative (`backfill init` writes them so): it is then a folder of DAGSTER_HOME,
the folder of the dagster.yaml that names it, so a home copied or moved keeps its Dagster storage
with it (an absolute path had a copy's commands store their runs in the original's).

`tests/test_dagster_storage.py` fails loudly when an upgrade moves what this relies on; the
tested range is pinned in pyproject.toml.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import alembic.command
import dagster._core.storage.sql as dagster_sql
import sqlalchemy as db
from alembic.config import Config as AlembicConfig
from alembic.script import ScriptDirectory
from dagster._core.execution.compute_logs import redirect_to_file
from dagster._core.storage.compute_log_manager import CapturedLogContext, ComputeIOType
from dagster._core.storage.event_log import ConsolidatedSqliteEventLogStorage
from dagster._core.storage.local_compute_log_manager import IO_TYPE_EXTENSION, LocalComputeLogManager
from dagster._core.storage.runs import SqliteRunStorage
from dagster._utils import ensure_file, touch_file
from sqlalchemy.pool import NullPool, QueuePool

BUSY_TIMEOUT_SECONDS = 30
BATCH_SIZE_ENV = "DAGSTER_EVENT_BATCH_SIZE"  # read by Dagster's instance on every event


class _KeptScriptDirectory(ScriptDirectory):
    """`ScriptDirectory.from_config` that returns the directory this process read already, for
    Dagster's own migration scripts (`ALEMBIC_SCRIPTS_LOCATION`, the package's folder): their revision
    map (every script, imported) is built once a process instead of once a storage. Dagster's
    storages name that folder through identical alembic.ini files; a directory is kept for each
    (folder, ini text), so an ini that differs reads its own. Any other scripts (a team's own
    alembic, a folder that merely starts with "dagster") are read as alembic reads them."""

    _kept: dict[tuple[str, bytes], ScriptDirectory] = {}
    _lock = threading.Lock()

    @classmethod
    def from_config(cls, config: AlembicConfig) -> ScriptDirectory:
        location = config.get_main_option("script_location") or ""
        if location != dagster_sql.ALEMBIC_SCRIPTS_LOCATION:  # exactly Dagster's, never a look-alike
            return ScriptDirectory.from_config(config)
        try:
            with open(config.config_file_name or "", "rb") as ini:
                key = (location, ini.read())
        except OSError:
            return ScriptDirectory.from_config(config)
        with cls._lock:
            kept = cls._kept.get(key)
            if kept is None:
                kept = cls._kept[key] = ScriptDirectory.from_config(config)
            return kept


def keep_migration_scripts() -> None:
    """Dagster's schema check (`check_alembic_revision`) and alembic's stamp and upgrade, which
    new and old homes run, read Dagster's scripts through the kept directories; idempotent."""
    modules: tuple[Any, ...] = (dagster_sql, alembic.command)  # each names the class it reads scripts with
    for module in modules:
        module.ScriptDirectory = _KeptScriptDirectory


def read_migration_scripts() -> None:
    """Read Dagster's migration scripts now: a process that forks commands (the tests' command
    server) reads them once for all its children."""
    from dagster._core.storage.runs.sqlite import sqlite_run_storage

    _KeptScriptDirectory.from_config(dagster_sql.get_alembic_config(sqlite_run_storage.__file__)).get_heads()


keep_migration_scripts()


def under_dagster_home(base_dir: str) -> str:
    """`base_dir` as given when absolute; a relative one is a folder of DAGSTER_HOME."""
    if os.path.isabs(base_dir):
        return base_dir
    dagster_home = os.environ.get("DAGSTER_HOME")
    if not dagster_home or not os.path.isabs(dagster_home):
        from backfill_assets.errors import UsageError

        raise UsageError(f"dagster.yaml names the folder {base_dir!r} relative to DAGSTER_HOME, which is not set "
                         "to an absolute path", fix="export DAGSTER_HOME=<the absolute folder of that dagster.yaml>")
    return os.path.join(dagster_home, base_dir)


def _this_process(engines: dict[int, db.engine.Engine], lock: threading.Lock,
                  make: Callable[[], db.engine.Engine]) -> db.engine.Engine:
    """This process's engine of a storage, made on first use: a forked process must not share its
    parent's connections."""
    pid = os.getpid()
    engine = engines.get(pid)
    if engine is None:
        with lock:
            engine = engines.get(pid)
            if engine is None:
                engine = engines[pid] = make()
    return engine


class _PooledEngine:
    """One pooled SQLAlchemy engine per process for a sqlite file (WAL, `synchronous=NORMAL`)."""

    _engine_lock = threading.Lock()
    _conn_string: str

    def _engine(self) -> db.engine.Engine:
        # made on first use: Dagster constructs these storages through its own __init__s
        return _this_process(self.__dict__.setdefault("_engines", {}), self._engine_lock, self._made)

    def _made(self) -> db.engine.Engine:
        # 4 kept open; more at once (the webserver's queries) open and close their own rather than
        # wait for the pool: sqlite, not the pool, serialises the writers
        engine = db.create_engine(self._conn_string, poolclass=QueuePool, pool_size=4, max_overflow=-1,
                                  connect_args={"timeout": BUSY_TIMEOUT_SECONDS, "check_same_thread": False})
        db.event.listen(engine, "connect", _pragmas)
        return engine

    def _dispose_engines(self) -> None:
        for engine in self.__dict__.get("_engines", {}).values():
            engine.dispose()
        self.__dict__.get("_engines", {}).clear()


class PooledSqliteRunStorage(_PooledEngine, SqliteRunStorage):
    """Dagster's sqlite run storage creates an engine and a connection for every statement, each
    commit a full sync: a run is created, started and ended through ~20 of them. Pooled here, as
    the event log is."""

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Any) -> PooledSqliteRunStorage:
        return cls.from_local(inst_data=inst_data, **{**config_value,
                                                      "base_dir": under_dagster_home(config_value["base_dir"])})

    @contextmanager
    def connect(self) -> Iterator[db.engine.Connection]:
        with self._engine().connect() as conn:
            with conn.begin():
                yield conn

    def dispose(self) -> None:
        self._dispose_engines()
        super().dispose()


class PooledSqliteEventLogStorage(_PooledEngine, ConsolidatedSqliteEventLogStorage):
    _batch = threading.local()  # the connection of the batch this thread is storing, if any

    def __init__(self, base_dir: str, inst_data: Any = None) -> None:
        self._tables_seen: dict[str, bool] = {}
        super().__init__(under_dagster_home(base_dir), inst_data=inst_data)

    @contextmanager
    def _connect(self) -> Iterator[db.engine.Connection]:
        held = getattr(self._batch, "conn", None)
        if held is not None:  # inside store_event_batch: every statement in the batch's one transaction
            yield held
            return
        with self._engine().connect() as conn:
            with conn.begin():
                yield conn

    def store_event_batch(self, events: Sequence[Any]) -> None:
        """The events in one transaction: all stored, or none (Dagster then stores them one by one).
        Their rows of the event log go in one INSERT executed for all, each event serialized once;
        each asset's row of the asset index is written once for the batch, not once an event."""
        with self._engine().connect() as conn:
            with conn.begin():
                self._batch.conn = conn
                self._batch.asset_events = {}
                self._batch.check_evaluations = []
                self._batch.serialized = {}
                try:
                    for event, event_id in zip(events, self._insert_events(conn, events), strict=True):
                        self._index_event(event, event_id)
                    for kept in self._batch.asset_events.values():
                        for event, event_id in last_writers(kept):
                            super()._store_asset_event(conn, event, event_id)
                    self._update_check_executions(conn, self._batch.check_evaluations)
                finally:
                    self._batch.conn = None
                    self._batch.asset_events = None
                    self._batch.check_evaluations = None
                    self._batch.serialized = None

    def _insert_events(self, conn: Any, events: Sequence[Any]) -> list[int]:
        """The events' rows of the event log (Dagster's `_event_to_row`), inserted by one statement
        executed for all of them, and their ids in the events' order."""
        from dagster._core.storage.event_log.schema import SqlEventLogStorageTable as table

        rows = [self._event_to_row(event) for event in events]
        inserted = conn.execute(table.insert().returning(table.c.id, sort_by_parameter_order=True), rows)
        return [int(row[0]) for row in inserted.fetchall()]

    def _index_event(self, event: Any, event_id: int) -> None:
        """What Dagster's `SqlEventLogStorage.store_event` does with an event once its row is
        inserted (tests/test_dagster_storage.py pins that method's source, so an upgrade that changes
        it fails there)."""
        from dagster._core.events import ASSET_CHECK_EVENTS, ASSET_EVENTS

        if event.is_dagster_event and event.dagster_event_type in ASSET_EVENTS and event.dagster_event.asset_key:
            with self.index_transaction() as conn:
                self._store_asset_event_tags(conn, [event], [event_id])
                self._store_asset_event(conn, event, event_id)
        if event.is_dagster_event and event.dagster_event_type in ASSET_CHECK_EVENTS:
            self.store_asset_check_event(event, event_id)

    def _serialized(self, event: Any) -> str:
        """The event's JSON (`event_json`: Dagster's text, made faster), once a batch: its event
        log row, its check execution row and each partition's row of a planned check all hold the
        same text."""
        from backfill_assets.event_json import serialized

        made: dict[int, tuple[Any, str]] | None = getattr(self._batch, "serialized", None)
        if made is None:
            return serialized(event)
        kept = made.get(id(event))
        if kept is None or kept[0] is not event:  # keyed by id: the event is kept alive beside its text
            kept = (event, serialized(event))
            made[id(event)] = kept
        return kept[1]

    def _event_to_row(self, event: Any) -> dict[str, Any]:
        # Dagster's `_event_to_row` (its source pinned by the test), the event's text made once a batch
        dagster_event_type = asset_key = partition = None
        step_key = event.step_key
        if event.is_dagster_event:
            dagster_event = event.get_dagster_event()
            dagster_event_type = dagster_event.event_type_value
            step_key = dagster_event.step_key
            if dagster_event.asset_key:
                asset_key = dagster_event.asset_key.to_string()
            if dagster_event.partition:
                partition = dagster_event.partition
        return {"run_id": event.run_id, "event": self._serialized(event), "dagster_event_type": dagster_event_type,
                "timestamp": self._event_insert_timestamp(event),  # type: ignore[no-untyped-call]  # untyped in Dagster
                "step_key": step_key, "asset_key": asset_key, "partition": partition}

    def _store_asset_check_evaluation_planned(self, event: Any, event_id: int | None) -> None:
        # Dagster serializes the planned event again for each partition of the run, in a statement
        # compiled anew for each run's partitions; the same rows, one text, one cached statement
        from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
        from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable as table

        planned = event.dagster_event.event_specific_data
        keys = planned.partitions_subset.get_partition_keys() if planned.partitions_subset else [None]
        text = self._serialized(event)
        timestamp = self._event_insert_timestamp(event)  # type: ignore[no-untyped-call]  # untyped in Dagster
        with self.index_connection() as conn:  # type: ignore[no-untyped-call]  # untyped in Dagster
            conn.execute(table.insert(), [
                dict(asset_key=planned.asset_key.to_string(), check_name=planned.check_name, partition=key,
                     run_id=event.run_id, execution_status=AssetCheckExecutionRecordStatus.PLANNED.value,
                     evaluation_event=text, evaluation_event_timestamp=timestamp, evaluation_event_storage_id=event_id)
                for key in keys])

    def _update_asset_check_evaluation(self, event: Any, event_id: int | None) -> None:
        # Dagster updates the check's execution row (made by the run's planned evaluation) with one
        # UPDATE built and run per evaluation; a batch's go in one executemany per statement shape
        pending = getattr(self._batch, "check_evaluations", None)
        if pending is None:
            super()._update_asset_check_evaluation(event, event_id)
            return
        pending.append((event, event_id))

    def _update_check_executions(self, conn: Any, pending: Sequence[tuple[Any, int | None]]) -> None:
        """What Dagster's `_update_asset_check_evaluation` writes for each evaluation, as one UPDATE
        executed for all of them (one for those without a partition). An evaluation whose execution
        row does not exist (no planned evaluation made it) is written Dagster's way, which inserts
        it; so is any whose row the UPDATE did not find after all."""
        from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
        from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable as table

        if not pending:
            return
        evaluations = [event.dagster_event.event_specific_data for event, _ in pending]
        # the unique index's leading columns, each an IN list: run_id alone would scan every
        # execution row ever written (hundreds of thousands after a few long windows)
        existing = {tuple(row) for row in conn.execute(
            db.select(table.c.asset_key, table.c.check_name, table.c.run_id, table.c.partition)
            .where(table.c.asset_key.in_(sorted({e.asset_key.to_string() for e in evaluations})),
                   table.c.check_name.in_(sorted({e.check_name for e in evaluations})),
                   table.c.run_id.in_(sorted({event.run_id for event, _ in pending})))).fetchall()}
        groups: dict[bool, list[tuple[Any, int | None, dict[str, Any]]]] = {True: [], False: []}
        for event, event_id in pending:
            evaluation = event.dagster_event.event_specific_data
            key = (evaluation.asset_key.to_string(), evaluation.check_name, event.run_id, evaluation.partition)
            if key not in existing:  # inserted Dagster's way; a later evaluation of it updates it
                super()._update_asset_check_evaluation(event, event_id)
                continue
            target = evaluation.target_materialization_data
            groups[evaluation.partition is None].append((event, event_id, {
                "w_asset_key": evaluation.asset_key.to_string(), "w_check_name": evaluation.check_name,
                "w_run_id": event.run_id, "w_partition": evaluation.partition,
                "v_status": (AssetCheckExecutionRecordStatus.SUCCEEDED.value if evaluation.passed
                             else AssetCheckExecutionRecordStatus.FAILED.value),
                "v_event": self._serialized(event),
                "v_timestamp": self._event_insert_timestamp(event),  # type: ignore[no-untyped-call]  # untyped in Dagster
                "v_storage_id": event_id, "v_materialization": target.storage_id if target else None,
                "v_partition": evaluation.partition}))
        for unpartitioned, group in groups.items():
            if not group:
                continue
            statement = table.update().where(db.and_(
                table.c.asset_key == db.bindparam("w_asset_key"),
                table.c.check_name == db.bindparam("w_check_name"),
                table.c.run_id == db.bindparam("w_run_id"),
                table.c.partition.is_(None) if unpartitioned else table.c.partition == db.bindparam("w_partition"),
            )).values(
                execution_status=db.bindparam("v_status"), evaluation_event=db.bindparam("v_event"),
                evaluation_event_timestamp=db.bindparam("v_timestamp"),
                evaluation_event_storage_id=db.bindparam("v_storage_id"),
                materialization_event_storage_id=db.bindparam("v_materialization"),
                partition=db.bindparam("v_partition"))
            updated = conn.execute(statement, [params for _, _, params in group]).rowcount
            if updated != len(group):
                for event, event_id, _ in group:
                    super()._update_asset_check_evaluation(event, event_id)

    def _store_asset_event(self, conn: Any, event: Any, event_id: int) -> None:
        # Dagster writes the asset's row of the asset index (its last materialization, last run,
        # last event time) for every event: a failed INSERT, then an UPDATE with the whole event
        # serialized again; in a batch only the last writer of each column counts (`last_writers`)
        pending = getattr(self._batch, "asset_events", None)
        if pending is None or not (event.dagster_event and event.dagster_event.asset_key):
            super()._store_asset_event(conn, event, event_id)
            return
        pending.setdefault(event.dagster_event.asset_key, []).append((event, event_id))

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
        self._dispose_engines()
        super().dispose()  # type: ignore[no-untyped-call]  # untyped in Dagster


class _PooledPostgres:
    """dagster-postgres's storages connect anew for every statement (SQLAlchemy's NullPool, to keep
    no connection per instance): a run on a PostgreSQL instance connected ~40 times a partition,
    most of its time (benchmarks/engines.py). Here each process keeps one connection a storage,
    checked before each use (a server restarted meanwhile is connected to again); more at once
    open and close their own. The webserver's own pool (`optimize_for_webserver`) is kept as set."""

    _pool_lock = threading.Lock()
    postgres_url: str
    _token_provider: Any

    @property
    def _engine(self) -> db.engine.Engine:
        return _this_process(self.__dict__.setdefault("_pg_engines", {}), self._pool_lock, self._made)

    @_engine.setter
    def _engine(self, engine: db.engine.Engine) -> None:
        # Dagster's __init__ sets a NullPool engine, replaced by the pooled one at its first use
        if isinstance(engine.pool, NullPool):
            engine.dispose()
            return
        engines: dict[int, db.engine.Engine] = self.__dict__.setdefault("_pg_engines", {})
        replaced = engines.get(os.getpid())
        engines[os.getpid()] = engine
        if replaced is not None and replaced is not engine:  # its connection is this process's own
            replaced.dispose()

    def _made(self) -> db.engine.Engine:
        from dagster_postgres.utils import create_pg_engine

        return create_pg_engine(self.postgres_url, self._token_provider, isolation_level="AUTOCOMMIT",
                                poolclass=QueuePool, pool_size=1, max_overflow=-1, pool_pre_ping=True)

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Any) -> Any:
        # Dagster's storages construct their own class here, not `cls` (the test pins their source)
        from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config

        return cls(inst_data=inst_data, postgres_url=pg_url_from_config(config_value),  # type: ignore[call-arg]
                   should_autocreate_tables=config_value.get("should_autocreate_tables", True),
                   token_provider=get_token_provider_from_config(config_value))

    def _dispose_pooled(self) -> None:
        engine = self.__dict__.get("_pg_engines", {}).pop(os.getpid(), None)
        if engine is not None:  # never a parent's: closing its connections would end their sessions
            engine.dispose()


def _postgres_storages() -> dict[str, type]:
    """The pooled PostgreSQL storages, made on first use: importing dagster-postgres costs the
    commands of a SQLite instance nothing then."""
    made: dict[str, type] | None = globals().get("_POSTGRES_STORAGES")
    if made is not None:
        return made
    from dagster_postgres.event_log import PostgresEventLogStorage
    from dagster_postgres.run_storage import PostgresRunStorage

    class PooledPostgresEventLogStorage(_PooledPostgres, PostgresEventLogStorage):
        _tables_seen: dict[str, bool]

        def has_table(self, table_name: str) -> bool:
            # asked before every check evaluation (as the sqlite one is); a table that exists keeps existing
            seen: dict[str, bool] = self.__dict__.setdefault("_tables_seen", {})
            if table_name not in seen:
                found = super().has_table(table_name)
                if not found:
                    return False
                seen[table_name] = True
            return True

        def dispose(self) -> None:
            try:
                super().dispose()
            finally:
                self._dispose_pooled()

    class PooledPostgresRunStorage(_PooledPostgres, PostgresRunStorage):
        def dispose(self) -> None:
            try:
                super().dispose()
            finally:
                self._dispose_pooled()

    for cls in (PooledPostgresEventLogStorage, PooledPostgresRunStorage):
        cls.__module__, cls.__qualname__ = __name__, cls.__name__
    made = {c.__name__: c for c in (PooledPostgresEventLogStorage, PooledPostgresRunStorage)}
    globals()["_POSTGRES_STORAGES"] = made
    return made


def __getattr__(name: str) -> type:
    # dagster.yaml names `backfill_assets.dagster_storage.PooledPostgres...Storage`; Dagster looks it up here
    if name in ("PooledPostgresEventLogStorage", "PooledPostgresRunStorage"):
        return _postgres_storages()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class FileComputeLogManager(LocalComputeLogManager):
    """Dagster's local compute log manager, capturing to the files without the mirror processes."""

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Any) -> FileComputeLogManager:
        return cls(inst_data=inst_data, **config_value)

    def register_instance(self, instance: Any) -> None:
        # made lazily, by the instance that reads it: a relative folder is one of that instance's
        super().register_instance(instance)
        if not os.path.isabs(self._base_dir):
            self._base_dir = os.path.join(instance.root_directory, self._base_dir)

    @contextmanager
    def capture_logs(self, log_key: Sequence[str]) -> Iterator[CapturedLogContext]:
        outpath = self.get_captured_local_path(log_key, IO_TYPE_EXTENSION[ComputeIOType.STDOUT])
        errpath = self.get_captured_local_path(log_key, IO_TYPE_EXTENSION[ComputeIOType.STDERR])
        ensure_file(outpath)
        ensure_file(errpath)
        with redirect_to_file(sys.stdout, outpath), redirect_to_file(sys.stderr, errpath):
            yield CapturedLogContext(log_key)
        # as Dagster's: the UI knows the capture ended
        touch_file(self.complete_artifact_path(log_key))  # type: ignore[no-untyped-call]  # untyped in Dagster


# The asset index's columns each kind of asset event writes (Dagster's `_get_asset_entry_values`):
# a materialization its last materialization, run and time; a planned materialization the run and
# time; an observation the time.
_COLUMNS_WRITTEN = {"ASSET_MATERIALIZATION": frozenset({"materialization", "run", "time"}),
                    "ASSET_MATERIALIZATION_PLANNED": frozenset({"run", "time"}),
                    "ASSET_OBSERVATION": frozenset({"time"})}


def last_writers(events: Sequence[tuple[Any, int]]) -> list[tuple[Any, int]]:
    """Of one asset's (event, storage id)s in storage order, those whose writes to the asset index
    are not all overwritten by a later one, in order: writing just these leaves the row exactly as
    writing every one would (tests/test_dagster_storage.py compares it with Dagster's own storage)."""
    covered: set[str] = set()
    kept = []
    for event, event_id in reversed(events):
        kind = event.dagster_event.event_type_value
        written = _COLUMNS_WRITTEN.get(kind)
        if written is None:  # a kind we do not know: written as Dagster would, in its place
            kept.append((event, event_id))
            continue
        if not written <= covered:
            kept.append((event, event_id))
            covered |= written
    return kept[::-1]


def _pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def with_targets(instance: Any, evaluations: Sequence[Any]) -> list[Any]:
    """The evaluations, each partitioned one without a target naming its partition's latest
    materialization (one query per asset), as Dagster's `AssetCheckResult` does in a one-partition
    run: the check's partition status counts an evaluation only when its target is the partition's
    latest materialization. A partition never materialized keeps no target."""
    from dagster import AssetRecordsFilter, DagsterEventType
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationTargetMaterializationData,
    )
    from dagster_shared.record import replace

    wanted: dict[Any, set[str]] = {}
    for evaluation in evaluations:
        if evaluation.partition is not None and evaluation.target_materialization_data is None:
            wanted.setdefault(evaluation.asset_key, set()).add(evaluation.partition)
    targets: dict[tuple[Any, str], Any] = {}
    for asset_key, partitions in wanted.items():
        ids = instance.get_latest_storage_id_by_partition(asset_key, DagsterEventType.ASSET_MATERIALIZATION,
                                                          partitions)
        if not ids:
            continue
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=asset_key, storage_ids=list(ids.values())), limit=len(ids)).records
        for record in records:
            targets[(asset_key, record.partition_key)] = AssetCheckEvaluationTargetMaterializationData(
                storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp)
    return [replace(e, target_materialization_data=targets[(e.asset_key, e.partition)])
            if e.target_materialization_data is None and (e.asset_key, e.partition) in targets else e
            for e in evaluations]


def log_check_evaluations(context: Any, evaluations: Sequence[Any]) -> None:
    """Log `AssetCheckEvaluation`s from inside a step as one batch (each keeps its partition and
    targets the partition's latest materialization: the one this run just stored), as Dagster logs
    a range run's materializations: with DAGSTER_EVENT_BATCH_SIZE set, the instance hands them to
    the event storage together at the batch's end."""
    if not evaluations:
        return
    evaluations = with_targets(context.instance, evaluations)
    from dagster._core.events import DagsterEvent, DagsterEventBatchMetadata, DagsterEventType, generate_event_batch_id

    step = context.op_execution_context._step_execution_context
    batch = generate_event_batch_id()  # type: ignore[no-untyped-call]  # untyped in Dagster
    last = len(evaluations) - 1
    # the instance batches only while this is set (it reads it on every event); a run the daemon
    # launched has not set it, so it is set for these events alone
    unset = BATCH_SIZE_ENV not in os.environ
    if unset:
        os.environ[BATCH_SIZE_ENV] = str(len(evaluations))
    try:
        for i, evaluation in enumerate(evaluations):
            DagsterEvent.from_step(
                event_type=DagsterEventType.ASSET_CHECK_EVALUATION, step_context=step,
                event_specific_data=evaluation,
                message=f"Asset check '{evaluation.check_name}' on '{evaluation.asset_key.to_user_string()}' "
                        + ("passed." if evaluation.passed else "did not pass."),
                batch_metadata=DagsterEventBatchMetadata(batch, i == last))
    finally:
        if unset:
            os.environ.pop(BATCH_SIZE_ENV, None)


def shown_checks(instance: Any, asset_key: Any, check_names: Sequence[str],
                 partitions: Sequence[str]) -> dict[tuple[str, str], bool | None]:
    """What the UI's partition bar shows of each (partition, check): True for passed, False for
    failed, None for nothing (never evaluated, planned, or its latest evaluation aimed at an older
    materialization, which Dagster's partition status does not count), read as the UI reads it
    (`get_asset_check_partition_info`, one query a check)."""
    from dagster import AssetCheckKey
    from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus as Status

    keys = [AssetCheckKey(asset_key, name) for name in check_names]
    shown: dict[tuple[str, str], bool | None] = {}
    for info in instance.event_log_storage.get_asset_check_partition_info(keys, partition_keys=list(partitions)):
        if info.partition_key is None or not info.is_current:
            continue
        status = info.latest_execution_status
        shown[(info.partition_key, info.check_key.name)] = \
            True if status == Status.SUCCEEDED else False if status == Status.FAILED else None
    return shown

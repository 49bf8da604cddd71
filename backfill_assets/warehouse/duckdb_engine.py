"""DuckDB, the embedded default engine: one file, one writing process at a time.

The webserver, the daemon, every run's process and the CLI compete for the file lock, so
connections are opened per unit of work and wait for the lock, visibly and for a bounded time.

Fingerprints (documented per engine, defined in warehouse/fingerprints.py): a value's text is its
cast to VARCHAR as DuckDB prints it (DECIMAL keeps its scale, DATE is ISO, TIMESTAMP is
`YYYY-MM-DD HH:MM:SS[.ffffff]`), except a float (the 16 hex digits of its IEEE-754 double, every
NaN as `NaN`: DuckDB prints `100.0` where PostgreSQL prints `100`) and a TIMESTAMPTZ (its UTC
wall-clock time: the cast would print the session's time zone). `sha256(VARCHAR)` gives a row's
digest as lowercase hex, which sorts as its bytes do; `unhex` of the sorted concatenation is the
bytes the partition's digest is the sha256 of (`string_agg` takes no BLOB).
"""

from __future__ import annotations

import functools
import os
import re
import stat
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from backfill_assets.bounded import refuse_non_regular
from backfill_assets.environment import fix_for, pid_running, reason_of
from backfill_assets.errors import LockWaitTimeout, UsageError, WarehouseError
from backfill_assets.identifiers import quote
from backfill_assets.settings import whole_number
from backfill_assets.warehouse import kept as kept_scope
from backfill_assets.warehouse import lock_wait
from backfill_assets.warehouse.engine import Engine, Params, Session, raise_no_chain_key, type_family
from backfill_assets.warehouse.postgres_spelling import PostgresSpelling


class CatalogMemo:
    """What `relation_kind` found in one open database: no other process can change its catalog
    while this one holds the file (DuckDB locks it for one process), and this process's own code
    makes no macro and turns no table into a view, so the answers stand until the database is
    closed (a session's end, or the kept connection's). The macro scan costs ~22 ms (every
    function DuckDB has), the generated-column one ~10 ms; a fingerprint asks both.

    The answers are of the database files DuckDB opened (`files`, the paths it resolved), never of
    the path we named: swapped for a symlink elsewhere while the kept connection holds the old
    file, the same path opens another database (found by an attack), which is asked afresh."""

    def __init__(self) -> None:
        self.files: tuple[str, ...] | None = None  # what the answers are of
        self.shadowing: frozenset[str] | None = None  # the database's macros named like built-ins
        self.plain_tables: set[tuple[str | None, str]] = set()  # (schema, lower name) found plain tables
        self.control_plain = False  # the control schema found to hold only plain tables of plain types
        self.triggers: bool | None = None  # whether the database holds a trigger (`runs_table_code`)
        self.remembered: dict[str, Any] = {}  # the control record's checks (`Session.memo_while_locked`)
        # this process's lock on the database file, seen as the memo began (`_lock_of`); None where
        # it cannot be seen: nothing is remembered then
        self.lock: FileLock | None = None

    def of(self, files: tuple[str, ...]) -> CatalogMemo:
        """This memo when its answers are of these files, else emptied for them."""
        if files != self.files:
            self.files, self.shadowing, self.plain_tables, self.control_plain = files, None, set(), False
            self.triggers = None
            self.remembered, self.lock = {}, None  # the lock seen was another file's (found by a review)
        return self


class DuckDBSession(Session):
    snapshot_transactions = True  # MVCC: a transaction reads the snapshot it began with, and its own writes

    def __init__(self, engine: DuckDBEngine, con: duckdb.DuckDBPyConnection,
                 catalog: CatalogMemo | None = None) -> None:
        super().__init__(engine)
        self.engine_path = engine.path
        self.duckdb_engine = engine
        self.con = con
        self.catalog = catalog if catalog is not None else CatalogMemo()
        self._files: tuple[str, ...] | None = None  # what `_memo` found this connection reaches

    def execute(self, sql: str, params: Params = ()) -> None:
        self._run(sql, params)

    def rows(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        return self._run(sql, params).fetchall()

    def _run(self, sql: str, params: Params) -> duckdb.DuckDBPyConnection:
        try:
            return self.con.execute(sql, params if isinstance(params, dict) else list(params))
        except duckdb.Error as exc:
            raise DuckDBStatementError(exc) from exc
        except RuntimeError as exc:
            _raise_if_interrupted(exc)
            raise

    def memo_while_locked(self) -> dict[str, Any] | None:
        # the memo lives as long as the file stays held by this process: a session's own connection,
        # then the kept one opened before it closed (`session`), dropped with it (`let_go`); and only
        # while the lock is still this process's (a descriptor of the file closed anywhere in the
        # process releases it)
        # nor where a trigger runs in this process's statements (`runs_table_code`): one fired by a
        # write of the target can update control rows a check passed on, and "this process only
        # appends" no longer holds (a trigger rewrote a sealed write's fingerprint: found by an attack)
        memo = self._memo()
        if memo.lock is None or self.runs_table_code:
            return None
        self.refuse_lost_lock()
        return memo.remembered

    def refuse_lost_lock(self) -> None:
        """WarehouseError when this process no longer holds the lock it held on the database file:
        DuckDB's is a POSIX record lock, which the process loses when it closes any descriptor of
        the file (a file of the home an insider pointed at the warehouse, which this process, or
        Dagster in it, opened and closed: found by an attack); another process may write the file
        meanwhile, so nothing remembered is trusted and nothing more is written."""
        memo = self._memo()
        lock = memo.lock
        if lock is None and locks_shown(self.engine_path.parent):
            # not seen as the session began: the path named another file then (a rename racing the
            # open, found by an attack); asked again, and a commit waits for no lock it cannot see
            lock = memo.lock = _lock_of(self.engine_path)
            if lock is None:
                raise WarehouseError(
                    f"this process cannot find its lock on the warehouse {self.engine_path}: the file at that "
                    "path is not the one it opened (renamed or replaced meanwhile?)",
                    fix="put the warehouse file back where it was, then run the command again")
        if lock is not None and not lock.still_ours():
            raise WarehouseError(
                f"this process lost its lock on the warehouse {self.engine_path}: a file it opened and closed "
                "was the warehouse (a link under the home?), so another process could write it meanwhile",
                fix=f"remove the link (`find {self.engine_path.parent} -samefile {self.engine_path}`), "
                    "then run the command again")

    def refuse_shadowed_code(self) -> None:
        """A macro named like a built-in answers every call of it (`sha256`, `count`): asked once
        while this process holds the file (~9 ms: every function DuckDB has), before the first
        decision reads the control record, not as every session opens (+40 CPU-s over the suite)."""
        memo = self._memo()
        if memo.shadowing is None:
            memo.shadowing = _shadowing(self)
        if memo.shadowing:
            from backfill_assets.errors import ForgedRecord

            raise ForgedRecord(f"the database's macro(s) {', '.join(sorted(memo.shadowing)[:3])} shadow built-ins: "
                               "every statement calling them would answer as the macro says",
                               fix="drop the macro (`DROP MACRO name`), or name it otherwise")

    @property
    def runs_table_code(self) -> bool:  # type: ignore[override]
        """Whether the database holds a trigger (DuckDB 2.0 runs one's statement inside the statement
        that fired it): then each proof is taken again before the commit (`proven`). A rollback
        proved the restored target, then restored the published table, whose trigger edited the
        target (found by an attack). Asked once while this process holds the file (no other
        process can add one meanwhile, and a trigger's statement cannot make one)."""
        memo = self._memo()
        if memo.triggers is None:
            memo.triggers = bool(self.scalar("SELECT count(*) FROM system.main.duckdb_triggers()"))
        return memo.triggers

    def _memo(self) -> CatalogMemo:
        """The catalog memo of the database files this connection reaches, as DuckDB resolved them:
        asked once a session (a connection reaches other files only by an ATTACH run on it, and
        none is), not before each decision (~1 ms each, a fifth of a decision's reads)."""
        if self._files is None:
            self._files = tuple(sorted(str(path) for (path,) in self.rows(
                "SELECT path FROM system.main.duckdb_databases() WHERE path IS NOT NULL")))
        return self.catalog.of(self._files)

    def control_relations_plain(self, lock: bool = False) -> None:  # noqa: ARG002 - the file lock holds the catalog
        """Every relation of the control schema a plain table, each column of the type the schema
        makes it with (any other column of `CONTROL_TYPES`), without computed columns or a
        collation. A view can answer each statement differently (`current_query()`): a decision
        read `passed = true` for a failed gate while the seal check, reading the same rows by
        another statement, saw the sealed ones; a rollback restored edited snapshot rows; `evidence
        verify` passed (found by an attack). Asked of the system catalog by its full name, the
        filtering done here, so nothing the database defines answers it; remembered while this
        process holds the file (no other process can change its catalog meanwhile)."""
        from backfill_assets.warehouse.state_store import SCHEMA
        from backfill_assets.warehouse.state_store.schema import column_types

        memo = self._memo()
        if memo.control_plain:
            return
        # one statement (a session opens often; each statement costs): the views, the columns, the
        # keys and the tables' statements, the filtering done here
        found = self.rows(
            "SELECT 'v', schema_name, view_name, NULL, internal, NULL FROM system.main.duckdb_views() "
            "UNION ALL SELECT 'c', schema_name, table_name, column_name, is_generated, data_type "
            "FROM system.main.duckdb_columns() "
            "UNION ALL SELECT 'k', schema_name, table_name, constraint_type, NULL, "
            "CAST(constraint_column_names AS VARCHAR) FROM system.main.duckdb_constraints() "
            "UNION ALL SELECT 's', schema_name, table_name, NULL, NULL, sql FROM system.main.duckdb_tables() "
            "UNION ALL SELECT 't', schema_name, table_name, trigger_name, NULL, NULL "
            "FROM system.main.duckdb_triggers() "
            "UNION ALL SELECT 'n', schema_name, CAST(oid AS VARCHAR), NULL, parent_schema_oid IS NOT NULL, "
            "CAST(parent_schema_oid AS VARCHAR) FROM system.main.duckdb_schemas()")
        memo.triggers = any(r[0] == "t" for r in found)
        _refuse_nested_namesakes({str(r[2]): (str(r[1]), None if r[5] is None else str(r[5]))
                                  for r in found if r[0] == "n"})
        # DuckDB 2.0 runs a trigger's statement inside the statement that fired it: one on a control
        # table runs in backfill's transactions after what they proved (an evidence row's insert,
        # after a publish's proof, edited the published table: found by an attack)
        hung = [(table, name) for (what, schema, table, name, _, _) in found if what == "t" and _named(schema, SCHEMA)]
        if hung:
            from backfill_assets.errors import ForgedRecord

            table, trigger = (_shown('"' + str(n).replace('"', '""') + '"') for n in hung[0])
            raise ForgedRecord(f"{SCHEMA} has the trigger {trigger} on {table}: code of its own runs in backfill's "
                               "transactions after what they proved, and can change it before they commit",
                               fix=f"drop it (`DROP TRIGGER {trigger} ON {SCHEMA}.{table}`); nothing may hang "
                                   f"on {SCHEMA}'s tables; `backfill evidence verify` then checks the record")
        # names as DuckDB resolves them, without regard to case: `backfill_control.evidence` reads a
        # table made as "Evidence", or a schema made again as "Backfill_Control" (found by an attack)
        odd = [f"the view {view}" for (what, schema, view, _, internal, _) in found
               if what == "v" and _named(schema, SCHEMA) and not internal]
        made = column_types()
        for what, schema, table, column, generated, kind in found:
            # each column of the type it is made with (`evidence_seq` as VARCHAR sorts '0123' after
            # '99': an older gate result read as the latest, its seal intact: found by an attack)
            expected = made.get((str(table).lower(), str(column).lower())) if what == "c" else None
            if what == "c" and _named(schema, SCHEMA) and (generated or str(kind) not in CONTROL_TYPES
                                                           or expected not in (None, str(kind))):
                odd.append(f"the column {table}.{column} ("
                           + ("computed" if generated else f"of type {kind}"
                              + (f", made {expected}" if expected not in (None, str(kind)) else "")) + ")")
            # a collation shows in no column's type, only in the table's statement: NOCASE has
            # `partition_key = 'eu'` read the rows of partition EU too
            if what == "s" and _named(schema, SCHEMA) and "COLLATE" in str(kind).upper():
                odd.append(f"the table {table} with a collation")
        # what must be there is looked for as the binder names it (ASCII case only): `_named` folds
        # more, and a key on a look-alike ("bacKfill_control" with the Kelvin sign, a column "ſeq")
        # answered for the real table, which held a row twice (found by an attack)
        chain = [r for r in found if ascii_folded(str(r[1])) == SCHEMA and ascii_folded(str(r[2])) == "evidence"]
        if any(r[0] == "c" for r in chain) and not any(
                r[0] == "k" and r[3] == "PRIMARY KEY" and ascii_folded(str(r[5])) == "[seq]" for r in chain):
            raise_no_chain_key(SCHEMA)
        if odd:
            from backfill_assets.errors import ForgedRecord

            raise ForgedRecord(f"{SCHEMA} holds {odd[0]}, not a plain column as the schema made it: it can answer "
                               "a statement otherwise than the record was written",
                               fix="the control schema holds only backfill's own plain tables, as made: move or drop "
                                   "what else is there, or restore a replaced or altered table from backup; "
                                   "`backfill evidence verify` then checks the record")
        memo.control_plain = True

    def _begin(self) -> None:
        self.con.execute("BEGIN TRANSACTION")

    def _commit(self) -> None:
        self.refuse_lost_lock()  # another process may be writing the file: this transaction rolls back
        self.duckdb_engine._refuse_odd_files()  # a pipe or a link put at the log since the open: written now
        self.execute("COMMIT")  # a failed commit is a statement error, one line

    def _rollback(self) -> None:
        try:
            self.con.execute("ROLLBACK")
        except duckdb.Error:
            pass  # the connection already dropped the transaction (e.g. after a fatal error)


# the types the control schema's columns are made of (`state_store/schema.py`); any other, an enum
# of the database's own (`passed` as ENUM('false', 'true') reads as a true string), a list or a
# struct of one, reads otherwise than the record was written
CONTROL_TYPES = frozenset({"BIGINT", "INTEGER", "VARCHAR", "BOOLEAN", "DOUBLE"})


def _named(name: object, ours: str) -> bool:
    """Whether DuckDB resolves our (lower-case) name `ours` to the catalog's `name`."""
    return name is not None and (str(name).lower() == ours or str(name).casefold() == ours)


def _refuse_nested_namesakes(schemas: dict[str, tuple[str, str | None]]) -> None:
    """A nested schema (DuckDB 2.0) named like a schema of the database, or like one the product
    reads or makes: the catalog lists its tables under that last name alone (`zzz.main.daily_revenue`
    as `main.daily_revenue`) while a statement's name still means the top-level one, so a check that
    looks a relation up by its schema's name could read the decoy's columns or kind (a contract gate
    passed over a column that lost its cents; a view over a snapshot passed for a table: found by an
    attack). `schemas`: each schema the connection reaches, by oid: (name, its parent's oid)."""
    from backfill_assets.warehouse.snapshot_tables import SNAPSHOT_SCHEMA
    from backfill_assets.warehouse.state_store import SCHEMA

    def alike(name: str) -> set[str]:  # as the binder folds it, and as anything else might
        return {ascii_folded(name), name.casefold()}

    taken = {"main", SCHEMA, SNAPSHOT_SCHEMA}
    for name, parent in schemas.values():
        if parent is None:
            taken |= alike(name)
    for name, parent in schemas.values():
        if parent is not None and alike(name) & taken:
            path: list[str] = [name]
            at: str | None = parent
            while at is not None and at in schemas and len(path) < 64:
                path.insert(0, schemas[at][0])
                at = schemas[at][1]
            quoted = ".".join('"' + part.replace('"', '""') + '"' for part in path)
            raise WarehouseError(
                f"the warehouse holds the nested schema {_shown(quoted)}, named like the schema {_shown(name)}: DuckDB "
                f"lists its tables as that schema's, so a check could read one of them for the table a statement names",
                fix=f"rename it or drop it (`DROP SCHEMA {_shown(quoted)} CASCADE`): a nested schema may not take the "
                    "name of a schema of the warehouse")


def _shown(name: str) -> str:
    """A name from the catalog in a one-line message: whoever made it chose its characters."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)


# DuckDB's binder matches names without regard to case for ASCII letters only ("İtem" and "item"
# are two tables), while SQL's lower() and Python's lower() fold other letters too (lower('İtem') is
# 'item'): a catalog look-up folds as the binder does, or a look-alike's row answers for the table a
# statement names (a contract gate read a decoy's column types: found by a review)
_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_TO_LOWER = str.maketrans(_UPPER, _UPPER.lower())


def ascii_folded(name: str) -> str:
    """`name` as DuckDB's binder compares it."""
    return name.translate(_TO_LOWER)


def _folded_sql(expr: str) -> str:
    return f"translate({expr}, '{_UPPER}', '{_UPPER.lower()}')"


# a VARIANT or a UNION where a type goes (not a quoted ENUM label or field name: `ENUM('variant')`)
_OWN_TYPED = re.compile(r"\bVARIANT(?=\s*(?:$|[,)\[]))|\bUNION\s*\(", re.IGNORECASE)
_COLLATE = re.compile(r"\bCOLLATE\b", re.IGNORECASE)
_QUOTED = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"")

_BUILTINS: set[str] = set()  # the names of DuckDB's own functions: the library's, learnt once a process


def _shadowing(session: Session) -> frozenset[str]:
    """The database's macros named like built-ins: a macro of the database's own answers every call
    of that name in it (`sha256`, `current_schema`, `count`): then no statement here says what it
    seems to. Asked of the system catalog by its full name, which no macro shadows (names compared
    as DuckDB calls them: without regard to case). One scan of every function DuckDB has (~9 ms)
    also learns the built-ins' names the first time, where two scans asked for them apart."""
    found = session.rows("SELECT DISTINCT function_name, internal FROM system.main.duckdb_functions()"
                         + (" WHERE NOT internal" if _BUILTINS else ""))
    if not _BUILTINS:
        _BUILTINS.update(str(name).lower() for (name, internal) in found if internal)
    return frozenset({str(name).lower() for (name, internal) in found if not internal} & _BUILTINS)


def _raise_if_interrupted(exc: RuntimeError) -> None:
    """KeyboardInterrupt when `exc` is DuckDB's answer to a Ctrl-C (SIGINT) while it ran a statement:
    it cancels the statement and raises a bare `RuntimeError: Query interrupted`, which the CLI called
    an internal error (exit 3) for every Ctrl-C landing in a statement (found by an attack)."""
    if type(exc) is RuntimeError and str(exc) == "Query interrupted":
        raise KeyboardInterrupt from exc


class DuckDBStatementError(WarehouseError):
    """A statement failed inside DuckDB; the first line of its message says why."""

    def __init__(self, exc: duckdb.Error) -> None:
        self.original = exc
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        why = reason_of(text)  # a full disk or a read-only home: say what to do about it
        super().__init__(f"{text} ({why})" if why else text, fix=fix_for(why, "the warehouse") if why else None)


THREADS_ENV = "BACKFILL_DUCKDB_THREADS"


def _threads() -> int:
    """DuckDB's worker threads for this process's database: 0 (unset) leaves DuckDB's default, one
    a core. Each open of the database starts them, and each statement hands work to them; on a
    machine whose cores are shared by several processes, or for a record's small statements, one
    thread costs less (the test suite: ~12% of its CPU)."""
    return whole_number(THREADS_ENV, 0, 0, 1024, "threads")


MEMORY_ENV = "BACKFILL_DUCKDB_MEMORY_MB"
MIN_MEMORY_MB = 64  # the demo's history load ran out of memory at 32 (at 48 it passed)


def _memory_mb() -> int:
    """DuckDB's memory limit for this process's database, in megabytes: 0 (unset) leaves DuckDB's
    default, 80% of the machine's memory, which its buffer pool fills with the blocks a command
    read (a reconcile of 2,526 partitions of a 6M-row source: 350-590 MB resident against 250-270
    MB at 64, in the same time; its run ~10% slower, reading the source's blocks again:
    benchmarks/backfill_peers.py --duckdb-memory-mb). A limit makes DuckDB evict blocks read and
    spill large operators to disk."""
    mb = whole_number(MEMORY_ENV, 0, 0, 16 * 1024 * 1024, "megabytes")
    if 0 < mb < MIN_MEMORY_MB:
        raise UsageError(f"{MEMORY_ENV}={mb} is under the {MIN_MEMORY_MB} megabytes a run's writes need",
                         fix=f"set it to {MIN_MEMORY_MB} or more, or unset it for DuckDB's default")
    return mb


class _Kept(kept_scope.Kept):
    """Connections kept open between the sessions of a command (`kept_open`), one a database file
    and process, with the mode it was opened in."""

    def __init__(self) -> None:
        super().__init__()
        self.connections: dict[tuple[int, str], tuple[duckdb.DuckDBPyConnection, bool]] = {}
        self.memos: dict[tuple[int, str], CatalogMemo] = {}  # valid while the key's connection is kept
        self.files: dict[tuple[int, str], tuple[str, int, int] | None] = {}  # what each kept one opened

    def take_all(self) -> list[duckdb.DuckDBPyConnection]:
        """This process's kept connections, no longer kept (the caller closes them; a forked
        child never closes its parent's)."""
        pid = os.getpid()
        taken = [(key, con) for key, (con, _mode) in self.connections.items()]
        self.connections.clear()
        self.memos.clear()
        self.files.clear()
        return [con for (owner, _path), con in taken if owner == pid]

    def drop(self, key: tuple[int, str]) -> tuple[duckdb.DuckDBPyConnection, bool] | None:
        """The key's kept connection, no longer kept (the caller closes it), and its memo forgotten."""
        self.memos.pop(key, None)
        self.files.pop(key, None)
        return self.connections.pop(key, None)


_kept = _Kept()


def release_kept() -> None:
    """Close the kept connections now, and keep none until the outermost `kept_open` ends: before
    waiting on anything outside the warehouse (a notice's receiver), the file is never held."""
    kept_scope.release(_kept)


def kept_open() -> AbstractContextManager[None]:
    """While this lasts, a session's end keeps a connection to its DuckDB database open, so the
    next session joins the database this process has loaded (~0.1 ms) instead of loading it again
    (~15 ms, most of a short command's warehouse time). The file stays locked meanwhile, and a
    session asked to read joins it for writing: use it only around work that writes anyway and
    waits for no other process and no person, nor on a reader of a long output (the CLI's short
    writing commands; the relay lets it go before a receiver). Nested uses end with the outermost."""
    return kept_scope.scope(_kept)


# a waiter renews its mark at every poll (at most 0.5 s apart); an older mark waits for nothing
MARK_FRESH_SECONDS = 3.0


def _drop_kept(key: tuple[int, str]) -> None:
    """Close the connection kept for this database, if any, and go on keeping the next one."""
    with _kept.lock:
        kept = _kept.drop(key)
    if kept is not None:
        kept[0].close()


@dataclass(frozen=True)
class FileLock:
    """Where this process's lock on the database file shows: DuckDB's descriptor of it, whose
    /proc/self/fdinfo lists the POSIX locks taken through it (Linux; ~5 us to ask, where the
    system-wide /proc/locks takes a lock of every process's locks and cost ~1.7 ms on average)."""

    fd: int
    file: tuple[int, int]  # (st_dev, st_ino) of the database file

    def still_ours(self) -> bool:
        return _file_of(self.fd) == self.file and _locked(self.fd)


# a warehouse's folder -> when the folders above it were found this account's or root's alone, and
# the ctime of the one right above then
_ANCESTORS_CHECKED: dict[Path, tuple[float, int]] = {}


def _ctime(folder: Path) -> int:
    try:
        return os.stat(folder).st_ctime_ns
    except OSError:
        return -1


_OWN_FOLDER_FIX = ("keep the warehouse in a folder of your own, every folder above it yours or root's and none "
                   "writable by others (a sticky one such as /tmp aside): `mkdir -m 755 DIR`, then "
                   "BACKFILL_WAREHOUSE_URL=duckdb:////DIR/warehouse.duckdb (or BACKFILL_HOME=DIR)")


def _others_can_write(path: Path, *, sticky_ok: bool) -> str | None:
    """Why another account than this one (or root) can add, remove or rename entries of the folder
    `path` (None: none can; absent: none yet). `sticky_ok`: a sticky folder's entries are renamed
    only by their owners (a folder above the warehouse's, such as /tmp)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if st.st_uid not in (os.geteuid(), 0):
        return f"is owned by uid {st.st_uid}, not this account (uid {os.geteuid()})"
    if sticky_ok and st.st_mode & stat.S_ISVTX:
        return None
    shown = stat.filemode(st.st_mode)
    if st.st_mode & stat.S_IWOTH:
        return f"can be written by every account ({shown})"
    acl = _acl_of(path)
    if acl:
        # the group bits are the ACL's mask: whether any named user or group may write
        return f"has an access control list ({acl}) that may let other accounts write it ({shown}+)" \
            if st.st_mode & stat.S_IWGRP or acl == "nfs4" else None
    if st.st_mode & stat.S_IWGRP and _shared_group(st):
        return f"can be written by its group, gid {st.st_gid}, which other accounts may be in ({shown})"
    return None


def _acl_of(path: Path) -> str | None:
    """The kind of access control list the folder carries, if any (POSIX or NFSv4)."""
    try:
        names = os.listxattr(path)
    except OSError:
        return None  # a filesystem without extended attributes has no ACL
    if "system.nfs4_acl" in names:
        return "nfs4"
    return "posix" if "system.posix_acl_access" in names else None


def _shared_group(st: os.stat_result) -> bool:
    """Whether the file's group may hold another account than its owner: anything but the owner's
    own private group (where a umask of 002 makes every folder group-writable)."""
    return _group_shared(st.st_uid, st.st_gid)


@functools.lru_cache(maxsize=16)
def _group_shared(uid: int, gid: int) -> bool:  # asked of the system's accounts once a process
    import grp
    import pwd

    try:
        group, owner = grp.getgrgid(gid), pwd.getpwuid(uid)
    except KeyError:
        return True
    # a user private group is named as its user is and lists no one; an account whose primary group
    # it is is not listed (`nogroup`: nobody, _apt), and a directory service may list no member at all
    return group.gr_name != owner.pw_name or owner.pw_gid != gid or bool(group.gr_mem) or any(
        account.pw_gid == gid and account.pw_uid != uid for account in pwd.getpwall())


def _identity(path: Path) -> tuple[str, int, int] | None:
    """Where a path leads (every link resolved) and the file there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return os.path.realpath(path), st.st_dev, st.st_ino


def _file_of(fd: int) -> tuple[int, int] | None:
    try:
        st = os.stat(f"/proc/self/fd/{fd}")
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _locked(fd: int) -> bool:
    try:
        handle = os.open(f"/proc/self/fdinfo/{fd}", os.O_RDONLY)
        try:
            text = os.read(handle, 1 << 16).decode("ascii", errors="replace")
        finally:
            os.close(handle)
    except OSError:
        return False
    # "lock:\t1: POSIX  ADVISORY  WRITE 23225 fe:00:2449434 0 EOF"
    return any(line.startswith("lock:") and " POSIX " in line for line in text.splitlines())


def _lock_of(path: Path) -> FileLock | None:
    """This process's lock on the database file as it shows now (just opened or joined), or None
    where it cannot be seen: another system, /proc not mounted (`locks_shown`), or a file put in
    the path's place since DuckDB opened it (an insider's rename; no commit passes then)."""
    try:
        st = os.stat(path)
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for name in names:
        fd = int(name) if name.isdigit() else -1
        if fd >= 0 and _file_of(fd) == (st.st_dev, st.st_ino) and _locked(fd):
            return FileLock(fd, (st.st_dev, st.st_ino))
    return None


def locks_shown(folder: Path) -> bool:
    """Whether this system lists the POSIX locks of a file in `folder` (Linux's /proc/self/fdinfo),
    asked once a filesystem of a lock this process takes on a file of its own there (a sandbox's
    /proc may list none; a FUSE filesystem may keep its locks to itself; a read-only one takes
    none): where it does, a database this process opened there shows DuckDB's lock, and a commit
    needs to see it."""
    try:
        device = os.stat(folder).st_dev
    except OSError:
        return False
    if device not in _LOCKS_SHOWN:
        _LOCKS_SHOWN[device] = _probe_locks(folder)
    return _LOCKS_SHOWN[device]


_LOCKS_SHOWN: dict[int, bool] = {}


def _probe_locks(folder: Path) -> bool:
    import fcntl
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=folder) as probe:
            fcntl.lockf(probe.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return _locked(probe.fileno())
    except OSError:
        return False


def _is_lock_error(exc: Exception) -> bool:
    text = str(exc)
    return "Could not set lock" in text or "Conflicting lock" in text


class DuckDBEngine(PostgresSpelling, Engine):
    name = "duckdb"
    wide_int = "HUGEINT"
    hold_during_runs = True  # opening the database costs ~15 ms; a second connection to it ~0.1 ms

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def describe(self) -> str:
        return str(self.path)

    def identity(self) -> str:
        try:
            stat = self.path.stat()
        except OSError:
            return f"{self.path}:absent"
        return f"{self.path}:{stat.st_dev}:{stat.st_ino}"

    def exists(self) -> bool:
        return self.path.exists()

    # --- taking turns with other processes ---------------------------------------------------------
    # DuckDB locks the whole file for one process, and a waiter only polls, so a process that opens
    # the file again right after closing it never lets a waiter in. A waiter leaves its pid in a
    # folder beside the file; a holder that keeps the file across steps looks there between them.

    @property
    def _waiting_folder(self) -> Path:
        return self.path.with_name(self.path.name + ".waiting")

    def _open_waiting_folder(self, create: bool) -> int | None:
        """A descriptor of the folder itself, never of what a symlink there points to: every mark is
        made, renewed, listed and removed through it, so swapping the folder for a symlink later
        leads no one elsewhere."""
        folder = self._waiting_folder
        try:
            if create:
                folder.mkdir(exist_ok=True)
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None  # absent, a symlink, or a read-only home: no marks (a waiter still waits)
        st = os.fstat(fd)
        if st.st_uid not in (os.geteuid(), 0) or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            # another account's folder (made while the home was shared): its marks would have a
            # holder let go of the file between every two steps, for nothing (found by an attack)
            os.close(fd)
            return None
        return fd

    def _mark_waiting(self, folder: int | None) -> int | None:
        """Leave (or renew: once a poll) this process's mark in the folder; returns the folder's
        descriptor, kept open while the process waits."""
        folder = folder if folder is not None else self._open_waiting_folder(create=True)
        if folder is None:
            return None
        try:
            # never blocks (a named pipe planted as the mark would), and only ever a regular file
            fd = os.open(str(os.getpid()), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, 0o644, dir_fd=folder)
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    os.utime(fd)
            finally:
                os.close(fd)
        except OSError:
            pass  # not a mark this time (a pipe without a reader, a full disk): the next poll tries again
        return folder

    def _unmark_waiting(self, folder: int) -> None:
        try:
            os.unlink(str(os.getpid()), dir_fd=folder)
            os.rmdir(self._waiting_folder)  # the last waiter leaves no folder behind (never a symlink)
        except OSError:
            pass  # another still waits (a later waiter makes the folder again)
        finally:
            os.close(folder)

    def waiters(self) -> list[int]:
        """Other live processes waiting for this file now: a mark renewed within the last few polls
        by a live process (a dead one's mark is removed; a stale one, planted or left, is ignored)."""
        folder = self._open_waiting_folder(create=False)
        if folder is None:
            return []
        found, now = [], time.time()
        try:
            for entry in os.scandir(folder):
                name = entry.name
                pid = int(name) if name.isascii() and name.isdigit() and len(name) <= 9 else 0
                if pid <= 0 or pid == os.getpid() or not entry.is_file(follow_symlinks=False):
                    continue
                if not pid_running(pid):
                    try:
                        os.unlink(name, dir_fd=folder)
                    except OSError:
                        pass
                elif abs(now - entry.stat(follow_symlinks=False).st_mtime) < MARK_FRESH_SECONDS:
                    found.append(pid)
        except OSError:
            return found
        finally:
            os.close(folder)
        return found

    def yield_to_waiters(self, patience: float = 2.0) -> bool:
        """Between two steps of a process that keeps the file (`kept_open`): when others wait for
        it, close it and give them up to `patience` seconds to take it (each then holds it for as
        long as its own work lasts; the next session here waits for it). False when none waits."""
        waiting = set(self.waiters())
        if not waiting:
            return False
        self.let_go()
        deadline = time.monotonic() + patience
        while waiting & set(self.waiters()) and time.monotonic() < deadline:
            time.sleep(0.02)
        return True

    def let_go(self) -> None:
        """Close the file now if only `kept_open` holds it (before a wait); the next session opens
        it again, and is kept again."""
        _drop_kept((os.getpid(), os.path.abspath(self.path)))

    @contextmanager
    def session(self, *, read_only: bool = False,
                wait_seconds: float | None = None) -> Iterator[DuckDBSession]:
        key = (os.getpid(), os.path.abspath(self.path))
        wait, threads, memory = lock_wait.seconds(wait_seconds), _threads(), _memory_mb()
        with _kept.lock:
            keeping = _kept.keeping
            kept = _kept.connections.get(key) if keeping else None
            if kept is not None and kept[1] and not read_only:  # kept read-only, wanted for writing
                _kept.drop(key)
                kept[0].close()
                kept = None
        catalog = CatalogMemo()
        if kept is not None:
            self._refuse_another_file(key)
            # joins the open database in the kept mode: DuckDB opens a file in one mode a process (a
            # session asked to read only still only reads)
            mode = kept[1]
            con = self._connect(mode, wait, threads, memory)
            with _kept.lock:
                # still kept (never closed: a kept connection is closed only once dropped): the
                # database stayed open from the memo's answers until now, and `con` holds it after
                if _kept.connections.get(key) is kept:
                    catalog = _kept.memos.setdefault(key, catalog)
        elif keeping and read_only and self.path.exists():
            # the command may write next: the database is loaded once, for writing, unless the file
            # cannot be written (a read-only home), where it is opened for reading as asked
            try:
                con, mode = self._connect(False, wait, threads, memory), False
            except LockWaitTimeout:
                raise
            except WarehouseError:
                con, mode = self._connect(True, wait, threads, memory), True
        else:
            mode = read_only
            con = self._connect(mode, wait, threads, memory)
        try:
            session = DuckDBSession(self, con, catalog)
            session.control_relations_plain()
            memo = session._memo()  # of the files this connection reaches (another file: a memo afresh)
            if memo.lock is None:
                memo.lock = _lock_of(self.path)
            yield session
        finally:
            try:
                lost = catalog.lock is not None and not catalog.lock.still_ours()
                with _kept.lock:
                    if _kept.keeping and key not in _kept.connections and not lost:
                        # a fresh connection to the same open database: none of this session's state
                        # but what it found in the catalog (`con` keeps the database open meanwhile)
                        _kept.connections[key] = (duckdb.connect(str(self.path), read_only=mode), mode)
                        _kept.memos[key] = catalog
                        # the file opened (its lock's, when seen), not whatever the path names as it ends
                        found = _identity(self.path)
                        _kept.files[key] = found if catalog.lock is None or found is None else \
                            (found[0], *catalog.lock.file)
            except duckdb.Error:
                pass  # a database DuckDB gave up on (a fatal error) is not kept; the session's error stands
            finally:
                con.close()

    def _refuse_another_file(self, key: tuple[int, str]) -> None:
        """The path still names the file the kept connection opened: renamed over or resolving
        elsewhere (a parent linked), DuckDB would join the kept instance on the old file or open a
        second one, whose close drops this process's lock while what the first remembered stays
        trusted (found by an attack). The kept connection goes, and the command stops."""
        with _kept.lock:
            held = _kept.files.get(key)
        if held is None or _identity(self.path) == held:
            return
        with _kept.lock:
            dropped = _kept.drop(key)
        if dropped is not None:
            dropped[0].close()
        raise WarehouseError(f"the warehouse path {self.path} names another file than the one this command holds "
                             "(renamed, replaced or linked meanwhile)",
                             fix="put the warehouse file back where it was, then run the command again")

    def _refuse_shared_folders(self) -> None:
        """The folder DuckDB makes its files in (the log, the spill folder `<file>.tmp`) can be written
        only by this account (or root), and no folder above it can be renamed by another: whoever
        else can write there can put a link (or a folder of links) where DuckDB writes, between our
        check and DuckDB's open (a `.wal` link planted 3 ms after a fresh open took the lease's
        release; a spill file's link emptied the head log, and a cancelled plan published; a team
        folder above the warehouse's let a member swap it for theirs mid-command; an ACL granted
        another account write behind a private group's bits: found by attacks), and no check of a
        path another writer controls can close that race. OpenSSH asks the same of a key's path.

        The folders above are walked again only a second later, or at once when the one right above
        changed (a chmod, an ACL: its ctime), not at every session: only this account or root can
        change any of them once the walk held."""
        folder = Path(os.path.realpath(self.path.parent))
        walked = _ANCESTORS_CHECKED.get(folder)
        above_changed = _ctime(folder.parent)
        if walked is None or walked[1] != above_changed or time.monotonic() - walked[0] >= 1.0:
            for above in folder.parents:
                why = _others_can_write(above, sticky_ok=True)
                if why:
                    raise WarehouseError(
                        f"{above}, above the warehouse's folder, {why}: another account could swap the warehouse's "
                        "folder for one of its own while DuckDB writes there", fix=_OWN_FOLDER_FIX)
            _ANCESTORS_CHECKED[folder] = (time.monotonic(), above_changed)
        spill = self.path.with_name(self.path.name + ".tmp")
        if os.path.islink(spill):
            raise WarehouseError(f"DuckDB's spill folder {spill} is a symbolic link: it would spill into the "
                                 "folder it names", fix=f"remove the link (`rm {spill}`): DuckDB makes the folder")
        for part, what in ((folder, "the warehouse's folder"), (spill, "DuckDB's spill folder")):
            why = _others_can_write(part, sticky_ok=False)
            if why:
                mine = "owned by uid" not in why
                raise WarehouseError(
                    f"{what} {part} {why}: DuckDB writes its log and spills there, and another account could "
                    "put a link where it writes", fix=(f"`chmod go-w {part}` (an ACL's write entries too: "
                                                       f"`setfacl -b {part}`), or " if mine else "") + _OWN_FOLDER_FIX)

    def _refuse_odd_files(self) -> None:
        """The database file and its write-ahead log are each a regular file or absent, never a link:
        DuckDB opens both for reading, and a named pipe there blocks this process for ever (at a
        commit, while it holds the file); it writes its log through a symlink to whatever file the
        link names (a planted `.wal` link overwrote a file of the service account's), and opens a
        linked database as a second instance beside a kept one, whose close drops this process's
        lock (found by an attack)."""
        for part, what in ((self.path, "the warehouse"), (self.path.with_name(self.path.name + ".wal"),
                                                           "the warehouse's write-ahead log")):
            fix = f"move it out of the way ({what} is a file DuckDB writes)"
            if os.path.islink(part):
                raise WarehouseError(f"{what} {part} is a symbolic link, not the file itself", fix=(
                    "replace the link with the file it names, or name that file: BACKFILL_WAREHOUSE_URL=duckdb:///PATH"
                    if part == self.path else "remove the link: DuckDB makes its log beside the warehouse"))
            refuse_non_regular(part, what, fix, WarehouseError)

    def _connect(self, read_only: bool, wait_seconds: float, threads: int,
                 memory_mb: int = 0) -> duckdb.DuckDBPyConnection:
        self._refuse_odd_files()
        if read_only and not self.path.exists():
            raise WarehouseError(f"no warehouse at {self.path}",
                                 fix="pass --home (or set BACKFILL_HOME) to the folder that holds it")
        made = not os.path.lexists(self.path.parent)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if made:  # writable by this account only, whatever the umask (002) or a setgid folder gave it
                os.chmod(self.path.parent, stat.S_IMODE(os.stat(self.path.parent).st_mode) & ~0o022)
        except OSError as exc:  # the home is a file, or under one
            raise WarehouseError(f"cannot create the warehouse folder {self.path.parent} ({exc.strerror})",
                                 fix="pass --home (or set BACKFILL_HOME) to a folder you can write") from None
        self._refuse_shared_folders()  # made or not (only its owner may change that: asked as it opens)
        waiting = lock_wait.Wait(str(self.path), wait_seconds)
        delay, marks = 0.02, None
        try:
            while True:
                try:
                    con = duckdb.connect(str(self.path), read_only=read_only)
                    if threads:  # a setting, not connect's config: other connections may join this database
                        con.execute(f"SET threads = {threads}")
                    if memory_mb:
                        con.execute(f"SET memory_limit = '{int(memory_mb)}MB'")
                    return con
                except duckdb.IOException as exc:
                    if not _is_lock_error(exc):
                        why = reason_of(str(exc))
                        raise WarehouseError(f"cannot open the warehouse {self.path}: "
                                             f"{str(exc).splitlines()[0]}",
                                             fix=fix_for(why, str(self.path.parent)) if why else "check the file"
                                             ) from None
                    waiting.still_waiting(lock_wait.holder_from_message(str(exc)))
                    marks = self._mark_waiting(marks)
                    time.sleep(delay)
                    delay = min(delay * 2, 0.5)
        finally:
            if marks is not None:
                self._unmark_waiting(marks)

    # --- dialect --------------------------------------------------------------------------------
    def text_of(self, expr: str) -> str:
        return f"CAST({expr} AS VARCHAR)"

    def value_text_sql(self, expr: str, column_type: str) -> str:
        if _OWN_TYPED.search(_QUOTED.sub("", column_type)):
            # a VARIANT's (DuckDB 2.0) or a UNION's value carries its own type, which its text drops:
            # 1 and '1', ['x'] and '[x]' read alike, so a value's type could change unseen (found by an
            # attack)
            raise WarehouseError(f"a column of type {column_type} cannot be fingerprinted: its values carry "
                                 "their own types, which their text drops (1 and '1' read alike)",
                                 fix="give the column a type of its own (cast it in the table's SQL and "
                                     "the contract)")
        family = type_family(column_type)
        if family == "float":
            double = f"CAST({expr} AS DOUBLE)"  # REAL widens exactly
            return (f"CASE WHEN isnan({double}) THEN 'NaN' "
                    f"ELSE printf('%016x', CAST(CAST({double} AS BIT) AS UBIGINT)) END")
        if family == "timestamptz":
            return self.text_of(f"timezone('UTC', {expr})")
        return self.text_of(expr)

    def row_digest_sql(self, text_sql: str) -> str:
        return f"sha256({text_sql})"

    def digest_of_rows_sql(self, row_digest: str) -> str:
        # hex sorts as the bytes do: '0'-'9' < 'a'-'f' under any collation of lowercase hex
        return f"sha256(unhex(coalesce(string_agg({row_digest}, '' ORDER BY {row_digest}), '')))"

    def transient_row_hash_sql(self, columns: Sequence[str], alias: str = "",
                               types: Sequence[str] | None = None) -> str:
        prefix = f"{alias}." if alias else ""
        exprs = [prefix + quote(c) for c in columns]
        if types is not None:
            # hash() follows equality, and DuckDB calls values of other bytes equal: INTERVAL '1 month'
            # and '30 days', -0.0 and 0.0, NaNs, and lists and structs of them. A replay that changed
            # only such a value, undeclared, hashed as unchanged and passed changes_as_expected (found
            # by an attack): those columns are hashed by their fingerprint text
            exprs = [e if _HASHES_ITS_BYTES.fullmatch(_normalised(t).split("(")[0]) else self.value_text_sql(e, t)
                     for e, t in zip(exprs, types, strict=True)]
        return f"hash({', '.join(exprs)})"

    def hash_int_sql(self, exprs: Sequence[str]) -> str:
        return f"CAST(hash({', '.join(exprs)}) % 9223372036854775807 AS BIGINT)"

    def temp_table_name(self, prefix: str) -> str:
        return f"temp.main.{prefix}_{uuid.uuid4().hex[:16]}"  # DuckDB's temporary catalog

    def rows_table_sql(self, rows: Sequence[Sequence[object]], columns: Sequence[str],
                       alias: str) -> tuple[str, list[object]]:
        # a list parameter a column, unnested side by side (in step, in list order): DuckDB binds
        # a VALUES list of a slice's 1,600 gate results (14,400 parameters) in ~150 ms, these in ~5
        lists: list[object] = [list(column) for column in zip(*rows, strict=True)] if rows else \
            [[] for _ in columns]
        return f"(SELECT {', '.join(f'UNNEST(?) AS {c}' for c in columns)}) AS {alias}", lists

    def table_exists(self, session: Session, table: str, schema: str | None = None) -> bool:
        return bool(session.scalar(
            "SELECT count(*) FROM information_schema.tables WHERE table_catalog = current_database() "
            f"AND {_folded_sql('table_schema')} = {_folded_sql('coalesce(?, current_schema())')} "
            f"AND {_folded_sql('table_name')} = {_folded_sql('?')}",
            [schema, table]))

    def relation_kind(self, session: Session, table: str, schema: str | None = None) -> str | None:
        assert isinstance(session, DuckDBSession)
        # the files of the databases this connection reaches, as DuckDB resolved their paths (the
        # system catalog by its full name, no function called: nothing a database holds answers it)
        memo = session._memo()
        if memo.shadowing is None:
            memo.shadowing = _shadowing(session)
        if memo.shadowing:
            return f"table in a database whose macro(s) {', '.join(sorted(memo.shadowing)[:3])} shadow built-ins"
        name = (None if schema is None else ascii_folded(schema), ascii_folded(table))
        if name in memo.plain_tables:
            return "table"
        # a VIRTUAL generated column is computed at each read, like a view's rows
        found = session.rows(
            "SELECT CASE WHEN EXISTS (SELECT 1 FROM system.main.duckdb_columns() AS c WHERE c.table_oid = t.table_oid "
            "AND c.is_generated) THEN 'table with computed columns' ELSE 'table' END, t.sql "
            "FROM system.main.duckdb_tables() AS t "
            "WHERE t.database_name = current_database() "
            f"AND {_folded_sql('t.schema_name')} = {_folded_sql('coalesce(?, current_schema())')} "
            f"AND {_folded_sql('t.table_name')} = {_folded_sql('?')} "
            "UNION ALL "
            "SELECT 'view', NULL FROM system.main.duckdb_views() WHERE database_name = current_database() "
            f"AND {_folded_sql('schema_name')} = {_folded_sql('coalesce(?, current_schema())')} "
            f"AND {_folded_sql('view_name')} = {_folded_sql('?')}",
            [schema, table, schema, table])
        kind = str(found[0][0]) if found else None
        if kind == "table" and _COLLATE.search(_QUOTED.sub("", str(found[0][1] or ""))):
            # a collation shows in no column's type (`duckdb_columns()` says VARCHAR), only in the
            # table's statement, yet every comparison, join and hash of the column honours it:
            # NOCASE put on a snapshot's key hid keys a replay upper-cased from changes_as_expected,
            # and it passed and was published (found by an attack)
            kind = "table with a collated column"
        if kind == "table":
            memo.plain_tables.add(name)  # an absent one may be created next: asked again
        return kind

    def table_columns(self, session: Session, table: str, schema: str | None = None) -> dict[str, str]:
        # duckdb_columns(), the function information_schema.columns is a view over: a quarter of
        # its cost (~1 ms), and every fingerprint reads it
        rows = session.rows(
            "SELECT column_name, data_type FROM duckdb_columns() "
            f"WHERE database_name = current_database() "
            f"AND {_folded_sql('schema_name')} = {_folded_sql('coalesce(?, current_schema())')} "
            f"AND {_folded_sql('table_name')} = {_folded_sql('?')} ORDER BY column_index", [schema, table])
        # keyed as the binder reads a column's name (the caller's ASCII names fold alike either way)
        return {ascii_folded(str(name)): _normalised(str(kind)) for name, kind in rows}

    def canonical_types(self, session: Session, types: Sequence[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        assert isinstance(session, DuckDBSession)
        # a separate cursor: a failed cast must not abort the caller's transaction
        cursor = session.con.cursor()
        try:
            for declared in dict.fromkeys(types):
                try:
                    found = cursor.execute(f"SELECT typeof(CAST(NULL AS {declared}))").fetchone()
                    assert found is not None  # a SELECT without FROM returns one row
                    out[declared] = _normalised(str(found[0]))
                except duckdb.Error:
                    out[declared] = _normalised(declared)  # unknown name: shows as a mismatch
        finally:
            cursor.close()
        return out


# types whose equal values have equal bytes (a collated VARCHAR is refused before any hash)
_HASHES_ITS_BYTES = re.compile(
    r"BOOLEAN|U?(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT)|DECIMAL|BIGNUM|VARCHAR|BLOB|BIT|UUID|DATE|TIME|"
    r"TIMESTAMP|TIMESTAMP_(S|MS|NS)|TIMESTAMP WITH TIME ZONE|TIME WITH TIME ZONE")


def _normalised(type_name: str) -> str:
    return " ".join(type_name.upper().replace(" (", "(").replace(", ", ",").split())

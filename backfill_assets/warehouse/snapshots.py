"""Pre-write snapshots as data: a copy of a partition's rows inside the warehouse (schema
`backfill_snapshots`, one table per plan and table), and putting those rows back.

Only the rows live here. Which snapshots a plan took, and their sealed fingerprints, are the
control record's (`control/snapshots.py`), which hands this module the fingerprints to restore to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from backfill_assets.errors import ForgedRecord, RollbackRefused
from backfill_assets.identifiers import qualified, quote
from backfill_assets.partitions import PartitionScheme
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.fingerprints import EMPTY, Fingerprint, fingerprints, fingerprints_like
from backfill_assets.warehouse.grouping import rows_per_partition
from backfill_assets.warehouse.partition_sql import many_predicate
from backfill_assets.warehouse.snapshot_tables import SNAPSHOT_SCHEMA, snapshot_in, snapshot_table

__all__ = ["SNAPSHOT_SCHEMA", "checked_copy", "copy_aside", "drop_checked_copy", "missing_rows", "put_back",
           "refill", "separate_reads", "session_copy", "snapshot_table"]


def copy_aside(session: Session, spec: TableSpec, scheme: PartitionScheme, table: str, plan_id: str,
               keys: Sequence[str]) -> dict[str, Fingerprint]:
    """Copy the current rows of `keys` into the plan's snapshot table; return their fingerprints.
    Inside the caller's transaction, before it changes those partitions."""
    name = snapshot_in(session, plan_id, table)
    snap = qualified(SNAPSHOT_SCHEMA, name)
    cols = ", ".join(quote(c) for c in spec.columns)
    if not session.engine.table_exists(session, name, SNAPSHOT_SCHEMA):
        # made by one writer at a time: two run workers' first writes of a table at once both made
        # it, and PostgreSQL failed the second once the first committed (`duplicate key value
        # violates unique constraint "pg_type_typname_nsp_index"`: found by an attack); the second,
        # let in then, finds it made
        session.lock(f"ddl:{snap}")
    session.execute(f"CREATE TABLE IF NOT EXISTS {snap} AS SELECT {cols} FROM {quote(table)} WHERE FALSE")
    before = fingerprints(session, table, spec.columns, scheme, spec.partition_column, keys)
    where, params = many_predicate(scheme, quote(spec.partition_column), keys)
    session.execute(f"INSERT INTO {snap} ({cols}) SELECT {cols} FROM {quote(table)} WHERE {where}",
                    params)
    # the rows set aside are the ones recorded as the transaction commits: its later writes (a
    # publish's copy) can run a table owner's code, as the product, which could edit the snapshot
    session.proven(lambda: _still_aside(session, spec, scheme, table, plan_id, before))
    return before


def _still_aside(session: Session, spec: TableSpec, scheme: PartitionScheme, table: str, plan_id: str,
                 before: Mapping[str, Fingerprint]) -> None:
    changed = changed_rows(session, spec, scheme, plan_id, table, before)
    if changed:
        first = next(iter(changed))
        raise ForgedRecord(f"the snapshot of {table} {first} changed before its transaction committed: code run by "
                           "a later write of it (a table owner's trigger, rule or cascading foreign key) edited "
                           f"{SNAPSHOT_SCHEMA}; nothing was committed",
                           fix="drop the triggers, rules and foreign keys on the tables backfill writes that change "
                               "other tables; then run the command again")


def missing_rows(session: Session, spec: TableSpec, scheme: PartitionScheme, plan_id: str, table: str,
                 recorded: Mapping[str, Fingerprint]) -> dict[str, str]:
    """The recorded snapshots whose rows are not all in the snapshot table, each with what is
    wrong (a rollback must refuse them)."""
    present = list(recorded)
    if not present:
        return {}
    name = snapshot_in(session, plan_id, table)
    if not session.engine.table_exists(session, name, SNAPSHOT_SCHEMA):
        return {k: f"snapshot table {SNAPSHOT_SCHEMA}.{name} is gone" for k in present if recorded[k].rows > 0}
    counts = rows_per_partition(session, name, spec.partition_column, scheme, present, SNAPSHOT_SCHEMA)
    return {k: f"snapshot holds {counts.get(k, 0)} row(s), {recorded[k].rows} were taken"
            for k in present if counts.get(k, 0) != recorded[k].rows}


def refill(session: Session, spec: TableSpec, scheme: PartitionScheme, plan_id: str, table: str, source: str,
           recorded: Mapping[str, Fingerprint], *, write: bool) -> list[str]:
    """The keys of `recorded` whose rows in `source` (the published copy) are exactly the rows
    taken, by their sealed fingerprints; with `write`, the snapshot's rows of those keys replaced by
    them, in the caller's transaction, refused unless the snapshot then holds exactly the rows taken."""
    if not recorded or not session.engine.table_exists(session, source):
        return []
    there = fingerprints_like(session, source, spec.columns, scheme, spec.partition_column, recorded)
    found = [k for k, taken in recorded.items() if there[k] == taken]
    if not write or not found:
        return found
    name = snapshot_in(session, plan_id, table)
    snap = qualified(SNAPSHOT_SCHEMA, name)
    cols = ", ".join(quote(c) for c in spec.columns)
    if not session.engine.table_exists(session, name, SNAPSHOT_SCHEMA):
        # made by one writer at a time: two run workers' first writes of a table at once both made
        # it, and PostgreSQL failed the second once the first committed (`duplicate key value
        # violates unique constraint "pg_type_typname_nsp_index"`: found by an attack); the second,
        # let in then, finds it made
        session.lock(f"ddl:{snap}")
    session.execute(f"CREATE TABLE IF NOT EXISTS {snap} AS SELECT {cols} FROM {quote(table)} WHERE FALSE")
    where, params = many_predicate(scheme, quote(spec.partition_column), found)
    session.execute(f"DELETE FROM {snap} WHERE {where}", params)
    session.execute(f"INSERT INTO {snap} ({cols}) SELECT {cols} FROM {quote(source)} WHERE {where}", params)
    changed = changed_rows(session, spec, scheme, plan_id, table, {k: recorded[k] for k in found})
    if changed:
        raise RollbackRefused(f"the snapshot of {table} {next(iter(changed))} does not hold the rows taken once "
                              f"copied from {source}: they changed as they were copied (code of a table's owner, a "
                              f"trigger on {SNAPSHOT_SCHEMA} or {source}, or an edit committed meanwhile)",
                              fix=f"nothing was changed; drop the triggers and rules on {SNAPSHOT_SCHEMA} and "
                                  f"{source}, then run the rollback again")
    return found


def changed_rows(session: Session, spec: TableSpec, scheme: PartitionScheme, plan_id: str, table: str,
                 recorded: Mapping[str, Fingerprint]) -> dict[str, tuple[Fingerprint, Fingerprint]]:
    """The snapshots whose rows are not those taken: {key: (now, taken)}, from one fingerprint pass
    over the snapshot table. A gate that compares data with a snapshot reads its rows, and those
    are as writable as any table's: the sealed record says what they were."""
    if not recorded:
        return {}
    name = snapshot_in(session, plan_id, table)
    if not session.engine.table_exists(session, name, SNAPSHOT_SCHEMA):  # none was ever needed if all were empty
        return {k: (EMPTY, taken) for k, taken in recorded.items() if taken.rows > 0}
    now = fingerprints_like(session, name, spec.columns, scheme, spec.partition_column, recorded, SNAPSHOT_SCHEMA)
    return {k: (now[k], taken) for k, taken in recorded.items() if now[k] != taken}


def checked_copy(session: Session, spec: TableSpec, scheme: PartitionScheme, plan_id: str, table: str,
                 recorded: Mapping[str, Fingerprint]) -> tuple[str | None, dict[str, tuple[Fingerprint, Fingerprint]]]:
    """The snapshots of `recorded` to compare with, and those whose rows are not the ones taken
    ({key: (now, taken)}). On a server engine another session commits between two statements: the
    snapshot checked by one statement and compared by the next was edited in between (the replayed
    values typed into it) and put back after, and `changes_as_expected` passed an undeclared change
    (found by an attack). There the rows are copied by one statement into a table of this session's
    own, which no one else can write, and checked there: the comparison reads that copy (its name is
    returned; `drop_checked_copy` once done). DuckDB's one writer holds the file: None, the snapshot
    table is read as checked."""
    name = snapshot_in(session, plan_id, table)
    if not separate_reads(session) or not recorded or not session.engine.table_exists(session, name, SNAPSHOT_SCHEMA):
        return None, changed_rows(session, spec, scheme, plan_id, table, recorded)
    copy, now = session_copy(session, spec, scheme, qualified(SNAPSHOT_SCHEMA, name), recorded)
    return copy, {k: (now[k], taken) for k, taken in recorded.items() if now[k] != taken}


def separate_reads(session: Session) -> bool:
    """Another session can commit between two statements of this one (a server engine): what one
    statement checked, the next must read from a copy of this session's own (`session_copy`)."""
    return session.engine.name != "duckdb"


def session_copy(session: Session, spec: TableSpec, scheme: PartitionScheme, source: str,
                 recorded: Mapping[str, Fingerprint]) -> tuple[str, dict[str, Fingerprint]]:
    """The rows of `recorded`'s keys in `source` (a quoted or qualified table) copied by one
    statement into a session-temporary table no other session can write, and their fingerprints
    there (by each record's algorithm): a comparison reading the copy reads the bytes fingerprinted.
    Its name (`drop_checked_copy` once done)."""
    copy = session.engine.temp_table_name(CHECKED_PREFIX)
    schema, _, bare = copy.rpartition(".")
    cols = ", ".join(quote(c) for c in spec.columns)
    session.execute(f"CREATE TEMP TABLE {copy} AS SELECT {cols} FROM {source} WHERE FALSE")
    where, params = many_predicate(scheme, quote(spec.partition_column), list(recorded))
    session.execute(f"INSERT INTO {copy} ({cols}) SELECT {cols} FROM {source} WHERE {where}", params)
    return copy, fingerprints_like(session, bare, spec.columns, scheme, spec.partition_column, recorded, schema)


def drop_checked_copy(session: Session, copy: str | None) -> None:
    if copy is not None:
        session.execute(f"DROP TABLE {copy}")


# the engine names the session-temporary copy; a write's staging prefix (`writes.STAGE_PREFIX`), the
# one temporary table a PostgreSQL session of the product may hold (`PostgresSession.unaltered`)
CHECKED_PREFIX = "backfill_stage_snapshot"


def put_back(session: Session, spec: TableSpec, scheme: PartitionScheme, table: str, plan_id: str,
             expected: Mapping[str, Fingerprint]) -> dict[str, tuple[Fingerprint, Fingerprint]]:
    """Put the snapshotted rows of `expected`'s keys back; return {key: (expected, restored)}.
    In a transaction; refuses (and so rolls back) unless every key comes back exactly."""
    keys = list(expected)
    name = snapshot_in(session, plan_id, table)
    snap = qualified(SNAPSHOT_SCHEMA, name)
    cols = ", ".join(quote(c) for c in spec.columns)
    where, params = many_predicate(scheme, quote(spec.partition_column), keys)
    session.execute(f"DELETE FROM {quote(table)} WHERE {where}", params)
    if session.engine.table_exists(session, name, SNAPSHOT_SCHEMA):
        session.execute(f"INSERT INTO {quote(table)} ({cols}) SELECT {cols} FROM {snap} WHERE {where}",
                        params)
    # by the algorithm of each record: a snapshot taken before the upgrade holds a legacy digest
    def prove(when: str) -> dict[str, tuple[Fingerprint, Fingerprint]]:
        restored = fingerprints_like(session, table, spec.columns, scheme, spec.partition_column, expected)
        result = {k: (expected[k], restored[k]) for k in keys}
        bad = [k for k, (want, got) in result.items() if want != got]
        if bad:
            raise RollbackRefused(f"restored fingerprints of {table} differ for {', '.join(bad)}{when}",
                                  fix="nothing was changed; inspect backfill_snapshots (and the triggers on the "
                                      "tables the rollback writes) before retrying")
        return result

    result = prove("")
    session.proven(lambda: prove(" as the rollback was committing: a later write of it (of another table) "
                                 "changed it"))
    return result

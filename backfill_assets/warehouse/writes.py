"""Partition writes by mode. Each runs inside the caller's transaction, so a crash at any point
leaves the old partition or the new one, never half.

- overwrite: delete the partition, insert the recomputation.
- merge: upsert on the business keys (rows the recomputation no longer yields are kept).
- replay: insert only the rows whose event id (or business keys) is absent, so a second replay
  adds nothing.
"""

from __future__ import annotations

from backfill_assets.errors import WriteRefused
from backfill_assets.partitions import PartitionScheme
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.identifiers import quote

MODES = ("overwrite", "merge", "replay")
STAGE = "backfill_stage"


def ensure_table(session: Session, spec: TableSpec, table: str | None = None) -> None:
    session.execute(spec.create_sql(table))


def _stage(session: Session, spec: TableSpec, scheme: PartitionScheme, key: str) -> None:
    """Materialize the recomputation once into a temp table (the source is read once per write)."""
    cols = ", ".join(quote(c) for c in spec.columns)
    session.execute(f"DROP TABLE IF EXISTS {STAGE}")
    # typed like the target, then filled: CREATE TABLE AS cannot take parameters on every engine
    session.execute(f"CREATE TEMP TABLE {STAGE} AS SELECT {cols} FROM {quote(spec.table)} WHERE FALSE")
    sql = session.engine.named(spec.select_sql)
    session.execute(f"INSERT INTO {STAGE} ({cols}) SELECT {cols} FROM ({sql}) AS s",
                    scheme.params_for(spec.select_sql, key))


def write_partition(session: Session, spec: TableSpec, scheme: PartitionScheme, key: str, mode: str,
                    *, allow_empty: bool = False) -> int:
    """Write one partition by `mode`; return the rows the recomputation yielded."""
    if mode not in MODES:
        raise WriteRefused(f"unknown write mode {mode!r}", fix=f"use one of {', '.join(MODES)}")
    _stage(session, spec, scheme, key)
    target, part = quote(spec.table), quote(spec.partition_column)
    inside = scheme.predicate(part)
    bound = scheme.predicate_params(key)
    staged, stray = session.one(
        f"SELECT count(*), count(*) FILTER (WHERE {part} IS NULL OR NOT {inside}) FROM {STAGE}", bound)
    if stray:
        # a row for another partition would land where no snapshot was taken
        raise WriteRefused(
            f"the recomputation of {spec.name} partition {key} yielded {stray} row(s) whose "
            f"{spec.partition_column} is outside {key}",
            fix="make select_sql filter on $partition and return it as the partition column")
    if staged == 0 and not allow_empty:
        existing = session.scalar(f"SELECT count(*) FROM {target} WHERE {inside}", bound)
        if existing:
            raise WriteRefused(
                f"the recomputation of {spec.name} partition {key} yielded no rows where {existing} "
                "exist", fix="check the source for that partition, or set "
                "execution.allow_empty_partitions: true in the plan if it is really empty")
    cols = ", ".join(quote(c) for c in spec.columns)
    if mode == "overwrite":
        session.execute(f"DELETE FROM {target} WHERE {inside}", bound)
        session.execute(f"INSERT INTO {target} ({cols}) SELECT {cols} FROM {STAGE}")
    elif mode == "merge":
        # delete what the recomputation replaces, inside this partition only, then insert it
        match = " AND ".join(f"t.{quote(k)} IS NOT DISTINCT FROM s.{quote(k)}" for k in spec.business_keys)
        session.execute(f"DELETE FROM {target} AS t WHERE {scheme.predicate('t.' + part)} AND EXISTS "
                        f"(SELECT 1 FROM {STAGE} AS s WHERE {match})", bound)
        session.execute(f"INSERT INTO {target} ({cols}) SELECT {cols} FROM {STAGE}")
    else:
        keys = (spec.event_id_column,) if spec.event_id_column else spec.business_keys
        match = " AND ".join(f"t.{quote(k)} IS NOT DISTINCT FROM s.{quote(k)}" for k in keys)
        session.execute(
            f"INSERT INTO {target} ({cols}) SELECT {cols} FROM {STAGE} AS s WHERE NOT EXISTS "
            f"(SELECT 1 FROM {target} AS t WHERE {scheme.predicate('t.' + part)} AND {match})", bound)
    session.execute(f"DROP TABLE IF EXISTS {STAGE}")
    return staged

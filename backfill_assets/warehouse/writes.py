"""Partition writes by mode. Each runs inside the caller's transaction, so a crash at any point
leaves the old partition or the new one, never half.

- overwrite: delete the partition, insert the recomputation.
- merge: upsert on the business keys (rows the recomputation no longer yields are kept).
- replay: insert only the rows whose event id is not there yet, so a second replay adds nothing.
"""

from __future__ import annotations

import duckdb

from backfill_assets.errors import WriteRefused
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.fingerprints import as_date
from backfill_assets.warehouse.identifiers import quote

MODES = ("overwrite", "merge", "replay")


def ensure_table(con: duckdb.DuckDBPyConnection, spec: TableSpec, table: str | None = None) -> None:
    con.execute(spec.create_sql(table))


def _stage(con: duckdb.DuckDBPyConnection, spec: TableSpec, partition_key: str) -> int:
    """Materialize the recomputation once into a temp table (the source is read once per write)."""
    con.execute("DROP TABLE IF EXISTS backfill_stage")
    cols = ", ".join(quote(c) for c in spec.columns)
    con.execute(f"CREATE TEMP TABLE backfill_stage AS SELECT {cols} FROM ({spec.select_sql}) AS s",
                {"partition": as_date(partition_key)})
    return con.execute("SELECT count(*) FROM backfill_stage").fetchone()[0]


def _existing(con: duckdb.DuckDBPyConnection, spec: TableSpec, partition_key: str) -> int:
    return con.execute(f"SELECT count(*) FROM {quote(spec.table)} WHERE "
                       f"{quote(spec.partition_column)} = ?", [as_date(partition_key)]).fetchone()[0]


def write_partition(con: duckdb.DuckDBPyConnection, spec: TableSpec, partition_key: str, mode: str,
                    *, allow_empty: bool = False) -> int:
    """Write one partition by `mode`; return the rows the recomputation yielded."""
    if mode not in MODES:
        raise WriteRefused(f"unknown write mode {mode!r}", fix=f"use one of {', '.join(MODES)}")
    staged = _stage(con, spec, partition_key)
    target, part = quote(spec.table), quote(spec.partition_column)
    key = as_date(partition_key)
    stray = con.execute(f"SELECT count(*) FROM backfill_stage WHERE {part} IS DISTINCT FROM ?",
                        [key]).fetchone()[0]
    if stray:
        # a row for another day would land in a partition that was never snapshotted
        raise WriteRefused(
            f"the recomputation of {spec.name} partition {partition_key} yielded {stray} row(s) "
            f"whose {spec.partition_column} is not {partition_key}",
            fix="make select_sql filter on $partition and return it as the partition column")
    if staged == 0 and not allow_empty:
        existing = _existing(con, spec, partition_key)
        if existing:
            raise WriteRefused(
                f"the recomputation of {spec.name} partition {partition_key} yielded no rows where "
                f"{existing} exist", fix="check the source for that day, or set "
                "execution.allow_empty_partitions: true in the plan if the day is really empty")
    cols = ", ".join(quote(c) for c in spec.columns)
    if mode == "overwrite":
        con.execute(f"DELETE FROM {target} WHERE {part} = ?", [key])
        con.execute(f"INSERT INTO {target} ({cols}) SELECT {cols} FROM backfill_stage")
    elif mode == "merge":
        # the partition filter keeps the upsert inside its partition whatever the business keys
        match = " AND ".join([f"t.{part} = ?"] + [f"t.{quote(k)} IS NOT DISTINCT FROM s.{quote(k)}"
                                                  for k in spec.business_keys])
        updates = ", ".join(f"{quote(c)} = s.{quote(c)}" for c in spec.columns
                            if c not in spec.business_keys)
        values = ", ".join("s." + quote(c) for c in spec.columns)
        con.execute(
            f"MERGE INTO {target} AS t USING backfill_stage AS s ON {match} "
            + (f"WHEN MATCHED THEN UPDATE SET {updates} " if updates else "")
            + f"WHEN NOT MATCHED THEN INSERT ({cols}) VALUES ({values})",
            [key],
        )
    else:
        keys = (spec.event_id_column,) if spec.event_id_column else spec.business_keys
        match = " AND ".join(f"t.{quote(k)} IS NOT DISTINCT FROM s.{quote(k)}" for k in keys)
        con.execute(
            f"INSERT INTO {target} ({cols}) SELECT {cols} FROM backfill_stage AS s "
            f"WHERE NOT EXISTS (SELECT 1 FROM {target} AS t WHERE t.{part} = ? AND {match})",
            [key],
        )
    con.execute("DROP TABLE IF EXISTS backfill_stage")
    return staged

"""The workload of benchmarks/backfill_peers.py, in plain SQL every tool runs: TPC-H `lineitem` into a
daily pricing summary (TPC-H Q1's figures per ship day, return flag and line status).

Standard library only: the peers' venvs import this file too. Every tool writes the same columns
with the same types (the casts are part of the SQL), so one order-independent aggregate over the
window (`CHECK_SQL`) says whether two tools produced the same rows.
"""

from __future__ import annotations

TABLE = "daily_pricing"
SOURCE = "lineitem"
KEYS = ("l_shipdate", "l_returnflag", "l_linestatus")

#: the target's columns and types, in order (sums keep TPC-H's scales; averages are DOUBLE, as Q1's)
COLUMNS = (
    ("l_shipdate", "DATE"),
    ("l_returnflag", "VARCHAR"),
    ("l_linestatus", "VARCHAR"),
    ("sum_qty", "DECIMAL(18,2)"),
    ("sum_base_price", "DECIMAL(18,2)"),
    ("sum_disc_price", "DECIMAL(18,4)"),
    ("sum_charge", "DECIMAL(18,6)"),
    ("avg_qty", "DOUBLE"),
    ("avg_price", "DOUBLE"),
    ("avg_disc", "DOUBLE"),
    ("count_order", "BIGINT"),
)

_FIGURES = """
       CAST(sum(l_quantity) AS DECIMAL(18,2)) AS sum_qty,
       CAST(sum(l_extendedprice) AS DECIMAL(18,2)) AS sum_base_price,
       CAST(sum(l_extendedprice * (1 - l_discount)) AS DECIMAL(18,4)) AS sum_disc_price,
       CAST(sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS DECIMAL(18,6)) AS sum_charge,
       CAST(avg(l_quantity) AS DOUBLE) AS avg_qty,
       CAST(avg(l_extendedprice) AS DOUBLE) AS avg_price,
       CAST(avg({disc}) AS DOUBLE) AS avg_disc,
       count(*) AS count_order"""

#: the released bug the replay fixes (this project's history only): avg_disc averaged the tax
BUGGY_DISC, FIXED_DISC = "l_tax", "l_discount"


def select_sql(where: str, *, source: str = SOURCE, disc: str = FIXED_DISC) -> str:
    """The summary's SELECT over `source` rows matching `where` (each tool's own placeholders)."""
    return (f"SELECT l_shipdate, l_returnflag, l_linestatus,{_FIGURES.format(disc=disc)}\n"
            f"FROM {source}\nWHERE {where}\nGROUP BY l_shipdate, l_returnflag, l_linestatus\n")


def create_sql(table: str = TABLE) -> str:
    return f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(f'{c} {t}' for c, t in COLUMNS)})"


def _row_text(alias: str) -> str:
    parts = []
    for column, kind in COLUMNS:
        ref = f"{alias}.{column}"
        # a DOUBLE average is compared at 6 decimals: engines may differ in the last bits
        parts.append(f"CAST(CAST({ref} AS DECIMAL(18,6)) AS VARCHAR)" if kind == "DOUBLE"
                     else f"CAST({ref} AS VARCHAR)")
    return f"concat_ws('|', {', '.join(parts)})"


def check_sql(relation: str, start: str, end: str) -> str:
    """One row, independent of row order and storage: rows, partitions, the exact sums, and the sum
    of 48 bits of each row's md5 (same on DuckDB 1.5 and 2.0); window [start, end] inclusive."""
    return (f"SELECT count(*) AS rows, count(DISTINCT t.l_shipdate) AS partitions, "
            f"CAST(sum(t.sum_qty) AS VARCHAR) AS sum_qty, CAST(sum(t.sum_charge) AS VARCHAR) AS sum_charge, "
            f"CAST(sum(t.count_order) AS VARCHAR) AS count_order, "
            f"CAST(sum(CAST(('0x' || left(md5({_row_text('t')}), 12)) AS BIGINT)) AS VARCHAR) AS row_md5_sum "
            f"FROM {relation} AS t WHERE t.l_shipdate BETWEEN DATE '{start}' AND DATE '{end}'")


CHECK_COLUMNS = ("rows", "partitions", "sum_qty", "sum_charge", "count_order", "row_md5_sum")


def check(con, relation: str, start: str, end: str) -> dict[str, str]:
    """`check_sql` on a DB-API connection (any DuckDB version), as text values."""
    row = con.execute(check_sql(relation, start, end)).fetchone()
    return {k: str(v) for k, v in zip(CHECK_COLUMNS, row, strict=True)}


if __name__ == "__main__":  # <venv>/bin/python tpch.py DB RELATION START END: the check, as JSON
    import json
    import sys

    import duckdb

    db, relation, first, last = sys.argv[1:5]
    with duckdb.connect(db, read_only=True) as connection:
        print(json.dumps(check(connection, relation, first, last)))

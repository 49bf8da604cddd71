"""Loading the benchmark's Parquet copies into a tool's own DuckDB file, shared by the peer runners
(each runs in its own venv with this folder on its path; only duckdb is needed)."""

from __future__ import annotations

import os
import time

import duckdb


def load(db_path: str, parquet_dir: str, tables: list[str]) -> float:
    """Create `db_path` with the tables from Parquet, once (atomically: build, then rename)."""
    if os.path.exists(db_path):
        return 0.0
    started = time.perf_counter()
    tmp = db_path + ".tmp"
    for leftover in (tmp, tmp + ".wal"):
        if os.path.exists(leftover):
            os.remove(leftover)
    with duckdb.connect(tmp) as con:
        for table in tables:
            con.execute(f'CREATE TABLE "{table}" AS SELECT * FROM read_parquet(?)',
                        [os.path.join(parquet_dir, table + ".parquet")])
        con.execute("CHECKPOINT")
    os.replace(tmp, db_path)
    return time.perf_counter() - started

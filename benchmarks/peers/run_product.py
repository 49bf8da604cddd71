"""`backfill diff`'s engine function in its own process, measured the way each peer is.

Runs with the project's own venv (.venv/bin/python), like a `backfill diff` command would: imports,
loads the Parquet copies into its own DuckDB file once, warms DuckDB's buffers with one scan of
both tables, then times one `backfill_assets.impact.compare` (a native hash per partition on both
sides, then one statement over the changed partitions: rows grouped by row hash, then only the keys
of the rows that differ). Prints one JSON object, as the peers do.
The same function also runs inside diff_peers.py's own process; this copy keeps it away from the
other in-process tools' memory (their multi-second queries), so the two figures bracket it.
"""

from __future__ import annotations

import time

_t0 = time.perf_counter()
import argparse  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import dagster as dg  # noqa: E402
import duckdb  # noqa: E402

from backfill_assets.impact import compare  # noqa: E402
from backfill_assets.partitions import scheme_for  # noqa: E402
from backfill_assets.table import Column, Metric, TableSpec  # noqa: E402
from backfill_assets.warehouse.duckdb_engine import DuckDBEngine, DuckDBSession  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parquet_db import load  # noqa: E402

IMPORT_SECONDS = time.perf_counter() - _t0


def spec_for(a: str, b: str, keys: list[str], partition: str) -> TableSpec:
    return TableSpec(name=b, source=a, publish_as=f"{b}_published", select_sql="SELECT 1",
                     partition_column=partition, source_partition_column=partition, business_keys=tuple(keys),
                     contract=(Column("event_date", "DATE"), Column("customer_id", "BIGINT"),
                               Column("category", "VARCHAR"), Column("amount", "DECIMAL(18,2)"),
                               Column("orders", "BIGINT")),
                     metrics=(Metric("amount", "sum(amount)", "sum(amount)"),))


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--parquet-dir", "--db", "--a", "--b", "--keys", "--values", "--partition", "--start"):
        parser.add_argument(name, required=True)
    parser.add_argument("--load", default="")
    parser.add_argument("--days", type=int, required=True)
    args = parser.parse_args()
    keys, values = args.keys.split(","), args.values.split(",")
    load_seconds = load(args.db, args.parquet_dir, (args.load or f"{args.a},{args.b}").split(","))
    start = dt.date.fromisoformat(args.start)
    scheme = scheme_for(dg.DailyPartitionsDefinition(start_date=args.start), "DATE", name=args.b)
    days = [(start + dt.timedelta(days=i)).isoformat() for i in range(args.days)]
    spec = spec_for(args.a, args.b, keys, args.partition)

    con = duckdb.connect(args.db, read_only=True)
    started = time.perf_counter()
    cols = ", ".join(f'sum(hash("{c}"))' for c in keys + values)  # reads every column (max() comes from statistics)
    for table in (args.a, args.b):
        con.execute(f'SELECT count(*), {cols} FROM "{table}"').fetchall()
    warm_seconds = time.perf_counter() - started

    started = time.perf_counter()
    found = compare(DuckDBSession(DuckDBEngine(args.db), con), spec, scheme, f'"{args.a}"', days, top=1)
    diff_seconds = time.perf_counter() - started
    print(json.dumps({
        "tool": "backfill diff, own process",
        "versions": {"duckdb": duckdb.__version__, "python": sys.version.split()[0]},
        "import_seconds": IMPORT_SECONDS, "load_seconds": load_seconds, "warm_seconds": warm_seconds,
        "diff_seconds": diff_seconds,
        "result": {p.partition: [p.added, p.removed, p.changed] for p in found if not p.unchanged},
    }))


if __name__ == "__main__":
    main()

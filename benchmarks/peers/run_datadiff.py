"""data-diff (joindiff) peer for benchmarks/diff_peers.py. Runs inside benchmarks/.venv-datadiff.

    .venv-datadiff/bin/python run_datadiff.py --parquet-dir D --db F --a a --b b \
        --keys event_date,customer_id,category --values amount,orders --partition event_date

Loads the Parquet copies into its own DuckDB file once (data-diff's DuckDB may differ from the
project's), warms DuckDB's buffers with one scan of both tables, then times one joindiff (the
`diff_tables(..., algorithm=JOINDIFF)` call and iterating its rows; data-diff's defaults, so its
duplicate-key and NULL-key checks and per-table statistics run too). The rows ('-', row) /
('+', row) are counted per partition: a key with both a '-' and a '+' row is changed.
Prints one JSON object: timings (import, load, warm-up, diff), versions, result.
Anonymous usage tracking of data-diff is disabled before anything runs.
"""

from __future__ import annotations

import time

_t0 = time.perf_counter()
import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from importlib.metadata import version  # noqa: E402

import duckdb  # noqa: E402
from data_diff import Algorithm, TableSegment, diff_tables, disable_tracking  # noqa: E402
from data_diff.databases._connect import connect  # noqa: E402
from parquet_db import load  # noqa: E402  (this folder is on the path: the script's own)

IMPORT_SECONDS = time.perf_counter() - _t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parquet-dir", required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--load", default="", help="comma-separated tables to load from Parquet")
    parser.add_argument("--a", required=True)
    parser.add_argument("--b", required=True)
    parser.add_argument("--keys", required=True)
    parser.add_argument("--values", required=True)
    parser.add_argument("--partition", required=True)
    args = parser.parse_args()
    keys, values = args.keys.split(","), args.values.split(",")
    if args.partition not in keys:
        sys.exit("the partition column must be one of the keys")
    pidx = keys.index(args.partition)
    disable_tracking()

    load_seconds = load(args.db, args.parquet_dir, (args.load or f"{args.a},{args.b}").split(","))

    started = time.perf_counter()
    db = connect(f"duckdb://main@{args.db}")
    cols = ", ".join(f'sum(hash("{c}"))' for c in keys + values)  # reads every column (max() comes from statistics)
    for table in (args.a, args.b):
        db.query(f'SELECT count(*), {cols} FROM "{table}"')
    warm_seconds = time.perf_counter() - started

    started = time.perf_counter()
    t1 = TableSegment(db, (args.a,), tuple(keys), extra_columns=tuple(values))
    t2 = TableSegment(db, (args.b,), tuple(keys), extra_columns=tuple(values))
    rows = list(diff_tables(t1, t2, algorithm=Algorithm.JOINDIFF))
    diff_seconds = time.perf_counter() - started

    # Rows are normalised strings; the key is the first len(keys) values.
    signs: dict[tuple, set[str]] = {}
    for sign, row in rows:
        signs.setdefault(tuple(row[: len(keys)]), set()).add(sign)
    per_partition: dict[str, list[int]] = {}
    for key, seen in signs.items():
        part = str(key[pidx])[:10]  # a DATE key normalises to 'YYYY-MM-DD...'
        counts = per_partition.setdefault(part, [0, 0, 0])
        counts[2 if len(seen) == 2 else (0 if seen == {"+"} else 1)] += 1
    print(json.dumps({
        "tool": "data-diff joindiff",
        "versions": {"data-diff": version("data-diff"), "dbt-core": version("dbt-core"),
                     "duckdb": duckdb.__version__, "python": sys.version.split()[0]},
        "import_seconds": IMPORT_SECONDS, "load_seconds": load_seconds, "warm_seconds": warm_seconds,
        "diff_seconds": diff_seconds, "diff_rows": len(rows),
        "result": {p: c for p, c in sorted(per_partition.items())},
    }))


if __name__ == "__main__":
    main()

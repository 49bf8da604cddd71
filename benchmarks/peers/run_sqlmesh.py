"""SQLMesh `table_diff` peer for benchmarks/diff_peers.py. Runs inside benchmarks/.venv-sqlmesh.

    .venv-sqlmesh/bin/python run_sqlmesh.py --parquet-dir D --db F --a a --b b \
        --keys event_date,customer_id,category --values amount,orders --partition event_date

In-process: a `Context` with one DuckDB gateway on a DuckDB file of its own (SQLMesh needs
duckdb < 2, whose storage may differ from the project's), loaded once from the Parquet copies;
SQLMesh's state goes to a separate DuckDB file beside it. After a warm-up scan of both tables,
times `Context.table_diff(a, b, on=keys, show=False, limit=...)` plus `.row_diff()` (SQLMesh's
defaults otherwise: grain check on, decimals=3). `limit` is raised so the samples hold every
differing row: source-only rows are removed, target-only rows added, joined rows that do not
fully match changed; they are counted per partition. Prints one JSON object.
"""

from __future__ import annotations

import time

_t0 = time.perf_counter()
import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from importlib.metadata import version  # noqa: E402

import duckdb  # noqa: E402
from parquet_db import load  # noqa: E402  (this folder is on the path: the script's own)
from sqlmesh.core.config import Config, DuckDBConnectionConfig, GatewayConfig, ModelDefaultsConfig  # noqa: E402
from sqlmesh.core.context import Context  # noqa: E402

IMPORT_SECONDS = time.perf_counter() - _t0
SAMPLE_LIMIT = 1_000_000


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

    load_seconds = load(args.db, args.parquet_dir, (args.load or f"{args.a},{args.b}").split(","))

    started = time.perf_counter()
    project = tempfile.mkdtemp(prefix="sqlmesh-project-", dir=os.path.dirname(os.path.abspath(args.db)))
    config = Config(
        gateways={"local": GatewayConfig(
            connection=DuckDBConnectionConfig(database=args.db),
            state_connection=DuckDBConnectionConfig(database=os.path.join(project, "state.duckdb")))},
        default_gateway="local",
        model_defaults=ModelDefaultsConfig(dialect="duckdb"),
    )
    context = Context(paths=project, config=config)
    context_seconds = time.perf_counter() - started

    started = time.perf_counter()
    cols = ", ".join(f'sum(hash("{c}"))' for c in keys + values)  # reads every column (max() comes from statistics)
    for table in (args.a, args.b):
        context.engine_adapter.fetchall(f'SELECT count(*), {cols} FROM "{table}"')
    warm_seconds = time.perf_counter() - started

    started = time.perf_counter()
    diffs = context.table_diff(f"main.{args.a}", f"main.{args.b}", on=keys, show=False,
                               limit=SAMPLE_LIMIT)
    row_diff = diffs[0].row_diff()
    diff_seconds = time.perf_counter() - started

    context.close()
    shutil.rmtree(project, ignore_errors=True)

    per_partition: dict[str, list[int]] = {}

    def count(frame, slot: int) -> None:
        for value in frame[args.partition]:
            per_partition.setdefault(str(value)[:10], [0, 0, 0])[slot] += 1

    count(row_diff.t_sample, 0)  # only in target (b): added
    count(row_diff.s_sample, 1)  # only in source (a): removed
    count(row_diff.joined_sample, 2)  # in both, some column differs: changed
    complete = (len(row_diff.t_sample) == row_diff.t_only_count
                and len(row_diff.s_sample) == row_diff.s_only_count
                and len(row_diff.joined_sample) == row_diff.partial_match_count)
    print(json.dumps({
        "tool": "SQLMesh table_diff",
        "versions": {"sqlmesh": version("sqlmesh"), "sqlglot": version("sqlglot"),
                     "duckdb": duckdb.__version__, "python": sys.version.split()[0]},
        "import_seconds": IMPORT_SECONDS, "load_seconds": load_seconds,
        "context_seconds": context_seconds, "warm_seconds": warm_seconds,
        "diff_seconds": diff_seconds, "samples_complete": complete,
        "stats": {"s_only": row_diff.s_only_count, "t_only": row_diff.t_only_count,
                  "partial_match": row_diff.partial_match_count},
        "result": {p: c for p, c in sorted(per_partition.items())},
    }))


if __name__ == "__main__":
    main()

"""What the reconciliation gates cost next to recomputing the window they check.

    .venv/bin/python benchmarks/gates_vs_recompute.py [--rows 10000000 --days 30 --rounds 5]

Builds a temporary DuckDB file of order events (generate_orders), materializes daily_revenue once,
then times, interleaved over several rounds (medians, since the machine is shared and noisy):
  (a) recomputing the window the way the framework writes: per partition, DELETE + INSERT of
      select_sql in one transaction;
  (b) every gate for the window with the metrics the demo plan checks (orders, gross, refunds,
      net_revenue), once per gate strategy of evaluate_slice (auto is the default);
  (c) the same plus the `customers` metric, a COUNT(DISTINCT) over the source;
  (d) a bare scan `count(*), sum(amount)` of the window's orders, for reference.
The goal is gates <= 0.4x recomputation.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backfill_assets.gates.results import Thresholds, all_passed  # noqa: E402
from backfill_assets.sample import generate_orders  # noqa: E402
from backfill_assets.warehouse.connection import transaction  # noqa: E402
from backfill_assets.warehouse.gate_sql import STRATEGIES, evaluate_slice  # noqa: E402
from backfill_assets.warehouse.identifiers import quote  # noqa: E402
from examples.revenue import DAILY_REVENUE  # noqa: E402

START = dt.date(2026, 1, 1)
DEMO_METRICS = {"orders": 0.0, "gross": 0.01, "refunds": 0.01, "net_revenue": 0.01}


def recompute(con: duckdb.DuckDBPyConnection, days: list[dt.date]) -> None:
    spec = DAILY_REVENUE
    delete = f"DELETE FROM {quote(spec.table)} WHERE {quote(spec.partition_column)} = ?"
    insert = f"INSERT INTO {quote(spec.table)} SELECT * FROM ({spec.select_sql})"
    for day in days:
        with transaction(con):
            con.execute(delete, [day])
            con.execute(insert, {"partition": day})


def gates(con: duckdb.DuckDBPyConnection, keys: list[str], thresholds: Thresholds,
          strategy: str) -> None:
    results = evaluate_slice(con, DAILY_REVENUE, keys, thresholds, strategy=strategy)
    if not all_passed(results):
        raise SystemExit(f"gates failed on clean data ({strategy}): the benchmark is wrong")


def bare_scan(con: duckdb.DuckDBPyConnection, days: list[dt.date]) -> None:
    con.execute("SELECT count(*), sum(amount) FROM orders WHERE order_date BETWEEN ? AND ?",
                [days[0], days[-1]]).fetchall()


def build(path: Path, rows: int, n_days: int) -> list[dt.date]:
    days = [START + dt.timedelta(days=i) for i in range(n_days)]
    with duckdb.connect(str(path)) as con:
        t0 = time.perf_counter()
        generate_orders(con, start=START, days=n_days, rows_per_day=max(1, rows // n_days))
        con.execute(DAILY_REVENUE.create_sql())
        recompute(con, days)
        con.execute("CHECKPOINT")
        n_orders, n_target = con.execute(
            "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM daily_revenue)").fetchone()
        print(f"built {n_orders:,} orders / {n_target:,} daily_revenue rows over {n_days} days "
              f"in {time.perf_counter() - t0:.1f} s ({path})")
    return days


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="order events in total")
    parser.add_argument("--days", type=int, default=30, help="daily partitions in the window")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median)")
    parser.add_argument("--threads", type=int, default=0, help="DuckDB threads (0: DuckDB default)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="gates-bench-") as tmp:
        path = Path(tmp) / "bench.duckdb"
        days = build(path, args.rows, args.days)
        keys = [d.isoformat() for d in days]
        demo = Thresholds(0, 0, DEMO_METRICS)
        with_customers = Thresholds(0, 0, {**DEMO_METRICS, "customers": 0.0})

        ops: dict[str, Callable[[duckdb.DuckDBPyConnection], None]] = {
            "(a) recompute window (DELETE+INSERT per partition)": lambda c: recompute(c, days)}
        for strategy in STRATEGIES:
            ops[f"(b) gates, demo metrics [{strategy}]"] = (
                lambda c, s=strategy: gates(c, keys, demo, s))
        for strategy in STRATEGIES:
            ops[f"(c) gates + customers COUNT(DISTINCT) [{strategy}]"] = (
                lambda c, s=strategy: gates(c, keys, with_customers, s))
        ops["(d) bare scan count(*), sum(amount) of orders"] = lambda c: bare_scan(c, days)

        timings: dict[str, list[float]] = {name: [] for name in ops}
        with duckdb.connect(str(path)) as con:
            if args.threads:
                con.execute(f"SET threads = {int(args.threads)}")
            threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
            for op in ops.values():  # warm-up: first touches pay for reading the file
                op(con)
            names = list(ops)
            for r in range(args.rounds):
                # rotate the order each round so no operation always runs right after another
                for name in names[r % len(names):] + names[:r % len(names)]:
                    t0 = time.perf_counter()
                    ops[name](con)
                    timings[name].append(time.perf_counter() - t0)

    base = statistics.median(timings[names[0]])
    print(f"\n{args.rows:,} orders, {args.days} partitions, {args.rounds} rounds, "
          f"DuckDB {duckdb.__version__}, {threads} threads")
    width = max(len(n) for n in names)
    print(f"{'operation':<{width}}  {'median':>9}  {'min':>9}  {'vs (a)':>7}")
    for name in names:
        med = statistics.median(timings[name])
        print(f"{name:<{width}}  {med * 1000:>7.0f}ms  {min(timings[name]) * 1000:>7.0f}ms  "
              f"{med / base:>6.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

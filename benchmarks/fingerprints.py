"""What sha256 fingerprints cost next to the legacy md5 sum they replace (issue 21), in one run.

    .venv/bin/python benchmarks/fingerprints.py                      # DuckDB and PostgreSQL
    .venv/bin/python benchmarks/fingerprints.py --engines duckdb --variants

The demo's order events (`demo.sample.generate_orders`, what benchmarks/common.py seeds) for
2,526 days of 2,375 rows (~6.0M rows) on DuckDB and 365 days on PostgreSQL (a throwaway server,
tests/pg_server.py), fingerprinted by `warehouse.fingerprints.fingerprints` (sha256 over the sorted
row digests) and by the legacy md5 sum (`fingerprints_like` with legacy records), for the first
30, 365 and all days, in one statement per call as the product makes it. Rounds interleave the
two in a rotating order; the script prints medians and the ratio new / legacy of each round.

`--variants` also times, at each engine's largest size, forms that were tried for the new
fingerprint and not kept (each as collision-resistant: a hash over the sorted row digests, or
rows): the sha256 over the hex text of the sorted digests instead of their bytes (both engines),
and on DuckDB `list_sort(list(...))` instead of an ordered `string_agg`, sorting on the digest's
bytes (`unhex`), two levels (a digest per 256 buckets of the digest's first byte, then one over
the buckets) and the sorted row texts themselves (no digest per row); and two pieces of the cost,
not fingerprints: each row's sha256 alone (`max`), and the digests concatenated in no order.
A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402

from backfill_assets.demo.sample import generate_orders  # noqa: E402
from backfill_assets.partitions import scheme_for  # noqa: E402
from backfill_assets.warehouse import engine_for, legacy_fingerprints  # noqa: E402
from backfill_assets.warehouse.engine import Session  # noqa: E402
from backfill_assets.warehouse.fingerprints import LEGACY_EMPTY, column_types, fingerprints, fingerprints_like  # noqa: E402

START = dt.date(2019, 1, 1)
SCHEME = scheme_for(dg.DailyPartitionsDefinition(start_date=START.isoformat()), "DATE", name="orders")
COLUMNS = ["order_id", "customer_id", "region", "order_ts", "order_date", "amount", "status"]


def day_keys(count: int) -> list[str]:
    return [(START + dt.timedelta(days=i)).isoformat() for i in range(count)]


def new(session: Session, keys: list[str]) -> dict:
    return fingerprints(session, "orders", COLUMNS, SCHEME, "order_date", keys)


def legacy(session: Session, keys: list[str]) -> dict:
    return fingerprints_like(session, "orders", COLUMNS, SCHEME, "order_date", dict.fromkeys(keys, LEGACY_EMPTY))


def variants(session: Session) -> dict[str, Callable[[Session, list[str]], object]]:
    """Other forms of the new fingerprint, and pieces of its cost, over the days of `keys`."""
    engine = session.engine
    text = engine.row_text_sql(COLUMNS, "t", column_types(session, "orders", COLUMNS))
    row = engine.row_digest_sql(text)
    where = "FROM orders AS t WHERE t.order_date >= ? AND t.order_date < ?"
    # the product's two statements in the variants' shape (a date range, GROUP BY the day; the
    # product joins the rows to the keys' windows), to compare the variants with
    forms = {
        "same shape: sha256 (new)":
            f"SELECT t.order_date, count(*), {engine.digest_of_rows_sql(row)} {where} GROUP BY 1",
        "same shape: md5 sum (legacy)":
            f"SELECT t.order_date, count(*), {legacy_fingerprints.digest_sql(engine, COLUMNS, 't')} {where} GROUP BY 1",
    }
    if engine.name == "postgresql":
        forms |= {
            "sha256 of the sorted hex text":
                f"SELECT t.order_date, count(*), encode(sha256(convert_to(coalesce(string_agg(encode({row}, 'hex'), "
                f"'' ORDER BY {row}), ''), 'UTF8')), 'hex') {where} GROUP BY 1",
        }
    else:
        forms |= {
            "piece: sha256 of each row, max()": f"SELECT t.order_date, count(*), max({row}) {where} GROUP BY 1",
            "piece: string_agg in no order":
                f"SELECT t.order_date, count(*), sha256(unhex(string_agg({row}, ''))) {where} GROUP BY 1",
            "sha256 of the sorted hex text":
                f"SELECT t.order_date, count(*), sha256(coalesce(string_agg({row}, '' ORDER BY {row}), '')) "
                f"{where} GROUP BY 1",
            "list_sort(list(digest))":
                f"SELECT t.order_date, count(*), sha256(unhex(array_to_string(list_sort(list({row})), ''))) "
                f"{where} GROUP BY 1",
            "ordered by the digest's bytes":
                f"SELECT t.order_date, count(*), sha256(unhex(string_agg({row}, '' ORDER BY unhex({row})))) "
                f"{where} GROUP BY 1",
            "two levels, 256 buckets":
                "SELECT k, sum(n), sha256(string_agg(b || d, '' ORDER BY b)) FROM (SELECT k, left(h, 2) AS b, "
                "count(*) AS n, sha256(unhex(string_agg(h, '' ORDER BY h))) AS d FROM (SELECT t.order_date AS k, "
                f"{row} AS h {where}) GROUP BY 1, 2) GROUP BY 1",
            "sha256 of the sorted row texts":
                f"SELECT t.order_date, count(*), sha256(string_agg({text}, '' ORDER BY {text})) {where} GROUP BY 1",
        }

    def runner(sql: str) -> Callable[[Session, list[str]], object]:
        def run(s: Session, keys: list[str]) -> object:
            end = dt.date.fromisoformat(keys[-1]) + dt.timedelta(days=1)
            return s.rows(sql, [dt.date.fromisoformat(keys[0]), end])
        return run

    return {name: runner(sql) for name, sql in forms.items()}


def measure(session: Session, sizes: list[int], rounds: int, extra: dict | None = None) -> dict:
    """{size: {name: [seconds per round]}}, the alternatives interleaved in a rotating order."""
    out: dict[int, dict[str, list[float]]] = {}
    for size in sizes:
        keys = day_keys(size)
        alternatives = {"sha256 (new)": new, "md5 sum (legacy)": legacy}
        if extra and size == max(sizes):
            alternatives.update(extra)
        names = list(alternatives)
        times: dict[str, list[float]] = {n: [] for n in names}
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                started = time.perf_counter()
                alternatives[name](session, keys)
                times[name].append(time.perf_counter() - started)
        out[size] = times
        report(size, times)
    return out


def report(size: int, times: dict[str, list[float]]) -> None:
    base = times["md5 sum (legacy)"]
    print(f"  {size} partitions:")
    for name, values in times.items():
        ratios = [v / b for v, b in zip(values, base, strict=True)]
        print(f"    {name:34} median {statistics.median(values):7.3f} s   / legacy: median "
              f"{statistics.median(ratios):.2f}x (rounds {', '.join(f'{x:.2f}' for x in ratios)})", flush=True)


def seed(session: Session, days: int, rows_per_day: int) -> int:
    started = time.perf_counter()
    rows = generate_orders(session, start=START, days=days, rows_per_day=rows_per_day, seed=7)
    print(f"  seeded {rows:,} rows over {days} days in {time.perf_counter() - started:.1f} s", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="duckdb,postgresql")
    parser.add_argument("--rows-per-day", type=int, default=2375)
    parser.add_argument("--sizes", default="30,365,2526", help="days fingerprinted on DuckDB")
    parser.add_argument("--pg-sizes", default="30,365", help="days fingerprinted on PostgreSQL")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", action="store_true", help="also time the forms not kept (DuckDB)")
    args = parser.parse_args()
    engines = args.engines.split(",")
    print(f"load average at start: {', '.join(f'{x:.1f}' for x in os.getloadavg())}; {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="fingerprints-bench-") as tmp:
        if "duckdb" in engines:
            sizes = [int(s) for s in args.sizes.split(",")]
            print(f"DuckDB ({Path(tmp) / 'orders.duckdb'}):")
            engine = engine_for(f"duckdb:///{Path(tmp) / 'orders.duckdb'}")
            with engine.session() as session:
                seed(session, max(sizes), args.rows_per_day)
                measure(session, sizes, args.rounds, variants(session) if args.variants else None)
        if "postgresql" in engines:
            from tests.pg_server import PostgresServer

            sizes = [int(s) for s in args.pg_sizes.split(",")]
            with PostgresServer() as server:
                print("PostgreSQL (tests/pg_server.py, durability off):")
                engine = engine_for(server.url_for())
                with engine.session() as session:
                    seed(session, max(sizes), args.rows_per_day)
                    session.execute("ANALYZE orders")
                    measure(session, sizes, args.rounds, variants(session) if args.variants else None)


if __name__ == "__main__":
    main()

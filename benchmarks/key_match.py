"""Joins on business keys on PostgreSQL: `IS NOT DISTINCT FROM` against the engine's key match.

    .venv/bin/python benchmarks/key_match.py [--keys 7000] [--partitions 3] [--rounds 3]

On a throwaway PostgreSQL server (tests/pg_server.py), two tables of --partitions days with --keys
business keys each (day, store, region; one region in a hundred NULL). The three joins on
business keys the product runs, each written both ways and timed side by side, rotating order:

  gate    the per-key parity gate's FULL JOIN of target and source, each grouped by key
  merge   a merge write's "delete what the recomputation replaces" (EXISTS on the keys), as a count
  diff    the diff's FULL JOIN of before and after, grouped by key

`IS NOT DISTINCT FROM` is neither hashable nor mergeable in PostgreSQL, so each join compares every
row of a partition with every other (the planner hashes on the day alone); the engine's key match
(`PostgresEngine.same_key_sql`: one-element arrays of the key cast to its family's lossless type,
NULL equal to NULL) hashes or merges on the keys.
Prints medians in seconds and the ratio. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backfill_assets.warehouse.postgres_engine import PostgresEngine  # noqa: E402
from tests.pg_server import PostgresServer  # noqa: E402

KEYS = ("day", "store", "region")
DECLARED = ("DATE", "BIGINT", "VARCHAR")  # the keys' contract types (the tables hold exactly these)


def by_hand(left: str, right: str) -> str:
    return " AND ".join(f"{left}.{k} IS NOT DISTINCT FROM {right}.{k}" for k in KEYS)


def statements(match) -> dict[str, str]:
    grouped = "SELECT day, store, region, sum(amount) AS m FROM {table} GROUP BY 1, 2, 3"
    return {
        "gate": f"SELECT count(*) FROM ({grouped.format(table='t')}) AS a FULL OUTER JOIN "
                f"({grouped.format(table='s')}) AS b ON a.day = b.day AND {match('a', 'b')} "
                "WHERE a.m IS DISTINCT FROM b.m",
        "merge": f"SELECT count(*) FROM t WHERE EXISTS (SELECT 1 FROM s WHERE s.day = t.day AND {match('t', 's')})",
        "diff": f"SELECT count(*) FROM ({grouped.format(table='s')}) AS b FULL OUTER JOIN "
                f"({grouped.format(table='t')}) AS a ON b.day = a.day AND {match('b', 'a')}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=7000, help="business keys per partition")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    engine_match = PostgresEngine("postgresql://unused").keys_match_sql
    forms = {"IS NOT DISTINCT FROM": statements(by_hand),
             "key match": statements(lambda left, right: engine_match(left, right, KEYS, DECLARED))}
    with PostgresServer() as server:
        server.start()
        import psycopg

        with psycopg.connect(server.dsn, autocommit=True) as con:
            for table in ("t", "s"):
                con.execute(
                    f"CREATE TABLE {table} AS SELECT d::date AS day, (g / 7)::bigint AS store, "
                    "CASE WHEN g % 100 = 0 THEN NULL ELSE (g % 7)::text END AS region, g::numeric(18,2) AS amount "
                    f"FROM generate_series(date '2026-01-01', date '2026-01-01' + {args.partitions - 1}, "
                    f"interval '1 day') AS d, generate_series(1, {args.keys}) AS g")
                con.execute(f"ANALYZE {table}")
            con.execute("UPDATE t SET amount = amount + 1 WHERE store % 50 = 0")
            times: dict[tuple[str, str], list[float]] = {}
            answers: dict[tuple[str, str], object] = {}
            names = list(forms)
            for round_ in range(args.rounds):
                for form in names[round_ % 2:] + names[:round_ % 2]:
                    for what, sql in forms[form].items():
                        started = time.perf_counter()
                        answers[(form, what)] = con.execute(sql).fetchone()[0]
                        times.setdefault((form, what), []).append(time.perf_counter() - started)
            version = con.execute("SHOW server_version").fetchone()[0]
    print(f"PostgreSQL {version}; {args.partitions} partitions x {args.keys:,} keys; medians of {args.rounds} rounds")
    print(f"{'join':<6} {'IS NOT DISTINCT FROM':>21} {'key match':>10} {'ratio':>7}  same answer")
    for what in forms["key match"]:
        slow = statistics.median(times[("IS NOT DISTINCT FROM", what)])
        fast = statistics.median(times[("key match", what)])
        same = answers[("IS NOT DISTINCT FROM", what)] == answers[("key match", what)]
        print(f"{what:<6} {slow:>20.3f}s {fast:>9.3f}s {slow / fast:>6.1f}x  {same}")


if __name__ == "__main__":
    main()

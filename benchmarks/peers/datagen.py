"""Test data for benchmarks/diff_peers.py, generated inside DuckDB (no rows pass through Python).

`daily_sales(event_date DATE, customer_id BIGINT, category VARCHAR, amount DECIMAL(18,2),
orders BIGINT)`, business key (event_date, customer_id, category), ~2.9M rows over 30 days, like
the aggregate in /work/shared/PERF-NOTES.md. Version `a` is that table; the other versions are
copies with a known change set, which is the ground truth every tool's answer must match:

* `b`  (scenario "3 days"): in each of 3 of the 30 days, 500 rows changed (amount + 0.01),
  200 rows removed and 300 rows added;
* `b1` (scenario "1 row"): one row changed (amount + 0.01) in one day.

Rows are stored in key order, as a daily aggregate would be written.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb

START = dt.date(2026, 1, 1)
DAYS = 30
CUSTOMERS = 24_000
CATEGORIES = ("books", "electronics", "grocery", "home", "toys")
KEEP_PERCENT = 81  # of the 30 x 24,000 x 5 = 3.6M possible keys -> ~2.9M rows

KEYS = ("event_date", "customer_id", "category")
VALUES = ("amount", "orders")
PARTITION = "event_date"

CHANGED, REMOVED, ADDED = 500, 200, 300
CHANGED_DAYS = (4, 15, 26)  # offsets from START
ONE_ROW_DAY = 17

TABLE_SQL = """CREATE OR REPLACE TABLE a AS
SELECT DATE '{start}' + d::INTEGER AS event_date,
       c AS customer_id,
       cat AS category,
       CAST((hash(d, c, cat, 'amount') % 5000000) / 100 AS DECIMAL(18,2)) AS amount,
       (1 + hash(d, c, cat, 'orders') % 40)::BIGINT AS orders
FROM range({days}) r(d), range(1, {customers} + 1) cu(c), unnest({categories}) k(cat)
WHERE hash(d, c, cat) % 100 < {keep}
ORDER BY event_date, customer_id, category"""

# Rows of `a` ranked per changed day by a hash, so the picks are spread over the day.
PICKS_SQL = """CREATE OR REPLACE TEMP TABLE picks AS
SELECT event_date, customer_id, category,
       row_number() OVER (PARTITION BY event_date ORDER BY hash(customer_id, category, 'pick')) AS rn
FROM a WHERE event_date IN ({days})"""

B_SQL = """CREATE OR REPLACE TABLE b AS
SELECT * FROM (
    SELECT a.event_date, a.customer_id, a.category,
           CAST(CASE WHEN p.rn <= {changed} THEN a.amount + 0.01 ELSE a.amount END
                AS DECIMAL(18,2)) AS amount,
           a.orders
    FROM a LEFT JOIN picks p USING (event_date, customer_id, category)
    WHERE p.rn IS NULL OR p.rn <= {changed} OR p.rn > {changed} + {removed}
    UNION ALL
    SELECT d.event_date, 1000000 + i AS customer_id, 'books' AS category,
           CAST((i * 7 % 100000) / 100 AS DECIMAL(18,2)) AS amount, (1 + i % 9)::BIGINT AS orders
    FROM (SELECT unnest([{days}]) AS event_date) d, range({added}) r(i)
) ORDER BY event_date, customer_id, category"""

B1_SQL = """CREATE OR REPLACE TABLE b1 AS
SELECT event_date, customer_id, category,
       CAST(CASE WHEN event_date = DATE '{day}' AND customer_id = {customer} AND category = '{category}'
            THEN amount + 0.01 ELSE amount END AS DECIMAL(18,2)) AS amount,
       orders
FROM a ORDER BY event_date, customer_id, category"""


def day(offset: int) -> str:
    return (START + dt.timedelta(days=offset)).isoformat()


def ground_truth() -> dict[str, dict[str, tuple[int, int, int]]]:
    """Scenario -> {partition (ISO date): (added, removed, changed)} for partitions that differ."""
    return {
        "3 days": {day(d): (ADDED, REMOVED, CHANGED) for d in CHANGED_DAYS},
        "1 row": {day(ONE_ROW_DAY): (0, 0, 1)},
    }


def build(con: duckdb.DuckDBPyConnection, export_dir: Path | None = None) -> dict:
    """Create tables a, b and b1 in `con` (a DuckDB file) and, if asked, Parquet copies."""
    con.execute(TABLE_SQL.format(start=START.isoformat(), days=DAYS, customers=CUSTOMERS,
                                 categories=list(CATEGORIES), keep=KEEP_PERCENT))
    days = ", ".join(f"DATE '{day(d)}'" for d in CHANGED_DAYS)
    con.execute(PICKS_SQL.format(days=days))
    con.execute(B_SQL.format(days=days, changed=CHANGED, removed=REMOVED, added=ADDED))
    customer, category = con.execute(
        "SELECT customer_id, category FROM a WHERE event_date = ? ORDER BY hash(customer_id, category) "
        "LIMIT 1", [START + dt.timedelta(days=ONE_ROW_DAY)]).fetchone()
    con.execute(B1_SQL.format(day=day(ONE_ROW_DAY), customer=customer, category=category))
    con.execute("DROP TABLE picks")
    types = {t: con.execute(f"SELECT list(column_name || ' ' || data_type ORDER BY column_index) "
                            f"FROM duckdb_columns() WHERE table_name = '{t}'").fetchone()[0]
             for t in ("a", "b", "b1")}
    assert types["a"] == types["b"] == types["b1"] == [
        "event_date DATE", "customer_id BIGINT", "category VARCHAR", "amount DECIMAL(18,2)",
        "orders BIGINT"], types
    con.execute("CHECKPOINT")
    check(con)
    counts = dict(con.execute(
        "SELECT 'a', count(*) FROM a UNION ALL SELECT 'b', count(*) FROM b "
        "UNION ALL SELECT 'b1', count(*) FROM b1").fetchall())
    if export_dir is not None:
        export_dir.mkdir(parents=True, exist_ok=True)
        for table in ("a", "b", "b1"):
            con.execute(f"COPY {table} TO '{export_dir / (table + '.parquet')}' (FORMAT parquet)")
    return counts


def check(con: duckdb.DuckDBPyConnection) -> None:
    """Cheap sanity checks that the change set was applied as designed (not a diff tool)."""
    per_day = con.execute(
        "SELECT a.event_date::VARCHAR, a.n, b.n FROM "
        "(SELECT event_date, count(*) n FROM a GROUP BY ALL) a JOIN "
        "(SELECT event_date, count(*) n FROM b GROUP BY ALL) b USING (event_date) "
        "WHERE a.n <> b.n ORDER BY 1").fetchall()
    expected = [(day(d), n_a, n_a - REMOVED + ADDED) for d, (_, n_a, _) in
                zip(CHANGED_DAYS, per_day, strict=True)]
    assert per_day == expected, (per_day, expected)
    dupes = con.execute("SELECT count(*) - count(DISTINCT (event_date, customer_id, category)) FROM b"
                        ).fetchone()[0]
    assert dupes == 0, dupes
    amount_delta = con.execute(
        "SELECT sum(b1.amount) - sum(a.amount) FROM a JOIN b1 USING (event_date, customer_id, category)"
    ).fetchone()[0]
    assert str(amount_delta) == "0.01", amount_delta


if __name__ == "__main__":
    import sys
    import time

    path = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/diff_peers_data.duckdb")
    started = time.perf_counter()
    with duckdb.connect(str(path)) as connection:
        print(build(connection, path.parent / "parquet"), f"{time.perf_counter() - started:.1f} s")

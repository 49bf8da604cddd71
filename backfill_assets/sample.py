"""Deterministic sample order events, generated inside DuckDB (no rows pass through Python)."""

from __future__ import annotations

import datetime as dt

import duckdb

from backfill_assets.warehouse.connection import transaction

ORDERS_DDL = """
CREATE TABLE IF NOT EXISTS orders (
    order_id BIGINT,
    customer_id BIGINT,
    region VARCHAR,
    order_ts TIMESTAMP,
    order_date DATE,
    amount DECIMAL(18,2),
    status VARCHAR
)
"""

REGIONS = ["north", "south", "east", "west", "central"]


def generate_orders(con: duckdb.DuckDBPyConnection, *, start: dt.date, days: int,
                    rows_per_day: int, seed: int = 7) -> int:
    """(Re)write `days` daily partitions of orders; the same arguments give the same rows."""
    if days < 1 or rows_per_day < 1:
        raise ValueError("days and rows_per_day must be >= 1")
    end = start + dt.timedelta(days=days - 1)
    with transaction(con):
        con.execute(ORDERS_DDL)
        con.execute("DELETE FROM orders WHERE order_date BETWEEN ? AND ?", [start, end])
        # hash() of (seed, day, n) is a deterministic pseudo-random source inside the engine
        con.execute(
            """
            INSERT INTO orders
            SELECT
                (d.i * $rows + n.i) + 1 AS order_id,
                1 + (hash($seed, 'c', d.i, n.i) % 5000)::BIGINT AS customer_id,
                list_extract($regions, 1 + (hash($seed, 'r', d.i, n.i) % 5)::INTEGER) AS region,
                ($start::DATE + d.i::INTEGER)::TIMESTAMP
                    + to_seconds((hash($seed, 't', d.i, n.i) % 86400)::BIGINT) AS order_ts,
                $start::DATE + d.i::INTEGER AS order_date,
                (5 + (hash($seed, 'a', d.i, n.i) % 49500) / 100.0)::DECIMAL(18,2) AS amount,
                CASE WHEN hash($seed, 's', d.i, n.i) % 10 = 0 THEN 'refunded'
                     ELSE 'completed' END AS status
            FROM range($days) AS d(i), range($rows) AS n(i)
            """,
            {"seed": seed, "rows": rows_per_day, "days": days, "start": start,
             "regions": REGIONS},
        )
    return days * rows_per_day

"""Deterministic sample order events, generated inside the engine (no rows pass through Python)."""

from __future__ import annotations

import datetime as dt

from backfill_assets.warehouse.engine import Session

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
# the tables sample data created: `backfill sample` rewrites only these (it deletes the days it
# generates), never a team's real `orders`
OWNED = "backfill_sample_tables"


def sample_owns_orders(session: Session) -> bool:
    """Whether `orders` is absent or was created by the sample generator."""
    engine = session.engine
    if not engine.table_exists(session, "orders"):
        return True
    return engine.table_exists(session, OWNED) and bool(
        session.scalar(f"SELECT count(*) FROM {OWNED} WHERE table_name = 'orders'"))


def generate_orders(session: Session, *, start: dt.date, days: int, rows_per_day: int, seed: int = 7) -> int:
    """(Re)write `days` daily partitions of orders; the same arguments give the same rows."""
    if days < 1 or rows_per_day < 1:
        raise ValueError("days and rows_per_day must be >= 1")
    end = start + dt.timedelta(days=days - 1)
    h = session.engine.hash_int_sql

    def rand(tag: str, modulo: int) -> str:
        return f"({h([str(seed), repr(tag), 'd.i', 'n.i'])} % {modulo})"

    region = "CASE " + " ".join(f"WHEN {rand('r', 5)} = {i} THEN '{r}'" for i, r in enumerate(REGIONS)) + " END"
    with session.transaction():
        if not session.engine.table_exists(session, "orders"):  # created here: marked as ours
            session.execute(f"CREATE TABLE IF NOT EXISTS {OWNED} (table_name VARCHAR PRIMARY KEY)")
            session.execute(f"INSERT INTO {OWNED} VALUES ('orders') ON CONFLICT DO NOTHING")
        session.execute(ORDERS_DDL)
        session.execute("DELETE FROM orders WHERE order_date BETWEEN ? AND ?", [start, end])
        session.execute(
            f"""
            INSERT INTO orders
            SELECT
                CAST(d.i * {rows_per_day} + n.i + 1 AS BIGINT) AS order_id,
                CAST(1 + {rand('c', 5000)} AS BIGINT) AS customer_id,
                {region} AS region,
                CAST(CAST(? AS DATE) + CAST(d.i AS INTEGER) AS TIMESTAMP)
                    + CAST({rand('t', 86400)} AS INTEGER) * INTERVAL '1 second' AS order_ts,
                CAST(? AS DATE) + CAST(d.i AS INTEGER) AS order_date,
                CAST(5 + {rand('a', 49500)} / 100.0 AS DECIMAL(18,2)) AS amount,
                CASE WHEN {rand('s', 10)} = 0 THEN 'refunded' ELSE 'completed' END AS status
            FROM generate_series(0, {days - 1}) AS d(i), generate_series(0, {rows_per_day - 1}) AS n(i)
            """, [start, start])
    return days * rows_per_day

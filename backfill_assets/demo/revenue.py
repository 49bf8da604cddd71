"""The demo's replayable table: revenue per day and region, recomputed from order events.

It ships the buggy transform that counted refunds twice (what is published before the replay) and
the fixed one, so the demo repairs something real.
"""

from __future__ import annotations

from dataclasses import replace

from backfill_assets.table import Column, Metric, TableSpec

FIXED_SELECT = """
SELECT order_date, region,
       count(*) AS orders,
       sum(amount) AS gross,
       coalesce(sum(amount) FILTER (WHERE status = 'refunded'), 0) AS refunds,
       sum(amount) - coalesce(sum(amount) FILTER (WHERE status = 'refunded'), 0) AS net_revenue,
       count(DISTINCT customer_id) AS customers
FROM orders
WHERE order_date >= $partition_start AND order_date < $partition_end
GROUP BY order_date, region
"""

# The 2025-12 release subtracted refunds twice from net revenue.
BUGGY_SELECT = FIXED_SELECT.replace(
    "sum(amount) - coalesce(sum(amount) FILTER (WHERE status = 'refunded'), 0) AS net_revenue",
    "sum(amount) - 2 * coalesce(sum(amount) FILTER (WHERE status = 'refunded'), 0) AS net_revenue",
)

REFUNDED = "coalesce(sum(amount) FILTER (WHERE status = 'refunded'), 0)"

DAILY_REVENUE = TableSpec(
    name="daily_revenue",
    source="orders",
    select_sql=FIXED_SELECT,
    partition_column="order_date",
    source_partition_column="order_date",
    business_keys=("order_date", "region"),
    contract=(
        Column("order_date", "DATE", nullable=False),
        Column("region", "VARCHAR", nullable=False),
        Column("orders", "BIGINT", nullable=False),
        Column("gross", "DECIMAL(18,2)", nullable=False),
        Column("refunds", "DECIMAL(18,2)", nullable=False),
        Column("net_revenue", "DECIMAL(18,2)", nullable=False),
        Column("customers", "BIGINT", nullable=False),
    ),
    metrics=(
        Metric("orders", "sum(orders)", "count(*)"),
        Metric("gross", "sum(gross)", "sum(amount)"),
        Metric("refunds", "sum(refunds)", REFUNDED),
        Metric("net_revenue", "sum(net_revenue)", f"sum(amount) - {REFUNDED}"),
        Metric("customers", "sum(customers)", "count(DISTINCT (region, customer_id))"),
    ),
    publish_as="published_revenue",
    source_event_id="order_id",
    code_version="2",
    description="Revenue per day and region: orders, gross, refunds, net revenue, customers.",
    range_form=True,  # a run's days in one statement: one scan of orders per run, not per day
)

# What was deployed before the fix: the buggy transform, and a net-revenue definition with the same
# mistake, which is why its gates passed and the error reached consumers.
DAILY_REVENUE_V1 = replace(
    DAILY_REVENUE, select_sql=BUGGY_SELECT, code_version="1",
    metrics=tuple(
        Metric("net_revenue", "sum(net_revenue)", f"sum(amount) - 2 * {REFUNDED}")
        if m.name == "net_revenue" else m for m in DAILY_REVENUE.metrics),
)


# The monthly rollup consumers read: recomputed from daily_revenue (a replayable table reading a
# replayable table), so a replay of January's days recomputes January's month in the same plan.
MONTH = "CAST(date_trunc('month', order_date) AS DATE)"
MONTHLY_SELECT = f"""
SELECT {MONTH} AS month, region,
       sum(orders) AS orders, sum(gross) AS gross, sum(refunds) AS refunds, sum(net_revenue) AS net_revenue
FROM daily_revenue
WHERE order_date >= $partition_start AND order_date < $partition_end
GROUP BY {MONTH}, region
"""

MONTHLY_REVENUE = TableSpec(
    name="monthly_revenue",
    source="daily_revenue",
    select_sql=MONTHLY_SELECT,
    partition_column="month",
    source_partition_column="order_date",
    business_keys=("month", "region"),
    source_keys=(("month", MONTH),),
    contract=(
        Column("month", "DATE", nullable=False),
        Column("region", "VARCHAR", nullable=False),
        Column("orders", "BIGINT", nullable=False),
        Column("gross", "DECIMAL(18,2)", nullable=False),
        Column("refunds", "DECIMAL(18,2)", nullable=False),
        Column("net_revenue", "DECIMAL(18,2)", nullable=False),
    ),
    metrics=tuple(Metric(m, f"sum({m})", f"sum({m})") for m in ("orders", "gross", "refunds", "net_revenue")),
    publish_as="published_monthly_revenue",
    code_version="1",
    range_form=True,
    description="Revenue per month and region, rolled up from daily_revenue.",
)

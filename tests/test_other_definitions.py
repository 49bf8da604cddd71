"""Attacks by an operator with the CLI, Dagster and a shell (README "Threat model", the operator):
definitions of their own for the team's table, loaded as a code location or BACKFILL_DEFS."""

from __future__ import annotations

import dataclasses

import dagster as dg
import pytest

from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.defs.resources import backfill_resources
from backfill_assets.errors import WindowError
from backfill_assets.table import Metric
from tests.world import FIXED, failure_text, keys, per_partition

# the team's daily_revenue, partitioned by region instead of by day: a region that holds no rows
# ("refunded", from the orders' status) is a "new" partition of it, while its rows land in days
# the team's history (and consumers) hold
BY_REGION = dataclasses.replace(
    FIXED,
    select_sql="""
SELECT order_date, $partition AS region, count(*) AS orders, sum(amount) AS gross,
       sum(amount) AS refunds, CAST(0 AS DECIMAL(18,2)) AS net_revenue,
       count(DISTINCT customer_id) AS customers
FROM orders WHERE status = $partition GROUP BY order_date
""",
    partition_column="region", source_partition_column="status", range_form=False,
    source_keys=(("region", "status"),),
    metrics=(Metric("orders", "sum(orders)", "count(*)"), Metric("gross", "sum(gross)", "sum(amount)")))


def _run_by_region(world, key: str) -> dg.ExecuteInProcessResult:
    table = make_replayable_table(BY_REGION, dg.StaticPartitionsDefinition([key]))
    defs = dg.Definitions(assets=[*table.assets], resources=backfill_resources(str(world.home)))
    job = defs.resolve_implicit_global_asset_job_def()
    with world.deployed():
        return job.execute_in_process(instance=world.instance, asset_selection=[table.target.key, table.publish.key],
                                      tags={"dagster/partition": key, "backfill_assets/actor": "operator"},
                                      raise_on_error=False)


def test_definitions_partitioning_the_table_by_another_column_cannot_write_its_history_without_a_plan(world):
    assert world.materialize(keys(1, 3), publish=True).success  # the team's history, published
    day = keys(2, 2)[0]
    before = (world.fingerprints("daily_revenue", keys(1, 3)), world.fingerprints("published_revenue", keys(1, 3)))
    refused = _run_by_region(world, "refunded")
    assert not refused.success
    text = failure_text(refused)
    assert "partitioned by order_date" in text and "region" in text and "backfill plan new" in text, text
    # nothing of the days consumers read changed, nor of the table's history
    assert (world.fingerprints("daily_revenue", keys(1, 3)),
            world.fingerprints("published_revenue", keys(1, 3))) == before
    assert world.sql("SELECT count(*) FROM daily_revenue WHERE region = 'refunded' AND order_date = ?", [day]) \
        == [(0,)]


def test_static_partitions_over_a_date_column_are_refused_as_the_definitions_load(world):
    """Static keys are text: over a DATE column the grouped count read back a date that is no key,
    and a run of the team's table so defined ended in a KeyError traceback."""
    assert world.materialize(keys(1, 3), publish=True).success
    with pytest.raises(WindowError, match="static partitions.*DATE") as refused:
        make_replayable_table(per_partition(FIXED), dg.StaticPartitionsDefinition(keys(2, 2)))
    assert "VARCHAR" in refused.value.fix

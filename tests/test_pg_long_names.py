"""PostgreSQL cuts an identifier over 63 bytes, silently, in every statement: a table whose asset
key names more is created, written and read under the cut name, while a question asked of the
catalog with the whole name found nothing. So the write permission took an adopted table's rows for
no rows, and every partition of its history for new (found while fixing an attack's finding on
snapshot names; the test failed first). Asked as the statements resolve a name now (`to_regclass`)."""

from __future__ import annotations

from dataclasses import replace

import dagster as dg
import pytest

from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.defs.resources import backfill_resources
from backfill_assets.demo.definitions import ORDERS, PARTITIONS
from backfill_assets.demo.revenue import DAILY_REVENUE
from backfill_assets.identifiers import table_for_asset
from tests.world import failure_text

pytestmark = pytest.mark.filterwarnings("ignore:Asset job .* varying BackfillPolicies")  # target + publish

LONG = replace(DAILY_REVENUE, name="finance/revenue/daily_revenue_by_region_after_the_refund_correction",
               publish_as="published_revenue_by_region")


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_an_adopted_table_whose_name_postgresql_cuts_is_still_history(engine_world):
    world = engine_world
    table = table_for_asset(LONG.name)
    assert len(table.encode()) > 63
    columns = ", ".join(f"{c.name} {c.type}" for c in LONG.contract)
    world.run_sql(f'CREATE TABLE "{table}" ({columns})')  # the team's table, adopted: PostgreSQL cuts its name
    world.run_sql(f'INSERT INTO "{table}" SELECT * FROM (VALUES (DATE \'2026-01-02\', \'north\', 1, 10.00, 0.00, '
                  "10.00, 1)) AS v")
    replayable = make_replayable_table(LONG, PARTITIONS, group_name="revenue")
    defs = dg.Definitions(assets=[ORDERS, *replayable.assets],
                          resources=backfill_resources(str(world.home), world.url or ""),
                          executor=dg.in_process_executor)
    job = defs.resolve_implicit_global_asset_job_def()
    with world.deployed():
        result = job.execute_in_process(instance=world.instance, asset_selection=[replayable.target.key],
                                        tags={"dagster/partition": "2026-01-02", "dagster/backfill": "ui-bf",
                                              "backfill_assets/actor": "test"}, raise_on_error=False)
    assert not result.success and "holds 1 row(s)" in failure_text(result), failure_text(result)
    assert world.sql(f'SELECT count(*) FROM "{table}"') == [(1,)]

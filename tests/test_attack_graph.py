"""Attacks on "a replay covers the graph": mappings that disagree with what a rollup's SQL and gates
read, an IO manager's schema set at launch, a rollup in another time zone. Each test failed on the
code before its fix. No `from __future__ import annotations`: Dagster reads the assets' `context`
annotations as types."""

import dagster as dg
import pytest

from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.defs.resources import WarehouseResource
from backfill_assets.demo.definitions import ORDERS, PARTITIONS
from backfill_assets.demo.revenue import DAILY_REVENUE
from tests.test_team_graph import _run
from tests.world import failure_text


@pytest.mark.separate_processes
def test_an_asset_whose_io_manager_schema_is_set_at_launch_refuses_the_table_it_can_write(world, monkeypatch):
    """A team's pandas asset keyed `staging/published_revenue`, its `DuckDBPandasIOManager`
    configured `schema="staging"` in the definitions: the namesake check read that configured schema
    and let the table run beside it. Resource config is run config: a Materialize from the launchpad
    with `resources: {io_manager: {config: {schema: main, ...}}}` (or an IO manager
    `configure_at_launch()`) writes `main.published_revenue`, the table consumers read, with a
    DataFrame no gate checked. Only the asset's own `schema` metadata is fixed by the definitions."""
    import pandas as pd
    from dagster_duckdb_pandas import DuckDBPandasIOManager

    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    day = "2026-01-02"
    database = str(world.warehouse_path)

    @dg.asset(key=["staging", "published_revenue"], partitions_def=PARTITIONS,
              metadata={"partition_expr": "order_date"})
    def quick_fix(context: dg.AssetExecutionContext):
        return pd.DataFrame({"order_date": [pd.Timestamp(context.partition_key)], "region": ["north"], "orders": [1],
                             "gross": [1.0], "refunds": [0.0], "net_revenue": [1_000_000.0], "customers": [1]})

    table = make_replayable_table(DAILY_REVENUE, PARTITIONS)
    defs = dg.Definitions(assets=[ORDERS, *table.assets, quick_fix],
                          resources={"warehouse": WarehouseResource(home=str(world.home)),
                                     "io_manager": DuckDBPandasIOManager(database=database, schema="staging")})
    # reachable: the schema given at launch is the one the IO manager writes into
    launched = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=world.instance, asset_selection=[dg.AssetKey(["staging", "published_revenue"])],
        tags={"dagster/partition": day}, raise_on_error=False,
        run_config={"resources": {"io_manager": {"config": {"database": database, "schema": "main"}}}})
    assert launched.success and world.rows("published_revenue", day) == 1
    world.run_sql("DROP TABLE published_revenue")

    ours = _run(world, defs, ["daily_revenue", "published_revenue"], [day])
    assert not ours.success and "staging/published_revenue" in failure_text(ours), (
        "the table ran and published beside an asset whose IO manager's schema a launch sets: "
        f"{failure_text(ours) or 'success'}")
    assert world.rows("published_revenue", day) == 0

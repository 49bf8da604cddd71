"""A data team's own Dagster project (dagster-duckdb's IO managers, op jobs, qualified names) beside
the replayable tables: each test failed on the code before its fix (found by an attack). No `from
__future__ import annotations`: Dagster reads the assets' `context` annotations as types."""

import dagster as dg
import pytest

from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.defs.resources import WarehouseResource
from backfill_assets.demo.definitions import ORDERS, PARTITIONS
from backfill_assets.demo.revenue import DAILY_REVENUE
from tests.test_team_graph import _quick_fix, _run
from tests.world import failure_text


@pytest.mark.separate_processes
def test_an_asset_whose_schema_metadata_names_main_through_the_warehouses_catalog_refuses_the_table(
        world, monkeypatch):
    """A team's pandas asset keyed `staging/published_revenue` whose `schema` metadata names the
    warehouse's catalog too (`warehouse.main`, the file's name, as a team attaching several DuckDB
    files qualifies its schemas): dagster-duckdb writes `warehouse.main.published_revenue`, which DuckDB
    reads as main.published_revenue, the table consumers read. The namesake check compared
    `warehouse.main` with `main` and let the table run and publish beside it (found by an attack)."""
    from dagster_duckdb_pandas import DuckDBPandasIOManager

    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    day = "2026-01-02"
    catalog = world.warehouse_path.stem
    quick_fix = _quick_fix(["staging", "published_revenue"], schema=f"{catalog}.main")

    table = make_replayable_table(DAILY_REVENUE, PARTITIONS)
    defs = dg.Definitions(assets=[ORDERS, *table.assets, quick_fix],
                          resources={"warehouse": WarehouseResource(home=str(world.home)),
                                     "io_manager": DuckDBPandasIOManager(database=str(world.warehouse_path))})
    launched = defs.resolve_implicit_global_asset_job_def().execute_in_process(  # reachable: writes main's table
        instance=world.instance, asset_selection=[dg.AssetKey(["staging", "published_revenue"])],
        tags={"dagster/partition": day}, raise_on_error=False)
    assert launched.success and world.rows("published_revenue", day) == 1
    world.run_sql("DROP TABLE published_revenue")

    ours = _run(world, defs, ["daily_revenue", "published_revenue"], [day])
    assert not ours.success and "staging/published_revenue" in failure_text(ours), (
        f"the table ran beside an asset whose schema metadata {catalog}.main names main: "
        f"{failure_text(ours) or 'success'}")
    assert world.rows("published_revenue", day) == 0

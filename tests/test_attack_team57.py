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


LEGACY_JOB = '''
import dagster as dg
import pandas as pd
from dagster_duckdb_pandas import DuckDBPandasIOManager
from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.demo.definitions import ORDERS, PARTITIONS
from backfill_assets.demo.revenue import DAILY_REVENUE
from backfill_assets.defs.resources import backfill_resources

@dg.op(out={"published_revenue": dg.Out()})
def extract_revenue():
    return pd.DataFrame({"order_date": [pd.Timestamp("2026-01-02")], "region": ["north"], "orders": [1],
                         "gross": [1.0], "refunds": [0.0], "net_revenue": [1_000_000.0], "customers": [1]})

@dg.job
def legacy_extract():
    extract_revenue()

@dg.op
def by_region(published_revenue):
    return published_revenue.groupby("region", as_index=False)["net_revenue"].sum()

@dg.graph_asset
def revenue_by_region():
    return by_region(extract_revenue())

table = make_replayable_table(DAILY_REVENUE, PARTITIONS)
TEAM = {"job": dict(jobs=[legacy_extract]), "graph_asset": dict(assets=[revenue_by_region])}[SHAPE]
defs = dg.Definitions(assets=[ORDERS, *table.assets, *TEAM.get("assets", [])], jobs=TEAM.get("jobs", []),
                      sensors=table.sensors,
                      resources={**backfill_resources(),
                                 "io_manager": DuckDBPandasIOManager(database=WAREHOUSE, schema="main")})
'''


@pytest.mark.separate_processes
@pytest.mark.parametrize("shape", ["job", "graph_asset"])
def test_an_op_output_the_io_manager_names_like_the_published_table_refuses_the_table(world, monkeypatch,
                                                                                      run_cli, shape):
    """The team keeps an older op job beside its assets (or the same op inside a `graph_asset`): an
    op whose output `published_revenue` dagster-duckdb's IO manager (configured `schema="main"`, as
    the team's is) stores as main.published_revenue, the table consumers read, replaced whole by each
    run (an op output is no asset and has no partitions: the IO manager deletes every row first) with
    a DataFrame no gate checked. The namesake check walked the asset graph's assets only: the table
    loaded and published beside the job (found by an attack)."""
    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    day = "2026-01-02"
    module = world.root / "team_legacy.py"
    module.write_text(f"WAREHOUSE = {str(world.warehouse_path)!r}\nSHAPE = {shape!r}\n{LEGACY_JOB}", encoding="utf-8")

    import importlib.util

    spec = importlib.util.spec_from_file_location("team_legacy", module)
    assert spec is not None and spec.loader is not None
    team = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(team)
    launched = (team.defs.get_job_def("legacy_extract").execute_in_process(instance=world.instance,
                                                                           raise_on_error=False)
                if shape == "job" else team.defs.resolve_implicit_global_asset_job_def().execute_in_process(
                    instance=world.instance, asset_selection=[dg.AssetKey("revenue_by_region")],
                    raise_on_error=False))
    assert launched.success and world.rows("published_revenue", day) == 1  # reachable: writes main's table
    world.run_sql("DROP TABLE published_revenue")

    loaded = run_cli("load", "daily_revenue", "--start", day, "--end", day, "--defs", str(module))
    assert loaded.code != 0 and "extract_revenue.published_revenue" in loaded.out + loaded.err, (
        f"the table loaded beside an op job whose output the IO manager writes into its published table: "
        f"{loaded.out}{loaded.err}")
    assert world.rows("daily_revenue", day) == 0 and world.rows("published_revenue", day) == 0

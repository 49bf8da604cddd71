"""Attack round fix2-55 on the newest fixes: the IO manager namesake and the written ancestor of a
team's plain asset. Each test failed on the code before its fix. No `from __future__ import
annotations`: Dagster reads the assets' `context` annotations as types."""

import dagster as dg
import pytest

from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.defs.resources import WarehouseResource
from backfill_assets.demo.definitions import ORDERS, PARTITIONS
from backfill_assets.demo.revenue import DAILY_REVENUE
from tests.test_team_graph import _run
from tests.world import failure_text


@pytest.mark.separate_processes
def test_an_io_manager_configured_with_the_schema_writes_a_prefixed_key_into_the_published_table(world,
                                                                                                monkeypatch):
    """dagster-duckdb names an asset's schema by its `schema` metadata, then the IO manager's own
    `schema` config, and only then the key's prefix. With the IO manager configured `schema="main"`
    (as the team's is), a pandas asset keyed `staging/published_revenue` writes
    `main.published_revenue`, the table consumers read; the namesake check took the prefix for
    its schema and let the table's runs and publish go on beside it."""
    from dagster_duckdb_pandas import DuckDBPandasIOManager

    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    day = "2026-01-02"

    @dg.asset(key=["staging", "published_revenue"], partitions_def=PARTITIONS,
              metadata={"partition_expr": "order_date"})
    def quick_fix(context: dg.AssetExecutionContext):
        import pandas as pd

        return pd.DataFrame({"order_date": [pd.Timestamp(context.partition_key)], "region": ["north"], "orders": [1],
                             "gross": [1.0], "refunds": [0.0], "net_revenue": [1_000_000.0], "customers": [1]})

    table = make_replayable_table(DAILY_REVENUE, PARTITIONS)
    defs = dg.Definitions(assets=[ORDERS, *table.assets, quick_fix],
                          resources={"warehouse": WarehouseResource(home=str(world.home)),
                                     "io_manager": DuckDBPandasIOManager(database=str(world.warehouse_path),
                                                                         schema="main")})
    ours = _run(world, defs, ["daily_revenue", "published_revenue"], [day])
    assert not ours.success and "staging/published_revenue" in failure_text(ours), (
        "the table ran and published beside an asset whose IO manager writes its published table: "
        f"{failure_text(ours) or 'success'}")
    assert world.rows("published_revenue", day) == 0


@pytest.mark.separate_processes
@pytest.mark.parametrize("key", [["main", "published_revenue"], ["Published_Revenue"]])
def test_a_consumers_asset_depending_on_the_published_table_by_its_schema_does_not_refuse_the_table(world,
                                                                                                   monkeypatch, key):
    """A consumer's asset (finance's dashboard extract) reads the published table, which is what it
    is for, and declares it as a dependency by the name its SQL uses: `main/published_revenue`.
    Dagster adds that key to the graph as an external asset, which no IO manager writes (it cannot
    be materialized), yet the namesake check refused every run of daily_revenue over it."""
    from dagster_duckdb import DuckDBResource

    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    day = "2026-01-02"

    @dg.asset(deps=[dg.AssetKey(key)])
    def finance_extract(duckdb: DuckDBResource) -> None:
        with duckdb.get_connection() as con:
            con.execute("CREATE OR REPLACE TABLE finance_extract AS SELECT * FROM main.published_revenue")

    table = make_replayable_table(DAILY_REVENUE, PARTITIONS)
    defs = dg.Definitions(assets=[ORDERS, *table.assets, finance_extract],
                          resources={"warehouse": WarehouseResource(home=str(world.home)),
                                     "duckdb": DuckDBResource(database=str(world.warehouse_path))})
    ours = _run(world, defs, ["daily_revenue", "published_revenue"], [day])
    assert ours.success, failure_text(ours)
    assert world.rows("published_revenue", day) > 0


@pytest.mark.separate_processes
@pytest.mark.parametrize("dep", ["['main', 'published_revenue']", "['Published_Revenue']"])
def test_a_plain_asset_over_the_published_days_by_another_key_still_makes_its_month_refused(world, monkeypatch,
                                                                                            dep):
    """The team's `clean_days` copies the published days (`FROM published_revenue`) and declares
    the dependency by the name its SQL reads: `main/published_revenue` (or in another case). DuckDB
    reads the same table, but the written-ancestor walk matched asset keys exactly, so a month
    whose source is clean_days was loaded and published from the days as if they were a raw source,
    and no plan over the days would recompute it."""
    import importlib.util

    from tests.test_graph import MONTH, _january_days_published
    from tests.test_graph import run as graph_run
    from tests.test_team_graph import _clean_days_defs

    _january_days_published(world)
    path = _clean_days_defs(world)
    path.write_text(path.read_text(encoding="utf-8").replace(
        "@dg.asset(deps=['published_revenue'])", f"@dg.asset(deps=[dg.AssetKey({dep})])"), encoding="utf-8")
    monkeypatch.setenv("BACKFILL_DEFS", str(path))
    spec = importlib.util.spec_from_file_location("defs_clean_days_keyed", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    job = module.defs.resolve_implicit_global_asset_job_def()
    with world.deployed():
        assert job.execute_in_process(instance=world.instance, asset_selection=[dg.AssetKey("clean_days")],
                                      raise_on_error=False).success
        loaded = graph_run(world, module.defs, ["monthly_revenue", "published_monthly_revenue"], [MONTH],
                           {"dagster/backfill": "ui-bf"})
    assert not loaded.success and "which is computed from" in failure_text(loaded), (
        f"a month computed from the published days through clean_days was loaded: {failure_text(loaded) or 'success'}")

"""The review round's attacks on the graph round's fixes. Each test failed on the code before its fix.
No `from __future__ import annotations`: Dagster reads the assets' `context` annotations as types."""

import dataclasses

import dagster as dg
import pytest

from tests.world import failure_text


@pytest.mark.separate_processes
def test_a_copy_of_the_published_days_reported_materialized_since_still_refuses_its_month(world, monkeypatch):
    """Another code location's `clean_days` (deps published_revenue, their SQL copying the days
    consumers read) is materialized by Dagster, which records the published days as its input. Then
    someone presses "Report materialization" on it (the UI's button for an asset filled outside a run,
    `report_runless_asset_event`), or an op logs an `AssetMaterialization` of it: that latest event
    carries no data provenance, and the month's location took clean_days for a raw source again, so
    the month was loaded and published from the published days beside which no plan over the days
    would recompute it."""
    from dagster_duckdb import DuckDBResource

    from backfill_assets.defs.replayable import make_replayable_table
    from backfill_assets.defs.resources import backfill_resources
    from backfill_assets.demo.definitions import MONTHS
    from backfill_assets.demo.revenue import MONTHLY_REVENUE
    from tests.test_graph import MONTH, _january_days_published, _published_by_region
    from tests.test_graph import run as graph_run

    _january_days_published(world)

    @dg.asset(deps=["published_revenue"])
    def clean_days(duckdb: DuckDBResource) -> None:
        with duckdb.get_connection() as con:
            con.execute("CREATE OR REPLACE TABLE clean_days AS SELECT * FROM published_revenue")

    cleaning = dg.Definitions(assets=[clean_days], resources={"duckdb": DuckDBResource(
        database=str(world.warehouse_path))}, executor=dg.in_process_executor)
    month = dataclasses.replace(MONTHLY_REVENUE, source="clean_days",
                                select_sql=MONTHLY_REVENUE.select_sql.replace("daily_revenue", "clean_days"))
    rollup = make_replayable_table(month, MONTHS, group_name="revenue")
    months = dg.Definitions(assets=[*rollup.assets], resources=backfill_resources(str(world.home), world.url or ""),
                            executor=dg.in_process_executor)
    with world.deployed():
        assert cleaning.resolve_implicit_global_asset_job_def().execute_in_process(instance=world.instance).success
        world.instance.report_runless_asset_event(dg.AssetMaterialization("clean_days"))
        loaded = graph_run(world, months, ["monthly_revenue", "published_monthly_revenue"], [MONTH],
                           {"dagster/backfill": "ui-bf"})
    assert not loaded.success and "which is computed from published_revenue" in failure_text(loaded), (
        f"a month computed from a copy of the published days, reported materialized since, was loaded: "
        f"{failure_text(loaded) or 'success'}")
    assert _published_by_region(world, "published_monthly_revenue", "month") == {}


@pytest.mark.parametrize("how", ["checks", "checks_for_assets"])
def test_a_job_selecting_a_tables_blocking_checks_alone_writes_nothing(world, how):
    """What held: a job the team defines over the table's checks alone (`AssetSelection.checks(...)`
    of the blocking gates, or `checks_for_assets`) runs the target's body with the materialization
    unselected; it is refused before it writes, whatever the checks' blocking says."""
    from backfill_assets.defs.replayable import make_replayable_table
    from backfill_assets.defs.resources import WarehouseResource
    from backfill_assets.demo.definitions import ORDERS, PARTITIONS
    from backfill_assets.demo.revenue import DAILY_REVENUE
    from backfill_assets.demo.sample import generate_orders
    from tests.world import START

    with world.warehouse().session() as session:
        generate_orders(session, start=START, days=3, rows_per_day=5, seed=3)
    table = make_replayable_table(DAILY_REVENUE, PARTITIONS)
    selection = (dg.AssetSelection.checks(*[dg.AssetCheckKey(dg.AssetKey("daily_revenue"), name)
                                            for name in ("no_duplicate_business_keys", "metrics_match_source")])
                 if how == "checks" else dg.AssetSelection.checks_for_assets("daily_revenue"))
    job = dg.define_asset_job("gates_only", selection=selection)
    defs = dg.Definitions(assets=[ORDERS, *table.assets], jobs=[job],
                          resources={"warehouse": WarehouseResource(home=str(world.home))},
                          executor=dg.in_process_executor)
    day = "2026-01-02"
    ran = defs.resolve_job_def("gates_only").execute_in_process(
        instance=world.instance, tags={"dagster/partition": day}, raise_on_error=False)
    assert not ran.success and "checks alone" in failure_text(ran), failure_text(ran) or "success"
    assert world.rows("daily_revenue", day) == 0
    assert world.sql("SELECT count(*) FROM backfill_control.writes")[0][0] == 0


def _defs_with_a_month_whose_reads_cannot_be_told(world):
    """The days and a month the team since declared with a TIMESTAMPTZ `month` beside the days' DATE
    (an edge refused in one line: which days a month reads depends on the session's time zone)."""
    path = world.root / "defs_tz_month.py"
    path.write_text(
        "import dataclasses\n"
        "import dagster as dg\n"
        "from backfill_assets.defs.replayable import make_replayable_table\n"
        "from backfill_assets.defs.resources import backfill_resources\n"
        "from backfill_assets.demo.definitions import MONTHS, ORDERS, PARTITIONS\n"
        "from backfill_assets.demo.revenue import DAILY_REVENUE, MONTHLY_REVENUE\n"
        "month = dataclasses.replace(MONTHLY_REVENUE, contract=tuple(dataclasses.replace(c, type='TIMESTAMPTZ')\n"
        "    if c.name == 'month' else c for c in MONTHLY_REVENUE.contract))\n"
        "days = make_replayable_table(DAILY_REVENUE, PARTITIONS, group_name='revenue')\n"
        "rollup = make_replayable_table(month, MONTHS, group_name='revenue')\n"
        "defs = dg.Definitions(assets=[ORDERS, *days.assets, *rollup.assets], sensors=days.sensors,\n"
        f"                      resources=backfill_resources({str(world.home)!r}, {world.url or ''!r}),\n"
        "                      executor=dg.in_process_executor)\n", encoding="utf-8")
    return path


def test_a_rollback_is_not_held_by_a_month_edge_the_definitions_refuse(world, monkeypatch, capsys):
    """A plan over the days is run and published; the team then deploys a month whose edge from the
    days is refused (TIMESTAMPTZ beside DATE): no run can write that month. `backfill rollback` asks
    the loaded graph which month partitions read the plan's days, and the refusal of the edge stopped
    the rollback of the days, the one way out of a plan consumers saw."""
    from tests.test_graph import _january_and_a_plan_over_its_days, _published_by_region

    _january_and_a_plan_over_its_days(world)
    before = _published_by_region(world, "published_revenue", "order_date")
    assert world.cli("publish", "fix") == 0
    assert _published_by_region(world, "published_revenue", "order_date") != before
    monkeypatch.setenv("BACKFILL_DEFS", str(_defs_with_a_month_whose_reads_cannot_be_told(world)))
    capsys.readouterr()
    code = world.cli("rollback", "fix")
    said = capsys.readouterr()
    assert code == 0, said.err
    assert _published_by_region(world, "published_revenue", "order_date") == before


@pytest.mark.separate_processes
@pytest.mark.parametrize("schema", ['"main"', "main ", " Main"])
def test_an_asset_whose_schema_metadata_names_main_in_another_spelling_refuses_the_table_it_writes(
        world, monkeypatch, schema):
    """A team's pandas asset keyed `staging/published_revenue` with `schema` metadata naming `main`
    quoted or with a space: dagster-duckdb writes `{schema}.published_revenue`, which DuckDB reads as
    main.published_revenue, the table consumers read; the namesake check compared the metadata's
    text with `main` and let the table run and publish beside it."""
    import pandas as pd
    from dagster_duckdb_pandas import DuckDBPandasIOManager

    from backfill_assets.defs.replayable import make_replayable_table
    from backfill_assets.defs.resources import WarehouseResource
    from backfill_assets.demo.definitions import ORDERS, PARTITIONS
    from backfill_assets.demo.revenue import DAILY_REVENUE
    from tests.test_team_graph import _run

    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    day = "2026-01-02"

    @dg.asset(key=["staging", "published_revenue"], partitions_def=PARTITIONS,
              metadata={"partition_expr": "order_date", "schema": schema})
    def quick_fix(context: dg.AssetExecutionContext):
        return pd.DataFrame({"order_date": [pd.Timestamp(context.partition_key)], "region": ["north"], "orders": [1],
                             "gross": [1.0], "refunds": [0.0], "net_revenue": [1_000_000.0], "customers": [1]})

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
        f"the table ran beside an asset whose schema metadata {schema!r} names main: {failure_text(ours) or 'success'}")
    assert world.rows("published_revenue", day) == 0

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


# --- a rollup's mapping that names other upstream partitions than its SQL and gates read ----------

def _static_spec(name: str, source: str, event_id: str | None = None):
    from backfill_assets.table import Column, Metric, TableSpec

    return TableSpec(name=name, source=source, publish_as=f"published_{name}",
                     select_sql=f"SELECT region, sum(n) AS n FROM {source} WHERE region = $partition GROUP BY region",
                     partition_column="region", source_partition_column="region", business_keys=("region",),
                     contract=(Column("region", "VARCHAR", nullable=False), Column("n", "BIGINT")),
                     metrics=(Metric("n", "sum(n)", "sum(n)"),), source_event_id=event_id)


def _count(world, table: str, column: str, value) -> int:
    exists = world.sql("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [table])[0][0]
    return int(world.sql(f"SELECT count(*) FROM {table} WHERE {column} = ?", [value])[0][0]) if exists else 0


class _FirstRegionOnly(dg.PartitionMapping):
    """A team's own mapping: "every region's copy depends on the first region's" (a baseline)."""

    @property
    def description(self) -> str:
        return "every region reads the first region"

    def validate_partition_mapping(self, upstream_partitions_def, downstream_partitions_def):
        pass

    def get_downstream_partitions_for_partitions(self, upstream_partitions_subset, upstream_partitions_def,
                                                 downstream_partitions_def, current_time=None,
                                                 dynamic_partitions_store=None):
        first = upstream_partitions_def.get_partition_keys()[0]
        hit = first in upstream_partitions_subset.get_partition_keys()
        return downstream_partitions_def.subset_with_partition_keys(
            downstream_partitions_def.get_partition_keys() if hit else [])

    def get_upstream_mapped_partitions_result_for_partitions(self, downstream_partitions_subset,
                                                             downstream_partitions_def, upstream_partitions_def,
                                                             current_time=None, dynamic_partitions_store=None):
        from dagster._core.definitions.partitions.mapping import UpstreamPartitionsResult

        first = upstream_partitions_def.get_partition_keys()[0]
        return UpstreamPartitionsResult(
            partitions_subset=upstream_partitions_def.subset_with_partition_keys([first]),
            required_but_nonexistent_subset=upstream_partitions_def.empty_subset())


@pytest.mark.separate_processes
@pytest.mark.parametrize("mapping", ["specific", "static", "custom"])
def test_a_static_rollup_whose_mapping_names_other_regions_never_reads_a_region_that_failed_its_gates(
        world, monkeypatch, mapping):
    """`by_region` (static regions, from raw events) feeds `region_copy` (the same regions, its SQL
    `WHERE region = $partition`, its gates comparing it with by_region's rows of its own region). The
    team's mapping for that edge says something else: `SpecificPartitionsPartitionMapping(["eu"])`,
    a `StaticPartitionMapping` pairing the regions crosswise, or their own `PartitionMapping`
    ("every region depends on the first"). by_region `us` fails its duplicates gate; region_copy
    `us` was checked against `eu` (passed), computed from `us`'s failed rows, passed its own gates
    (it adds up to them) and was published."""
    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    world.run_sql("CREATE TABLE events (region VARCHAR, n BIGINT, event_id BIGINT)")
    world.run_sql("INSERT INTO events VALUES ('eu', 5, 1), ('eu', 7, 2), ('us', 11, 3), ('us', 13, 4), ('us', 13, 4)")
    regions = dg.StaticPartitionsDefinition(["eu", "us"])
    chosen = (dg.SpecificPartitionsPartitionMapping(["eu"]) if mapping == "specific" else
              dg.StaticPartitionMapping({"eu": "us", "us": "eu"}) if mapping == "static" else _FirstRegionOnly())
    raw = make_replayable_table(_static_spec("by_region", "events", "event_id"), regions)
    copy = make_replayable_table(_static_spec("region_copy", "by_region"), regions, source_partition_mapping=chosen)
    defs = dg.Definitions(assets=[dg.AssetSpec("events"), *raw.assets, *copy.assets],
                          resources={"warehouse": WarehouseResource(home=str(world.home))},
                          executor=dg.in_process_executor)
    assert _run(world, defs, ["by_region", "published_by_region"], ["eu"]).success
    failed = _run(world, defs, ["by_region"], ["us"])
    assert not failed.success
    assert world.sql("SELECT count(*) FROM backfill_control.gate_results WHERE NOT passed")[0][0] > 0
    assert _count(world, "published_by_region", "region", "us") == 0  # consumers never saw us's rows

    copied = _run(world, defs, ["region_copy", "published_region_copy"], ["us"])
    assert not copied.success and "by_region us failed" in failure_text(copied), failure_text(copied) or "success"
    assert _count(world, "published_region_copy", "region", "us") == 0, (
        "consumers read region_copy us, computed from by_region us, whose gates failed")


@pytest.mark.separate_processes
def test_a_rollup_reading_its_upstream_by_another_column_than_its_partition_column_is_refused(world, monkeypatch):
    """`by_region` (partitioned by region) holds each region's rows with their `zone`; `by_zone`
    reads it by zone (`source_partition_column="zone"`, `WHERE zone = $partition`) and its team's
    `StaticPartitionMapping({"eu": "europe"})` forgot that `us` rows are in `europe` too. by_region
    `us` fails its duplicates gate; by_zone `europe` was checked against `eu` alone, computed from
    `us`'s failed rows, passed its gates (it adds up to them) and was published. Which partitions
    a zone reads is in the data, not the definitions: such an edge is refused in one line."""
    from backfill_assets.table import Column, Metric, TableSpec

    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    world.run_sql("CREATE TABLE events (region VARCHAR, zone VARCHAR, n BIGINT, event_id BIGINT)")
    world.run_sql("INSERT INTO events VALUES ('eu', 'europe', 5, 1), ('us', 'europe', 11, 3), ('us', 'europe', 11, 3)")
    by_region = TableSpec(name="by_region", source="events", publish_as="published_by_region",
                          select_sql="SELECT region, zone, sum(n) AS n FROM events WHERE region = $partition "
                                     "GROUP BY ALL", partition_column="region", source_partition_column="region",
                          business_keys=("region", "zone"), source_event_id="event_id",
                          contract=(Column("region", "VARCHAR", nullable=False),
                                    Column("zone", "VARCHAR", nullable=False), Column("n", "BIGINT")),
                          metrics=(Metric("n", "sum(n)", "sum(n)"),))
    by_zone = TableSpec(name="by_zone", source="by_region", publish_as="published_by_zone",
                        select_sql="SELECT zone, sum(n) AS n FROM by_region WHERE zone = $partition GROUP BY zone",
                        partition_column="zone", source_partition_column="zone", business_keys=("zone",),
                        contract=(Column("zone", "VARCHAR", nullable=False), Column("n", "BIGINT")),
                        metrics=(Metric("n", "sum(n)", "sum(n)"),))
    raw = make_replayable_table(by_region, dg.StaticPartitionsDefinition(["eu", "us"]))
    zones = make_replayable_table(by_zone, dg.StaticPartitionsDefinition(["europe"]),
                                  source_partition_mapping=dg.StaticPartitionMapping({"eu": "europe"}))
    defs = dg.Definitions(assets=[dg.AssetSpec("events"), *raw.assets, *zones.assets],
                          resources={"warehouse": WarehouseResource(home=str(world.home))},
                          executor=dg.in_process_executor)
    assert _run(world, defs, ["by_region", "published_by_region"], ["eu"]).success
    assert not _run(world, defs, ["by_region"], ["us"]).success  # its duplicates gate fails

    zoned = _run(world, defs, ["by_zone", "published_by_zone"], ["europe"])
    assert not zoned.success and "by_zone reads by_region by zone, but by_region is partitioned by region" in \
        failure_text(zoned), failure_text(zoned) or "success"
    assert _count(world, "published_by_zone", "zone", "europe") == 0, (
        "consumers read by_zone europe, computed from by_region us, whose gates failed")


def test_a_month_in_another_time_zone_than_its_days_is_refused_in_one_line_naming_the_fix(world, run_cli, tmp_path,
                                                                                       monkeypatch):
    """A team's month declared `MonthlyPartitionsDefinition(..., timezone="America/New_York")` over
    UTC days. Dagster maps no time window across time zones (its runs of the month fail before any
    code of ours), and `plan validate` of a plan over the days ended in Dagster's internal error from
    inside the graph (`DagsterInvalidDefinitionError: Timezones America/New_York and UTC don't
    match`, a traceback), naming neither the table nor what to change."""
    from tests.plans import complete_plan, write_plan

    defs = tmp_path / "team_defs.py"
    defs.write_text(
        "import dagster as dg\n"
        "from backfill_assets.defs.replayable import make_replayable_table\n"
        "from backfill_assets.defs.resources import backfill_resources\n"
        "from backfill_assets.demo.definitions import ORDERS, PARTITIONS\n"
        "from backfill_assets.demo.revenue import DAILY_REVENUE, MONTHLY_REVENUE\n"
        "months = dg.MonthlyPartitionsDefinition(start_date='2026-01-01', timezone='America/New_York')\n"
        "days = make_replayable_table(DAILY_REVENUE, PARTITIONS)\n"
        "month = make_replayable_table(MONTHLY_REVENUE, months)\n"
        "defs = dg.Definitions(assets=[ORDERS, *days.assets, *month.assets], sensors=days.sensors,\n"
        f"                      resources=backfill_resources({str(world.home)!r}))\n", encoding="utf-8")
    document = complete_plan(plan_id="fix", start="2026-01-05", end="2026-01-08", proof=("2026-01-05",), per_run=4)
    path = write_plan(world.root / "plans" / "fix.yaml", document)
    monkeypatch.setenv("BACKFILL_DEFS", str(defs))
    shown = run_cli("plan", "validate", str(path))
    said = shown.out + shown.err
    assert shown.code != 0 and "Traceback" not in said, said
    assert "monthly_revenue's partitions are in America/New_York and daily_revenue's in UTC" in said, said
    assert "timezone='UTC'" in said, said


@pytest.mark.separate_processes
def test_a_month_over_another_code_locations_copy_of_the_published_days_is_refused(world, monkeypatch):
    """The team's `clean_days` (deps published_revenue, their SQL copying the days consumers read)
    lives in its own code location; the month's location declares the month alone, its `source`
    clean_days (an external asset there, with no deps). The walk over the loaded definitions saw no
    ancestor, so the month was loaded and published from the published days as from a raw source,
    and no plan over the days would recompute it. Dagster's instance, shared by the locations,
    records on each materialization of clean_days the assets it was computed from."""
    import dataclasses

    from dagster_duckdb import DuckDBResource

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
        loaded = graph_run(world, months, ["monthly_revenue", "published_monthly_revenue"], [MONTH],
                           {"dagster/backfill": "ui-bf"})
    assert not loaded.success and "which is computed from published_revenue" in failure_text(loaded), (
        f"a month computed from another location's copy of the published days was loaded: "
        f"{failure_text(loaded) or 'success'}")
    assert _published_by_region(world, "published_monthly_revenue", "month") == {}

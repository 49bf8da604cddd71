"""A team's own Dagster project around the asset graph: a partition mapping override, a plain asset
between the published days and a replayable month, an asset the IO manager writes into one of the
tables. Each test failed on the code before its fix (found by an attack). No `from __future__ import
annotations`: Dagster reads the assets' `context` annotations as types."""

import dataclasses
import datetime as dt

import dagster as dg
import pytest

from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.defs.resources import WarehouseResource
from backfill_assets.demo.definitions import MONTHS, ORDERS, PARTITIONS
from backfill_assets.demo.revenue import DAILY_REVENUE, MONTHLY_REVENUE
from backfill_assets.demo.sample import generate_orders
from tests.world import START, failure_text

FEBRUARY = "2026-02-01"


def _quick_fix(key, **metadata) -> dg.AssetsDefinition:
    """A team's pandas asset keyed `key`, written by dagster-duckdb's IO manager: one row a day whose
    net revenue no gate checked (`metadata`: its asset metadata beside `partition_expr`)."""

    @dg.asset(key=key, partitions_def=PARTITIONS, metadata={"partition_expr": "order_date", **metadata})
    def quick_fix(context: dg.AssetExecutionContext):
        import pandas as pd

        return pd.DataFrame({"order_date": [pd.Timestamp(context.partition_key)], "region": ["north"], "orders": [1],
                             "gross": [1.0], "refunds": [0.0], "net_revenue": [1_000_000.0], "customers": [1]})

    return quick_fix


def _days(first: dt.date, last: dt.date) -> list[str]:
    return [(first + dt.timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]


def _run(world, defs: dg.Definitions, assets: list[str], partitions: list[str]):
    tags = ({"dagster/partition": partitions[0]} if len(partitions) == 1 else
            {"dagster/asset_partition_range_start": partitions[0],
             "dagster/asset_partition_range_end": partitions[-1]})
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(instance=world.instance, asset_selection=[dg.AssetKey(a) for a in assets],
                                  tags=tags, raise_on_error=False)


def test_a_month_whose_partition_mapping_names_other_days_than_its_sql_reads_publishes_failed_days(world):
    """A team engineer declares the month with a partition mapping override (here "the month before":
    `TimeWindowPartitionMapping(start_offset=-1, end_offset=-1)`, kept from a prior-month baseline
    asset) while its SQL reads its own month's days, as the demo's does. Every check that a month
    reads only days whose gates passed and that consumers saw asks the mapping: February's month is
    checked against January's days (all passed), computed from February's days (one failed its
    duplicates gate and was never published), passes its own gates (it adds up to those days) and
    reaches consumers. The days a month's gates compare it with are its window's, whatever the mapping."""
    with world.warehouse().session() as session:
        generate_orders(session, start=START, days=59, rows_per_day=12, seed=5)
    daily = make_replayable_table(DAILY_REVENUE, PARTITIONS, group_name="revenue")
    month = make_replayable_table(MONTHLY_REVENUE, MONTHS, group_name="revenue",
                                  source_partition_mapping=dg.TimeWindowPartitionMapping(start_offset=-1,
                                                                                         end_offset=-1))
    defs = dg.Definitions(assets=[ORDERS, *daily.assets, *month.assets],
                          resources={"warehouse": WarehouseResource(home=str(world.home))},
                          executor=dg.in_process_executor)
    good = _days(START, dt.date(2026, 2, 9))
    assert _run(world, defs, ["daily_revenue", "published_revenue"], good).success
    # February 10th's orders hold an event twice: its day is written, its duplicates gate fails
    world.run_sql("INSERT INTO orders SELECT * FROM orders WHERE order_date = '2026-02-10' LIMIT 1")
    rest = _days(dt.date(2026, 2, 10), dt.date(2026, 2, 28))
    written = _run(world, defs, ["daily_revenue"], rest)
    assert not written.success and "duplicate" in failure_text(written).lower() + str(
        world.sql("SELECT gate FROM backfill_control.gate_results WHERE NOT passed"))
    assert world.rows("published_revenue", "2026-02-10") == 0  # consumers never saw the failed day

    computed = _run(world, defs, ["monthly_revenue", "published_monthly_revenue"], [FEBRUARY])
    assert not computed.success and "reads daily_revenue" in failure_text(computed), failure_text(computed)
    seen = world.sql("SELECT count(*) FROM published_monthly_revenue WHERE month = ?", [FEBRUARY]) \
        if world.sql("SELECT count(*) FROM information_schema.tables WHERE table_name = "
                     "'published_monthly_revenue'")[0][0] else [(0,)]
    assert seen == [(0,)], (
        f"consumers read February's month ({seen[0][0]} rows, run success={computed.success}) computed from "
        "2026-02-10, whose gates failed and which was never published")


def _clean_days_defs(world):
    """The team's definitions: the daily table; their own plain asset `clean_days` (their SQL through
    their dagster-duckdb `DuckDBResource`) copying the days consumers read, `published_revenue`; and a
    replayable monthly rollup whose `source` is clean_days."""
    path = world.root / "defs_clean_days.py"
    path.write_text(
        "import dataclasses\n"
        "import dagster as dg\n"
        "from dagster_duckdb import DuckDBResource\n"
        "from backfill_assets.defs.replayable import make_replayable_table\n"
        "from backfill_assets.defs.resources import backfill_resources\n"
        "from backfill_assets.demo.definitions import MONTHS, ORDERS, PARTITIONS\n"
        "from backfill_assets.demo.revenue import DAILY_REVENUE, MONTHLY_REVENUE\n"
        "@dg.asset(deps=['published_revenue'])\n"
        "def clean_days(duckdb: DuckDBResource) -> None:\n"
        "    with duckdb.get_connection() as con:\n"
        "        con.execute('CREATE OR REPLACE TABLE clean_days AS SELECT * FROM published_revenue')\n"
        "month = dataclasses.replace(MONTHLY_REVENUE, source='clean_days',\n"
        "                            select_sql=MONTHLY_REVENUE.select_sql.replace('daily_revenue', 'clean_days'))\n"
        "days = make_replayable_table(DAILY_REVENUE, PARTITIONS, group_name='revenue')\n"
        "rollup = make_replayable_table(month, MONTHS, group_name='revenue')\n"
        "defs = dg.Definitions(assets=[ORDERS, *days.assets, clean_days, *rollup.assets], sensors=days.sensors,\n"
        f"                      resources={{**backfill_resources({str(world.home)!r}, {world.url or ''!r}),\n"
        f"                                 'duckdb': DuckDBResource(database={str(world.warehouse_path)!r})}},\n"
        "                      executor=dg.in_process_executor)\n", encoding="utf-8")
    return path


@pytest.mark.separate_processes
def test_a_month_computed_through_a_teams_plain_asset_from_the_published_days_is_never_left_stale(
        world, monkeypatch, capsys):
    """A month whose `source` is the days' published table is refused ("nor is one computed from
    another table's published table": no plan over the days would recompute or hold it back). A team
    engineer puts their own plain asset between them: `clean_days` (deps published_revenue, their
    SQL) and the month's `source` clean_days. The month is taken for one over a raw source: loaded
    and published from the published days, then a plan over the days publishes new days beside it,
    and consumers read a month that does not add up to them."""
    from tests.plans import complete_plan, write_plan
    from tests.test_graph import (
        FIX_DAYS,
        MONTH,
        _january_days_published,
        _publish_fix_and_check_the_month_adds_up,
        _published_by_region,
        deployed_defs,
    )
    from tests.test_graph import run as graph_run

    _january_days_published(world)
    defs = deployed_defs(_clean_days_defs(world), monkeypatch)
    job = defs.resolve_implicit_global_asset_job_def()
    with world.deployed():
        assert job.execute_in_process(instance=world.instance, asset_selection=[dg.AssetKey("clean_days")],
                                      raise_on_error=False).success
        loaded = graph_run(world, defs, ["monthly_revenue", "published_monthly_revenue"], [MONTH],
                           {"dagster/backfill": "ui-bf"})
    if not loaded.success:  # refused: its source is computed from a table backfill publishes
        assert "computed from clean_days, which is computed from published_revenue" in failure_text(loaded), \
            failure_text(loaded)
        assert _published_by_region(world, "published_monthly_revenue", "month") == {}
        return
    assert _published_by_region(world, "published_monthly_revenue", "month") == \
        _published_by_region(world, "published_revenue", "order_date")
    plan = complete_plan(plan_id="fix", start=FIX_DAYS[0], end=FIX_DAYS[-1], proof=(FIX_DAYS[0],), per_run=4)
    plan["downstream"].append({"asset": "clean_days", "owners": ["finance-bi"]})  # as `plan validate` asks
    world.approve(write_plan(world.root / "plans" / "fix.yaml", plan))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    _publish_fix_and_check_the_month_adds_up(world, capsys)


@pytest.mark.separate_processes
@pytest.mark.parametrize("key", [["main", "published_revenue"], ["Published_Revenue"],
                                 ["staging", "published_revenue"]])
def test_a_teams_plain_asset_whose_io_manager_table_is_the_published_table_is_refused_beside_it(world,
                                                                                               monkeypatch, key):
    """"A table is one asset's: a second asset key naming the same table ... in the definitions ...
    is refused before it writes." A team engineer adds a pandas asset keyed `main/published_revenue`
    (a quick fix of what finance reads) to the definitions that declare the table: dagster-duckdb's
    `DuckDBPandasIOManager` names its table `main.published_revenue`, the published table, and each
    Materialize of it replaces partitions consumers read with a DataFrame no gate checked. The
    table's runs and publish went on beside it as the table's only asset. dagster-duckdb takes the
    schema from the asset's metadata, then the IO manager's `schema` config, then the key's prefix:
    configured `schema="main"` (as the team's is), `staging/published_revenue` writes the published
    table too, and the check had taken the prefix for its schema (found by an attack)."""
    from dagster_duckdb_pandas import DuckDBPandasIOManager

    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    day = "2026-01-02"

    quick_fix = _quick_fix(key)

    table = make_replayable_table(DAILY_REVENUE, PARTITIONS)
    defs = dg.Definitions(assets=[ORDERS, *table.assets, quick_fix],
                          resources={"warehouse": WarehouseResource(home=str(world.home)),
                                     "io_manager": DuckDBPandasIOManager(database=str(world.warehouse_path),
                                                                         schema="main")})
    ours = _run(world, defs, ["daily_revenue", "published_revenue"], [day])
    assert not ours.success and "/".join(key) in failure_text(ours), (
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


@pytest.mark.separate_processes
def test_an_asset_whose_io_manager_schema_is_set_at_launch_refuses_the_table_it_can_write(world, monkeypatch):
    """A team's pandas asset keyed `staging/published_revenue`, its `DuckDBPandasIOManager`
    configured `schema="staging"` in the definitions: the namesake check read that configured schema
    and let the table run beside it. Resource config is run config: a Materialize from the launchpad
    with `resources: {io_manager: {config: {schema: main, ...}}}` (or an IO manager
    `configure_at_launch()`) writes `main.published_revenue`, the table consumers read, with a
    DataFrame no gate checked. Only the asset's own `schema` metadata is fixed by the definitions."""
    from dagster_duckdb_pandas import DuckDBPandasIOManager

    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    day = "2026-01-02"
    database = str(world.warehouse_path)

    quick_fix = _quick_fix(["staging", "published_revenue"])

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
@pytest.mark.parametrize("reported", [False, True], ids=["computed", "reported-since"])
def test_a_month_over_another_code_locations_copy_of_the_published_days_is_refused(world, monkeypatch, reported):
    """The team's `clean_days` (deps published_revenue, their SQL copying the days consumers read)
    lives in its own code location; the month's location declares the month alone, its `source`
    clean_days (an external asset there, with no deps). The walk over the loaded definitions saw no
    ancestor, so the month was loaded and published from the published days as from a raw source,
    and no plan over the days would recompute it. Dagster's instance, shared by the locations,
    records on each materialization of clean_days the assets it was computed from (found by an
    attack). `reported-since`: someone then pressed "Report materialization" on clean_days (or an op
    logged an `AssetMaterialization` of it), an event with no data provenance on top, and the month
    was loaded again; a review found it: reported events are passed over."""
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
        if reported:
            world.instance.report_runless_asset_event(dg.AssetMaterialization("clean_days"))
        loaded = graph_run(world, months, ["monthly_revenue", "published_monthly_revenue"], [MONTH],
                           {"dagster/backfill": "ui-bf"})
    assert not loaded.success and "which is computed from published_revenue" in failure_text(loaded), (
        f"a month computed from another location's copy of the published days was loaded: "
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
@pytest.mark.parametrize("schema", ['"main"', "main ", " Main", "{catalog}.main", "", "main/**/"])
def test_an_asset_whose_schema_metadata_names_main_in_another_spelling_refuses_the_table_it_writes(
        world, monkeypatch, schema):
    """A team's pandas asset keyed `staging/published_revenue` with `schema` metadata naming `main`
    quoted or with a space (found by a review), through the warehouse's catalog (`warehouse.main`, as
    a team attaching several DuckDB files qualifies its schemas: found by an attack), empty (the IO
    manager's own `schema` config then decides, `main` here) or with a comment (`main/**/`; both
    found by a review): dagster-duckdb writes `{schema}.published_revenue`, which DuckDB reads as
    main.published_revenue, the table consumers read; the namesake check compared the metadata's
    text with `main` and let the table run and publish beside it."""
    from dagster_duckdb_pandas import DuckDBPandasIOManager

    from backfill_assets.defs.replayable import make_replayable_table
    from backfill_assets.defs.resources import WarehouseResource
    from backfill_assets.demo.definitions import ORDERS, PARTITIONS
    from backfill_assets.demo.revenue import DAILY_REVENUE
    from tests.test_team_graph import _run

    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    day = "2026-01-02"
    schema = schema.format(catalog=world.warehouse_path.stem)
    quick_fix = _quick_fix(["staging", "published_revenue"], schema=schema)

    table = make_replayable_table(DAILY_REVENUE, PARTITIONS)
    defs = dg.Definitions(assets=[ORDERS, *table.assets, quick_fix],
                          resources={"warehouse": WarehouseResource(home=str(world.home)),
                                     "io_manager": DuckDBPandasIOManager(database=str(world.warehouse_path),
                                                                         schema="main")})
    launched = defs.resolve_implicit_global_asset_job_def().execute_in_process(  # reachable: writes main's table
        instance=world.instance, asset_selection=[dg.AssetKey(["staging", "published_revenue"])],
        tags={"dagster/partition": day}, raise_on_error=False)
    assert launched.success and world.rows("published_revenue", day) == 1, failure_text(launched)
    world.run_sql("DROP TABLE published_revenue")

    ours = _run(world, defs, ["daily_revenue", "published_revenue"], [day])
    assert not ours.success and "staging/published_revenue" in failure_text(ours), (
        f"the table ran beside an asset whose schema metadata {schema!r} names main: {failure_text(ours) or 'success'}")
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


FILES_JOB = '''
import dagster as dg
import pandas as pd
from dagster_duckdb_pandas import DuckDBPandasIOManager
from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.demo.definitions import ORDERS, PARTITIONS
from backfill_assets.demo.revenue import DAILY_REVENUE
from backfill_assets.defs.resources import backfill_resources

@dg.op(out={"published_revenue": dg.Out(io_manager_key=KEY)})
def extract_revenue():
    return pd.DataFrame({"region": ["north"], "net_revenue": [1.0]})

@dg.job
def revenue_report():
    extract_revenue()

table = make_replayable_table(DAILY_REVENUE, PARTITIONS)
defs = dg.Definitions(assets=[ORDERS, *table.assets], jobs=[revenue_report], sensors=table.sensors,
                      resources={**backfill_resources(), "files": FILES, "memory": dg.mem_io_manager,
                                 "io_manager": DuckDBPandasIOManager(database=WAREHOUSE, schema="main")})
'''


@pytest.mark.separate_processes
@pytest.mark.parametrize(("key", "files"), [("files", "dg.FilesystemIOManager(base_dir=BASE)"),
                                             ("files", "dg.fs_io_manager"), ("memory", "None")])
def test_an_op_output_named_like_the_table_but_kept_in_files_or_memory_does_not_refuse_it(
        world, monkeypatch, run_cli, key, files):
    """The team's report job names an op's output `published_revenue` and keeps it with Dagster's
    filesystem (or in-memory) IO manager: it writes a pickle under the run's storage, never a warehouse
    table. The namesake check read every op output as dagster-duckdb's and refused every load and
    plan of daily_revenue (found by a review)."""
    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    day = "2026-01-02"
    module = world.root / "team_report.py"
    module.write_text(f"WAREHOUSE = {str(world.warehouse_path)!r}\nBASE = {str(world.root / 'files')!r}\n"
                      f"KEY = {key!r}\nimport dagster as dg\nFILES = {files}\n{FILES_JOB}", encoding="utf-8")
    loaded = run_cli("load", "daily_revenue", "--start", day, "--end", day, "--defs", str(module))
    assert loaded.code == 0, f"refused beside an op output kept in {files}: {loaded.out}{loaded.err}"
    assert world.rows("daily_revenue", day) > 0


def _many_asset_jobs() -> dg.Definitions:
    partitions = dg.DailyPartitionsDefinition(start_date="2020-01-01")
    assets = []
    for i in range(200):
        @dg.asset(name=f"step_{i}", partitions_def=partitions, deps=[f"step_{i - 1}"] if i else [])
        def step() -> None:
            return None

        assets.append(step)
    jobs = [dg.define_asset_job(f"from_{i}", selection=dg.AssetSelection.assets(f"step_{i}").downstream())
            for i in range(60)]
    return dg.Definitions(assets=assets, jobs=jobs)


def test_the_implicit_job_of_definitions_with_many_asset_jobs_does_not_build_them_all():
    """A team's definitions with many asset jobs (200 assets in a chain, 60 jobs from some of them on):
    every `backfill run` and `load` (and every run worker) built each asset job to read the op jobs'
    outputs, seconds for each command where the implicit job alone takes a tenth of one; asset jobs hold
    no output the implicit job does not (found by a review)."""
    import time
    import warnings

    from backfill_assets.graph import implicit_job

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        started = time.perf_counter()
        _many_asset_jobs().get_repository_def().get_all_jobs()
        every_job = time.perf_counter() - started
        started = time.perf_counter()
        implicit_job(_many_asset_jobs())
        ours = time.perf_counter() - started
    assert ours < every_job / 3, f"implicit_job took {ours:.2f}s, building every job {every_job:.2f}s"



SPELLED_JOB = '''
import dagster as dg
import pandas as pd
from pathlib import Path
from dagster_duckdb_pandas import DuckDBPandasIOManager
from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.demo.definitions import ORDERS, PARTITIONS
from backfill_assets.demo.revenue import DAILY_REVENUE
from backfill_assets.defs.resources import backfill_resources

CATALOG = Path(WAREHOUSE).stem

@dg.op(out={"extract": dg.Out(metadata=eval(METADATA))})
def extract_revenue():
    return pd.DataFrame({"order_date": [pd.Timestamp("2026-01-02")], "region": ["north"], "orders": [1],
                         "gross": [1.0], "refunds": [0.0], "net_revenue": [1_000_000.0], "customers": [1]})

@dg.job
def legacy_extract():
    extract_revenue()

table = make_replayable_table(DAILY_REVENUE, PARTITIONS)
defs = dg.Definitions(assets=[ORDERS, *table.assets], jobs=[legacy_extract], sensors=table.sensors,
                      resources={**backfill_resources(),
                                 "io_manager": DuckDBPandasIOManager(database=WAREHOUSE, schema="main")})
'''


@pytest.mark.separate_processes
@pytest.mark.parametrize("metadata", ['{"table": \'"published_revenue"\'}', '{"table": "published_revenue "}',
                                      '{"table": "main.published_revenue", "schema": CATALOG}'])
def test_an_op_output_whose_table_metadata_spells_the_published_table_otherwise_refuses_the_table(
        world, monkeypatch, run_cli, metadata):
    """The team's older op job keeps its output in a table its `table` metadata names: quoted
    (`"published_revenue"`), with a space after it, or schema-qualified under a catalog `schema`
    (`warehouse` + `main.published_revenue`). dagster-duckdb writes `main."published_revenue"`,
    `main.published_revenue ` and `warehouse.main.published_revenue`: main.published_revenue each
    time, the table consumers read, replaced whole. The namesake check compared the metadata's text
    with the table's name and let the table load and publish beside the job (found by a review)."""
    import importlib.util

    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    day = "2026-01-02"
    module = world.root / "team_spelled.py"
    module.write_text(f"WAREHOUSE = {str(world.warehouse_path)!r}\nMETADATA = {metadata!r}\n{SPELLED_JOB}",
                      encoding="utf-8")
    spec = importlib.util.spec_from_file_location("team_spelled", module)
    assert spec is not None and spec.loader is not None
    team = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(team)
    launched = team.defs.get_job_def("legacy_extract").execute_in_process(instance=world.instance,
                                                                          raise_on_error=False)
    assert launched.success and world.rows("published_revenue", day) == 1, failure_text(launched)
    world.run_sql("DROP TABLE published_revenue")

    loaded = run_cli("load", "daily_revenue", "--start", day, "--end", day, "--defs", str(module))
    assert loaded.code != 0 and "extract_revenue.extract" in loaded.out + loaded.err, (
        f"the table loaded beside an op job whose output the IO manager writes into its published table: "
        f"{loaded.out}{loaded.err}")
    assert world.rows("daily_revenue", day) == 0 and world.rows("published_revenue", day) == 0

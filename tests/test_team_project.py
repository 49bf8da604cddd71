"""A team's own Dagster project: their dagster-duckdb `DuckDBResource` under their key, and a pandas
asset reading the published table through `DuckDBPandasIOManager`, on a real DuckDB file and instance."""

from decimal import Decimal

import dagster as dg
import pandas as pd
import pytest
import yaml
from dagster_duckdb import DuckDBResource
from dagster_duckdb_pandas import DuckDBPandasIOManager

from backfill_assets.defs.component import ReplayableTableComponent
from backfill_assets.defs.replayable import PLAN_HINT, make_replayable_table
from backfill_assets.demo.definitions import ORDERS, PARTITIONS
from backfill_assets.demo.revenue import DAILY_REVENUE
from backfill_assets.errors import UsageError
from backfill_assets.warehouse import engine_for
from tests.pg_server import APP_ROLE
from tests.test_component import ATTRIBUTES
from tests.world import failure_text, keys

pytestmark = pytest.mark.separate_processes  # dagster-duckdb's DuckDBResource opens the file with its own configuration

SEEN: dict[str, pd.DataFrame] = {}


@dg.asset(partitions_def=PARTITIONS, ins={"published_revenue": dg.AssetIn()}, kinds={"pandas"})
def revenue_by_region(context: dg.AssetExecutionContext, published_revenue: pd.DataFrame) -> dg.MaterializeResult:
    """The team's consumer: the published days of its run, as a DataFrame the IO manager loaded."""
    SEEN[context.partition_key_range.start] = published_revenue
    return dg.MaterializeResult(metadata={"rows": len(published_revenue)})


def team_definitions(database: str) -> dg.Definitions:
    table = make_replayable_table(DAILY_REVENUE, PARTITIONS, warehouse_key="duckdb", owners=["team:finance"],
                                  tags={"domain": "revenue"}, kinds=["duckdb"],
                                  metadata={"dashboard": "https://bi.example/revenue"},
                                  publish_description="Revenue as finance reads it.")
    return dg.Definitions(assets=[ORDERS, *table.assets, revenue_by_region], sensors=table.sensors,
                          resources={"duckdb": DuckDBResource(database=database),
                                     "io_manager": DuckDBPandasIOManager(database=database)})


def run(defs: dg.Definitions, instance, selection: list[str], first: str, last: str):
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey(s) for s in selection],
                                  tags={"dagster/asset_partition_range_start": first,
                                        "dagster/asset_partition_range_end": last}, raise_on_error=False)


@pytest.fixture
def team(world, monkeypatch):
    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    return world


def test_a_pandas_consumer_reads_published_partitions_through_the_teams_duckdb_resource(team):
    defs = team_definitions(str(team.warehouse_path))
    first, last = keys(2, 4)[0], keys(2, 4)[-1]
    result = run(defs, team.instance, ["daily_revenue", "published_revenue", "revenue_by_region"], first, last)
    assert result.success, failure_text(result)
    frame = SEEN[first]
    expected = team.sql("SELECT order_date, region, net_revenue FROM published_revenue "
                        "WHERE order_date BETWEEN ? AND ? ORDER BY 1, 2", [first, last])
    assert len(expected) == 15 and len(frame) == len(expected)  # 5 regions a day, only the run's days
    got = sorted((str(r.order_date)[:10], r.region, Decimal(str(r.net_revenue))) for r in frame.itertuples())
    assert got == [(str(d), r, n) for d, r, n in expected]
    assert team.rows("daily_revenue", keys(1, 1)[0]) == 0  # outside the run: neither written nor loaded
    # the notice relay of the team's resource key relays through that resource
    context = dg.build_sensor_context(instance=team.instance, definitions=defs,
                                      resources={"duckdb": DuckDBResource(database=str(team.warehouse_path))})
    assert defs.resolve_sensor_def("backfill_notice_relay__duckdb").evaluate_tick(context).skip_message == \
        "no notice due"


def test_the_factory_passes_the_teams_metadata_tags_owners_and_kinds_to_both_assets():
    graph = team_definitions("/tmp/unused.duckdb").resolve_asset_graph()
    for name in ("daily_revenue", "published_revenue"):
        node = graph.get(dg.AssetKey(name))
        # where an IO manager finds a partition's rows: the published table's alone (the target's
        # hold rows no gate passed yet)
        assert ("partition_expr" in node.metadata) == (name == "published_revenue"), name
        assert node.metadata.get("schema") == ("main" if name == "published_revenue" else None)
        assert node.metadata["dashboard"] == "https://bi.example/revenue"
        assert node.owners == ["team:finance"]
        assert node.tags["domain"] == "revenue" and "dagster/kind/duckdb" in node.tags
    assert graph.get(dg.AssetKey("published_revenue")).description == "Revenue as finance reads it."
    # the team's description, then where a backfill starts, that rewriting history needs a plan
    assert graph.get(dg.AssetKey("daily_revenue")).description == f"{DAILY_REVENUE.description}\n\n{PLAN_HINT}"
    with pytest.raises(UsageError, match="may not set backfill_assets/spec"):
        make_replayable_table(DAILY_REVENUE, PARTITIONS, metadata={"backfill_assets/spec": "{}"})


def test_the_component_takes_the_teams_resource_key_and_metadata():
    attributes = {**ATTRIBUTES, "warehouse_key": "duckdb", "owners": ["team:finance"], "kinds": ["duckdb"],
                  "metadata": {"dashboard": "x"}, "tags": {"domain": "revenue"}}
    defs = ReplayableTableComponent.resolve_from_yaml(yaml.safe_dump(attributes)).build_defs(
        dg.ComponentTree.for_test().load_context)
    assert not defs.resources  # the team's definitions bind "duckdb"
    project = dg.Definitions.merge(defs, dg.Definitions(resources={"duckdb": DuckDBResource(database="/x.duckdb")}))
    node = project.resolve_asset_graph().get(dg.AssetKey("published_revenue"))
    assert node.metadata["partition_expr"] == "order_date" and node.metadata["dashboard"] == "x"
    assert node.owners == ["team:finance"] and node.tags["domain"] == "revenue"
    clash = ReplayableTableComponent.resolve_from_yaml(yaml.safe_dump({**attributes, "home": "/srv/backfill"}))
    with pytest.raises(UsageError, match="names warehouse_key 'duckdb' and also home"):
        clash.build_defs(dg.ComponentTree.for_test().load_context)


@pytest.mark.parametrize(("database", "message"), [
    ("data/warehouse.duckdb", "DuckDBResource 'duckdb' names the relative path 'data/warehouse.duckdb': give it "
                              "an absolute path"),
    (":memory:", "DuckDBResource 'duckdb' opens :memory:, which the CLI and other processes cannot open"),
    ("OTHER", "but the CLI and the run coordinator read the warehouse {wanted}: set BACKFILL_WAREHOUSE_URL="),
])
def test_a_duckdb_resource_the_cli_cannot_share_is_refused_before_any_write(team, tmp_path, monkeypatch,
                                                                            database, message):
    monkeypatch.chdir(tmp_path)  # where a relative path would have landed
    database = str(tmp_path / "other.duckdb") if database == "OTHER" else database
    defs = team_definitions(database)
    result = run(defs, team.instance, ["daily_revenue"], keys(1, 1)[0], keys(1, 1)[0])
    assert not result.success
    assert message.format(wanted=f"duckdb:///{team.warehouse_path}") in failure_text(result)
    assert team.rows("daily_revenue", keys(1, 1)[0]) == 0
    assert not (tmp_path / "other.duckdb").exists() and not (tmp_path / "data").exists()


def test_a_relative_duckdb_url_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as refused:
        engine_for("duckdb:///data/x.duckdb")
    assert "names a relative path" in str(refused.value) and "duckdb:////abs/data/x.duckdb" in str(refused.value)
    assert "\n" not in str(refused.value) and not (tmp_path / "data").exists()
    assert engine_for(f"duckdb:///{tmp_path / 'x.duckdb'}").describe() == str(tmp_path / "x.duckdb")


class TeamPostgres(dg.ConfigurableResource):
    """What a team on PostgreSQL writes for itself (Dagster ships no PostgreSQL resource for data)."""

    connection_string: str


def test_a_teams_own_resource_runs_the_table_on_each_engine_and_another_database_is_refused(
        engine_world, monkeypatch, tmp_path):
    world = engine_world
    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    own = (TeamPostgres(connection_string=world.url) if world.url
           else DuckDBResource(database=str(world.warehouse_path)))
    # another database; on PostgreSQL also the same one under another search_path (other tables)
    others = ([TeamPostgres(connection_string=world.url.rsplit("/", 1)[0] + "/another_db"),
               TeamPostgres(connection_string=world.url + "?options=-csearch_path%3Delsewhere")] if world.url
              else [DuckDBResource(database=str(tmp_path / "other.duckdb"))])
    table = make_replayable_table(DAILY_REVENUE, PARTITIONS, warehouse_key="team_db")
    first, last = keys(2, 3)[0], keys(2, 3)[-1]

    def materialize(resource):
        defs = dg.Definitions(assets=[ORDERS, *table.assets], resources={"team_db": resource})
        return run(defs, world.instance, ["daily_revenue"], first, last)

    for other in others:
        refused = materialize(other)
        assert not refused.success
        assert "but the CLI and the run coordinator read the warehouse" in failure_text(refused)
        assert world.rows("daily_revenue", first) == 0  # refused before any write

    result = materialize(own)
    assert result.success, failure_text(result)
    assert world.rows("daily_revenue", first) == 5 and world.rows("daily_revenue", last) == 5


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_resource_url_that_libpq_reads_as_another_database_or_server_is_refused(engine_world, monkeypatch):
    """The comparison is libpq's reading of both URLs, not their spelling: a trailing slash names the
    database `db/`, a blank `?dbname=` the user's own database, and an empty host (unix socket, or
    $PGHOST) is not `localhost`. Each was taken for the warehouse, and the run opened it."""
    world = engine_world
    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    table = make_replayable_table(DAILY_REVENUE, PARTITIONS, warehouse_key="team_db")
    first, last = keys(2, 3)[0], keys(2, 3)[-1]
    parts = world.url.split("@", 1)[1]  # 127.0.0.1:PORT/db
    port_db = parts.split(":", 1)[1]  # PORT/db

    def refused(connection_string: str, warehouse_url: str = world.url) -> None:
        monkeypatch.setenv("BACKFILL_WAREHOUSE_URL", warehouse_url)
        defs = dg.Definitions(assets=[ORDERS, *table.assets],
                              resources={"team_db": TeamPostgres(connection_string=connection_string)})
        result = run(defs, world.instance, ["daily_revenue"], first, last)
        assert not result.success
        assert "but the CLI and the run coordinator read the warehouse" in failure_text(result), connection_string

    refused(world.url + "/")  # the database "db/"
    refused(world.url + "?dbname=")  # the database named after the user
    monkeypatch.setenv("PGHOST", str(world.root / "no-socket-here"))
    refused(f"postgresql://{APP_ROLE}@:{port_db}", f"postgresql://{APP_ROLE}@localhost:{port_db}")
    monkeypatch.delenv("PGHOST")
    assert world.rows("daily_revenue", first) == 0


def test_the_cli_loads_and_replays_through_a_definitions_module_with_the_teams_duckdb_resource(team, run_cli):
    """`--defs` names the team's own module: the CLI's runs write through their `DuckDBResource`."""
    module = team.root / "team_defs.py"
    module.write_text(
        "import dagster as dg\nfrom dagster_duckdb import DuckDBResource\n"
        "from backfill_assets.defs.replayable import make_replayable_table\n"
        "from backfill_assets.demo.definitions import ORDERS, PARTITIONS\n"
        "from backfill_assets.demo.revenue import DAILY_REVENUE\n"
        "table = make_replayable_table(DAILY_REVENUE, PARTITIONS, warehouse_key='duckdb')\n"
        "defs = dg.Definitions(assets=[ORDERS, *table.assets], sensors=table.sensors,\n"
        f"                      resources={{'duckdb': DuckDBResource(database={str(team.warehouse_path)!r})}})\n",
        encoding="utf-8")
    first, last = keys(1, 3)[0], keys(1, 3)[-1]
    loaded = run_cli("load", "daily_revenue", "--start", first, "--end", last, "--defs", str(module))
    assert loaded.code == 0, loaded.err
    assert [team.rows("published_revenue", k) for k in keys(1, 3)] == [5] * 3
    plan = team.plan("fix", start=first, end=last, proof=(keys(2, 2)[0],))
    for who in ("olivia", "alice", "bob"):
        assert run_cli("plan", "approve", str(plan), "--by", who, "--key", str(team.keys[who]),
                       "--defs", str(module)).code == 0
    assert run_cli("run", "fix", "--proof", "--defs", str(module)).code == 0
    done = run_cli("run", "fix", "--defs", str(module))
    assert done.code == 0 and "plan fix is reconciled" in done.out, done.err
    planned = [r for r in team.instance.get_run_records() if r.dagster_run.tags.get("backfill_assets/plan") == "fix"]
    written_by = team.sql("SELECT DISTINCT run_id FROM backfill_control.writes WHERE plan_id = 'fix'")
    assert sorted(r.dagster_run.run_id for r in planned) == sorted(r for (r,) in written_by)  # every run wrote
    assert team.sql("SELECT count(*) FROM backfill_control.writes WHERE plan_id = 'fix'") == [(4,)]  # proof x2

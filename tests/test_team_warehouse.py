"""A team's own Dagster project cannot move a run to another warehouse, nor make its IO manager read
rows no gate passed. Found by an attack on issue 24's team path (each test failed first)."""

import shutil
from dataclasses import replace
from typing import Any

import dagster as dg
import pandas as pd
import pytest
from dagster_duckdb_pandas import DuckDBPandasIOManager

from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.defs.resources import WarehouseResource
from backfill_assets.demo.definitions import ORDERS, PARTITIONS
from backfill_assets.demo.revenue import DAILY_REVENUE
from tests.test_team_project import run
from tests.world import failure_text, keys

pytestmark = pytest.mark.separate_processes

REFUSED = "but the CLI and the run coordinator read the warehouse"


@pytest.fixture
def team(world, monkeypatch):
    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    return world


def _copy_of_warehouse(team, path):
    """A second DuckDB file holding the same source (a staging copy, or one an insider made)."""
    with team.warehouse().session() as session:
        session.execute("CHECKPOINT")
    shutil.copyfile(team.warehouse_path, path)
    return path


@pytest.mark.parametrize("how", ["url", "home"])
def test_a_warehouse_resource_on_another_database_is_refused_like_a_duckdb_resource(team, tmp_path, how):
    """README 'Declare your own replayable table': the warehouse a run writes "must be the warehouse
    the CLI and the run coordinator read, since the control record lives beside the data"; a
    DuckDBResource or a PostgreSQL resource on another database is "refused in one line before any
    write". `as_warehouse` (backfill_assets/defs/resources.py:61) returns a WarehouseResource as it
    is: `backfill_resources(url=...)` / `WarehouseResource(home=...)` (the factory's default resource
    and the component's `home`/`warehouse_url`) are never compared with the CLI's warehouse."""
    other_home = tmp_path / "elsewhere"
    other_home.mkdir()
    other = _copy_of_warehouse(team, other_home / "warehouse.duckdb")
    if how == "home":  # a home of its own: its warehouse holds the orders, and a chain is begun there
        import duckdb

        with duckdb.connect(str(other)) as con:
            con.execute("DROP SCHEMA backfill_control CASCADE")
    resource = (WarehouseResource(url=f"duckdb:///{other}") if how == "url"
                else WarehouseResource(home=str(other_home)))
    table = make_replayable_table(DAILY_REVENUE, PARTITIONS)
    defs = dg.Definitions(assets=[ORDERS, *table.assets], resources={"warehouse": resource})
    day = keys(2, 2)[0]
    result = run(defs, team.instance, ["daily_revenue", "published_revenue"], day, day)
    written_elsewhere = open_rows(other, day)
    assert not result.success and REFUSED in failure_text(result), (
        f"the run (success={result.success}) wrote and published {written_elsewhere} rows of {day} in {other}, "
        "a warehouse the CLI "
        "(`backfill status`, `evidence verify`, `plan approve`, `publish`) never reads")
    assert written_elsewhere == 0


def open_rows(path, day):
    import duckdb

    with duckdb.connect(str(path), read_only=True) as con:
        found = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'published_revenue'"
                            ).fetchone()[0]
        return con.execute("SELECT count(*) FROM published_revenue WHERE order_date = ?", [day]).fetchone()[0] \
            if found else 0


def _control_tables(session):
    return [r[0] for r in session.rows(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'backfill_control' "
        "AND table_type = 'BASE TABLE' ORDER BY 1")]


@pytest.mark.parametrize("published_before", [False, True])
def test_an_insider_launders_a_plan_free_rewrite_of_history_through_a_run_on_a_copy(team, tmp_path,
                                                                                   published_before):
    """The insider of the threat model writes the warehouse (any SQL) and edits the team's
    definitions module, but cannot read the evidence key. Promise: they cannot rewrite a written
    partition without an approved plan and make it count (the chain rows that seal a write are
    keyed; publish verifies the whole record).

    Attack: copy the warehouse to a file they own, there empty day 2 and its `writes` rows (so it
    looks never written) and doctor its orders; point the definitions' WarehouseResource at the copy
    (nothing compares it with the CLI's warehouse: resources.py:61). Dagster's run, which holds the
    key, writes day 2 plan-free in the copy and seals it with chain rows under the real key that
    continue the real chain. Copy those rows and the new day-2 rows back: the real warehouse's chain
    verifies, and `backfill publish`/the publish asset publish the rewritten day. (Whoever can set the
    deployment's BACKFILL_WAREHOUSE_URL or edit code that runs beside the key holds the key's power:
    outside this threat model, see README.)"""
    day = keys(2, 2)[0]
    honest = team.materialize(keys(1, 3))  # the team's table, written plan-free through its own defs
    assert honest.success, failure_text(honest)
    if published_before:  # consumers already read day 2
        assert team.publish(keys(1, 3)).success
    before = team.sql("SELECT sum(net_revenue) FROM daily_revenue WHERE order_date = ?", [day])[0][0]

    # 1. the insider's copy: day 2 looks never written there, and its orders say what they want
    copy = _copy_of_warehouse(team, tmp_path / "insider.duckdb")
    import duckdb

    with duckdb.connect(str(copy)) as con:
        con.execute("DELETE FROM daily_revenue WHERE order_date = ?", [day])
        con.execute("DELETE FROM backfill_control.gate_results WHERE write_id IN "
                    "(SELECT write_id FROM backfill_control.writes WHERE partition_key = ?)", [day])
        con.execute("DELETE FROM backfill_control.writes WHERE partition_key = ?", [day])
        con.execute("UPDATE orders SET amount = amount * 10 WHERE order_date = ?", [day])

    # 2. the edited definitions: the factory's own resource, on the copy; a Dagster run writes day 2
    table = make_replayable_table(DAILY_REVENUE, PARTITIONS)
    defs = dg.Definitions(assets=[ORDERS, *table.assets],
                          resources={"warehouse": WarehouseResource(url=f"duckdb:///{copy}")})
    laundered = run(defs, team.instance, ["daily_revenue"], day, day)
    # the run on the copy is refused before it writes, so the key never seals a write made there
    assert not laundered.success and REFUSED in failure_text(laundered), failure_text(laundered)
    with duckdb.connect(str(copy), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM daily_revenue WHERE order_date = ?", [day]).fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM backfill_control.writes WHERE partition_key = ?",
                           [day]).fetchone()[0] == 0
    assert team.sql("SELECT sum(net_revenue) FROM daily_revenue WHERE order_date = ?", [day])[0][0] == before


CONSUMED: dict[str, pd.DataFrame] = {}


def _a_failed_write_below(team, spec, reader: dg.AssetsDefinition) -> tuple[Any, dg.Definitions, str]:
    """The table of `spec` and a team's pandas asset `reader` through DuckDBPandasIOManager; day 2's
    orders gain an event with no region, so its write lands in the target and its gates fail."""
    table = make_replayable_table(spec, PARTITIONS)
    defs = dg.Definitions(assets=[ORDERS, *table.assets, reader],
                          resources={"warehouse": WarehouseResource(home=str(team.home)),
                                     "io_manager": DuckDBPandasIOManager(database=str(team.warehouse_path))})
    day = keys(2, 2)[0]
    team.run_sql("INSERT INTO orders SELECT order_id + 1000000, customer_id, NULL, order_ts, order_date, amount, "
                 "status FROM orders WHERE order_date = ? LIMIT 1", [day])
    written = run(defs, team.instance, ["daily_revenue"], day, day)
    assert not written.success and team.rows("daily_revenue", day) > 0  # written, gates failed
    return table, defs, day


def test_a_prefixed_publish_as_makes_the_io_manager_read_the_ungated_target(team):
    """The factory gives the published asset `partition_expr` and `schema: main` so that
    "downstream pandas assets read the published table through DuckDBPandasIOManager". With a
    publish_as under a prefix (`published/daily_revenue`, the published table is
    `published__daily_revenue`) the IO manager reads `main.daily_revenue`: the target itself, rows no
    gate passed and publish never copied. Such an asset now carries no `partition_expr`/`schema`, so
    the IO manager fails instead of reading the target."""
    spec = replace(DAILY_REVENUE, publish_as="published/daily_revenue")

    @dg.asset(partitions_def=PARTITIONS, ins={"published": dg.AssetIn(dg.AssetKey(["published", "daily_revenue"]))})
    def consumer(context: dg.AssetExecutionContext, published: pd.DataFrame) -> None:
        CONSUMED[context.partition_key] = published

    table, defs, day = _a_failed_write_below(team, spec, consumer)
    job = defs.resolve_implicit_global_asset_job_def()
    refused = job.execute_in_process(instance=team.instance, asset_selection=[table.publish.key],
                                     tags={"dagster/partition": day}, raise_on_error=False)
    assert not refused.success and team.rows("published__daily_revenue", day) == 0  # publish refused
    consumed = run(defs, team.instance, ["consumer"], day, day)
    seen = len(CONSUMED.get(day, []))
    assert not consumed.success or seen == 0, (
        f"the consumer of the published asset loaded {seen} rows of {day}: the target's, whose gates failed "
        "and which publish refused")


def test_a_teams_pandas_asset_below_the_target_never_loads_rows_whose_gates_failed(team):
    """An analyst places a pandas asset below the target (`ins={"daily_revenue": AssetIn()}`, the
    asset they see in the UI) with DuckDBPandasIOManager. A write whose gates failed is in the
    target, never published: the factory gave the target `partition_expr`/`schema` too, so the IO
    manager loaded those rows into the team's DataFrame (found by an attack). Only the published
    asset names where its rows are; reading the target fails loudly unless the team says so itself."""
    @dg.asset(partitions_def=PARTITIONS, ins={"daily_revenue": dg.AssetIn()})
    def extract(context: dg.AssetExecutionContext, daily_revenue: pd.DataFrame) -> None:
        CONSUMED[f"target {context.partition_key}"] = daily_revenue

    _, defs, day = _a_failed_write_below(team, DAILY_REVENUE, extract)
    loaded = run(defs, team.instance, ["extract"], day, day)
    seen = len(CONSUMED.get(f"target {day}", []))
    assert not loaded.success and seen == 0, f"the team's asset loaded {seen} row(s) whose gates failed"

"""A replay covers the asset graph: daily_revenue feeds monthly_revenue (a replayable table reading
a replayable table) and a plain pandas report reads the published months.

A plan over daily_revenue lists monthly_revenue in its graph (derived from Dagster's partition
mapping and checked on every decision); one approval, runs in dependency order, one publish of
both tables in one transaction; a UI backfill without a plan writes nothing; a gate failing on the
month blocks publishing the days; a kill -9 in the graph's publish leaves both published tables
wholly old.
"""

from __future__ import annotations

import dataclasses

import dagster as dg
import pytest
import yaml

from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.defs.resources import WarehouseResource
from backfill_assets.demo.definitions import build_definitions
from backfill_assets.demo.revenue import MONTHLY_REVENUE
from backfill_assets.demo.sample import generate_orders
from backfill_assets.graph import TableGraph
from backfill_assets.permission import BACKFILL_TAG, PLAN_TAG
from backfill_assets.signing.statements import Statement
from backfill_assets.table import Column, Metric, TableSpec
from tests.plans import complete_plan, write_plan
from tests.test_trust import _drop_bob, sign_file
from tests.world import BUGGY, FIXED, START, failure_text, keys

JANUARY = keys(1, 31)
MONTH = "2026-01-01"
WINDOW = ("2026-01-05", "2026-01-08")
FULL_DEFS = "backfill_assets.demo.definitions"  # the demo's definitions: the daily table, its month, the report
KILLED = -9


# --- the graph itself, from Dagster's partition mappings ----------------------------------------

def _static(name: str, source: str, keys_column: str = "region") -> TableSpec:
    return TableSpec(name=name, source=source, select_sql=f"SELECT region, sum(n) AS n FROM {source} "
                     "WHERE region = $partition GROUP BY region", partition_column=keys_column,
                     source_partition_column="region", business_keys=(keys_column,),
                     contract=(Column(keys_column, "VARCHAR", nullable=False), Column("n", "BIGINT")),
                     metrics=(Metric("n", "sum(n)", "sum(n)"),), publish_as=f"published_{name}")


def test_the_graph_follows_dagsters_partition_mappings_daily_to_monthly_and_static_to_static():
    graph = TableGraph.of(build_definitions(FIXED, monthly=MONTHLY_REVENUE).resolve_asset_graph())
    members = graph.derive("daily_revenue", keys(5, 8))
    assert [(m.asset, m.keys, m.upstream) for m in members] == [
        ("daily_revenue", tuple(keys(5, 8)), None), ("monthly_revenue", (MONTH,), "daily_revenue")]
    assert graph.upstream_keys("monthly_revenue", MONTH) == tuple(JANUARY)
    assert [(c.asset, c.keys, c.reads) for c in graph.consumers(members)] == [
        ("revenue_report", None, "published_monthly_revenue")]
    # the month's code is part of what a plan over the days binds
    assert graph.code_identity(["daily_revenue", "monthly_revenue"]).startswith("graph/")
    assert graph.code_identity(["daily_revenue", "monthly_revenue"]) != FIXED.code_identity

    regions = dg.StaticPartitionsDefinition(["eu", "us"])
    zones = dg.StaticPartitionsDefinition(["europe", "americas"])
    raw = make_replayable_table(_static("by_region", "events"), regions)
    same = make_replayable_table(_static("region_copy", "by_region"), regions)  # identity by default
    mapped = make_replayable_table(_static("by_zone", "by_region", "zone"), zones,
                                   source_partition_mapping=dg.StaticPartitionMapping({"eu": "europe",
                                                                                       "us": "americas"}))
    defs = dg.Definitions(assets=[dg.AssetSpec("events"), *raw.assets, *same.assets, *mapped.assets],
                          resources={"warehouse": WarehouseResource(home="unused")})
    graph = TableGraph.of(defs.resolve_asset_graph())
    assert [(m.asset, m.keys) for m in graph.derive("by_region", ["eu"])] == [
        ("by_region", ("eu",)), ("by_zone", ("europe",)), ("region_copy", ("eu",))]
    assert graph.upstream_keys("by_zone", "americas") == ("us",)


# --- a world with January's days, its month and the report --------------------------------------

@pytest.fixture
def graph_world(world, monkeypatch):
    return buggy_january_published(world, monkeypatch)


def buggy_january_published(world, monkeypatch):
    """The world with all of January (the month reads every day of it), the buggy release's days
    and month written and published plan-free, and the CLI loading the demo's whole definitions."""
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    with world.warehouse().session() as session:
        generate_orders(session, start=START, days=31, rows_per_day=40, seed=11)
    buggy = defs_of(world, BUGGY)
    assert run(world, buggy, ["daily_revenue", "published_revenue"], JANUARY).success
    assert run(world, buggy, ["monthly_revenue", "published_monthly_revenue"], [MONTH]).success
    return world


def defs_of(world, daily: TableSpec = FIXED) -> dg.Definitions:
    return build_definitions(daily, home=str(world.home), url=world.url or "", monthly=MONTHLY_REVENUE)


def run(world, defs: dg.Definitions, assets: list[str], partitions: list[str], tags: dict | None = None):
    tags = dict(tags or {})
    if len(partitions) == 1:
        tags["dagster/partition"] = partitions[0]
    else:
        tags.update({"dagster/asset_partition_range_start": partitions[0],
                     "dagster/asset_partition_range_end": partitions[-1]})
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(instance=world.instance, asset_selection=[dg.AssetKey(a) for a in assets],
                                  tags=tags, raise_on_error=False)


def deployed_defs(path, monkeypatch) -> dg.Definitions:
    """The definitions of a code location written to `path`, deployed (BACKFILL_DEFS names it, as the
    CLI and runs find it) and loaded as Dagster would load the file."""
    import importlib.util

    monkeypatch.setenv("BACKFILL_DEFS", str(path))
    spec = importlib.util.spec_from_file_location(f"defs_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.defs


def graph_plan(world, name: str = "fix", graph: bool = True) -> dict:
    document = complete_plan(plan_id=name, start=WINDOW[0], end=WINDOW[1], proof=(WINDOW[0],), per_run=4)
    if graph:
        document["graph"] = [{"asset": "monthly_revenue", "window": {"start": MONTH, "end": MONTH}}]
    if graph:  # the report exists only in the definitions that declare the month
        document["downstream"].append({"asset": "revenue_report", "owners": ["finance-bi"]})
    return document


def month_net(world, table: str) -> float:
    return float(world.sql(f"SELECT coalesce(sum(net_revenue), 0) FROM {table} WHERE month = DATE '{MONTH}'")[0][0])


def days_net(world, table: str) -> float:
    return float(world.sql(f"SELECT coalesce(sum(net_revenue), 0) FROM {table} "
                           f"WHERE order_date BETWEEN DATE '{WINDOW[0]}' AND DATE '{WINDOW[1]}'")[0][0])


def reconciled_graph(world) -> None:
    path = world.approve(write_plan(world.root / "plans" / "fix.yaml", graph_plan(world)))
    assert path.exists()
    assert world.cli("run", "fix", "--proof") == 0
    assert world.cli("run", "fix") == 0
    assert world.phase("fix") == "reconciled"


def test_a_plan_over_the_graph_replays_gates_and_publishes_the_days_and_the_month_together(
        graph_world, run_cli, capfd):
    world = graph_world
    defs = defs_of(world)
    days_before, month_before = days_net(world, "published_revenue"), month_net(world, "published_monthly_revenue")

    # a UI backfill of the days and their month, without a plan, writes nothing
    days_rows = world.fingerprints("daily_revenue", keys(5, 8))
    for assets, partitions in ((["daily_revenue"], keys(5, 8)), (["monthly_revenue"], [MONTH])):
        refused = run(world, defs, assets, partitions, {BACKFILL_TAG: "ui-bf"})
        assert not refused.success
    assert world.fingerprints("daily_revenue", keys(5, 8)) == days_rows
    assert month_net(world, "monthly_revenue") == month_before

    # a plan that leaves the month out is refused, naming the entry to add
    path = write_plan(world.root / "plans" / "short.yaml", graph_plan(world, "short", graph=False))
    result = run_cli("plan", "validate", str(path))
    assert result.code != 0
    assert "monthly_revenue" in result.out + result.err and "graph:" in result.out + result.err

    # shown before anyone signs: the month, recomputed from the days; the report, refreshed after
    path = write_plan(world.root / "plans" / "fix.yaml", graph_plan(world))
    shown = run_cli("plan", "validate", str(path))
    assert shown.code == 0, shown.err
    assert "monthly_revenue 2026-01-01, recomputed from daily_revenue" in shown.out
    assert "consumer  revenue_report" in shown.out
    world.approve(path)
    dry = run_cli("run", "fix", "--dry-run")
    assert "then monthly_revenue 2026-01-01..2026-01-01" in dry.out
    # the month waits for the proof, and for the days it reads
    early = run(world, defs, ["monthly_revenue"], [MONTH], {PLAN_TAG: "fix"})
    assert not early.success
    assert world.cli("run", "fix", "--proof") == 0
    early = run(world, defs, ["monthly_revenue"], [MONTH], {PLAN_TAG: "fix"})
    assert not early.success  # 2026-01-05 is proven, 06..08 are not written under the plan yet
    assert month_net(world, "monthly_revenue") == month_before
    assert world.cli("run", "fix") == 0
    assert world.phase("fix") == "reconciled"
    assert month_net(world, "monthly_revenue") != month_before  # recomputed from the fixed days

    # a gate failing on the month blocks publishing the days too
    world.run_sql(f"UPDATE monthly_revenue SET net_revenue = net_revenue + 1 WHERE month = DATE '{MONTH}' "
                  "AND region = 'north'")
    assert world.cli("reconcile", "fix") == 1
    assert world.phase("fix") == "running"
    assert world.cli("publish", "fix") == 1
    assert days_net(world, "published_revenue") == days_before
    assert month_net(world, "published_monthly_revenue") == month_before
    status = run_cli("status", "fix")
    assert "monthly_revenue 2026-01-01" in status.out
    assert f"--asset monthly_revenue --partitions {MONTH}" in status.out

    # the month re-run alone, then one publish of both, in one transaction
    assert world.cli("run", "fix", "--asset", "monthly_revenue", "--partitions", MONTH) == 0
    assert world.phase("fix") == "reconciled"
    assert world.cli("publish", "fix") == 0
    assert world.phase("fix") == "published"
    days_after, month_after = days_net(world, "published_revenue"), month_net(world, "published_monthly_revenue")
    assert days_after != days_before and month_after != month_before
    assert round(month_after - month_before, 2) == round(days_after - days_before, 2)  # the days' repair, rolled up
    [published] = [yaml.safe_load(p) for (p,) in world.sql(
        "SELECT payload FROM backfill_control.evidence WHERE plan_id = 'fix' AND kind = 'published'")]
    assert published["graph"]["monthly_revenue"]["table"] == "published_monthly_revenue"

    # the sensor then refreshes the report downstream of the published month: it reads the repair
    sensor = defs.resolve_sensor_def("daily_revenue__reopen_publish")
    context = dg.build_sensor_context(instance=world.instance, definitions=defs,
                                      resources={"warehouse": WarehouseResource(home=str(world.home))})
    [request] = sensor.evaluate_tick(context).run_requests
    assert [k.to_user_string() for k in request.asset_selection] == ["revenue_report"]
    job = defs.resolve_implicit_global_asset_job_def()
    report = job.execute_in_process(instance=world.instance, asset_selection=request.asset_selection,
                                    tags=dict(request.tags), raise_on_error=False)
    assert report.success
    [event] = report.get_asset_materialization_events()
    assert round(event.materialization.metadata["net_revenue"].value, 2) == round(
        float(world.sql("SELECT sum(net_revenue) FROM published_monthly_revenue")[0][0]), 2)
    # the same run key on every tick: the daemon launches it once per publish
    assert [r.run_key for r in sensor.evaluate_tick(context).run_requests] == [request.run_key]

    # and the rollback restores both tables and both published tables
    assert world.cli("rollback", "fix") == 0
    assert days_net(world, "published_revenue") == days_before
    assert month_net(world, "published_monthly_revenue") == month_before
    assert world.cli("evidence", "verify") == 0


def test_a_plan_signed_before_the_month_was_declared_writes_nothing_until_signed_again(graph_world, monkeypatch):
    world = graph_world
    monkeypatch.setenv("BACKFILL_DEFS", "backfill_assets.demo.daily")
    world.approve(write_plan(world.root / "plans" / "old.yaml", graph_plan(world, "old", graph=False)))
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)  # then the team deploys the monthly rollup
    before = world.fingerprints("daily_revenue", keys(5, 8))
    assert world.cli("run", "old", "--proof") == 1
    assert world.fingerprints("daily_revenue", keys(5, 8)) == before
    assert world.sql("SELECT count(*) FROM backfill_control.writes WHERE plan_id = 'old'")[0][0] == 0


def test_a_killed_graph_publish_leaves_both_published_tables_wholly_old(engine_world, run_subprocess, monkeypatch):
    world = engine_world

    def cli(*args: str, env: dict):
        return run_subprocess("--home", str(world.home), *args, env=env)

    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    with world.warehouse().session() as session:
        generate_orders(session, start=START, days=31, rows_per_day=40, seed=11)
    buggy = defs_of(world, BUGGY)
    assert run(world, buggy, ["daily_revenue", "published_revenue"], JANUARY).success
    assert run(world, buggy, ["monthly_revenue", "published_monthly_revenue"], [MONTH]).success
    reconciled_graph(world)
    days_before = world.fingerprints("published_revenue", keys(1, 31))
    month_before = month_net(world, "published_monthly_revenue")
    env = {"BACKFILL_DEFS": FULL_DEFS, **({"BACKFILL_WAREHOUSE_URL": world.url} if world.url else {})}
    # the days copied and the month deleted, not inserted; then everything copied, not committed
    for point in ("publish.between_delete_and_insert@2", "publish.before_commit"):
        result = cli("publish", "fix", env={**env, "BACKFILL_CRASH_AT": point})
        assert result.code == KILLED, f"{point}: {result.code}\n{result.err[-2000:]}"
        assert world.fingerprints("published_revenue", keys(1, 31)) == days_before, point
        assert month_net(world, "published_monthly_revenue") == month_before, point
        assert world.phase("fix") == "reconciled", point
    assert cli("publish", "fix", env=env).code == 0
    assert world.fingerprints("published_revenue", keys(1, 31)) != days_before
    assert month_net(world, "published_monthly_revenue") != month_before
    assert world.cli("evidence", "verify") == 0


def test_a_day_re_run_after_its_month_passed_holds_publish_until_the_month_is_computed_again(graph_world, capsys):
    """Late data for one day of a reconciled graph plan: the hurried user re-runs that day
    (`backfill run fix --partitions DAY`). The month's gates had compared it with the days as they
    were; the verdict judged each table by its own writes, so the plan reconciled again and its
    publish put the new day beside the month computed from the old one (found by an attack). A
    downstream partition written before a table it reads was written again is stale now."""
    world = graph_world
    world.approve(write_plan(world.root / "plans" / "fix.yaml", graph_plan(world)))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.phase("fix") == "reconciled"
    late_day = "2026-01-06"
    world.run_sql("INSERT INTO orders SELECT order_id + 5000000, customer_id, region, order_ts, order_date, "
                  "amount + 500, status FROM orders WHERE order_date = ? AND status <> 'refunded' "
                  "ORDER BY order_id LIMIT 3", [late_day])
    world.cli("run", "fix", "--partitions", late_day)
    capsys.readouterr()
    assert world.cli("publish", "fix") == 1
    said = capsys.readouterr().err
    assert f"monthly_revenue {MONTH}: computed before daily_revenue {late_day} was written again" in said, said
    assert world.sql("SELECT count(*) FROM backfill_control.evidence WHERE plan_id = 'fix' AND kind = 'published'") \
        == [(0,)]
    # what status says to do next works: the month again, then publish
    assert world.cli("status", "fix") == 0
    step = f"`backfill run fix --asset monthly_revenue --partitions {MONTH}`"
    assert f"next       compute monthly_revenue again from the partitions it reads, written since: {step}" in \
        capsys.readouterr().out
    assert world.cli("run", "fix", "--asset", "monthly_revenue", "--partitions", MONTH) == 0
    assert world.cli("publish", "fix") == 0
    days = world.sql("SELECT region, sum(net_revenue) FROM published_revenue WHERE order_date >= DATE '2026-01-01' "
                     "AND order_date < DATE '2026-02-01' GROUP BY region ORDER BY 1")
    month = world.sql(f"SELECT region, net_revenue FROM published_monthly_revenue WHERE month = DATE '{MONTH}' "
                      "ORDER BY 1")
    assert days == month


def _january_and_a_plan_over_its_days(world, loaded: TableSpec = BUGGY, days: int = 31) -> None:
    """January's days (the first `days` from January 1) loaded (by `loaded`'s code) and published by
    the project without a rollup (the daily table alone); plan fix over 2026-01-05..08, approved for
    that project, proven and run (reconciled)."""
    with world.warehouse().session() as session:
        generate_orders(session, start=START, days=days, rows_per_day=40, seed=11)
    assert world.materialize(keys(1, days), spec=loaded, publish=True).success
    world.approve(write_plan(world.root / "plans" / "fix.yaml", complete_plan(
        plan_id="fix", start="2026-01-05", end="2026-01-08", proof=("2026-01-05",), per_run=4)))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0


def _published_by_region(world, table: str, column: str) -> dict[str, float]:
    """January's published figures by region (the days summed, or the month's row)."""
    if not world.sql("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [table])[0][0]:
        return {}
    return {r: round(float(n), 2) for r, n in world.sql(
        f"SELECT region, sum(net_revenue) FROM {table} WHERE {column} >= DATE '2026-01-01' "
        f"AND {column} < DATE '2026-02-01' GROUP BY region")}


@pytest.mark.parametrize("held", [True, False])
def test_a_month_loaded_without_a_plan_never_reads_a_day_of_a_plan_consumers_have_not_seen(world, monkeypatch,
                                                                                           capsys, held):
    """January's days are loaded and published; a plan over 2026-01-05..08, approved while the
    project had no monthly rollup, is proven and reconciled, then cancelled (or left unpublished).
    The team deploys the rollup and loads January's month, which no plan claims: it took each day's
    latest write that passed, the plan's for 2026-01-05..08, and published a month that does not add
    up to the published days (found by an attack). It is refused, naming the plan to publish or roll
    back; once the plan is published, the month loads and adds up to the published days (rolled
    back, the days hold other bytes than their latest write: the month's refusal names a replay)."""
    _january_and_a_plan_over_its_days(world)
    if held:
        assert world.cli("cancel", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)  # the team deploys the monthly rollup
    month = run(world, defs_of(world, BUGGY), ["monthly_revenue", "published_monthly_revenue"], [MONTH],
                {"dagster/backfill": "ui-bf"})
    assert not month.success
    assert _published_by_region(world, "published_monthly_revenue", "month") == {}
    failures = failure_text(month)
    assert "plan fix's, which consumers have not seen" in failures and "backfill rollback fix" in failures, failures
    monkeypatch.setenv("BACKFILL_DEFS", "backfill_assets.demo.daily")  # the plan's own project: no rollup
    if held:
        assert world.cli("rollback", "fix") == 0
    else:
        assert world.cli("publish", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    again = run(world, defs_of(world, BUGGY), ["monthly_revenue", "published_monthly_revenue"], [MONTH],
                {"dagster/backfill": "ui-bf"})
    if held:
        assert not again.success and "replay daily_revenue 2026-01-05" in failure_text(again), failure_text(again)
        return
    assert again.success
    assert _published_by_region(world, "published_monthly_revenue", "month") == \
        _published_by_region(world, "published_revenue", "order_date")


def test_a_graph_publish_refused_for_a_changed_month_shows_the_months_check_failed(graph_world):
    """A graph plan reconciled; the month is edited by hand; the sensor's publish run is refused for
    the month and the ledger records its failed unchanged_since_checked, but the UI showed only the
    table the run was asked for: the month's check stayed green (found by an attack)."""
    from dagster._core.event_api import PartitionKeyFilter

    from backfill_assets.gates.results import UNCHANGED_SINCE_CHECKED

    world = graph_world
    world.approve(write_plan(world.root / "plans" / "fix.yaml", graph_plan(world)))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    world.run_sql(f"UPDATE monthly_revenue SET net_revenue = net_revenue + 1 WHERE month = DATE '{MONTH}' "
                  "AND region = 'north'")
    assert not run(world, defs_of(world), ["published_revenue"], keys(5, 8), {}).success
    check = dg.AssetCheckKey(dg.AssetKey("monthly_revenue"), UNCHANGED_SINCE_CHECKED)
    latest = world.instance.event_log_storage.get_latest_asset_check_execution_by_key(
        [check], partition_filter=PartitionKeyFilter(key=MONTH))
    assert latest[check].status.value == "FAILED", latest


@pytest.mark.parametrize("cancelled", [False, True])
def test_a_month_never_reads_a_day_a_plan_under_repair_wrote_again(world, monkeypatch, cancelled):
    """A plan over 2026-01-05..08 was published; a late order for 2026-01-06 fails its reconcile and
    the plan goes to repairing; the day is re-run from the UI under the plan's tag (its new bytes
    published nowhere; the plan still repairing, or then cancelled). A month loaded without a plan
    read the re-run day and was published beside days that never showed it, because repairing
    counted as seen by consumers (found by an attack): only a plan published for good does."""
    _january_and_a_plan_over_its_days(world)
    assert world.cli("publish", "fix") == 0
    world.run_sql("INSERT INTO orders VALUES (9999999, 42, 'north', TIMESTAMP '2026-01-06 12:00:00', "
                  "DATE '2026-01-06', 1000.00, 'completed')")
    assert world.cli("reconcile", "fix") == 1 and world.phase() == "repairing"
    assert world.plan_run("fix", ["2026-01-06"]).success and world.phase() == "repairing"
    if cancelled:
        assert world.cli("cancel", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)  # the team deploys the monthly rollup
    month = run(world, defs_of(world, BUGGY), ["monthly_revenue", "published_monthly_revenue"], [MONTH],
                {"dagster/backfill": "ui-bf"})
    assert not month.success and "plan fix's, which consumers have not seen (repairing" in failure_text(month)
    assert _published_by_region(world, "published_monthly_revenue", "month") == {}


# --- after the publish: rollups, reports and definitions a team brings (found by an attack) -------

def test_a_rollback_of_days_a_published_month_was_computed_from_never_leaves_consumers_a_mix(world, monkeypatch,
                                                                                          capsys):
    """A plan over 2026-01-05..08 of the daily table is published; the team then deploys a monthly
    rollup and loads January's month, which reads the published days (the plan's). Rolling the plan
    back restored the days and left the published month computed from the plan's days: consumers
    read a month that does not add up to the days beside it."""
    _january_and_a_plan_over_its_days(world)
    assert world.cli("publish", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)  # the team deploys the monthly rollup
    month = run(world, defs_of(world, BUGGY), ["monthly_revenue", "published_monthly_revenue"], [MONTH],
                {"dagster/backfill": "ui-bf"})
    assert month.success
    assert _published_by_region(world, "published_monthly_revenue", "month") == \
        _published_by_region(world, "published_revenue", "order_date")
    capsys.readouterr()
    code = world.cli("rollback", "fix")
    said = capsys.readouterr()
    assert _published_by_region(world, "published_monthly_revenue", "month") == \
        _published_by_region(world, "published_revenue", "order_date"), (code, said.out, said.err)
    if code != 0:
        assert "monthly_revenue 2026-01-01" in said.err and "Traceback" not in said.err, said.err
        assert world.phase("fix") == "published"


def test_a_rollback_with_definitions_omitting_the_month_still_sees_the_month_computed_from_the_days(
        world, monkeypatch, capsys):
    """The refusal above asked the loaded definitions which tables are computed from the days: an
    operator who rolled back with definitions declaring the daily table alone (`--defs`, or an
    older deployment) restored the days and left the published month computed from the plan's
    days, unsaid (found by an attack on the rollback). Each write records what it read, so the
    chain answers whatever the definitions say."""
    _january_and_a_plan_over_its_days(world)
    assert world.cli("publish", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    assert run(world, defs_of(world, BUGGY), ["monthly_revenue", "published_monthly_revenue"], [MONTH],
               {"dagster/backfill": "ui-bf"}).success
    days = _published_by_region(world, "published_revenue", "order_date")
    monkeypatch.setenv("BACKFILL_DEFS", "backfill_assets.demo.daily")  # the daily table alone
    capsys.readouterr()
    assert world.cli("rollback", "fix") == 1
    said = capsys.readouterr()
    assert "monthly_revenue 2026-01-01" in said.err and said.err.count("\n") == 1, said.err
    assert world.phase("fix") == "published"
    assert _published_by_region(world, "published_revenue", "order_date") == days


def _report_requests(world, defs):
    sensor = defs.resolve_sensor_def("daily_revenue__reopen_publish")
    context = dg.build_sensor_context(instance=world.instance, definitions=defs,
                                      resources={"warehouse": WarehouseResource(home=str(world.home))})
    return [r for r in sensor.evaluate_tick(context).run_requests
            if [k.to_user_string() for k in r.asset_selection] == ["revenue_report"]]


def _run_request(world, defs, request):
    job = defs.resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(instance=world.instance, asset_selection=request.asset_selection,
                                    tags=dict(request.tags), raise_on_error=False)
    assert result.success
    [event] = result.get_asset_materialization_events()
    return round(event.materialization.metadata["net_revenue"].value, 2)


def test_a_rolled_back_graph_plan_refreshes_the_report_that_read_its_published_month(graph_world):
    """A plan over the days and their month is published; the sensor refreshes revenue_report (a
    pandas consumer of the published month), which now shows the repair. The plan is rolled back:
    both published tables are old again, but the sensor asked nothing of the report, which went on
    showing consumers the rolled-back month's figures."""
    world = graph_world
    defs = defs_of(world)
    world.approve(write_plan(world.root / "plans" / "fix.yaml", graph_plan(world)))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0
    [request] = _report_requests(world, defs)
    repaired = _run_request(world, defs, request)
    assert world.cli("rollback", "fix") == 0
    old = round(float(world.sql("SELECT sum(net_revenue) FROM published_monthly_revenue")[0][0]), 2)
    assert old != repaired
    requests = _report_requests(world, defs)
    assert len(requests) == 1, "the report reads the rolled-back month and no run refreshes it"
    assert _run_request(world, defs, requests[0]) == old
    assert [r.run_key for r in _report_requests(world, defs)] == [requests[0].run_key]  # once per rollback


def test_plan_validate_says_a_consumer_reading_the_target_reads_rows_no_gate_passed(world, run_cli, tmp_path,
                                                                                    monkeypatch):
    """A team's asset reads the target through its own DuckDBResource and SQL (`deps=["daily_revenue"]`,
    dagster-duckdb's usual pattern), not through the IO manager (which fails loudly on the target).
    `plan validate` listed it as a consumer "requested after the publish", as if it were one of the
    consumers the gates protect; between publishes it reads whatever the target holds, a failed
    write's rows and a plan's unchecked ones included. Before anyone signs, it must say so."""
    defs = tmp_path / "team_defs.py"
    defs.write_text(
        "import dagster as dg\n"
        "from backfill_assets.demo.definitions import build_definitions\n"
        "@dg.asset(deps=['daily_revenue'])\n"
        "def sales_extract() -> None: ...\n"
        f"defs = dg.Definitions.merge(build_definitions(home={str(world.home)!r}), "
        "dg.Definitions(assets=[sales_extract]))\n", encoding="utf-8")
    document = complete_plan(plan_id="fix", start="2026-01-05", end="2026-01-08", proof=("2026-01-05",), per_run=4)
    document["downstream"].append({"asset": "sales_extract", "owners": ["finance-bi"]})
    path = write_plan(world.root / "plans" / "fix.yaml", document)
    monkeypatch.setenv("BACKFILL_DEFS", str(defs))
    shown = run_cli("plan", "validate", str(path))
    assert shown.code == 0, shown.err
    [line] = [ln for ln in shown.out.splitlines() if "sales_extract" in ln]
    assert "reads daily_revenue, the target" in line and "published_revenue" in line, line


def test_a_definitions_file_holding_two_definitions_is_refused_not_read_as_the_first(world, run_cli, tmp_path,
                                                                                     monkeypatch):
    """`base = build_definitions(...)` then `defs = Definitions.merge(base, <the team's rollup>)`: Dagster
    refuses a file holding two Definitions; the CLI took the first, so plans, runs and publish
    decided over a graph without the rollup Dagster runs."""
    defs = tmp_path / "team_defs.py"
    defs.write_text(
        "import dagster as dg\n"
        "from backfill_assets.demo.definitions import build_definitions\n"
        "from backfill_assets.demo.revenue import MONTHLY_REVENUE\n"
        f"base = build_definitions(home={str(world.home)!r})\n"
        f"defs = build_definitions(home={str(world.home)!r}, monthly=MONTHLY_REVENUE)\n", encoding="utf-8")
    path = write_plan(world.root / "plans" / "fix.yaml", complete_plan(
        plan_id="fix", start="2026-01-05", end="2026-01-08", proof=("2026-01-05",), per_run=4))
    monkeypatch.setenv("BACKFILL_DEFS", str(defs))
    shown = run_cli("plan", "validate", str(path))
    said = shown.out + shown.err
    assert "2 dagster Definitions (base, defs)" in said and "fits daily_revenue" not in said, said
    assert "Traceback" not in said


def _cancelled_under_a_month(world, monkeypatch) -> None:
    """Plan fix over 2026-01-05..08 published; the team deploys its monthly rollup and loads January's
    month from the published days (a UI backfill, no plan); a published day is edited, the plan
    goes back to repairing, and the operator cancels it."""
    _january_and_a_plan_over_its_days(world)
    assert world.cli("publish", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    assert run(world, defs_of(world, BUGGY), ["monthly_revenue", "published_monthly_revenue"], [MONTH],
               {"dagster/backfill": "ui-bf"}).success
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 WHERE order_date = DATE '2026-01-06'")
    world.cli("reconcile", "fix")
    assert world.phase("fix") == "repairing"
    assert world.cli("cancel", "fix") == 0


def test_a_cancelled_plan_whose_days_a_month_was_computed_from_has_a_way_out(world, monkeypatch, capsys):
    """A plan over 2026-01-05..08 is published; the team deploys its monthly rollup and loads
    January's month from the published days. A published day is then edited, so the plan goes back
    to repairing, and the operator cancels it: a cancelled plan only rolls back, and its rollback was
    refused for good while the month computed from its days stood (its writer, a load without a
    plan, has no rollback; a new plan listing the month is refused while the cancelled plan holds its
    window): no command ended the plan. Naming the month with --keep-computed leaves it as it is,
    said and recorded; a name of no table is one line."""
    _cancelled_under_a_month(world, monkeypatch)
    month = world.sql("SELECT sum(net_revenue) FROM published_monthly_revenue")
    # the cancel, and the refusals of a cancelled plan, name the rollback that succeeds (they said a
    # bare `backfill rollback fix`, which the month refuses)
    assert "`backfill rollback fix --keep-computed monthly_revenue`" in capsys.readouterr().out
    assert world.cli("pause", "fix") == 1 and "`backfill status fix` names the rollback" in capsys.readouterr().err
    assert world.cli("run", "fix") == 1 and "`backfill status fix` names the rollback" in capsys.readouterr().err
    assert world.cli("rollback", "fix") == 1
    said = capsys.readouterr()
    assert said.err.count("\n") == 1 and "--keep-computed monthly_revenue" in said.err, said.err
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revnue") == 2
    said = capsys.readouterr()
    assert said.err.count("\n") == 1 and "monthly_revnue" in said.err and "monthly_revenue" in said.err, said.err
    assert world.phase("fix") == "repairing"  # cancelled: a hold on it
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue") == 0
    said = capsys.readouterr()
    assert "left 1 partition(s) of monthly_revenue (2026-01-01) as computed" in said.out, said.out
    assert world.phase("fix") == "rolled_back"
    assert world.sql("SELECT sum(net_revenue) FROM published_monthly_revenue") == month  # left as it was
    [payload] = world.sql("SELECT payload FROM backfill_control.evidence WHERE kind = 'rollback'")
    assert '"kept_computed":{"monthly_revenue":["2026-01-01"]}' in payload[0], payload[0]
    out = world.root / "evidence.yaml"  # and the evidence document says so
    assert world.cli("evidence", "fix", "--out", str(out)) == 0
    assert yaml.safe_load(out.read_text())["rollback"]["kept_computed"] == {"monthly_revenue": ["2026-01-01"]}
    capsys.readouterr()  # and `status` names the recompute as the next step (found by an attack)
    assert world.cli("status", "fix") == 0
    assert "recompute monthly_revenue 2026-01-01, left computed" in capsys.readouterr().out


def test_rollback_signatures_bind_the_tables_a_rollback_leaves_computed(world, monkeypatch, tmp_path, capsys):
    """A published plan whose own approvals no longer hold rolls back only with approvers' rollback
    signatures. They bound the plan and the warehouse, not `--keep-computed`: an operator added
    `--keep-computed monthly_revenue` to a rollback the approvers signed as a whole one, leaving the
    month computed from the days it restored, which that rollback refuses (found by an attack). A
    rollback that leaves a table signs a statement naming it."""
    _cancelled_under_a_month(world, monkeypatch)
    _drop_bob(world, tmp_path)  # the plan's own approvals (olivia, alice, bob) no longer hold
    capsys.readouterr()
    assert world.cli("rollback", "fix", "--print-statement") == 0
    whole = Statement.parse(capsys.readouterr().out)
    text, sig = sign_file(world, "carol", whole, tmp_path)
    signed = ("--statement", str(text), "--signature", f"carol={sig}", "--sign", f"alice={world.keys['alice']}")
    assert world.cli("rollback", "fix", *signed) == 1  # signed as a whole: the month refuses it
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue", *signed) == 1
    said = capsys.readouterr()
    assert "--print-statement --keep-computed monthly_revenue" in said.err and said.err.count("\n") == 2, said.err
    assert world.phase("fix") == "repairing"
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue", "--print-statement") == 0
    keeping = Statement.parse(capsys.readouterr().out)
    assert keeping["keep"] == "monthly_revenue", keeping.text
    text, sig = sign_file(world, "carol", keeping, tmp_path)
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue", "--statement", str(text),
                     "--signature", f"carol={sig}", "--sign", f"alice={world.keys['alice']}") == 0
    assert world.phase("fix") == "rolled_back"


def test_a_rollback_keeps_only_the_months_that_read_its_days_when_months_were_written_together(
        world, monkeypatch, capsys):
    """January's and February's months are loaded in one run (one write, one chain row) after plan
    fix over 2026-01-05..08 was published. What each write read was recorded for the write as a
    whole, so February, which read none of the plan's days, was taken for computed from them: named
    by the refusal, and left by `--keep-computed` (whose publish then stays refused until a plan
    recomputes it). What each partition read is recorded for that partition."""
    _january_and_a_plan_over_its_days(world, days=59)  # and February's
    assert world.cli("publish", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    assert run(world, defs_of(world, BUGGY), ["monthly_revenue", "published_monthly_revenue"],
               ["2026-01-01", "2026-02-01"], {"dagster/backfill": "ui-bf"}).success
    capsys.readouterr()
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue") == 0
    [payload] = world.sql("SELECT payload FROM backfill_control.evidence WHERE kind = 'rollback'")
    assert '"kept_computed":{"monthly_revenue":["2026-01-01"]}' in payload[0], payload[0]


def test_keep_computed_naming_a_table_the_plan_wrote_is_refused_not_ignored(world, monkeypatch, capsys):
    """`--keep-computed daily_revenue` on a plan that wrote daily_revenue: the rollback restored the
    table the operator asked to keep (the name was only checked to be a table of the definitions),
    saying nothing of the option it ignored. One line, nothing changed."""
    _cancelled_under_a_month(world, monkeypatch)
    days = world.sql("SELECT sum(net_revenue) FROM daily_revenue")
    capsys.readouterr()
    code = world.cli("rollback", "fix", "--keep-computed", "monthly_revenue", "--keep-computed", "daily_revenue")
    said = capsys.readouterr()
    assert code == 2, said.out + said.err
    assert said.err.count("\n") == 1 and "daily_revenue" in said.err, said.err
    assert world.phase("fix") == "repairing"
    assert world.sql("SELECT sum(net_revenue) FROM daily_revenue") == days


def test_keep_computed_never_leaves_an_active_plans_month_to_publish_over_the_restored_days(world, monkeypatch,
                                                                                           capsys):
    """Plan fix's days are published; plan q recomputes January's month from them and is reconciled,
    not yet published. fix is then cancelled; its rollback is refused, naming q's month, and offers
    `--keep-computed monthly_revenue`, which a plan that can itself be rolled back does not need:
    kept, the rollback restored the days and q then published a month computed from the days
    consumers no longer see (the month's publish reads no upstream)."""
    from tests.plans import write_plan
    from tests.test_graph import complete_plan

    _january_and_a_plan_over_its_days(world)
    assert world.cli("publish", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    document = complete_plan(plan_id="q", start=MONTH, end=MONTH, proof=(MONTH,), per_run=1,
                             target="monthly_revenue", source="daily_revenue")
    document["downstream"] = [{"asset": "published_monthly_revenue", "owners": ["finance-bi"]},
                              {"asset": "revenue_report", "owners": ["finance-bi"]}]
    world.approve(write_plan(world.root / "plans" / "q.yaml", document))
    assert world.cli("run", "q", "--proof") == 0
    assert world.cli("run", "q") == 0
    assert world.phase("q") == "reconciled", world.phase("q")
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 WHERE order_date = DATE '2026-01-06'")
    world.cli("reconcile", "fix")
    assert world.cli("cancel", "fix") == 0
    capsys.readouterr()
    assert world.cli("rollback", "fix") == 1
    said = capsys.readouterr()
    assert "by q" in said.err and "--keep-computed" not in said.err and "backfill rollback q" in said.err, said.err
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue") == 1
    said = capsys.readouterr()
    assert said.err.count("\n") == 1 and "plan q can be rolled back" in said.err, said.err
    assert world.phase("fix") == "repairing"
    days = world.fingerprints("daily_revenue", ["2026-01-05", "2026-01-06", "2026-01-07", "2026-01-08"])
    assert world.cli("rollback", "q") == 0 and world.cli("rollback", "fix", "--keep-computed", "monthly_revenue") == 0
    assert world.phase("fix") == "rolled_back"
    assert world.fingerprints("daily_revenue", ["2026-01-05", "2026-01-06", "2026-01-07", "2026-01-08"]) != days


def test_a_month_over_days_a_rolled_back_plan_rewrote_unchanged_names_a_replay_not_the_rollback(world,
                                                                                              monkeypatch):
    """The days loaded with the fixed release, so plan fix rewrites them byte for byte; cancelled and
    rolled back, their latest write is still the plan's, which consumers never saw. The month's
    refusal named `backfill publish fix` or `backfill rollback fix`, both refused for a plan rolled
    back already (found by a review): it names a replay of the days, as for days a rollback changed."""
    _january_and_a_plan_over_its_days(world, loaded=FIXED)
    assert world.cli("cancel", "fix") == 0 and world.cli("rollback", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)  # the team deploys the monthly rollup
    month = run(world, defs_of(world, FIXED), ["monthly_revenue", "published_monthly_revenue"], [MONTH],
                {"dagster/backfill": "ui-bf"})
    assert not month.success
    failures = failure_text(month)
    assert "plan fix's, which consumers have not seen (rolled_back" in failures, failures
    assert "backfill rollback fix" not in failures and "backfill publish fix" not in failures, failures
    assert "replay daily_revenue 2026-01-05 with a plan" in failures, failures


# --- after --keep-computed: the kept month, its record and a later plan (found by an attack) ----------

def _kept(world, monkeypatch, capsys):
    _cancelled_under_a_month(world, monkeypatch)
    capsys.readouterr()


def test_keep_computed_dry_run_then_rollback_then_verify_status(world, monkeypatch, capsys):
    _kept(world, monkeypatch, capsys)
    code = world.cli("rollback", "fix", "--keep-computed", "monthly_revenue", "--dry-run")
    said = capsys.readouterr()
    assert code == 0, said.out + said.err
    assert "would leave 1 partition(s) of monthly_revenue" in said.out, said.out
    assert world.phase("fix") == "repairing"
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue") == 0
    capsys.readouterr()
    out = world.root / "ev.yaml"
    assert world.cli("evidence", "fix", "--out", str(out)) == 0
    capsys.readouterr()
    code = world.cli("evidence", "verify", "--against", str(out))
    said = capsys.readouterr()
    assert code == 0, said.out + said.err
    code = world.cli("status", "fix")
    said = capsys.readouterr()
    assert code == 0 and "Traceback" not in said.err, said.out + said.err


def test_keep_computed_then_a_graph_plan_over_the_kept_month_is_published(world, monkeypatch, capsys):
    _kept(world, monkeypatch, capsys)
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue") == 0
    capsys.readouterr()
    world.approve(write_plan(world.root / "plans" / "fix2.yaml", graph_plan(world, "fix2")))
    code = world.cli("run", "fix2", "--proof")
    said = capsys.readouterr()
    assert code == 0, said.out + said.err
    code = world.cli("run", "fix2", "--and-publish")
    said = capsys.readouterr()
    assert code == 0, said.out + said.err
    assert world.phase("fix2") == "published"
    assert _published_by_region(world, "published_monthly_revenue", "month") == \
        _published_by_region(world, "published_revenue", "order_date")
    code = world.cli("evidence", "verify")
    said = capsys.readouterr()
    assert code == 0, said.out + said.err


def test_keep_computed_then_a_ui_month_load_without_a_plan(world, monkeypatch, capsys):
    """The kept month reloaded from the restored days by the team without a plan."""
    _kept(world, monkeypatch, capsys)
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue") == 0
    again = run(world, defs_of(world, BUGGY), ["monthly_revenue", "published_monthly_revenue"], [MONTH],
                {"dagster/backfill": "ui-bf2"})
    if again.success:
        assert _published_by_region(world, "published_monthly_revenue", "month") == \
            _published_by_region(world, "published_revenue", "order_date")


def test_a_kept_month_never_published_is_not_published_later_over_the_restored_days(world, monkeypatch, capsys):
    """The team computed January's month from plan fix's published days but did not publish it; fix
    is cancelled and rolled back with --keep-computed monthly_revenue (left computed from bytes
    consumers no longer see). Publishing that month without a plan put a month that does not add
    up to the restored days before consumers."""
    _january_and_a_plan_over_its_days(world)
    assert world.cli("publish", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    assert run(world, defs_of(world, BUGGY), ["monthly_revenue"], [MONTH], {"dagster/backfill": "ui-bf"}).success
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 WHERE order_date = DATE '2026-01-06'")
    world.cli("reconcile", "fix")
    assert world.cli("cancel", "fix") == 0
    capsys.readouterr()
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue") == 0
    published = run(world, defs_of(world, BUGGY), ["published_monthly_revenue"], [MONTH],
                    {"dagster/backfill": "ui-bf3"})
    month = _published_by_region(world, "published_monthly_revenue", "month")
    assert month in ({}, _published_by_region(world, "published_revenue", "order_date")), month
    assert not published.success and "rollback (--keep-computed" in failure_text(published), failure_text(published)
    # the way out: a plan over the days whose graph lists the month recomputes and publishes both
    world.approve(write_plan(world.root / "plans" / "fix2.yaml", graph_plan(world, "fix2")))
    assert world.cli("run", "fix2", "--proof") == 0 and world.cli("run", "fix2", "--and-publish") == 0
    assert _published_by_region(world, "published_monthly_revenue", "month") == \
        _published_by_region(world, "published_revenue", "order_date")


# --- the chain, not the loaded definitions, says what was computed from what (found by an attack) ----

DAILY_DEFS = "backfill_assets.demo.daily"
FIX_DAYS = keys(5, 8)


def _january_days_published(world) -> None:
    with world.warehouse().session() as session:
        generate_orders(session, start=START, days=31, rows_per_day=40, seed=11)
    assert world.materialize(keys(1, 31), spec=BUGGY, publish=True).success


def _days_plan(world, name: str = "fix"):
    return write_plan(world.root / "plans" / f"{name}.yaml", complete_plan(
        plan_id=name, start=FIX_DAYS[0], end=FIX_DAYS[-1], proof=(FIX_DAYS[0],), per_run=4))


def test_a_plan_over_the_days_alone_never_publishes_under_a_published_month_computed_from_them(
        world, monkeypatch, capsys):
    """January's days are loaded and published; plan fix over 2026-01-05..08 is approved for the
    daily table alone. The team then deploys the monthly rollup and loads January's month (no plan
    has written the days yet, so it reads their published bytes) and publishes it. The operator
    runs and publishes fix with the definitions it was approved under (`BACKFILL_DEFS` naming the
    daily table alone; under the deployed ones it is refused as not fitting the graph): the chain
    records that the published month was computed from the plan's days, but publish asked the
    loaded definitions only, and consumers read a month that does not add up to the days beside
    it."""
    _january_days_published(world)
    world.approve(_days_plan(world))
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)  # the team deploys the monthly rollup
    assert run(world, defs_of(world, BUGGY), ["monthly_revenue", "published_monthly_revenue"], [MONTH],
               {"dagster/backfill": "ui-bf"}).success
    assert _published_by_region(world, "published_monthly_revenue", "month") == \
        _published_by_region(world, "published_revenue", "order_date")
    monkeypatch.setenv("BACKFILL_DEFS", DAILY_DEFS)  # the plan's own definitions
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.phase("fix") == "reconciled"
    code, said = _publish_fix_and_check_the_month_adds_up(world, capsys)
    assert code == 1 and "monthly_revenue 2026-01-01" in said.err, said.err
    # the way out: roll fix back, then a plan whose graph lists the month replays both
    assert world.cli("rollback", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    world.approve(write_plan(world.root / "plans" / "fix2.yaml", graph_plan(world, "fix2")))
    assert world.cli("run", "fix2", "--proof") == 0 and world.cli("run", "fix2", "--and-publish") == 0
    assert _published_by_region(world, "published_monthly_revenue", "month") == \
        _published_by_region(world, "published_revenue", "order_date")


def test_a_month_computed_before_a_plan_rewrote_its_days_is_not_published_after_it(world, monkeypatch, capsys):
    """The month is computed from January's published days (not published: the team materialized
    monthly_revenue alone). Plan fix over 2026-01-05..08 (the daily table's definitions) is then
    run and published: consumers read the fixed days. A Materialize of published_monthly_revenue
    in the UI then publishes the month computed from the days as they were before the plan: it
    does not add up to the days beside it."""
    _january_days_published(world)
    world.approve(_days_plan(world))
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    assert run(world, defs_of(world, BUGGY), ["monthly_revenue"], [MONTH], {"dagster/backfill": "ui-bf"}).success
    monkeypatch.setenv("BACKFILL_DEFS", DAILY_DEFS)
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    world.cli("publish", "fix")  # refused, or the month's publish must be
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    run(world, defs_of(world, BUGGY), ["published_monthly_revenue"], [MONTH], {"dagster/backfill": "ui-bf2"})
    month = _published_by_region(world, "published_monthly_revenue", "month")
    assert month in ({}, _published_by_region(world, "published_revenue", "order_date")), month


def test_a_day_re_run_by_a_plan_under_repair_never_leaves_a_published_month_computed_before_it(
        world, monkeypatch, capsys):
    """Plan fix over 2026-01-05..08 (the daily table alone) is published; the team deploys the
    rollup and loads January's month from the published days. A late order fails fix's reconcile
    (repairing); the operator re-runs 2026-01-06 under the plan (its own definitions) and publishes
    again: the day changed under a published month computed before it."""
    _january_days_published(world)
    _days_plan_published_then_the_month_loaded(world, monkeypatch)
    monkeypatch.setenv("BACKFILL_DEFS", DAILY_DEFS)
    world.run_sql("INSERT INTO orders VALUES (9999999, 42, 'north', TIMESTAMP '2026-01-06 12:00:00', "
                  "DATE '2026-01-06', 1000.00, 'completed')")
    assert world.cli("reconcile", "fix") == 1 and world.phase() == "repairing"
    assert world.cli("run", "fix", "--partitions", "2026-01-06") == 0
    _publish_fix_and_check_the_month_adds_up(world, capsys)


def _month_alone_defs(world):
    """A code location of the month alone (the team's rollup deployed apart from the daily table):
    its `source` names daily_revenue, which these definitions do not declare."""
    import dagster as dg

    from backfill_assets.defs.replayable import make_replayable_table
    from backfill_assets.defs.resources import backfill_resources
    from backfill_assets.demo.definitions import MONTHS
    from backfill_assets.demo.revenue import MONTHLY_REVENUE

    rollup = make_replayable_table(MONTHLY_REVENUE, MONTHS, group_name="revenue")
    return dg.Definitions(assets=[*rollup.assets], resources=backfill_resources(str(world.home), world.url or ""),
                          executor=dg.in_process_executor)


def test_a_month_loaded_by_definitions_without_its_days_never_reads_a_cancelled_plans_days(world, monkeypatch):
    """Plan fix over 2026-01-05..08 is run and cancelled: consumers never saw its days. The month is
    loaded by a code location that declares the month alone: the check that a month reads only
    days consumers saw asked the loaded definitions for its upstream table, found none, and the
    month was computed from the cancelled plan's days and published beside days that never showed
    them."""
    _january_days_published(world)
    world.approve(_days_plan(world))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("cancel", "fix") == 0
    loaded = run(world, _month_alone_defs(world), ["monthly_revenue", "published_monthly_revenue"], [MONTH],
                 {"dagster/backfill": "ui-bf"})
    month = _published_by_region(world, "published_monthly_revenue", "month")
    assert month in ({}, _published_by_region(world, "published_revenue", "order_date")), month
    assert not loaded.success and "daily_revenue" in failure_text(loaded), failure_text(loaded)


def test_an_insider_hiding_the_days_ledger_rows_lets_a_month_alone_location_read_a_cancelled_plans_days(
        world, monkeypatch):
    """`_undeclared_upstream` asks the ledger's rows alone whether the month's `source` is a table
    backfill writes. An insider who can write the warehouse (not read the key) moves the days'
    `writes` rows aside while a code location declaring the month alone loads January's month
    from a cancelled plan's days, then puts them back (they verify against their seals again): the
    month records no reads, and its publish put before consumers a month that does not add up to
    the days they read."""
    _january_days_published(world)
    world.approve(_days_plan(world))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("cancel", "fix") == 0
    world.run_sql("CREATE TABLE main.hidden_writes AS SELECT * FROM backfill_control.writes "
                  "WHERE asset = 'daily_revenue'")
    world.run_sql("DELETE FROM backfill_control.writes WHERE asset = 'daily_revenue'")
    loaded = run(world, _month_alone_defs(world), ["monthly_revenue"], [MONTH], {"dagster/backfill": "ui-bf"})
    world.run_sql("INSERT INTO backfill_control.writes SELECT * FROM main.hidden_writes")
    world.run_sql("DROP TABLE main.hidden_writes")
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    published = run(world, defs_of(world, BUGGY), ["published_monthly_revenue"], [MONTH],
                    {"dagster/backfill": "ui-bf2"})
    month = _published_by_region(world, "published_monthly_revenue", "month")
    assert month in ({}, _published_by_region(world, "published_revenue", "order_date")), (
        loaded.success, failure_text(loaded), published.success, failure_text(published))


def _days_plan_published_then_the_month_loaded(world, monkeypatch) -> None:
    """Plan fix over 2026-01-05..08 (the daily table alone) run and published; then the team
    deploys the rollup and loads January's month from the published days (a UI backfill)."""
    world.approve(_days_plan(world))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    assert run(world, defs_of(world, BUGGY), ["monthly_revenue", "published_monthly_revenue"], [MONTH],
               {"dagster/backfill": "ui-bf"}).success


def _publish_fix_and_check_the_month_adds_up(world, capsys):
    """`backfill publish fix`, refused or not: the published month still adds up to the published
    days. Returns its exit code and what it said."""
    capsys.readouterr()
    code = world.cli("publish", "fix")
    said = capsys.readouterr()
    assert _published_by_region(world, "published_monthly_revenue", "month") == \
        _published_by_region(world, "published_revenue", "order_date"), (code, said.out, said.err)
    return code, said


def _a_days_plan_leaves_the_published_month_adding_up(world, capsys) -> None:
    """The published month adds up to the published days, and still does once a plan over
    2026-01-05..08 is run and its publish tried (refused, or publishing what keeps them adding up)."""
    assert _published_by_region(world, "published_monthly_revenue", "month") == \
        _published_by_region(world, "published_revenue", "order_date")
    world.approve(_days_plan(world))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    _publish_fix_and_check_the_month_adds_up(world, capsys)


def _published_source_defs(world):
    """The team's definitions: the daily table, and a monthly rollup that reads the days consumers
    read (its `source` is published_revenue, the table backfill publishes the days into)."""
    path = world.root / "defs_published_source.py"
    path.write_text(
        "import dataclasses\n"
        "import dagster as dg\n"
        "from backfill_assets.defs.replayable import make_replayable_table\n"
        "from backfill_assets.defs.resources import backfill_resources\n"
        "from backfill_assets.demo.definitions import MONTHS, ORDERS, PARTITIONS\n"
        "from backfill_assets.demo.revenue import DAILY_REVENUE, MONTHLY_REVENUE\n"
        "month = dataclasses.replace(MONTHLY_REVENUE, source='published_revenue',\n"
        "                            select_sql=MONTHLY_REVENUE.select_sql.replace(\n"
        "                                'daily_revenue', 'published_revenue'))\n"
        "days = make_replayable_table(DAILY_REVENUE, PARTITIONS, group_name='revenue')\n"
        "rollup = make_replayable_table(month, MONTHS, group_name='revenue')\n"
        "defs = dg.Definitions(assets=[ORDERS, *days.assets, *rollup.assets], sensors=days.sensors,\n"
        f"                      resources=backfill_resources({str(world.home)!r}, {world.url or ''!r}),\n"
        "                      executor=dg.in_process_executor)\n", encoding="utf-8")
    return path


def test_a_month_computed_from_the_published_days_is_never_left_beside_days_a_plan_published_since(
        world, monkeypatch, capsys):
    """A replayable rollup whose `source` is the days' published table (the table consumers read,
    which backfill writes): it is no member of the days' graph, records no `reads` and is not
    refused as computed from a table backfill writes. A plan over the days is then run and
    published: consumers read a published month computed from the days it replaced."""
    _january_days_published(world)
    defs = deployed_defs(_published_source_defs(world), monkeypatch)
    loaded = run(world, defs, ["monthly_revenue", "published_monthly_revenue"], [MONTH],
                 {"dagster/backfill": "ui-bf"})
    if not loaded.success:  # refused: its source is a table backfill writes, outside the graph
        assert "published_revenue" in failure_text(loaded), failure_text(loaded)
        assert _published_by_region(world, "published_monthly_revenue", "month") == {}
        return
    _a_days_plan_leaves_the_published_month_adding_up(world, capsys)


def test_a_publish_of_days_only_a_rolled_back_plan_wrote_is_one_line_not_an_internal_error(world, monkeypatch,
                                                                                           capsys):
    """Plan fix writes January 5..8, never written before, and publishes them; the team loads
    January's month from the published days (no plan) and publishes it. fix is rolled back keeping
    the month (`--keep-computed`). The chain's reads then name days whose only writes are a rolled-back
    plan's: publish's check of what was computed from them looked the days' newest write up and
    failed with a KeyError (a traceback in the run, exit 3 from the CLI) instead of refusing."""
    from tests.world import keys

    with world.warehouse().session() as session:
        from backfill_assets.demo.sample import generate_orders
        from tests.world import START
        generate_orders(session, start=START, days=31, rows_per_day=40, seed=11)
    assert world.materialize(keys(1, 4), spec=BUGGY, publish=True).success
    assert world.materialize(keys(9, 31), spec=BUGGY, publish=True).success
    _days_plan_published_then_the_month_loaded(world, monkeypatch)
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue") == 0
    capsys.readouterr()
    published = run(world, defs_of(world, BUGGY), ["published_revenue"], keys(5, 8), {"dagster/backfill": "ui-bf2"})
    assert not published.success
    said = failure_text(published)
    assert said and "Error occurred while executing" not in said, f"an internal error: {_causes(published)}"
    code = world.cli("publish", "fix")
    said = capsys.readouterr()
    assert code != 3 and "Traceback" not in said.err, said.err


def _causes(result) -> str:
    """The errors under a run's step failures (Dagster's wrapper, then what the step raised)."""
    out = []
    for event in result.all_events:
        error = getattr(event.event_specific_data, "error", None) if event.is_step_failure else None
        while error is not None:
            out.append(f"{error.cls_name}: {error.message.strip()}")
            error = error.cause
    return " <- ".join(out)


def _month_from_published_alone_defs(world):
    """A second code location: the team's monthly rollup alone, reading the days consumers read
    (`source` published_revenue, the daily table's `publish_as` in the other location)."""
    from backfill_assets.defs.replayable import make_replayable_table
    from backfill_assets.defs.resources import backfill_resources
    from backfill_assets.demo.definitions import MONTHS
    from backfill_assets.demo.revenue import MONTHLY_REVENUE

    month = dataclasses.replace(MONTHLY_REVENUE, source="published_revenue",
                                select_sql=MONTHLY_REVENUE.select_sql.replace("daily_revenue", "published_revenue"))
    rollup = make_replayable_table(month, MONTHS, group_name="revenue")
    return dg.Definitions(assets=[*rollup.assets], resources=backfill_resources(str(world.home), world.url or ""),
                          executor=dg.in_process_executor)


def test_a_month_alone_location_reading_an_adopted_published_table_is_never_left_beside_a_plans_days(
        world, monkeypatch, capsys):
    """The team adopts its existing `published_revenue` (consumers read it) as the daily table's
    `publish_as`; the days are loaded into the target but not yet published. A second code location
    declaring the month alone, its `source` published_revenue, loads and publishes January's month:
    no publication into published_revenue is in the ledger or the chain yet, so the check that a
    source is a table backfill publishes into takes it for a raw source; the month records no reads.
    A plan over the days (their own location) then publishes 2026-01-05..08 into published_revenue:
    consumers read a month computed from days they no longer see."""
    from backfill_assets.demo.sample import generate_orders

    with world.warehouse().session() as session:
        generate_orders(session, start=START, days=31, rows_per_day=40, seed=11)
    assert world.materialize(keys(1, 31), spec=BUGGY).success  # the target only
    # the team's own table, which consumers read already (adopted as publish_as)
    world.run_sql("INSERT INTO published_revenue SELECT * FROM daily_revenue")
    monkeypatch.setenv("BACKFILL_DEFS", DAILY_DEFS)
    loaded = run(world, _month_from_published_alone_defs(world), ["monthly_revenue", "published_monthly_revenue"],
                 [MONTH], {"dagster/backfill": "ui-bf"})
    if not loaded.success:  # refused: its source is the table the days are published into
        assert "published_revenue" in failure_text(loaded), failure_text(loaded)
        return
    _a_days_plan_leaves_the_published_month_adding_up(world, capsys)


# --- the way out of a cancelled plan under a month, from the command line (found by an attack) --------

def _next_step(world, capsys) -> str:
    capsys.readouterr()
    assert world.cli("status", "fix") == 0
    [line] = [x for x in capsys.readouterr().out.splitlines() if x.startswith("next")]
    return line


def test_status_of_a_cancelled_plan_whose_rollback_must_keep_a_month_names_the_rollback_that_ends_it(
        world, monkeypatch, capsys):
    """A cancelled plan whose days a month was computed from since (a load without a plan): `status`
    said `backfill rollback fix`, which is refused for the month; the step that ends the plan is
    the rollback with `--keep-computed monthly_revenue`."""
    _cancelled_under_a_month(world, monkeypatch)
    step = _next_step(world, capsys)
    assert "--keep-computed monthly_revenue" in step, step
    command = step.split("`")[1].split()
    assert world.cli(*command[1:]) == 0
    assert world.phase("fix") == "rolled_back"


def test_status_of_a_cancelled_plan_needing_signatures_has_them_sign_the_statement_its_rollback_takes(
        world, monkeypatch, tmp_path, capsys):
    """Its own approvals no longer hold, so the rollback needs approvers' signatures: `status` had
    them sign `backfill rollback fix --print-statement`, a whole rollback's statement, which never
    authorises the rollback that keeps the month (the only one that can end the plan): a signing
    round wasted on a statement no command accepts."""
    _cancelled_under_a_month(world, monkeypatch)
    _drop_bob(world, tmp_path)
    step = _next_step(world, capsys)
    assert "--print-statement --keep-computed monthly_revenue" in step, step
    assert "`backfill rollback fix --keep-computed monthly_revenue --statement FILE" in step, step


@pytest.mark.parametrize("named", ["nosuch", "MONTHLY_REVENUE", "daily_revenue", ""])
def test_print_statement_refuses_a_keep_computed_name_the_rollback_refuses(world, monkeypatch, tmp_path,
                                                                          capsys, named):
    """`--print-statement --keep-computed NAME` printed (exit 0) a statement naming a table the
    rollback then refuses (no table of the definitions, a case or a typo away from one, a table
    the plan wrote): approvers signed a statement no rollback accepts. The empty name was refused
    naming `backfill plan statement`, which prints no rollback statement. One line naming the
    option, exit 2, nothing printed to sign."""
    _cancelled_under_a_month(world, monkeypatch)
    _drop_bob(world, tmp_path)
    capsys.readouterr()
    code = world.cli("rollback", "fix", "--keep-computed", named, "--print-statement")
    said = capsys.readouterr()
    assert code == 2, (code, said.out)
    assert said.out == "" and said.err.count("\n") == 1 and f"--keep-computed {named}" in said.err, said.err
    assert "plan statement" not in said.err, said.err


def test_a_rollback_statement_edited_by_hand_is_refused_naming_the_command_that_prints_it(
        world, monkeypatch, tmp_path, capsys):
    """A `rollback keeping computed` statement saved with CRLF line ends (an editor on Windows) or
    a trailing space: refused in one line whose fix named `backfill plan statement` (or `approvers
    statement`), neither of which prints a rollback's statement."""
    _cancelled_under_a_month(world, monkeypatch)
    _drop_bob(world, tmp_path)
    capsys.readouterr()
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue", "--print-statement") == 0
    keeping = Statement.parse(capsys.readouterr().out)
    text, sig = sign_file(world, "carol", keeping, tmp_path)
    for edited in (keeping.text.replace("\n", "\r\n"), keeping.text.replace("\n", " \n", 1)):
        text.write_bytes(edited.encode())
        code = world.cli("rollback", "fix", "--keep-computed", "monthly_revenue", "--statement", str(text),
                         "--signature", f"carol={sig}", "--sign", f"alice={world.keys['alice']}")
        said = capsys.readouterr()
        assert code != 0 and said.err.count("\n") == 1, said.err
        assert "--print-statement" in said.err and "plan statement" not in said.err, said.err
        assert world.phase("fix") == "repairing"


def test_keep_computed_of_a_month_the_loaded_definitions_do_not_declare_names_the_definitions_to_load(
        world, monkeypatch, capsys):
    """The month was loaded by a deployment with the rollup; the operator rolls back with the
    definitions the plan was made with (the daily table alone). The refusal said `leave
    monthly_revenue as it is with --keep-computed monthly_revenue`, which was refused in turn with
    `name one of the tables they declare (daily_revenue)`: a loop of two fixes that never ends the
    plan. Each says to load definitions declaring the month (--defs), and that rollback ends it."""
    from tests.test_graph import FULL_DEFS

    _cancelled_under_a_month(world, monkeypatch)
    monkeypatch.setenv("BACKFILL_DEFS", "backfill_assets.demo.daily")
    capsys.readouterr()
    assert world.cli("rollback", "fix") == 1
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "--keep-computed monthly_revenue" in said and "--defs" in said, said
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue") == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "--defs" in said, said
    assert world.phase("fix") == "repairing"
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue", "--defs", FULL_DEFS) == 0
    assert world.phase("fix") == "rolled_back"


def test_a_source_naming_the_days_in_another_case_is_refused_naming_the_declared_table(world, monkeypatch):
    """A month whose `source` writes the days' table in another case (`DAILY_REVENUE`): DuckDB reads
    daily_revenue by that name, but the graph matches asset names exactly, so the month was no
    member of the days' graph; it was refused as computed from a table "the loaded definitions do
    not declare", telling the team to declare what they had declared. The refusal names the
    declared table to write instead."""
    _january_days_published(world)
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    shouting = dataclasses.replace(MONTHLY_REVENUE, source="DAILY_REVENUE")
    defs = build_definitions(BUGGY, home=str(world.home), url=world.url or "", monthly=shouting)
    loaded = run(world, defs, ["monthly_revenue", "published_monthly_revenue"], [MONTH])
    said = failure_text(loaded)
    assert not loaded.success and "do not declare" not in said, said
    assert "source DAILY_REVENUE names daily_revenue in another case" in said, said
    assert world.sql("SELECT count(*) FROM backfill_control.writes WHERE asset = 'monthly_revenue'") == [(0,)]

"""A data team's own Dagster project: a daily table feeding a Monday-start WEEKLY rollup and a
MONTHLY rollup, a replay of days straddling a month end in the middle of a week."""

import datetime as dt

import pytest

from tests.plans import complete_plan, write_plan
from tests.test_graph import deployed_defs, run
from tests.world import START

DAYS = [(START + dt.timedelta(days=i)).isoformat() for i in range(59)]  # January and February
WEEKS = [(dt.date(2026, 1, 5) + dt.timedelta(weeks=i)).isoformat() for i in range(7)]  # Mondays to 02-16
MONTHS = ["2026-01-01", "2026-02-01"]
FIX = ("2026-01-29", "2026-02-03")  # Thursday .. Tuesday: the week of 01-26 spans both months


def _team_defs(world, extra: str = ""):
    """The team's code location: the daily table, a Monday-start weekly rollup and the monthly one,
    both computed from the days; `extra`, the team's own assets (`TEAM`) and resources."""
    path = world.root / "defs_team_rollups.py"
    path.write_text(
        "import dataclasses\n"
        "import dagster as dg\n"
        "from backfill_assets.defs.replayable import make_replayable_table\n"
        "from backfill_assets.defs.resources import backfill_resources\n"
        "from backfill_assets.demo.definitions import MONTHS, ORDERS, PARTITIONS\n"
        "from backfill_assets.demo.revenue import DAILY_REVENUE, MONTHLY_REVENUE\n"
        "WEEK = \"CAST(date_trunc('week', order_date) AS DATE)\"\n"
        "weekly = dataclasses.replace(\n"
        "    MONTHLY_REVENUE, name='weekly_revenue', partition_column='week', business_keys=('week', 'region'),\n"
        "    source_keys=(('week', WEEK),), publish_as='published_weekly_revenue',\n"
        "    contract=(dataclasses.replace(MONTHLY_REVENUE.contract[0], name='week'), *MONTHLY_REVENUE.contract[1:]),\n"
        "    select_sql=MONTHLY_REVENUE.select_sql.replace(\"CAST(date_trunc('month', order_date) AS DATE)\", WEEK)\n"
        "    .replace('AS month', 'AS week'))\n"
        "WEEKS = dg.WeeklyPartitionsDefinition(start_date='2026-01-05', day_offset=1)\n"
        + extra +
        "days = make_replayable_table(DAILY_REVENUE, PARTITIONS, group_name='revenue')\n"
        "week = make_replayable_table(weekly, WEEKS, group_name='revenue')\n"
        "month = make_replayable_table(MONTHLY_REVENUE, MONTHS, group_name='revenue')\n"
        "defs = dg.Definitions(assets=[ORDERS, *days.assets, *week.assets, *month.assets"
        + (", *TEAM" if extra else "") + "],\n"
        "                      sensors=[*days.sensors, week.sensor, month.sensor],\n"
        + f"                      resources={{**backfill_resources({str(world.home)!r}, {world.url or ''!r}),\n"
        + ("  **TEAM_RESOURCES},\n" if extra else "  },\n") +
        "                      executor=dg.in_process_executor)\n", encoding="utf-8")
    return path


def _sums(world, table: str, column: str, by: str) -> dict:
    return {(str(k), r): round(float(n), 2) for k, r, n in world.sql(
        f"SELECT CAST(date_trunc('{by}', {column}) AS DATE), region, sum(net_revenue) FROM {table} "
        "GROUP BY 1, 2")}


def _consistent(world) -> None:
    days_by_week = {k: v for k, v in _sums(world, "published_revenue", "order_date", "week").items()
                    if k[0] in WEEKS}
    assert _sums(world, "published_weekly_revenue", "week", "week") == days_by_week
    assert _sums(world, "published_monthly_revenue", "month", "month") == _sums(
        world, "published_revenue", "order_date", "month")


def _loaded(world, monkeypatch):
    """January's and February's orders; their days, weeks and months loaded and published plan-free."""
    from backfill_assets.demo.sample import generate_orders

    with world.warehouse().session() as session:
        generate_orders(session, start=START, days=59, rows_per_day=12, seed=5)
    defs = deployed_defs(_team_defs(world), monkeypatch)
    assert run(world, defs, ["daily_revenue", "published_revenue"], DAYS).success
    for asset, keys in (("weekly_revenue", WEEKS), ("monthly_revenue", MONTHS)):
        for key in keys:
            result = run(world, defs, [asset, f"published_{asset}"], [key])
            assert result.success, key
    _consistent(world)
    return defs


def _plan(world) -> dict:
    document = complete_plan(plan_id="fix", start=FIX[0], end=FIX[1], proof=(FIX[0],), per_run=6)
    document["graph"] = [{"asset": "monthly_revenue", "window": {"start": MONTHS[0], "end": MONTHS[1]}},
                         {"asset": "weekly_revenue", "window": {"start": "2026-01-26", "end": "2026-02-02"}}]
    return document


def test_a_replay_straddling_a_month_end_mid_week_recomputes_publishes_and_rolls_back_weeks_and_months(
        engine_world, monkeypatch, run_cli):
    world = engine_world
    _loaded(world, monkeypatch)
    before = {t: world.sql(f"SELECT * FROM {t} ORDER BY 1, 2, 3, 4, 5, 6") for t in (
        "published_revenue", "published_weekly_revenue", "published_monthly_revenue")}
    path = write_plan(world.root / "plans" / "fix.yaml", _plan(world))
    shown = run_cli("plan", "validate", str(path))
    assert shown.code == 0, shown.out + shown.err
    world.approve(path)
    # the source changes under the plan's days: a late order on 2026-01-31 and one on 2026-02-02
    world.run_sql("UPDATE orders SET amount = amount + 100 WHERE order_date IN ('2026-01-31', '2026-02-02')")
    assert world.cli("run", "fix", "--proof") == 0
    assert world.cli("run", "fix", "--and-publish") == 0
    assert world.phase("fix") == "published"
    _consistent(world)
    weeks = world.sql("SELECT * FROM published_weekly_revenue ORDER BY 1, 2, 3, 4, 5, 6")
    assert weeks != before["published_weekly_revenue"]  # the weeks were recomputed from the fixed days
    assert world.cli("rollback", "fix") == 0
    for table, rows in before.items():
        assert world.sql(f"SELECT * FROM {table} ORDER BY 1, 2, 3, 4, 5, 6") == rows, table
    _consistent(world)


TOTALS = (
    "from dagster_duckdb import DuckDBResource\n"
    "@dg.asset(deps=[dg.AssetKey({key!r})])\n"
    "def weekly_totals(duckdb: DuckDBResource) -> dg.MaterializeResult:\n"
    "    with duckdb.get_connection() as con:\n"
    "        con.execute('CREATE OR REPLACE TABLE weekly_totals AS SELECT week, sum(net_revenue) AS net '\n"
    "                    'FROM main.published_weekly_revenue GROUP BY week')\n"
    "    return dg.MaterializeResult()\n"
    "TEAM = [weekly_totals]\n"
    "TEAM_RESOURCES = {{'duckdb': DuckDBResource(database={path!r})}}\n")


@pytest.mark.separate_processes
@pytest.mark.parametrize("key", [["main", "published_weekly_revenue"], ["Published_Weekly_Revenue"]])
def test_a_consumer_reading_a_published_rollup_by_another_key_for_its_table_is_named_not_left_stale(
        world, monkeypatch, run_cli, key):
    """The team's report `weekly_totals` reads the published weeks with its own DuckDBResource and
    SQL, its `deps` naming the table as dagster-duckdb names it (`main/published_weekly_revenue`) or
    in another case: the table DuckDB reads is the published weeks. A plan over the days changes
    them, yet `plan validate` passed a plan whose `downstream:` left the report out: its owners were
    never told, and no run refreshed it after the publish or a rollback, so it showed figures
    consumers no longer read. The key is refused in one line naming the published asset to depend on."""
    path = _team_defs(world, extra=TOTALS.format(key=key, path=str(world.warehouse_path)))
    deployed_defs(path, monkeypatch)
    plan = write_plan(world.root / "plans" / "fix.yaml", _plan(world))
    shown = run_cli("plan", "validate", str(plan))
    assert shown.code != 0, f"plan validate passed, leaving weekly_totals out: {shown.out}"
    said = shown.out + shown.err
    assert "weekly_totals" in said and "published_weekly_revenue" in said, said
    # depending on the published asset itself, the report is a consumer the plan must list
    path = _team_defs(world, extra=TOTALS.format(key=["published_weekly_revenue"], path=str(world.warehouse_path)))
    deployed_defs(path, monkeypatch)
    shown = run_cli("plan", "validate", str(plan))
    assert shown.code != 0 and "add `- {asset: weekly_totals" in shown.out + shown.err, shown.out + shown.err
    document = _plan(world)
    document["downstream"].append({"asset": "weekly_totals", "owners": ["finance-bi"]})
    plan = write_plan(world.root / "plans" / "fix.yaml", document)
    shown = run_cli("plan", "validate", str(plan))
    assert shown.code == 0 and "consumer  weekly_totals" in shown.out, shown.out + shown.err

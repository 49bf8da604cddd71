"""What a rollup reads over the asset graph, and the consumers a plan lists: rows in no upstream
partition, days consumers have not seen, consumers of partitions Dagster cannot map (round `graph`)."""

from __future__ import annotations

import dagster as dg
import pytest

from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.defs.resources import backfill_resources
from backfill_assets.demo.definitions import ORDERS, PARTITIONS
from backfill_assets.demo.revenue import DAILY_REVENUE, MONTHLY_REVENUE
from backfill_assets.demo.sample import generate_orders
from tests.plans import complete_plan, write_plan
from tests.world import START, failure_text, keys


def _run(world, defs: dg.Definitions, assets: list[str], key: str):
    job = defs.resolve_implicit_global_asset_job_def()
    with world.deployed():
        return job.execute_in_process(instance=world.instance, asset_selection=[dg.AssetKey(a) for a in assets],
                                      tags={"dagster/partition": key}, raise_on_error=False)


def test_a_month_never_reads_rows_of_its_days_table_that_lie_in_no_day_partition(world):
    """The team's months start a month before its days (`MonthlyPartitionsDefinition(start_date=
    "2025-12-01")` over days from 2026-01-01): December 2025's window holds no day partition, so
    the month's check of what it reads asked about none. A hurried user pastes December's figures
    into daily_revenue by hand (rows no write of the framework made, in no partition, so no gate
    or fingerprint covers them); Materialize of the month's December in the UI computed it from
    them, its gates compared it with those same rows, and it was published to consumers."""
    with world.warehouse().session() as session:
        generate_orders(session, start=START, days=3, rows_per_day=10, seed=5)
    assert world.materialize(keys(1, 3), spec=DAILY_REVENUE, publish=True).success
    world.run_sql("INSERT INTO daily_revenue BY NAME SELECT DATE '2025-12-20' AS order_date, "
                  "* EXCLUDE (order_date) FROM daily_revenue WHERE order_date = DATE '2026-01-02'")
    days = make_replayable_table(DAILY_REVENUE, PARTITIONS)
    months = make_replayable_table(MONTHLY_REVENUE, dg.MonthlyPartitionsDefinition(start_date="2025-12-01"))
    defs = dg.Definitions(assets=[ORDERS, *days.assets, *months.assets],
                          resources=backfill_resources(str(world.home), world.url or ""))
    december = _run(world, defs, ["monthly_revenue", "published_monthly_revenue"], "2025-12-01")
    published = world.sql("SELECT count(*) FROM information_schema.tables WHERE table_name = "
                          "'published_monthly_revenue'")[0][0] and \
        world.sql("SELECT count(*) FROM published_monthly_revenue")[0][0]
    assert not december.success and not published, (
        f"a month computed from daily_revenue rows in no day partition was published ({published} row(s)): "
        f"{failure_text(december) or 'success'}")
    assert "order_date 2025-12-20) that lie in no daily_revenue partition" in failure_text(december), \
        failure_text(december)


@pytest.mark.parametrize(("consumer", "partitions", "reads"), [
    # a per-client report: Dagster asked the keys of a dynamic partitions definition without an
    # instance, and `plan validate` (like every run of the plan, and the reopen sensor) stopped with
    # an internal error
    ("per_client", "dg.DynamicPartitionsDefinition(name='clients')", "published_revenue"),
    # finance's New York daily extract over the UTC days: Dagster's own mapping refuses to map
    # windows across time zones, and that refusal escaped the same way; its partitions whose windows
    # overlap the plan's days are the ones that read them
    ("ny_extract", "dg.DailyPartitionsDefinition(start_date='2026-01-01', timezone='America/New_York')",
     "2026-01-04..2026-01-08 (5)"),
])
def test_plan_validate_names_what_a_consumer_of_odd_partitions_reads_never_an_internal_error(
        world, run_cli, tmp_path, monkeypatch, consumer, partitions, reads):
    """A pandas consumer of the published days whose partitions Dagster cannot map on its own."""
    defs = tmp_path / "team_defs.py"
    defs.write_text(
        "import dagster as dg\n"
        "from backfill_assets.demo.definitions import build_definitions\n"
        f"@dg.asset(deps=['published_revenue'], partitions_def={partitions})\n"
        f"def {consumer}() -> None: ...\n"
        f"defs = dg.Definitions.merge(build_definitions(home={str(world.home)!r}), "
        f"dg.Definitions(assets=[{consumer}]))\n", encoding="utf-8")
    document = complete_plan(plan_id="fix", start="2026-01-05", end="2026-01-08", proof=("2026-01-05",), per_run=4)
    document["downstream"].append({"asset": consumer, "owners": ["finance-bi"]})
    path = write_plan(world.root / "plans" / "fix.yaml", document)
    monkeypatch.setenv("BACKFILL_DEFS", str(defs))
    shown = run_cli("plan", "validate", str(path))
    assert shown.code == 0 and "internal error" not in shown.err, shown.err
    [line] = [ln for ln in shown.out.splitlines() if consumer in ln]
    assert reads in line, line


def test_a_month_never_reads_a_day_written_without_a_plan_that_consumers_have_not_seen(world):
    """January's days are loaded and published, but for the 31st: a hurried user pressed Materialize
    on daily_revenue alone (not its published table), so consumers' days end on the 30th. The
    month loaded from the UI read the 31st and was published: consumers read a month that does not
    add up to the published days beside it, as the unpublished days of a plan would have made it
    (refused since an attack); a day written without a plan is no more seen by consumers."""
    from tests.test_graph import MONTH, defs_of
    from tests.test_graph import run as graph_run

    with world.warehouse().session() as session:
        generate_orders(session, start=START, days=31, rows_per_day=5, seed=7)
    assert world.materialize(keys(1, 30), spec=DAILY_REVENUE, publish=True).success
    assert world.materialize("2026-01-31", spec=DAILY_REVENUE).success  # the target alone
    month = graph_run(world, defs_of(world, DAILY_REVENUE), ["monthly_revenue", "published_monthly_revenue"], [MONTH])
    published = world.sql("SELECT count(*) FROM information_schema.tables WHERE table_name = "
                          "'published_monthly_revenue'")[0][0] and \
        world.sql("SELECT count(*) FROM published_monthly_revenue")[0][0]
    assert not month.success and not published, (
        f"a month computed from a day consumers have not seen was published ({published} row(s)): "
        f"{failure_text(month) or 'success'}")
    assert "daily_revenue 2026-01-31" in failure_text(month), failure_text(month)

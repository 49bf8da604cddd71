"""Attack h: the chain's `reads` (which partitions each write was computed from) against publish,
rollback and --keep-computed, with definitions that omit the month."""

from __future__ import annotations

from backfill_assets.demo.sample import generate_orders
from tests.plans import complete_plan, write_plan
from tests.test_graph import FULL_DEFS, MONTH, _published_by_region, defs_of, graph_plan, run
from tests.world import BUGGY, START, failure_text, keys

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
    capsys.readouterr()
    code = world.cli("publish", "fix")
    said = capsys.readouterr()
    assert _published_by_region(world, "published_monthly_revenue", "month") == \
        _published_by_region(world, "published_revenue", "order_date"), (code, said.out, said.err)
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
    world.approve(_days_plan(world))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    assert run(world, defs_of(world, BUGGY), ["monthly_revenue", "published_monthly_revenue"], [MONTH],
               {"dagster/backfill": "ui-bf"}).success
    monkeypatch.setenv("BACKFILL_DEFS", DAILY_DEFS)
    world.run_sql("INSERT INTO orders VALUES (9999999, 42, 'north', TIMESTAMP '2026-01-06 12:00:00', "
                  "DATE '2026-01-06', 1000.00, 'completed')")
    assert world.cli("reconcile", "fix") == 1 and world.phase() == "repairing"
    assert world.cli("run", "fix", "--partitions", "2026-01-06") == 0
    capsys.readouterr()
    code = world.cli("publish", "fix")
    said = capsys.readouterr()
    assert _published_by_region(world, "published_monthly_revenue", "month") == \
        _published_by_region(world, "published_revenue", "order_date"), (code, said.out, said.err)


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

"""Attacks by a data team bringing its own asset graph: rollups, reports, and a hurried user pressing
Materialize on any part of it, in any plan phase."""

from __future__ import annotations

from tests.test_graph import FULL_DEFS, MONTH, _january_and_a_plan_over_its_days, _published_by_region, defs_of, run
from tests.world import BUGGY


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


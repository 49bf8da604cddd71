"""Attacks by a data team bringing its own asset graph: rollups, reports, and a hurried user pressing
Materialize on any part of it, in any plan phase."""

from __future__ import annotations

import pytest

from tests.test_graph import (
    FULL_DEFS,
    MONTH,
    _january_and_a_plan_over_its_days,
    _published_by_region,
    buggy_january_published,
    defs_of,
    run,
)
from tests.world import BUGGY


@pytest.fixture
def graph_world(world, monkeypatch):
    return buggy_january_published(world, monkeypatch)


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



def _report_requests(world, defs):
    import dagster as dg

    from backfill_assets.defs.resources import WarehouseResource

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
    from tests.plans import write_plan
    from tests.test_graph import graph_plan

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

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


def test_plan_validate_says_a_consumer_reading_the_target_reads_rows_no_gate_passed(world, run_cli, tmp_path,
                                                                                    monkeypatch):
    """A team's asset reads the target through its own DuckDBResource and SQL (`deps=["daily_revenue"]`,
    dagster-duckdb's usual pattern), not through the IO manager (which fails loudly on the target).
    `plan validate` listed it as a consumer "requested after the publish", as if it were one of the
    consumers the gates protect; between publishes it reads whatever the target holds, a failed
    write's rows and a plan's unchecked ones included. Before anyone signs, it must say so."""
    from tests.plans import complete_plan, write_plan

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
    from tests.plans import complete_plan, write_plan

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

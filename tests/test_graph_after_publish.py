"""After a graph replay: a plan over the days and their month published, then closed, rolled back,
repaired or followed by another plan; the reopen sensor's requests of the consumers between those
steps (found by attacks)."""

from __future__ import annotations

from tests.plans import write_plan
from tests.test_graph import FULL_DEFS, _report_requests, _run_request, buggy_january_published, defs_of, graph_plan


def test_a_graph_plan_closed_before_the_sensors_tick_still_refreshes_the_report(world, monkeypatch):
    """A hurried user publishes a graph plan and closes it at once (`plan close`, before the reopen
    sensor's next tick, or while the daemon is down): the sensor asked consumers only of a plan
    still published, so revenue_report (a pandas consumer of the published month) was never
    requested and went on showing the month before the publish."""
    buggy_january_published(world, monkeypatch)
    defs = defs_of(world)
    world.approve(write_plan(world.root / "plans" / "fix.yaml", graph_plan(world)))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0 and world.cli("plan", "close", "fix") == 0
    assert world.phase("fix") == "closed"
    requests = _report_requests(world, defs)
    assert len(requests) == 1, "the report reads the published month and no run refreshes it"
    month = round(float(world.sql("SELECT sum(net_revenue) FROM published_monthly_revenue")[0][0]), 2)
    assert _run_request(world, defs, requests[0]) == month
    assert [r.run_key for r in _report_requests(world, defs)] == [requests[0].run_key]  # once per publish


def test_plan_close_under_definitions_without_the_month_never_closes_over_an_edited_published_month(
        world, monkeypatch, capsys):
    """A graph plan is published; published_monthly_revenue is then edited by hand. `plan close` with
    definitions declaring the daily table alone (`--defs`, an older deployment) checked the days'
    published table only and closed the plan as confirmed, consumers reading an edited month beside
    days it does not add up to. Refused in one line; with the plan's definitions it goes to repairing."""
    buggy_january_published(world, monkeypatch)
    world.approve(write_plan(world.root / "plans" / "fix.yaml", graph_plan(world)))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0
    world.run_sql("UPDATE published_monthly_revenue SET net_revenue = net_revenue + 1 WHERE region = 'north'")
    monkeypatch.setenv("BACKFILL_DEFS", "backfill_assets.demo.daily")
    capsys.readouterr()
    code = world.cli("plan", "close", "fix")
    said = capsys.readouterr()
    assert code != 0 and world.phase("fix") == "published", (code, said.out, said.err)
    assert said.err.count("\n") == 1 and "monthly_revenue" in said.err and "Traceback" not in said.err, said.err
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    assert world.cli("plan", "close", "fix") == 1 and world.phase("fix") == "repairing"


def test_run_after_a_late_day_re_run_recomputes_the_stale_month_not_nothing_to_run(world, monkeypatch, capsys):
    """Late data for one day of a reconciled graph plan: the hurried user re-runs the day, then runs
    the plan (`backfill run fix`) to finish it. The month, computed before the day was written
    again, holds publish; but `run` counted it done (its gates had passed), said "nothing to run:
    every partition of fix is already written and passed" and exited 0 with the plan running and
    the month stale. It recomputes the month; `--dry-run` lists it."""
    from tests.test_graph import _published_by_region

    buggy_january_published(world, monkeypatch)
    world.approve(write_plan(world.root / "plans" / "fix.yaml", graph_plan(world)))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    world.run_sql("INSERT INTO orders SELECT order_id + 5000000, customer_id, region, order_ts, order_date, "
                  "amount + 500, status FROM orders WHERE order_date = DATE '2026-01-06' AND status <> 'refunded' "
                  "ORDER BY order_id LIMIT 3")
    assert world.cli("run", "fix", "--partitions", "2026-01-06") == 0
    capsys.readouterr()
    assert world.cli("run", "fix", "--dry-run") == 0
    assert "monthly_revenue: 1 partition(s) in 1 run(s)" in capsys.readouterr().out
    code = world.cli("run", "fix")
    said = capsys.readouterr()
    assert code == 0 and world.phase("fix") == "reconciled", (code, world.phase("fix"), said.out, said.err)
    assert world.cli("publish", "fix") == 0
    assert _published_by_region(world, "published_monthly_revenue", "month") == \
        _published_by_region(world, "published_revenue", "order_date")


def test_run_re_running_a_day_whose_gates_failed_recomputes_the_month_that_reads_it(world, monkeypatch):
    """Late data fails a day's reconcile; `backfill run fix` re-runs the day (its gates failed) and
    counted the month done, so it ended with the month computed before the day it reads."""
    buggy_january_published(world, monkeypatch)
    world.approve(write_plan(world.root / "plans" / "fix.yaml", graph_plan(world)))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    world.run_sql("INSERT INTO orders VALUES (9999999, 42, 'north', TIMESTAMP '2026-01-06 12:00:00', "
                  "DATE '2026-01-06', 1000.00, 'completed')")
    assert world.cli("reconcile", "fix") == 1 and world.phase("fix") == "running"
    assert world.cli("run", "fix") == 0 and world.phase("fix") == "reconciled"


def test_the_sensor_asks_a_plans_consumers_once_per_publish_not_on_every_tick_after(world, monkeypatch):
    """Every tick asked consumers of every published, closed or rolled-back plan the record holds, each
    plan's chain rows read and its consumers' runs requested again (Dagster then looked each run key
    up to drop it): a cost that grew with every plan a warehouse ever ended. The cursor holds the
    chain row up to which consumers were asked: a later tick asks only of plans published or rolled
    back since, and a tick without it (a new sensor, an earlier release's cursor) asks of all again."""
    import dagster as dg

    from backfill_assets.defs.resources import WarehouseResource

    buggy_january_published(world, monkeypatch)
    defs = defs_of(world)
    world.approve(write_plan(world.root / "plans" / "fix.yaml", graph_plan(world)))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0 and world.cli("plan", "close", "fix") == 0
    sensor = defs.resolve_sensor_def("daily_revenue__reopen_publish")
    resources = {"warehouse": WarehouseResource(home=str(world.home))}

    def tick(cursor: str | None) -> dg.SensorResult:
        return sensor.evaluate_tick(dg.build_sensor_context(instance=world.instance, definitions=defs,
                                                             resources=resources, cursor=cursor))

    def report(result) -> list[str]:
        return [r.run_key for r in result.run_requests
                if [k.to_user_string() for k in r.asset_selection] == ["revenue_report"]]

    first = tick(None)
    assert len(report(first)) == 1
    later = tick(first.cursor)
    assert report(later) == [] and later.cursor == first.cursor
    # an earlier release's cursor (the plans' hash alone) asks of all once more, as a new sensor does
    assert report(tick(first.cursor.split(":")[0])) == report(first)
    # a rollback after the cursor is asked of, once
    assert world.cli("rollback", "fix") == 0
    after = tick(later.cursor)
    assert len(report(after)) == 1 and report(after) != report(first)
    assert report(tick(after.cursor)) == []

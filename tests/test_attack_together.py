"""Round "together": two commands at once, a sensor tick while a command runs, around the evening's
changes (a published plan that stays published while another plan holds its partitions, the
reopen sensor's chain cursor), on PostgreSQL where many sessions run at once."""

from __future__ import annotations

import threading

import pytest

from backfill_assets.control import record
from backfill_assets.demo.definitions import build_definitions
from backfill_assets.execution.advance import advance
from tests.test_pg_concurrency import ADVISORY, wait_for_waiters
from tests.world import BUGGY, FIXED, OWNER, keys


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_published_plan_reconciled_while_a_later_plan_over_its_days_is_approved_never_holds_them_again(
        engine_world, monkeypatch):
    """Plan first (days 1..4) is published and consumers' copy of day 1 edited; plan second (days
    3..5) is approved while `backfill reconcile first` runs. The approval read no active plan over
    days 3..5 (first was published) and the reconcile read no active plan over first's days (the
    approval had not committed): first went back to repairing and both plans were active over days
    3..4, each refusing the other's runs. One of the two sees the other."""
    world = engine_world
    assert world.materialize(keys(1, 8), spec=BUGGY, publish=True).success
    world.approved_plan("first", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "first", "--proof") == 0 and world.cli("run", "first") == 0
    assert world.cli("publish", "first") == 0
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 WHERE order_date = DATE '2026-01-01'")
    second = world.plan("second", start="2026-01-03", end="2026-01-05", proof=("2026-01-03",))
    world.sign_into_file(second, OWNER, "alice")
    codes: dict[str, int] = {}
    approving = threading.Thread(target=lambda: codes.update(approve=world.cli(
        "plan", "approve", str(second), "--by", "bob", "--key", str(world.keys["bob"]))))
    with world.warehouse().session() as sensor, sensor.transaction():
        # the reopen sensor's tick (or `reconcile first`) moving first on the edit: its move is made,
        # not yet committed, when the approval reads which plans are active
        moved = advance(sensor, record.require(sensor, "first"), "reopen-sensor", FIXED, world.scheme)
        approving.start()
        wait_for_waiters(world, 1, ADVISORY)  # the approval waits for the chain's turn
    approving.join(timeout=240)
    phases = (world.phase("first"), world.phase("second"))
    assert moved.phase.value == "published" or codes.get("approve") != 0, (phases, codes)
    assert phases != ("repairing", "approved"), (phases, codes)


def test_a_tick_under_definitions_without_the_month_never_loses_the_reports_refresh_of_a_publish(
        world, monkeypatch):
    """A graph plan (days and month) is published; the reopen sensor ticks once under a deployment
    declaring the daily table alone (a code location reloaded from an older release, the month and
    the report not loaded), then under the plan's definitions again. The first tick found no
    consumer of the plan's month to ask and moved its cursor past the publish: the next ticks asked
    nothing, and revenue_report went on showing the month before the publish, for good."""
    import dagster as dg

    from backfill_assets.defs.resources import WarehouseResource
    from tests.plans import write_plan
    from tests.test_graph import buggy_january_published, defs_of, graph_plan

    buggy_january_published(world, monkeypatch)
    full, days_only = defs_of(world), build_definitions(FIXED, home=str(world.home))
    world.approve(write_plan(world.root / "plans" / "fix.yaml", graph_plan(world)))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0
    resources = {"warehouse": WarehouseResource(home=str(world.home))}

    def tick(defs: dg.Definitions, cursor: str | None) -> dg.SensorResult:
        sensor = defs.resolve_sensor_def("daily_revenue__reopen_publish")
        return sensor.evaluate_tick(dg.build_sensor_context(instance=world.instance, definitions=defs,
                                                             resources=resources, cursor=cursor))

    def report(result: dg.SensorResult) -> list[str]:
        return [r.run_key for r in result.run_requests
                if [k.to_user_string() for k in r.asset_selection] == ["revenue_report"]]

    older = tick(days_only, None)
    assert report(older) == []  # no report in those definitions
    again = tick(full, older.cursor)
    assert len(report(again)) == 1, (older.cursor, again.cursor)
    assert report(tick(full, again.cursor)) == []  # once per publish


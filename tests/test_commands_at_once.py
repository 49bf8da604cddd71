"""Two commands at once, a sensor tick while a command runs, kill -9 while a second waits, around
the changes (a published plan that stays published while another plan holds its partitions, the
reopen sensor's chain cursor), on PostgreSQL where many sessions run at once."""

from __future__ import annotations

import re
import shlex
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


def _killed_while_another_waits(world, tmp_path, first_args: tuple[str, ...], stall_at: str,
                                second_args: tuple[str, ...], env: dict[str, str]) -> tuple[int, str, str]:
    """`backfill *first_args` held at its crash point `stall_at` (its transaction open), `backfill
    *second_args` started and waiting on its locks, the first killed -9: the second's exit code and
    output."""
    import os
    import signal

    from tests.test_pg_concurrency import ROW, _backfill, _until

    release = tmp_path / "release"
    first = _backfill(world, tmp_path, *first_args, wait=False, env={
        **env, "BACKFILL_STALL_AT": f"{stall_at}=120", "BACKFILL_STALL_RELEASE_FILE": str(release)})
    waiting = None
    try:
        _until(lambda: first.poll() is not None or world.sql(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = "
            "'idle in transaction' AND application_name = 'backfill-assets'")[0][0] >= 1)
        assert first.poll() is None, first.communicate()
        waiting = _backfill(world, tmp_path, *second_args, wait=False, env=env)
        wait_for_waiters(world, 1, ROW + ADVISORY)
        os.kill(first.pid, signal.SIGKILL)
        first.communicate(timeout=60)
        out, err = waiting.communicate(timeout=240)
    finally:
        release.touch()
        for process in (first, waiting):
            if process is not None and process.poll() is None:
                process.kill()
    return waiting.returncode, out, err


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
@pytest.mark.parametrize("second", ["publish", "rollback"])
def test_a_graph_publish_killed_while_a_second_command_waits_converges(engine_world, monkeypatch, tmp_path, second):
    """`backfill publish fix` (days and month) holds every lock it takes, everything copied, not
    committed, when a second shell types `publish fix` again (or `rollback fix`); the first is then
    killed -9. The second goes on alone: the plan ends published (or rolled back) with every table
    as the one command that committed left it, and the chain verifies."""

    from tests.test_graph import JANUARY, buggy_january_published, month_net, reconciled_graph
    from tests.test_pg_concurrency import _backfill

    world = engine_world
    buggy_january_published(world, monkeypatch)
    reconciled_graph(world)
    days_before = world.fingerprints("published_revenue", JANUARY)
    month_before = month_net(world, "published_monthly_revenue")
    env = {"BACKFILL_DEFS": "backfill_assets.demo.definitions"}
    code, out, err = _killed_while_another_waits(world, tmp_path, ("publish", "fix"), "publish.before_commit",
                                                 (second, "fix"), env)
    assert code == 0, (out[-1500:], err[-1500:])
    if second == "publish":
        assert world.phase("fix") == "published"
        assert world.fingerprints("published_revenue", JANUARY) == world.fingerprints("daily_revenue", JANUARY)
        assert month_net(world, "published_monthly_revenue") != month_before
    else:
        assert world.phase("fix") == "rolled_back"
        assert world.fingerprints("published_revenue", JANUARY) == days_before
        assert month_net(world, "published_monthly_revenue") == month_before
    assert _backfill(world, tmp_path, "evidence", "verify", env=env).returncode == 0


def test_plan_close_never_closes_a_published_plan_over_an_edited_published_day_while_another_plan_holds_others(
        world, run_cli):
    """Plan first (days 1..4) is published; plan second (days 3..5) is approved. Consumers' copy of
    day 1 (first's alone) is edited by hand, then `backfill plan close first`: the edit no longer
    sent first to repairing (second holds days 3..4), and the close, which asked only whether the
    days changed since their gates, closed the plan as confirmed over the edited published day. It
    is refused, first staying published, naming second, as before second was approved."""
    assert world.materialize(keys(1, 8), spec=BUGGY, publish=True).success
    world.approved_plan("first", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "first", "--proof") == 0 and world.cli("run", "first") == 0
    assert world.cli("publish", "first") == 0
    world.approved_plan("second", start="2026-01-03", end="2026-01-05", proof=("2026-01-03",))
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 WHERE order_date = DATE '2026-01-01'")
    closed = run_cli("plan", "close", "first")
    assert (closed.code, world.phase("first")) == (1, "published"), (closed.code, world.phase("first"), closed.err)
    assert "second" in closed.err and "Traceback" not in closed.err, closed.err
    # once second ends, the same command sends first to repairing, whose way on republishes the day
    assert run_cli("plan", "withdraw", "second").code == 0
    assert run_cli("plan", "close", "first").code == 1 and world.phase("first") == "repairing"


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_graph_rollback_killed_while_plan_close_waits_converges_and_the_report_is_refreshed_once(
        engine_world, monkeypatch, tmp_path):
    """A published graph plan's `backfill rollback fix` has restored everything, not committed, when
    a second shell types `backfill plan close fix`; the rollback is then killed -9. The close goes
    on alone and closes the plan; the rollback typed again restores the days and the month, and the
    reopen sensor asks the report once for the publish and once for the rollback."""

    import dagster as dg

    from backfill_assets.defs.resources import WarehouseResource
    from tests.test_graph import JANUARY, buggy_january_published, defs_of, month_net, reconciled_graph
    from tests.test_pg_concurrency import _backfill

    world = engine_world
    buggy_january_published(world, monkeypatch)
    days_before = world.fingerprints("published_revenue", JANUARY)
    month_before = month_net(world, "published_monthly_revenue")
    reconciled_graph(world)
    env = {"BACKFILL_DEFS": "backfill_assets.demo.definitions"}
    assert _backfill(world, tmp_path, "publish", "fix", env=env).returncode == 0
    defs = defs_of(world)
    sensor = defs.resolve_sensor_def("daily_revenue__reopen_publish")
    resources = {"warehouse": WarehouseResource(url=world.url)}

    def tick(cursor: str | None) -> tuple[list[str], str | None]:
        result = sensor.evaluate_tick(dg.build_sensor_context(instance=world.instance, definitions=defs,
                                                               resources=resources, cursor=cursor))
        return [r.run_key for r in result.run_requests
                if [k.to_user_string() for k in r.asset_selection] == ["revenue_report"]], result.cursor

    asked, cursor = tick(None)
    assert len(asked) == 1
    code, out, err = _killed_while_another_waits(world, tmp_path, ("rollback", "fix"), "rollback.before_commit",
                                                 ("plan", "close", "fix"), env)
    assert code == 0 and world.phase("fix") == "closed", (out[-1500:], err[-1500:])
    assert tick(cursor)[0] == []  # nothing changed for consumers: the killed rollback committed nothing
    again = _backfill(world, tmp_path, "rollback", "fix", env=env)
    assert again.returncode == 0 and world.phase("fix") == "rolled_back", again.stderr[-1500:]
    assert world.fingerprints("published_revenue", JANUARY) == days_before
    assert month_net(world, "published_monthly_revenue") == month_before
    after, cursor = tick(cursor)
    assert len(after) == 1 and after != asked
    assert tick(cursor)[0] == []
    assert _backfill(world, tmp_path, "evidence", "verify", env=env).returncode == 0


def test_publish_of_a_published_plan_over_an_edited_day_another_plan_holds_others_of_says_so_and_what_to_do(
        world, run_cli):
    """The same two plans and the same edit of consumers' day 1: `backfill publish first` said "already
    published", exit 0, the edit left in place and nothing named. It is refused in one line naming the
    edited day and the plan that holds first's other days, whose status names the way on."""
    assert world.materialize(keys(1, 8), spec=BUGGY, publish=True).success
    world.approved_plan("first", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "first", "--proof") == 0 and world.cli("run", "first") == 0
    assert world.cli("publish", "first") == 0
    world.approved_plan("second", start="2026-01-03", end="2026-01-05", proof=("2026-01-03",))
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 WHERE order_date = DATE '2026-01-01'")
    again = run_cli("run", "first", "--and-publish")  # the same, through the one-command way
    assert again.code == 1 and "published_revenue 2026-01-01" in again.err, (again.code, again.out, again.err)
    refused = run_cli("publish", "first")
    assert refused.code == 1 and world.phase("first") == "published", (refused.code, refused.out, refused.err)
    assert "published_revenue 2026-01-01" in refused.err and "plan second" in refused.err, refused.err
    assert refused.err.count("\n") == 1 and "Traceback" not in refused.err, refused.err
    for command in re.findall(r"`backfill ([^`]+)`", refused.err):  # each command it names, as printed
        assert run_cli(*shlex.split(command)).code == 0, command
    assert world.phase("second") == "withdrawn" and world.phase("first") == "repairing"

"""Dagster's automation and a team's consumers around an active plan: declarative automation
(eager, on_cron, on_missing) on the month, the published tables and the report; a schedule built
from the incremental job; the UI's Materialize all over the graph. Their refusals name commands
that work (three named commands a plan's phase refuses, found by an attack; each test of them
failed on the code before its fix). No `from __future__ import annotations`: Dagster reads the
assets' `context` annotations as types."""

import datetime as dt

import dagster as dg

from backfill_assets.permission import BACKFILL_TAG
from tests.plans import write_plan
from tests.test_graph import JANUARY, MONTH, WINDOW, buggy_january_published, defs_of, graph_plan, month_net
from tests.world import failure_text, keys

FEBRUARY = dt.datetime(2026, 2, 1, 10, 0, tzinfo=dt.UTC)  # January is the latest month


def _automated(world, condition: dg.AutomationCondition, assets: tuple[str, ...]) -> dg.Definitions:
    defs = defs_of(world)
    return defs.map_asset_specs(
        func=lambda spec: spec.replace_attributes(automation_condition=condition)
        if spec.key.to_user_string() in assets else spec)


def _tick(world, defs: dg.Definitions, cursor, when=FEBRUARY):
    """One tick of the automation sensor, its requests launched as the daemon launches them: one
    partition a plain run, several a backfill (emit_backfills), whose runs carry dagster/backfill."""
    result = dg.evaluate_automation_conditions(defs=defs, instance=world.instance, cursor=cursor,
                                               evaluation_time=when)
    from dagster._core.definitions.automation_tick_evaluation_context import build_run_requests

    job = defs.resolve_implicit_global_asset_job_def()
    requests = build_run_requests(result._requested_subsets, defs.resolve_asset_graph(), None, True)
    launches = []
    for request in requests:
        if request.asset_graph_subset is not None:  # a backfill: the daemon's runs, tagged with it
            subset = request.asset_graph_subset
            for key, partitions in subset.partitions_subsets_by_asset_key.items():
                for k in partitions.get_partition_keys():  # multi_run(1) or one run a key at worst
                    launches.append(([key], {BACKFILL_TAG: "auto-bf", "dagster/partition": k}, k))
            for key in subset.non_partitioned_asset_keys:
                launches.append(([key], {BACKFILL_TAG: "auto-bf"}, None))
        else:
            tags = dict(request.tags or {})
            if request.partition_key:
                tags["dagster/partition"] = request.partition_key
            launches.append((list(request.asset_selection or []), tags, request.partition_key))
    outcomes = []
    for selection, tags, key in launches:
        run = job.execute_in_process(instance=world.instance, asset_selection=selection, tags=tags,
                                     raise_on_error=False)
        outcomes.append((sorted(k.to_user_string() for k in selection), key, BACKFILL_TAG in tags, run.success,
                         failure_text(run)[:300]))
    return result, outcomes


# a team's eager without its latest-window clause: every partition whose deps updated, once
ANY_UPDATE = (dg.AutomationCondition.any_deps_updated() | dg.AutomationCondition.missing()).since_last_handled() \
    & ~dg.AutomationCondition.in_progress()


def test_automation_on_the_month_the_published_tables_and_the_report_through_a_plans_life(world, monkeypatch):
    """The team puts an automation condition on the month, both published tables and the pandas
    report, and runs the automation sensor through a plan's life (proven, running, reconciled,
    paused, published, rolled back). Every run it requests is either refused before it writes (a
    plain run over the plan's claim, a publish of a frozen window), once per update and not again
    on the next tick, or reads published bytes: consumers keep the last good data until the
    plan's publish, and the rollback's."""
    buggy_january_published(world, monkeypatch)
    defs = _automated(world, ANY_UPDATE, ("monthly_revenue", "published_revenue", "published_monthly_revenue",
                                          "revenue_report"))
    days, month = world.fingerprints("published_revenue", JANUARY), month_net(world, "published_monthly_revenue")
    clock = [FEBRUARY]

    def tick(cursor):
        clock[0] += dt.timedelta(minutes=2)
        result, outcomes = _tick(world, defs, cursor, clock[0])
        for selection, _, _, success, said in outcomes:
            assert success == (selection == ["revenue_report"]), (selection, said)
        return result.cursor, outcomes

    cursor, _ = tick(None)
    cursor, _ = tick(cursor)
    world.approve(write_plan(world.root / "plans" / "fix.yaml", graph_plan(world)))
    assert world.cli("run", "fix", "--proof") == 0
    cursor, outcomes = tick(cursor)
    assert {(tuple(s), k) for s, k, *_ in outcomes} == {(("monthly_revenue", "published_monthly_revenue"), MONTH),
                                                         (("published_revenue",), WINDOW[0])}, outcomes
    assert "claimed by active plan fix (proven)" in outcomes[0][4] + outcomes[1][4]
    cursor, outcomes = tick(cursor)
    assert outcomes == []  # refused once, not every tick
    assert world.cli("run", "fix") == 0 and world.phase() == "reconciled"
    cursor, outcomes = tick(cursor)
    assert outcomes and all("refused, consumers keep the last good data" in o[4] for o in outcomes)
    assert world.cli("pause", "fix") == 0
    cursor, outcomes = tick(cursor)
    assert outcomes == [] and world.phase() == "reconciled"
    assert world.fingerprints("published_revenue", JANUARY) == days
    assert month_net(world, "published_monthly_revenue") == month
    assert world.cli("run", "fix") == 0 and world.cli("publish", "fix") == 0
    repaired = month_net(world, "published_monthly_revenue")
    assert repaired != month
    cursor, outcomes = tick(cursor)
    assert [o[0] for o in outcomes] == [["revenue_report"]]
    assert world.cli("rollback", "fix") == 0
    cursor, outcomes = tick(cursor)
    assert outcomes == []  # a rollback materializes nothing: the reopen sensor refreshes the report
    assert world.fingerprints("published_revenue", JANUARY) == days
    assert month_net(world, "published_monthly_revenue") == month


def test_a_claimed_month_refused_to_automation_names_a_command_that_runs_it(world, monkeypatch):
    """The automation sensor (eager on the month) requests one partition of the month as a plain
    run while a plan over the days and their month holds it: refused, as it must be, but the fix it
    named, `backfill run fix --partitions 2026-01-01`, names a day of the target outside the
    plan's window and exits 2: the month's partitions are run with `--asset monthly_revenue`."""
    import re

    buggy_january_published(world, monkeypatch)
    world.approve(write_plan(world.root / "plans" / "fix.yaml", graph_plan(world)))
    assert world.cli("run", "fix", "--proof") == 0
    defs = _automated(world, dg.AutomationCondition.eager(), ("monthly_revenue",))
    result, outcomes = _tick(world, defs, None)
    assert world.cli("run", "fix", "--partitions", "2026-01-06..2026-01-08") == 0  # the days, not the month
    result, outcomes = _tick(world, defs, result.cursor)
    [(selection, key, as_backfill, success, said)] = outcomes
    assert (selection, key, as_backfill, success) == (["monthly_revenue"], MONTH, False, False), outcomes
    assert "claimed by active plan fix" in said, said
    command = re.search(r"`backfill (run [^`]*)`", said)
    assert command is not None, said
    assert world.cli(*command.group(1).split()) == 0, f"the fix named, `backfill {command.group(1)}`, fails"
    assert world.cli("run", "fix") == 0 and world.phase() == "reconciled"


def _scheduled(world, day: str):
    """The daily schedule built from the incremental job (`build_schedule_from_partitioned_job`,
    hour 2) ticking the morning after `day`, its request launched as the daemon launches it."""
    defs = world.defs()
    schedule = defs.resolve_schedule_def("daily_revenue_incremental_schedule")
    at = dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC) + dt.timedelta(days=1, hours=2)
    # entered and left: a context built with an instance sets Dagster's current definitions-state
    # storage until it is left, and a later test's load met its instance gone
    with dg.build_schedule_context(instance=world.instance, scheduled_execution_time=at) as context:
        [request] = schedule.evaluate_tick(context).run_requests
    assert request.partition_key == day
    tags = {**request.tags, "dagster/partition": day, "dagster/schedule_name": schedule.name}
    job = defs.resolve_job_def("daily_revenue_incremental")
    with world.deployed():
        return job.execute_in_process(instance=world.instance, tags=tags, partition_key=day, raise_on_error=False)


def test_the_daily_schedule_never_writes_nor_publishes_a_partition_an_active_plan_holds(world):
    """The design's freeze lock: an incremental run may not write a partition an active plan holds
    (its new partitions included), and never moves its cursor because of a backfill."""
    from backfill_assets.warehouse.state_store.ledger import watermark

    assert _scheduled(world, "2026-01-01").success  # the cursor: the newest day written plan-free
    world.approve(world.plan("fix", start="2026-01-02", end="2026-01-04", proof=("2026-01-02",)))
    assert world.cli("run", "fix", "--proof") == 0
    refused = _scheduled(world, "2026-01-03")
    assert not refused.success and "claimed by active plan fix" in failure_text(refused)
    assert world.rows("daily_revenue", "2026-01-03") == 0 and world.rows("published_revenue", "2026-01-02") == 0
    assert world.cli("run", "fix") == 0 and world.phase() == "reconciled"
    before = world.fingerprints("daily_revenue", keys(2, 4))
    refused = _scheduled(world, "2026-01-04")
    assert not refused.success and "claimed by active plan fix (reconciled)" in failure_text(refused)
    assert world.fingerprints("daily_revenue", keys(2, 4)) == before
    assert world.rows("published_revenue", "2026-01-04") == 0 and world.phase() == "reconciled"
    with world.warehouse().session() as session:
        assert watermark(session, "daily_revenue") == "2026-01-01"  # the plan's writes moved no cursor
    assert _scheduled(world, "2026-01-05").success  # past the window the schedule goes on
    assert world.rows("published_revenue", "2026-01-05") > 0
    with world.warehouse().session() as session:
        assert watermark(session, "daily_revenue") == "2026-01-05"
    assert world.cli("publish", "fix") == 0 and world.phase() == "published"


def test_a_publish_refused_mid_plan_never_advises_rolling_back_the_plan_that_recomputes_the_month(
        world, monkeypatch):
    """Eager on the published days while a plan over the days and their month runs: the plan wrote
    the days, the month is next. The publish run automation requests is refused (frozen), but it
    also told the team to `roll back the plan that wrote 2026-01-06 and replay with a plan whose
    graph lists monthly_revenue`: the plan lists it and recomputes it before its publish."""
    buggy_january_published(world, monkeypatch)
    world.approve(write_plan(world.root / "plans" / "fix.yaml", graph_plan(world)))
    assert world.cli("run", "fix", "--proof") == 0
    defs = _automated(world, dg.AutomationCondition.eager(), ("published_revenue",))
    result, _ = _tick(world, defs, None, FEBRUARY)
    assert world.cli("run", "fix", "--partitions", "2026-01-06..2026-01-08") == 0
    from tests.test_graph import run

    # the request eager makes of the latest day, or the published asset's Materialize in the UI
    refused = run(world, defs_of(world), ["published_revenue"], ["2026-01-06"])
    said = failure_text(refused)
    assert not refused.success and "frozen by plan fix (running)" in said, said
    assert "roll back the plan" not in said, said
    assert world.cli("run", "fix") == 0 and world.cli("publish", "fix") == 0


def test_materialize_all_over_the_graph_writes_and_publishes_nothing_of_a_held_plan(world, monkeypatch):
    """The UI's Materialize all (or Materialize unsynced) over the whole graph, no tags of the team's:
    Dagster launches it as a backfill, one run a partition, each asset with its published one, then
    the month and the report. The plan is paused after its proof: nothing of its window is written
    or published, the days around it are history no plan covers, and the report reads only what
    consumers saw."""
    from tests.test_graph import run

    buggy_january_published(world, monkeypatch)
    world.approve(write_plan(world.root / "plans" / "fix.yaml", graph_plan(world)))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("pause", "fix") == 0
    defs = defs_of(world)
    target = world.fingerprints("daily_revenue", keys(4, 9))
    days, month = world.fingerprints("published_revenue", JANUARY), month_net(world, "published_monthly_revenue")
    for day in keys(4, 9):
        result = run(world, defs, ["daily_revenue", "published_revenue"], [day], tags={BACKFILL_TAG: "ui-all"})
        assert not result.success, day
    result = run(world, defs, ["monthly_revenue", "published_monthly_revenue"], [MONTH], tags={BACKFILL_TAG: "ui-all"})
    assert not result.success and "fix" in failure_text(result)
    report = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=world.instance, asset_selection=[dg.AssetKey("revenue_report")], tags={BACKFILL_TAG: "ui-all"})
    [event] = report.get_asset_materialization_events()
    assert round(event.materialization.metadata["net_revenue"].value, 2) == round(
        float(world.sql("SELECT sum(net_revenue) FROM published_monthly_revenue")[0][0]), 2)
    assert world.fingerprints("daily_revenue", keys(4, 9)) == target
    assert world.fingerprints("published_revenue", JANUARY) == days
    assert month_net(world, "published_monthly_revenue") == month
    assert world.phase() == "proven"


def test_a_run_refused_over_a_cancelled_plans_claim_names_its_way_out_not_a_run(world):
    """The daily schedule (or automation's one-partition request) over a day a cancelled plan still
    holds is refused, but it named `backfill run fix --partitions KEY` as the fix, which a cancelled
    plan refuses: its one way out is the rollback (`backfill status` says which)."""
    world.approve(world.plan("fix", start="2026-01-02", end="2026-01-04", proof=("2026-01-02",)))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("cancel", "fix") == 0
    refused = _scheduled(world, "2026-01-03")
    said = failure_text(refused)
    assert not refused.success and "claimed by active plan fix" in said, said
    assert "backfill run fix" not in said and "rollback" in said, said
    assert world.cli("run", "fix", "--partitions", "2026-01-03") != 0  # what it named before


def test_an_unpartitioned_pandas_report_over_the_target_never_loads_rows_whose_gates_failed(world, monkeypatch):
    """A team mistake: its pandas report reads the target (`ins={"daily_revenue": AssetIn()}`), not the
    published table, unpartitioned (the whole table), through DuckDBPandasIOManager with
    `schema="main"` (where the tables are). README: reading the target fails loudly."""
    import pandas as pd
    from dagster_duckdb_pandas import DuckDBPandasIOManager

    from tests.test_team_warehouse import CONSUMED, _a_failed_write_below

    monkeypatch.setenv("BACKFILL_HOME", str(world.home))

    @dg.asset(ins={"daily_revenue": dg.AssetIn()})
    def whole_report(daily_revenue: pd.DataFrame) -> None:
        CONSUMED["whole target"] = daily_revenue

    from backfill_assets.demo.revenue import DAILY_REVENUE

    _, defs, day = _a_failed_write_below(world, DAILY_REVENUE, whole_report)
    defs = dg.Definitions(assets=list(defs.assets or []), resources={
        **(defs.resources or {}), "io_manager": DuckDBPandasIOManager(database=str(world.warehouse_path),
                                                                      schema="main")})
    world.warehouse().engine.let_go()
    loaded = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=world.instance, asset_selection=[dg.AssetKey("whole_report")], raise_on_error=False)
    assert not loaded.success and "whole target" not in CONSUMED, "the report loaded the target's unchecked rows"
    [failure] = [e for e in loaded.all_events if e.is_step_failure]
    cause = failure.event_specific_data.error.cause  # type: ignore[union-attr]
    assert cause is not None and "no 'partition_expr'" in cause.message, cause  # loudly, before any row

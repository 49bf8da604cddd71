"""The run coordinator refuses a backfill run over history outside every plan before it starts, lets
one over never-written partitions load without a plan, and caps each plan."""

from __future__ import annotations

import dagster as dg
import pytest

# Test-only internals: a queued run needs the remote origin the webserver would give it, and
# Dagster exposes no public way to build one outside a running webserver.
from dagster._core.test_utils import in_process_test_workspace
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

from backfill_assets.dagster_setup import instance_for
from backfill_assets.home import Home
from backfill_assets.permission import BACKFILL_TAG
from tests.conftest import ROOT

RANGE = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")

# the coordinator reads the home its dagster.yaml names (`backfill init` writes the home's own)
pytestmark = pytest.mark.own_dagster_home


@pytest.fixture
def coordinated(world, monkeypatch):
    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    instance = instance_for(Home(world.home))
    origin = LoadableTargetOrigin(module_name="backfill_assets.demo.definitions", working_directory=str(ROOT))
    with in_process_test_workspace(instance, origin) as workspace:
        world.workspace = workspace
        yield world, instance
    instance.dispose()


def submit(instance: dg.DagsterInstance, world, tags: dict[str, str], asset: str = "daily_revenue") -> dg.DagsterRun:
    """Create and submit a run the way the webserver and the backfill daemon do."""
    location = next(iter(world.workspace.get_code_location_entries().values())).code_location
    remote_job = location.get_repository("__repository__").get_full_job("__ASSET_JOB")
    job = world.defs().resolve_implicit_global_asset_job_def()
    run = instance.create_run_for_job(
        job_def=job, tags=tags, asset_selection=frozenset({dg.AssetKey(asset)}),
        remote_job_origin=remote_job.get_remote_origin(), job_code_origin=remote_job.get_python_origin())
    return instance.submit_run(run.run_id, world.workspace)


def test_an_uncovered_backfill_run_over_history_is_failed_before_it_starts(coordinated):
    world, instance = coordinated
    assert world.materialize(["2026-01-03"]).success  # one day of the range is history
    run = submit(instance, world, {BACKFILL_TAG: "bf1", RANGE[0]: "2026-01-02", RANGE[1]: "2026-01-04"})
    assert run.status == dg.DagsterRunStatus.FAILURE
    events = instance.all_logs(run.run_id)
    kinds = [e.dagster_event.event_type_value for e in events if e.dagster_event]
    assert "PIPELINE_START" not in kinds and "RUN_START" not in kinds
    messages = " ".join(e.message or "" for e in events)
    assert "Refused by the backfill write permission" in messages
    assert "no approved replay plan covers partitions 2026-01-02..2026-01-04 of daily_revenue, and 2026-01-03 " \
           "holds 5 row(s): rewriting it is a replay" in messages
    emptied = submit(instance, world, {BACKFILL_TAG: "bf1", "dagster/partition": "2026-01-03"})
    assert emptied.status == dg.DagsterRunStatus.FAILURE  # before it is emptied by hand, and after:
    world.run_sql("DELETE FROM daily_revenue")
    emptied = submit(instance, world, {BACKFILL_TAG: "bf1", "dagster/partition": "2026-01-03"})
    assert emptied.status == dg.DagsterRunStatus.FAILURE
    assert "2026-01-03 was written before (it holds no rows now)" in " ".join(
        e.message or "" for e in instance.all_logs(emptied.run_id))


def test_a_backfill_run_over_partitions_never_written_is_queued_without_a_plan(coordinated):
    """Loading a new table's history from the UI: the daemon's ranged runs pass, untagged by a plan;
    the run's own permission decides again in each write transaction."""
    world, instance = coordinated
    assert world.materialize(["2026-01-06"]).success  # a later day written first changes nothing
    run = submit(instance, world, {BACKFILL_TAG: "bf5", RANGE[0]: "2026-01-01", RANGE[1]: "2026-01-05"})
    assert run.status == dg.DagsterRunStatus.QUEUED
    assert "backfill_assets/plan" not in run.tags
    # a range reaching into an active plan's window is refused whole
    world.approved_plan("fix", start="2026-01-05", end="2026-01-05", proof=("2026-01-05",))
    mixed = submit(instance, world, {BACKFILL_TAG: "bf6", RANGE[0]: "2026-01-01", RANGE[1]: "2026-01-05"})
    assert mixed.status == dg.DagsterRunStatus.FAILURE


def test_a_covered_range_run_is_queued_with_its_plan_cap(coordinated):
    world, instance = coordinated
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",), runs_at_once=3)
    run = submit(instance, world, {BACKFILL_TAG: "bf2", "dagster/partition": "2026-01-02"})
    assert run.status == dg.DagsterRunStatus.QUEUED
    assert run.tags["backfill_assets/plan"] == "fix" and run.tags["backfill_assets/plan-cap-3"] == "fix"
    # a range past the proof before the proof passed is refused by the same rule as inside the asset
    early = submit(instance, world, {BACKFILL_TAG: "bf2", RANGE[0]: "2026-01-02", RANGE[1]: "2026-01-03"})
    assert early.status == dg.DagsterRunStatus.FAILURE
    assert world.cli("pause", "fix") == 0
    paused = submit(instance, world, {BACKFILL_TAG: "bf3", "dagster/partition": "2026-01-02"})
    assert paused.status == dg.DagsterRunStatus.FAILURE


def test_runs_that_are_not_backfills_of_a_replayable_table_pass_untouched(coordinated):
    world, instance = coordinated
    daily = submit(instance, world, {"dagster/partition": "2026-01-03"})
    assert daily.status == dg.DagsterRunStatus.QUEUED and "backfill_assets/plan" not in daily.tags
    # a backfill of another asset of the same code location is not ours to judge
    other = submit(instance, world, {BACKFILL_TAG: "bf4", RANGE[0]: "2026-01-02", RANGE[1]: "2026-01-03"},
                   asset="published_revenue")
    assert other.status == dg.DagsterRunStatus.QUEUED


def test_dagster_yaml_caps_each_plan_apart_from_daily_runs(coordinated):
    _world, instance = coordinated
    limits = {(lim["key"], str(lim.get("value"))): lim["limit"]
              for lim in instance.run_coordinator.get_run_queue_config().tag_concurrency_limits}
    assert limits[("backfill_assets/plan-cap-3", "{'applyLimitPerUniqueValue': True}")] == 3
    assert limits[("dagster/schedule_name", "None")] == 4

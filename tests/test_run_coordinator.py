"""The run coordinator refuses an uncovered backfill run before it starts, and caps plans."""

from __future__ import annotations

import dagster as dg
import pytest

# Test-only internals: a queued run needs the remote origin the webserver would give it, and
# Dagster exposes no public way to build one outside a running webserver.
from dagster._core.test_utils import in_process_test_workspace
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

from backfill_assets.dagster_setup import instance_for
from backfill_assets.home import Home
from backfill_assets.plan.gate import BACKFILL_TAG
from tests.conftest import ROOT


@pytest.fixture
def coordinated(world):
    instance = instance_for(Home(world.home))
    origin = LoadableTargetOrigin(module_name="examples.definitions", working_directory=str(ROOT))
    with in_process_test_workspace(instance, origin) as workspace:
        world.workspace = workspace
        yield world, instance
    instance.dispose()


def submit(instance: dg.DagsterInstance, world, tags: dict[str, str]) -> dg.DagsterRun:
    """Create and submit a run the way the webserver and the backfill daemon do."""
    location = next(iter(world.workspace.get_code_location_entries().values())).code_location
    remote_job = location.get_repository("__repository__").get_full_job("__ASSET_JOB")
    job = world.defs().resolve_implicit_global_asset_job_def()
    run = instance.create_run_for_job(
        job_def=job, tags=tags, asset_selection=frozenset({dg.AssetKey("daily_revenue")}),
        remote_job_origin=remote_job.get_remote_origin(),
        job_code_origin=remote_job.get_python_origin())
    return instance.submit_run(run.run_id, world.workspace)


def test_uncovered_backfill_run_is_failed_before_it_starts(coordinated):
    world, instance = coordinated
    run = submit(instance, world, {BACKFILL_TAG: "bf1", "dagster/partition": "2026-01-03"})
    assert run.status == dg.DagsterRunStatus.FAILURE
    events = instance.all_logs(run.run_id)
    kinds = [e.dagster_event.event_type_value for e in events if e.dagster_event]
    assert "PIPELINE_START" not in kinds and "RUN_START" not in kinds
    messages = " ".join(e.message or "" for e in events)
    assert "Refused by the backfill plan gate" in messages
    assert "no approved replay plan covers partition 2026-01-03 of daily_revenue" in messages


def test_covered_backfill_run_is_queued_with_its_plan_cap(coordinated):
    world, instance = coordinated
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",),
                        max_concurrent=3)
    run = submit(instance, world, {BACKFILL_TAG: "bf2", "dagster/partition": "2026-01-02"})
    assert run.status == dg.DagsterRunStatus.QUEUED
    assert run.tags["backfill_assets/plan"] == "fix"
    assert run.tags["backfill_assets/plan-cap-3"] == "fix"
    # a non-proof partition before the proof is refused by the same rule as inside the asset
    early = submit(instance, world, {BACKFILL_TAG: "bf2", "dagster/partition": "2026-01-03"})
    assert early.status == dg.DagsterRunStatus.FAILURE


def test_daily_runs_pass_the_coordinator_untouched(coordinated):
    world, instance = coordinated
    run = submit(instance, world, {"dagster/partition": "2026-01-03"})
    assert run.status == dg.DagsterRunStatus.QUEUED
    assert "backfill_assets/plan" not in run.tags


def test_dagster_yaml_caps_each_plan_apart_from_daily_runs(coordinated):
    _world, instance = coordinated
    limits = {(lim["key"], str(lim.get("value"))): lim["limit"]
              for lim in instance.run_coordinator.get_run_queue_config().tag_concurrency_limits}
    assert limits[("backfill_assets/plan-cap-3", "{'applyLimitPerUniqueValue': True}")] == 3
    assert limits[("dagster/schedule_name", "None")] == 4

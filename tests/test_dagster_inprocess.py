"""`dagster_inprocess.execute_selection` makes the run `JobDefinition.execute_in_process` makes, with
the selection's job built once a process: same tags, snapshots, events and writes."""

from __future__ import annotations

import hashlib
import inspect

import dagster as dg

from backfill_assets.dagster_inprocess import execute_selection
from backfill_assets.tags import ACTOR_TAG
from tests.world import keys

# the method execute_selection does the work of: an upgrade that changes it fails here, so the
# arguments execute_selection passes are read again against it before the pin moves
EXECUTE_IN_PROCESS = "609eeb637ebd44fa"


def test_the_method_a_selection_run_replicates_is_the_one_it_was_written_against():
    from dagster._core.definitions.job_definition import JobDefinition

    found = hashlib.sha256(inspect.getsource(JobDefinition.execute_in_process).encode()).hexdigest()[:16]
    assert found == EXECUTE_IN_PROCESS, "Dagster changed execute_in_process: re-read dagster_inprocess.py, then the pin"


def _range(first: str, last: str) -> dict[str, str]:
    return {ACTOR_TAG: "test", "dagster/asset_partition_range_start": first,
            "dagster/asset_partition_range_end": last}


def _events(instance: dg.DagsterInstance, run_id: str) -> list[tuple[str, str | None]]:
    return [(e.dagster_event.event_type_value, e.dagster_event.partition) for e in instance.all_logs(run_id)
            if e.dagster_event is not None]


def test_a_selection_run_is_the_run_execute_in_process_makes(world):
    instance = world.instance
    job = world.defs().resolve_implicit_global_asset_job_def()
    selection = [dg.AssetKey("daily_revenue")]
    windows = [keys(1, 3), keys(4, 6), keys(7, 9)]
    ours = execute_selection(job, selection, instance=instance, tags=_range(*windows[0][::2]), run_config={})
    again = execute_selection(job, selection, instance=instance, tags=_range(*windows[1][::2]), run_config={})
    theirs = job.execute_in_process(instance=instance, asset_selection=selection, tags=_range(*windows[2][::2]),
                                    raise_on_error=False)
    runs = [instance.get_run_by_id(r.run_id) for r in (ours, again, theirs)]
    assert all(r.success for r in (ours, again, theirs))
    assert all(run is not None and run.status == dg.DagsterRunStatus.SUCCESS for run in runs)
    # one job, built once for our two runs: the snapshots Dagster stores for each are the same
    assert len({run.job_snapshot_id for run in runs}) == 1
    assert len({run.execution_plan_snapshot_id for run in runs}) == 1
    assert len({run.job_name for run in runs}) == 1
    assert {run.asset_selection for run in runs} == {frozenset(selection)}

    def untimed(run: dg.DagsterRun) -> dict[str, str]:
        return {k: v for k, v in run.tags.items() if "range" not in k}
    assert untimed(runs[0]) == untimed(runs[1]) == untimed(runs[2])
    # the same events, in the same order, each run on its own partitions
    shapes = [[(kind, None if part is None else windows[i].index(part)) for kind, part in _events(instance, r.run_id)]
              for i, r in enumerate((ours, again, theirs))]
    assert shapes[0] == shapes[1] == shapes[2]
    assert sum(kind == "ASSET_MATERIALIZATION" for kind, _ in shapes[0]) == 3
    for window, result in zip(windows, (ours, again, theirs), strict=True):
        assert [p for kind, p in _events(instance, result.run_id) if kind == "ASSET_MATERIALIZATION"] == window

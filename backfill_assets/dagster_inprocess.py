"""Runs of a job's asset selection in this process, the job built once: the one place we use
Dagster's in-process execution internals.

`JobDefinition.execute_in_process` builds a new ephemeral job (the in-process executor, the
selection's subset) for every call, and Dagster then snapshots and hashes that new job for the run
it creates (~20 ms a run for the demo's table under the profiler; a `backfill run` of 2,526
partitions makes 85 runs, the test suite hundreds). The job a selection runs is the same for every run of a
process, so it is built once, and its snapshot with it; each run is still created, tagged,
executed and stored exactly as `execute_in_process` does it (this module calls the same three
functions with the same arguments; `tests/test_dagster_inprocess.py` pins the method's source and
compares a run's events with one made by `execute_in_process`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

_jobs: weakref.WeakKeyDictionary[dg.JobDefinition, dict[tuple[dg.AssetKey, ...], dg.JobDefinition]] = \
    weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _ephemeral(job: dg.JobDefinition, selection: tuple[dg.AssetKey, ...]) -> dg.JobDefinition:
    with _lock:
        built = _jobs.setdefault(job, {})
        found = built.get(selection)
        if found is None:
            found = built[selection] = job.as_ephemeral_job(resource_defs={}, input_values={},
                                                            asset_selection=list(selection))
        return found


def execute_selection(job: dg.JobDefinition, selection: Sequence[dg.AssetKey], *, instance: dg.DagsterInstance,
                      tags: Mapping[str, str], run_config: Mapping[str, Any]) -> dg.ExecuteInProcessResult:
    """`job.execute_in_process(instance=, asset_selection=, tags=, run_config=, raise_on_error=False)`."""
    from dagster._core.definitions.job_base import InMemoryJob
    from dagster._core.execution.execute_in_process import core_execute_in_process, merge_run_tags

    keys = tuple(selection)
    return core_execute_in_process(
        job=InMemoryJob(job_def=_ephemeral(job, keys)),
        run_config=dict(run_config),
        instance=instance,
        output_capturing_enabled=True,
        raise_on_error=False,
        run_tags=merge_run_tags(job_def=job, partition_key=None, tags=dict(tags), asset_selection=list(keys),
                                instance=instance, run_config=dict(run_config)),
        run_id=None,
        asset_selection=frozenset(keys),
    )

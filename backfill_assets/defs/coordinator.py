"""A run coordinator that refuses an uncovered backfill run before it starts.

Dagster has no hook on backfill creation, but every run passes `submit_run`. A run tagged
`dagster/backfill` that targets a replayable table (its op carries `backfill_assets/replayable`)
must be covered by an approved plan; otherwise it is failed with the plan gate's message and
never launched. A covered run is tagged with its plan and with `backfill_assets/plan-cap-N`, so the
tag concurrency limits in dagster.yaml cap each plan at its own max_concurrent_partitions,
apart from daily runs.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from dagster import AssetKey
from dagster._config import Field, StringSource
from dagster._core.run_coordinator import QueuedRunCoordinator, SubmitRunContext
from dagster._core.storage.dagster_run import DagsterRun

from backfill_assets.errors import BackfillError
from backfill_assets.home import resolve_home
from backfill_assets.plan.gate import BACKFILL_TAG, PLAN_TAG, REPLAYABLE_OP_TAG, clear_backfill
from backfill_assets.warehouse.connection import connection

MAX_CAP = 16
CAP_TAG = "backfill_assets/plan-cap-{}"


def run_partition_keys(tags: Mapping[str, str]) -> list[str]:
    if "dagster/partition" in tags:
        return [tags["dagster/partition"]]
    start = tags.get("dagster/asset_partition_range_start")
    end = tags.get("dagster/asset_partition_range_end")
    if not (start and end):
        return []
    first, last = dt.date.fromisoformat(start), dt.date.fromisoformat(end)
    return [(first + dt.timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]


def cap_tags(plan_id: str, max_concurrent: int) -> dict[str, str]:
    return {PLAN_TAG: plan_id, CAP_TAG.format(min(max_concurrent, MAX_CAP)): plan_id}


class PlanGateRunCoordinator(QueuedRunCoordinator):
    def __init__(self, backfill_home: str | None = None, **kwargs: Any) -> None:
        self._backfill_home = backfill_home
        super().__init__(**kwargs)

    @classmethod
    def config_type(cls):
        schema = dict(super().config_type())
        schema["backfill_home"] = Field(StringSource, is_required=False,
                                        description="BACKFILL_HOME holding warehouse.duckdb")
        return schema

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        base = super().from_config_value(inst_data, config_value)
        base._backfill_home = config_value.get("backfill_home")
        return base

    def _replayable_targets(self, run: DagsterRun) -> list[str]:
        if not run.job_snapshot_id:
            return []
        snapshot = self._instance.get_job_snapshot(run.job_snapshot_id)
        names = {op.tags[REPLAYABLE_OP_TAG] for op in snapshot.node_defs_snapshot.op_def_snaps
                 if REPLAYABLE_OP_TAG in (op.tags or {})}
        selection = run.asset_selection
        return sorted(n for n in names
                      if not selection or AssetKey(n.split("/")) in selection)

    def submit_run(self, context: SubmitRunContext) -> DagsterRun:
        run = context.dagster_run
        if BACKFILL_TAG in run.tags:
            targets = self._replayable_targets(run)
            keys = run_partition_keys(run.tags)
            if targets and keys:
                try:
                    with connection(resolve_home(self._backfill_home).warehouse) as con:
                        from backfill_assets.control.schema import ensure_schema

                        ensure_schema(con)
                        extra: dict[str, str] = {}
                        for target in targets:
                            clearance = clear_backfill(con, target, keys, run.tags)
                            assert clearance.plan is not None
                            extra.update(cap_tags(clearance.plan.plan_id,
                                                  clearance.plan.max_concurrent_partitions))
                except BackfillError as exc:
                    self._instance.report_run_failed(
                        run, message=f"Refused by the backfill plan gate: {exc}")
                    return self._instance.get_run_by_id(run.run_id) or run
                self._instance.add_run_tags(run.run_id, extra)
                run = self._instance.get_run_by_id(run.run_id) or run
                context = SubmitRunContext(run, context.workspace)
        return super().submit_run(context)

"""A run coordinator that refuses a backfill run of a replayable table that would rewrite history
without a plan, before it starts.

Dagster has no hook on backfill creation, but every run passes `submit_run`. Only runs whose job
holds a replayable table (its op carries `backfill_assets/replayable`) and that Dagster tagged as
part of a backfill are looked at; every other run (other assets, other partitionings) passes
untouched. A run inside a plan's window is tagged with its plan and with
`backfill_assets/plan-cap-N`, so the tag concurrency limits in dagster.yaml cap each plan at its
own `runs_at_once`. A run outside every plan passes only when the data says its partitions are
new (no rows, never written: loading a new table's history from the UI); one over history is
failed here, naming the first such partition. The run's op checks the write permission again,
partition by partition, whatever this coordinator decided.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, cast

from dagster import AssetKey
from dagster._config import Field, StringSource
from dagster._core.run_coordinator import QueuedRunCoordinator, SubmitRunContext
from dagster._core.storage.dagster_run import DagsterRun

from backfill_assets.control import authority, record
from backfill_assets.control.record import PlanState
from backfill_assets.control.schema import has_control_schema
from backfill_assets.errors import BackfillError, PartitionRefused
from backfill_assets.home import Home
from backfill_assets.partitions import scheme_for
from backfill_assets.permission import history
from backfill_assets.plan.phases import WRITABLE
from backfill_assets.table import TableSpec
from backfill_assets.tags import BACKFILL_TAG, CAP_TAG, MAX_CAP, PLAN_TAG, RANGE_END, RANGE_START, REPLAYABLE_OP_TAG
from backfill_assets.terminal import NEW_PLAN_FILE
from backfill_assets.warehouse import open_warehouse

if TYPE_CHECKING:
    from dagster._config.config_schema import UserConfigSchema
    from dagster._serdes import ConfigurableClassData


def run_span(tags: Mapping[str, str]) -> tuple[str, str] | None:
    """The first and last partition key a run names (no parsing: keys may be any text)."""
    if "dagster/partition" in tags:
        return tags["dagster/partition"], tags["dagster/partition"]
    start, end = tags.get(RANGE_START), tags.get(RANGE_END)
    return (start, end) if start and end else None


def cap_tags(plan_id: str, runs_at_once: int) -> dict[str, str]:
    return {PLAN_TAG: plan_id, CAP_TAG.format(min(runs_at_once, MAX_CAP)): plan_id}


def covering_plan(plans: list[PlanState], target: str, span: tuple[str, str]) -> PlanState | None:
    """The active plan whose window holds both ends of the span (its window is contiguous, so it
    holds every key between them), in a phase and hold that let it start a run; None when no plan
    holds either end (then the data decides, `refuse_history`)."""
    first, last = span
    for plan in plans:
        if plan.covers(first, target) and plan.covers(last, target):
            keys = list(plan.keys_of(target))
            inside = keys[keys.index(first):keys.index(last) + 1]
            if plan.phase not in WRITABLE or plan.hold:
                why = plan.hold or plan.phase
                raise PartitionRefused(f"plan {plan.plan_id} is {why}: no new run may write {target}",
                                       plan_id=plan.plan_id, partition=first,
                                       fix=f"see `backfill status {plan.plan_id}`")
            if not plan.past_proof and (target != plan.target or not set(inside) <= set(plan.proof_keys)):
                raise PartitionRefused(
                    f"plan {plan.plan_id} is {plan.phase}: only its proof partitions "
                    f"({', '.join(plan.proof_keys)}) may run until the proof passes"
                    + ("" if target == plan.target else f", not {target} (its graph runs after the proof)"),
                    plan_id=plan.plan_id, partition=first, fix=f"run `backfill run {plan.plan_id} --proof`")
            return plan
    held = next((p for p in plans if p.covers(first, target) or p.covers(last, target)), None)
    if held is not None:
        raise PartitionRefused(f"partitions {first}..{last} of {target} reach outside plan {held.plan_id}'s "
                               "window", plan_id=held.plan_id, partition=first,
                               fix="launch the plan's partitions and the others as separate backfills")
    return None


def _refusal(target: str, span: tuple[str, str], why: str) -> PartitionRefused:
    first, last = span
    return PartitionRefused(f"no approved replay plan covers partitions {first}..{last} of {target}, and {why}: "
                            "rewriting it is a replay", plan_id=None, partition=first,
                            fix=f"draft one with `backfill plan new {NEW_PLAN_FILE} --target {target}`, "
                                "have it approved, then relaunch (only partitions never written load without one)")


def table_of_workspace(workspace: Any, target: str) -> tuple[TableSpec, Any] | None:
    """The spec and partitions definition of `target` as the run's code location declares them,
    read through the workspace's asset graph (a Dagster internal, kept to this function; a test of
    the coordinator fails when an upgrade moves it). None when it cannot be read."""
    from backfill_assets.graph import SPEC_METADATA

    try:
        node = workspace.asset_graph.get(AssetKey(target.split("/")))
        raw = node.metadata.get(SPEC_METADATA)
        spec = TableSpec.from_json(str(raw.value if hasattr(raw, "value") else raw))
        return spec, node.partitions_def
    except Exception:  # noqa: BLE001 - the run's own permission decides; this is only the early refusal
        return None


def refuse_history(session: Any, workspace: Any, plans: list[PlanState], target: str,
                   span: tuple[str, str]) -> None:
    """A backfill run outside every plan may start only over new partitions (no rows, never
    written), the rule the run's permission applies again inside each write transaction."""
    found = table_of_workspace(workspace, target)
    if found is None:
        return  # the run's permission refuses history before any write, with the same message
    spec, partitions_def = found
    scheme = scheme_for(partitions_def, spec.column(spec.partition_column).type, name=spec.name)
    first, last = span
    if first not in scheme or last not in scheme:
        return
    keys = list(scheme.ordered_keys[scheme.position(first):scheme.position(last) + 1])
    inside = next((k for k in keys for p in plans if p.covers(k, target)), None)
    if inside is not None:
        raise PartitionRefused(f"partitions {first}..{last} of {target} reach into an active plan's window "
                               f"({inside})", plan_id=None, partition=inside,
                               fix="launch the plan's partitions and the others as separate backfills")
    old = history(session, spec, scheme, keys)
    if old:
        key = next(k for k in keys if k in old)
        raise _refusal(target, span, f"{key} {old[key]}")


class PlanGateRunCoordinator(QueuedRunCoordinator):
    def __init__(self, backfill_home: str | None = None, warehouse_url: str | None = None,
                 **kwargs: Any) -> None:
        self._backfill_home = backfill_home
        self._warehouse_url = warehouse_url
        super().__init__(**kwargs)

    @classmethod
    def config_type(cls) -> UserConfigSchema:
        schema = dict(cast("Mapping[str, Any]", super().config_type()))  # Dagster's is a dict of fields
        schema["backfill_home"] = Field(StringSource, is_required=False,
                                        description="BACKFILL_HOME (keys, the embedded warehouse)")
        schema["warehouse_url"] = Field(StringSource, is_required=False,
                                        description="the warehouse, when not the embedded DuckDB")
        return schema

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]) -> Self:
        base = super().from_config_value(inst_data, config_value)
        base._backfill_home = config_value.get("backfill_home")
        base._warehouse_url = config_value.get("warehouse_url")
        return base

    def _replayable_targets(self, run: DagsterRun) -> list[str]:
        if not run.job_snapshot_id:
            return []
        snapshot = self._instance.get_job_snapshot(run.job_snapshot_id)
        names = {op.tags[REPLAYABLE_OP_TAG] for op in snapshot.node_defs_snapshot.op_def_snaps
                 if REPLAYABLE_OP_TAG in (op.tags or {})}
        selection = run.asset_selection
        return sorted(n for n in names if not selection or AssetKey(n.split("/")) in selection)

    def submit_run(self, context: SubmitRunContext) -> DagsterRun:
        run = context.dagster_run
        span = run_span(run.tags)
        targets = self._replayable_targets(run) if BACKFILL_TAG in run.tags and span else []
        if targets and span:
            try:
                extra: dict[str, str] = {}
                from pathlib import Path

                from backfill_assets.home import resolve_home

                # a relative backfill_home (`..`, as `backfill init` writes it) is of this instance's
                # folder: a home copied or moved gates with its own warehouse, not the original's
                home = Home((Path(self._instance.root_directory) / self._backfill_home).resolve()) \
                    if self._backfill_home else resolve_home()
                warehouse = open_warehouse(home, self._warehouse_url)
                with warehouse.session() as session:
                    plans = record.active_plans(session) if has_control_schema(session) else []
                    for target in targets:
                        involved = [p for p in plans if p.involves(target)]
                        plan = covering_plan(involved, target, span)
                        if plan is None:
                            refuse_history(session, context.workspace, involved, target, span)
                            continue
                        # the code is checked by the run's own permission, which loads the table
                        why = authority.refusal(session, plan.approved, code=None)
                        if why:
                            raise PartitionRefused(f"plan {plan.plan_id} may not start a run of {target}: {why}",
                                                   plan_id=plan.plan_id, partition=span[0],
                                                   fix=f"see `backfill status {plan.plan_id}`")
                        extra.update(cap_tags(plan.plan_id, plan.approved.plan.execution.runs_at_once))
            except BackfillError as exc:
                self._instance.report_run_failed(run, message=f"Refused by the backfill write permission: {exc}")
                return self._instance.get_run_by_id(run.run_id) or run
            self._instance.add_run_tags(run.run_id, extra)
            run = self._instance.get_run_by_id(run.run_id) or run
            context = SubmitRunContext(run, context.workspace)
        return super().submit_run(context)

"""`make_replayable_table`: a team's TableSpec in, Dagster definitions out.

The target asset asks the plan gate before writing, writes each partition in one transaction,
fingerprints it and runs the gates in the warehouse. Its gates are blocking asset checks, one
result per partition: yielded normally in a one-partition run, logged once per partition in a
range run (Dagster otherwise records a range run's checks without their partition).
"""


from dataclasses import dataclass

import dagster as dg

from backfill_assets.defs.publish_asset import make_publish_asset
from backfill_assets.defs.resources import PlanGateResource, WarehouseResource
from backfill_assets.defs.sensor import make_reopen_sensor
from backfill_assets.errors import BackfillError, PartitionRefused
from backfill_assets.execution.slice_write import gate_slice, write_slice
from backfill_assets.gates.results import GATE_NAMES, GateResult
from backfill_assets.plan.gate import PLAN_TAG, REPLAYABLE_OP_TAG
from backfill_assets.table import TableSpec

ACTOR_TAG = "backfill_assets/actor"

GATE_DESCRIPTIONS = {
    "row_count_matches_source": "Row count within the plan's max_diff_pct of what the source implies.",
    "no_duplicate_business_keys": "Rows sharing the business keys stay within max_rows.",
    "metrics_match_source": "Each checked business aggregate matches the source within tolerance.",
    "contract_holds": "Column names, types and nullability are as declared; no NULL in a key.",
    "single_code_version": "Every partition of the window was written by the same code version.",
}


@dataclass(frozen=True)
class ReplayableTable:
    spec: TableSpec
    target: dg.AssetsDefinition
    publish: dg.AssetsDefinition
    sensor: dg.SensorDefinition

    @property
    def assets(self) -> list[dg.AssetsDefinition]:
        return [self.target, self.publish]


# Every table the factory built in this process, by asset name: how the CLI finds a plan's target.
REGISTRY: dict[str, ReplayableTable] = {}


def _check_event(spec: TableSpec, result: GateResult, partition_key: str | None):
    """A yielded result in a one-partition run, else an evaluation logged for its partition."""
    common = dict(asset_key=dg.AssetKey(spec.name.split("/")), check_name=result.gate,
                  passed=result.passed, metadata=result.metadata(),
                  severity=dg.AssetCheckSeverity.ERROR, description=result.detail)
    if partition_key is None:
        return dg.AssetCheckResult(**common)
    return dg.AssetCheckEvaluation(**common, blocking=True, partition=partition_key)


def make_replayable_table(spec: TableSpec, partitions_def: dg.PartitionsDefinition, *,
                          group_name: str | None = None) -> ReplayableTable:
    key = dg.AssetKey(spec.name.split("/"))
    check_specs = [dg.AssetCheckSpec(name, asset=key, partitions_def=partitions_def, blocking=True,
                                     description=GATE_DESCRIPTIONS[name]) for name in GATE_NAMES]

    @dg.multi_asset(
        name=spec.table,
        specs=[dg.AssetSpec(key, deps=[dg.AssetKey(spec.source.split("/"))],
                            partitions_def=partitions_def, code_version=spec.code_version,
                            description=spec.description, group_name=group_name,
                            kinds={"duckdb"}, tags={"backfill_assets/replayable": ""})],
        check_specs=check_specs,
        partitions_def=partitions_def,
        can_subset=True,
        op_tags={REPLAYABLE_OP_TAG: spec.name},
    )
    def target(context: dg.AssetExecutionContext, warehouse: WarehouseResource,
               plan_gate: PlanGateResource):
        keys = list(context.partition_keys)
        tags = dict(context.run.tags)
        actor = tags.get(ACTOR_TAG, "dagster")
        with warehouse.get_connection() as con:
            try:
                clearance = plan_gate.clear(con, spec.name, keys, tags)
            except PartitionRefused as exc:
                raise dg.Failure(description=str(exc), metadata={
                    "plan": exc.plan_id or "none", "partition": exc.partition}) from None
            try:
                writes = write_slice(con, spec, clearance, run_id=context.run_id, actor=actor)
                results = gate_slice(con, spec, clearance, writes, actor)
            except BackfillError as exc:
                raise dg.Failure(description=str(exc)) from None
        plan_id = clearance.plan.plan_id if clearance.plan else "incremental"
        single = len(writes) == 1
        # The rows are written whatever the gates say, so Dagster records the materialization and
        # the checks judge it (the asset's page then shows a failed gate on the current data);
        # publish is what refuses them.
        yield dg.MaterializeResult(asset_key=key, metadata={
            "plan": plan_id,
            "rows": sum(w.rows for w in writes),
            **({"fingerprint": str(writes[0].fingerprint)} if single else
               {"partitions": f"{keys[0]}..{keys[-1]}"}),
        })
        selected = {c.name for c in context.selected_asset_check_keys}
        for write in writes:
            for result in results[write.partition_key]:
                if result.gate not in selected:
                    continue
                if single:
                    yield _check_event(spec, result, None)  # Dagster's blocking fails the step
                else:
                    context.log_event(_check_event(spec, result, write.partition_key))
        failed = {w.partition_key: [r for r in results[w.partition_key] if not r.passed]
                  for w in writes}
        failed = {k: v for k, v in failed.items() if v}
        if failed and not single:
            # logged evaluations are not blocking in Dagster: fail the range run ourselves
            summary = "; ".join(f"{k}: " + ", ".join(f"{r.gate} ({r.detail})" for r in gates)
                                for k, gates in failed.items())
            raise dg.Failure(
                description=f"gates failed on {len(failed)} partition(s) of {spec.name}: "
                            f"{summary}. The rows stay unpublished; fix the cause and re-run "
                            "those partitions.",
                metadata={"plan": plan_id, "failed_partitions": ", ".join(failed)})

    publish = make_publish_asset(spec, partitions_def, key, group_name=group_name)
    sensor = make_reopen_sensor(spec, publish.key)
    table = ReplayableTable(spec, target, publish, sensor)
    REGISTRY[spec.name] = table
    return table


__all__ = ["PLAN_TAG", "ReplayableTable", "make_replayable_table"]

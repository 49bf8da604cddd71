"""The reopen sensor: moves active plans forward on evidence and requests their publish run.

It runs by default every 30 seconds. For each active plan of the table it records a passed proof,
marks a fully reconciled window, and once reconciled requests one publish run over the window,
tagged with the plan (the run key makes it fire once per approved plan version).
"""


import dagster as dg

from backfill_assets.control import evidence_log, record
from backfill_assets.defs.resources import WarehouseResource
from backfill_assets.errors import WarehouseError
from backfill_assets.execution.progress import advance
from backfill_assets.plan.gate import PLAN_TAG
from backfill_assets.plan.phases import Phase
from backfill_assets.table import TableSpec

SENSOR_LOCK_WAIT_SECONDS = 10.0
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"


def publish_run_tags(state: record.PlanState) -> dict[str, str]:
    return {PLAN_TAG: state.plan_id, RANGE_START: state.partition_keys[0],
            RANGE_END: state.partition_keys[-1], "backfill_assets/actor": "reopen-sensor"}


def make_reopen_sensor(spec: TableSpec, publish_key: dg.AssetKey) -> dg.SensorDefinition:
    @dg.sensor(
        name=f"{spec.table}__reopen_publish",
        minimum_interval_seconds=30,
        default_status=dg.DefaultSensorStatus.RUNNING,
        asset_selection=[publish_key],
        description=f"Reopens publish of {spec.publish_as} once a plan's window passed every gate.",
    )
    def reopen(context: dg.SensorEvaluationContext, warehouse: WarehouseResource):
        requests, notes = [], []
        try:
            # a tick must stay short: if a run holds the warehouse, try again next tick
            with warehouse.get_connection(wait_seconds=SENSOR_LOCK_WAIT_SECONDS) as con:
                for state in record.active_plans(con, target=spec.name):
                    state = advance(con, state, actor="reopen-sensor")
                    notes.append(f"{state.plan_id}: {state.phase}")
                    if state.phase is Phase.RECONCILED:
                        # one request per reconciliation: a re-run window asks again
                        reconciled = evidence_log.rows(con, state.plan_id, "window_reconciled")
                        requests.append(dg.RunRequest(
                            run_key=f"publish:{state.plan_id}:{reconciled[-1].seq}",
                            asset_selection=[publish_key], tags=publish_run_tags(state)))
        except WarehouseError as exc:
            return dg.SkipReason(f"warehouse busy, retrying next tick ({exc.message})")
        if not requests:
            return dg.SkipReason("; ".join(notes) or f"no active plan for {spec.name}")
        return requests

    return reopen

"""The reopen sensor: moves a table's plans forward on evidence, requests their publish run and
keeps the plan-state entry on the target current in the Dagster UI. It requests and reports; it
does not deliver notices: the relay sensor does (`defs.relay`, over `publish.notify.deliver_pending`).

It runs every 30 seconds, or every BACKFILL_REOPEN_INTERVAL_SECONDS (a whole number, 1..3600).
A plan whose window reconciled gets one publish run per reconciliation, only when the publish
rule would pass now (so a partition changed after its gates ran is never requested).
"""


import hashlib

import dagster as dg

from backfill_assets.control import evidence_log, record
from backfill_assets.defs.plan_state import observation, plans_of_table
from backfill_assets.defs.relay import relay_name
from backfill_assets.defs.resources import DEFAULT_KEY, as_warehouse
from backfill_assets.defs.run_context import table_scheme
from backfill_assets.errors import LockWaitTimeout
from backfill_assets.execution.advance import advance
from backfill_assets.graph import Member, TableGraph, asset_key, graph_of_repository
from backfill_assets.plan.phases import Phase
from backfill_assets.publish import rule
from backfill_assets.settings import whole_number
from backfill_assets.status import reconciled_seq
from backfill_assets.table import TableSpec
from backfill_assets.tags import ACTOR_TAG, PLAN_TAG, RANGE_END, RANGE_START, RUN_KEY
from backfill_assets.warehouse.engine import Session

SENSOR_LOCK_WAIT_SECONDS = 10.0
INTERVAL_ENV = "BACKFILL_REOPEN_INTERVAL_SECONDS"
DEFAULT_INTERVAL_SECONDS = 30
MAX_CONSUMER_RUNS = 100  # partitions of one consumer requested after a publish


def interval_seconds() -> int:
    return whole_number(INTERVAL_ENV, DEFAULT_INTERVAL_SECONDS, 1, 3600, "seconds")


def publish_run_tags(state: record.PlanState) -> dict[str, str]:
    keys = state.partition_keys
    return {PLAN_TAG: state.plan_id, RANGE_START: keys[0], RANGE_END: keys[-1],
            ACTOR_TAG: "reopen-sensor"}


PUBLISH_ATTEMPTS = 3


def publish_run_key(instance: dg.DagsterInstance, plan_id: str, reconciled_seq: int) -> str | None:
    """The key of the publish run of a window reconciled at chain row `reconciled_seq`, or None once
    it failed PUBLISH_ATTEMPTS times. Dagster launches one run per key, ever: a publish run that
    failed (the plan paused between the request and the run, a deadlock on PostgreSQL) was asked
    for again under the same key and never ran (found by an attack); each failure allows the next
    attempt under the next key. Past the last one `backfill publish` says what blocks it."""
    base = f"publish:{plan_id}:{reconciled_seq}"
    for key in [base] + [f"{base}:{n}" for n in range(2, PUBLISH_ATTEMPTS + 1)]:
        # one key at a time (Dagster's own daemon avoids a list of tag values on SQL run storage)
        runs = instance.get_runs(dg.RunsFilter(tags={RUN_KEY: key, PLAN_TAG: plan_id}), limit=1)
        if not runs or runs[0].status not in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED):
            return key  # not tried yet; or queued, running or done: Dagster launches a key once
    return None


CHANGED_FOR_CONSUMERS = (Phase.PUBLISHED, Phase.CLOSED, Phase.ROLLED_BACK)  # phases whose consumers may be requested


def _cursor(text: str | None) -> tuple[str, int]:
    """The sensor's cursor: the hash of the plans' state it last showed, and the chain row up to which
    it asked consumers (0: of every plan, as a new sensor does and one whose cursor an earlier release
    wrote, the hash alone)."""
    shown, _, asked = (text or "").partition(":")
    return shown, int(asked) if asked.isdigit() else 0


def changed_for_consumers_since(session: Session, asked: int) -> tuple[dict[str, int], int]:
    """The plans published or rolled back after chain row `asked` (each with its first such row),
    and the chain's last row now: a tick asks consumers only of those. Every tick asked of every
    plan ever published, closed or rolled back, each plan's rows read and its runs requested again
    for Dagster to drop by their keys: a cost that grew with each plan a warehouse ended."""
    top = evidence_log.head(session)[0]
    changed: dict[str, int] = {}
    for r in evidence_log.rows(session, None, ("published", "rollback"), after=asked):
        if r.plan_id is not None and r.seq <= top:
            changed.setdefault(r.plan_id, r.seq)
    return changed, top


def _changed_for_consumers(session: Session, state: record.PlanState) -> int | None:
    """The chain row after which a plan's consumers read other published data: its publish (while
    published, or closed since), or the rollback of a plan that had published (the report refreshed after the
    publish went on showing the rolled-back month: found by an attack); None otherwise."""
    rows = evidence_log.rows(session, state.plan_id, ("published", "rollback"))
    published = [r for r in rows if r.kind == "published"]
    # closed too: a plan closed before the sensor's next tick (a hurried `plan close` right after
    # `publish`, a daemon down meanwhile) left the report on the month before the publish, and
    # nothing asked for it again (found by an attack); Dagster launches each run key once
    if state.phase in (Phase.PUBLISHED, Phase.CLOSED):
        found = published[-1] if published else None
        return found.seq if found is not None and found.payload.get("sha256") == state.approved_sha256 else None
    if state.phase is Phase.ROLLED_BACK and published and rows[-1].kind == "rollback":
        return rows[-1].seq
    return None


def consumer_requests(session: Session, state: record.PlanState, graph: TableGraph,
                      store: dg.DagsterInstance | None = None) -> list[dg.RunRequest]:
    """After a plan's publish, and after the rollback of a published plan, a run of each consumer
    downstream of its tables (a pandas report, an extract), for the partitions that read them: once
    per publish or rollback (the run key)."""
    seq = _changed_for_consumers(session, state)
    if seq is None:
        return []
    members = [Member(a, state.keys_of(a)) for a in state.assets if a in graph.tables]
    requests = []
    for consumer in graph.consumers(members, store):  # the instance lists a dynamic consumer's keys
        selection = [asset_key(consumer.asset)]
        base = f"consumers:{state.plan_id}:{seq}:{consumer.asset}"
        tags = {PLAN_TAG: state.plan_id, ACTOR_TAG: "reopen-sensor"}
        if consumer.keys is None:
            requests.append(dg.RunRequest(run_key=base, asset_selection=selection, tags=tags))
        else:
            requests += [dg.RunRequest(run_key=f"{base}:{k}", asset_selection=selection, partition_key=k, tags=tags)
                         for k in consumer.keys[:MAX_CONSUMER_RUNS]]
    return requests


def make_reopen_sensor(spec: TableSpec, partitions_def: dg.PartitionsDefinition,
                       publish_key: dg.AssetKey, warehouse_key: str = DEFAULT_KEY) -> dg.SensorDefinition:
    target_key = dg.AssetKey(spec.name.split("/"))

    @dg.sensor(
        name=f"{spec.table}__reopen_publish",
        minimum_interval_seconds=interval_seconds(),
        default_status=dg.DefaultSensorStatus.RUNNING,
        # the publish run, and the consumers it refreshes afterwards
        asset_selection=dg.AssetSelection.assets(publish_key)
        | dg.AssetSelection.assets(publish_key, target_key).downstream(),
        description=f"Reopens publish of {spec.publish_as} once a plan's window passed every gate, "
                    f"and shows {spec.name}'s plans on the asset.",
        required_resource_keys={warehouse_key},
    )
    def reopen(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        warehouse = as_warehouse(getattr(context.resources, warehouse_key), warehouse_key)
        requests, notes, table, active = [], [], "", 0
        shown, asked = _cursor(context.cursor)
        scheme = table_scheme(spec, partitions_def)
        graph = graph_of_repository(context.repository_def) if context.repository_def else None
        try:
            # a tick must stay short: if a run holds the warehouse, try again next tick
            with warehouse.session(wait_seconds=SENSOR_LOCK_WAIT_SECONDS) as session:
                for state in record.active_plans(session, target=spec.name):
                    if state.target != spec.name:
                        continue  # a plan over a graph moves on its target's sensor, and publishes there
                    state = advance(session, state, actor="reopen-sensor", spec=spec, scheme=scheme, graph=graph)
                    notes.append(f"{state.plan_id}: {state.phase}")
                    if state.phase is Phase.RECONCILED and not rule.plan_blockers(
                            session, state, spec, scheme, graph).problems:
                        seq = reconciled_seq(session, state)  # `status` reads the same one
                        key = publish_run_key(context.instance, state.plan_id, seq) if seq is not None else None
                        if key is not None:
                            requests.append(dg.RunRequest(run_key=key, asset_selection=[publish_key],
                                                          tags=publish_run_tags(state)))
                if graph is not None:
                    changed, top = changed_for_consumers_since(session, asked)
                    for state in record.all_plans(session, target=spec.name):
                        if state.target == spec.name and state.phase in CHANGED_FOR_CONSUMERS \
                                and state.plan_id in changed:
                            requests += consumer_requests(session, state, graph, context.instance)
                            if any(a not in graph.tables for a in state.assets):
                                # definitions without a table the plan wrote (a deployment of the daily
                                # table alone) cannot name that table's consumers: the cursor stays
                                # before this plan's row, so a tick under definitions declaring it asks
                                # them (moved past it, the report was never refreshed: found by an attack)
                                top = min(top, changed[state.plan_id] - 1)
                    asked = top
                table, active = plans_of_table(session, spec.name, spec, scheme, graph)
        except LockWaitTimeout as exc:
            # only a lock wait is "busy"; any other error (a missing table, a server that refuses
            # the connection) fails the tick, so the UI shows it as the error it is
            return dg.SkipReason(f"warehouse busy, retrying next tick ({exc.message})")
        state_hash = hashlib.sha256(table.encode()).hexdigest()
        events = []
        if state_hash != shown:  # an observation only when the plans' state changed
            events.append(observation(spec.name, table, active, "reopen-sensor"))
        cursor = f"{state_hash}:{asked}"
        repository = context.repository_def
        if repository is not None and not repository.has_sensor_def(relay_name(warehouse_key)):
            # definitions written for 0.2 registered `[table.sensor]` alone, which delivered notices
            notes.append(f"no notice relay: register `sensors=table.sensors` ({relay_name(warehouse_key)}); "
                         "until then notices wait for the next `backfill` command")
            context.log.warning(notes[-1])
        decided = dg.SensorResult(run_requests=requests, asset_events=events, cursor=cursor,
                                  skip_reason=None if requests or events else
                                  ("; ".join(notes) or f"no active plan for {spec.name}"))
        return decided

    return reopen

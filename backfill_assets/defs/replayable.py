"""`make_replayable_table`: a team's TableSpec in, Dagster definitions out.

The target asset asks the write permission before writing, writes each partition in one
transaction, fingerprints it and runs the gates in the warehouse. Its gates are blocking asset
checks with one result per partition: yielded in a one-partition run, logged once per partition
in a range run (Dagster otherwise records a range run's checks without their partition). A UI
backfill runs ranges of `partitions_per_run` partitions (a backfill policy), like `backfill run`.
"""


from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg

from backfill_assets.control import lease, record
from backfill_assets.control.lease import refuse_foreign_run
from backfill_assets.defs.plan_state import observations
from backfill_assets.defs.publish_asset import impact_metadata, make_publish_asset
from backfill_assets.defs.relay import make_notice_relay
from backfill_assets.defs.resources import DEFAULT_KEY, as_warehouse
from backfill_assets.defs.run_context import run_actor, table_scheme
from backfill_assets.defs.sensor import make_reopen_sensor
from backfill_assets.defs.verdicts_shown import gate_evaluation, gate_metadata
from backfill_assets.errors import BackfillError, IdentifierError, PartitionRefused, UsageError
from backfill_assets.execution.write import write_partitions
from backfill_assets.gates.results import GATE_DESCRIPTIONS, GATE_NAMES, GateResult
from backfill_assets.graph import SPEC_METADATA, TableGraph, graph_of_run, recorded_inputs
from backfill_assets.impact import plan_impact
from backfill_assets.partitions import PartitionScheme
from backfill_assets.permission import Permission, permit
from backfill_assets.table import TableSpec
from backfill_assets.tags import LAUNCHER_TAG, PLAN_TAG, REPLAYABLE_OP_TAG
from backfill_assets.warehouse.engine import Session

DEFAULT_PARTITIONS_PER_RUN = 30


@dataclass(frozen=True)
class ReplayableTable:
    spec: TableSpec
    partitions_def: dg.PartitionsDefinition
    target: dg.AssetsDefinition
    publish: dg.AssetsDefinition
    sensor: dg.SensorDefinition  # the reopen sensor: moves plans forward, requests publish runs
    relay: dg.SensorDefinition  # delivers notices; one per warehouse key, shared by its tables

    @property
    def assets(self) -> list[dg.AssetsDefinition]:
        return [self.target, self.publish]

    @property
    def sensors(self) -> list[dg.SensorDefinition]:
        """The reopen sensor and the notice relay: register both (`Definitions(sensors=...)`)."""
        return [self.sensor, self.relay]

    def scheme(self) -> PartitionScheme:
        """Built afresh each time: a time-window definition gains a key every period."""
        return table_scheme(self.spec, self.partitions_def)


def _check_event(key: dg.AssetKey, result: GateResult,
                 partition_key: str | None) -> dg.AssetCheckResult | dg.AssetCheckEvaluation:
    """A yielded result in a one-partition run, else an evaluation logged for its partition."""
    if partition_key is None:
        return dg.AssetCheckResult(asset_key=key, check_name=result.gate, passed=result.passed,
                                   metadata=gate_metadata(result), severity=dg.AssetCheckSeverity.ERROR,
                                   description=result.detail[:1000])
    return gate_evaluation(key, result, partition_key)


def _impact_metadata(context: dg.AssetExecutionContext, session: Session, spec: TableSpec,
                     scheme: PartitionScheme, permission: Permission) -> dict[str, Any]:
    """What a plan's run changed against the snapshot taken before the plan's first write of each
    partition (`backfill diff` for these partitions): numeric deltas and a markdown table. A report
    on data already written and judged: if it cannot be computed the run still stands, and says so."""
    if permission.plan is None:
        return {}  # a plan-free write only fills empty partitions: there is no before
    try:
        impact = plan_impact(session, spec, scheme, permission.plan, list(permission.keys), top=3)
    except Exception as exc:  # noqa: BLE001 - a report must never fail a run whose data is written and judged
        context.log.warning(f"the impact of this run could not be computed: {type(exc).__name__}: {exc}")
        return {"impact": dg.MetadataValue.text(f"not computed: {type(exc).__name__}: {exc}")}
    return impact_metadata(impact)


RESERVED_TAG = REPLAYABLE_OP_TAG  # a team's tag of this name would pass for ours


def _team_metadata(metadata: Mapping[str, object] | None, spec: TableSpec, asset: str) -> dict[str, object]:
    """The team's metadata, under ours for `asset` (the target or the published asset):
    `partition_expr` (the partition column) and `schema` tell dagster-duckdb's IO managers where a
    partition's rows are, so a downstream pandas asset loads the published table's partitions as
    DataFrames. Only the published asset's: on the target they loaded a team asset placed below it
    with rows whose gates failed (found by an attack), so an asset reading the target fails loudly
    unless the team sets them itself. Those IO managers name the table by the key's last part, so for
    a key with a prefix (`published/sales`, the table `published__sales`) they would read another
    table, the target itself for `publish_as: published/<target>`: such an asset gets neither, and
    the IO manager fails loudly instead of reading rows no gate passed."""
    given = dict(metadata or {})
    if SPEC_METADATA in given:
        raise UsageError(f"metadata of {spec.name} may not set {SPEC_METADATA}: the table's spec travels there",
                         fix="give the key another name")
    where: dict[str, object] = {"partition_expr": spec.partition_column, "schema": "main"} \
        if asset == spec.publish_as and "/" not in asset else {}
    return {**where, **given}


# Above the asset's Materialize button, where a backfill dialog starts: Dagster's dialog itself has
# no place for a word of ours, and a refused run otherwise says it only after the launch. The
# Overview shows only definition metadata and the latest materialization's (ui-core's
# AssetNodeOverview), so the plans' state, which changes without a materialization, is recorded as
# an observation, and the description says where it is.
PLAN_HINT = ("Backfills that rewrite written partitions need an approved replay plan (`backfill plan new`); "
             "partitions never written load without one, gated and published as usual. "
             "This table's plans and their state (phase, gates, publish, next step): the newest observation "
             "in the Events tab, recorded whenever a command or a run changes a plan, or `backfill status`.")


def _with_hint(description: str | None) -> str:
    return f"{description.rstrip()}\n\n{PLAN_HINT}" if description else PLAN_HINT


def _changed_plan_state(session: Session, permission: Permission, results: Mapping[str, Sequence[GateResult]],
                        tags: Mapping[str, str], run_id: str, graph: TableGraph | None) -> list[dg.AssetObservation]:
    """The plan's state as this run left it, for its tables' assets now rather than at the sensor's
    next tick, when the run moved its phase or a gate failed (a passing run mid-window waits for the
    tick: computing the state costs a run ~0.1 s). `backfill run` records it once for all of its
    runs, when they end."""
    plan = permission.plan
    if plan is None:
        return []
    held = lease.current(session, plan.plan_id)
    if held is not None and held.alive() and tags.get(LAUNCHER_TAG) == lease.launcher_label(held):
        return []  # one of the runs of the `backfill run` holding the plan: it records the state
    moved = record.require(session, plan.plan_id).phase is not plan.phase
    if not moved and all(r.passed for rs in results.values() for r in rs):
        return []
    return observations(session, plan.assets, f"run {run_id}", graph)


def make_replayable_table(spec: TableSpec, partitions_def: dg.PartitionsDefinition, *,
                          group_name: str | None = None,
                          partitions_per_run: int = DEFAULT_PARTITIONS_PER_RUN,
                          source_partition_mapping: dg.PartitionMapping | None = None,
                          warehouse_key: str = DEFAULT_KEY,
                          metadata: Mapping[str, object] | None = None,
                          tags: Mapping[str, str] | None = None,
                          owners: Sequence[str] | None = None,
                          kinds: Iterable[str] | None = None,
                          publish_description: str | None = None) -> ReplayableTable:
    """A team's table as Dagster definitions. When `spec.source` is another replayable table, this
    one is part of its graph: a plan over the source recomputes, gates and publishes it too, for
    the partitions whose rows read the window's and those `source_partition_mapping` maps it to
    (Dagster's default mapping when None: time windows by overlap, e.g. daily -> monthly; static
    partitions by identity); see `graph.TableGraph.downstream_keys`.

    `warehouse_key` names the resource runs write through: a `WarehouseResource` (the default,
    `backfill_resources()`) or the team's dagster-duckdb `DuckDBResource`. `metadata`, `tags`,
    `owners` and `kinds` go on the target and the published asset (the target's description is
    `spec.description`); both carry `partition_expr` and `schema` for dagster-duckdb's IO managers
    (the team's metadata wins, e.g. `{"schema": "public"}` on PostgreSQL).

    Register `table.sensors`: the reopen sensor and the notice relay of `warehouse_key`'s warehouse
    (the same object for every table of that key)."""
    key = dg.AssetKey(spec.name.split("/"))
    # built once here to refuse an unsupported partitioning when the definitions load
    table_scheme(spec, partitions_def)
    if spec.range_form and isinstance(partitions_def, dg.StaticPartitionsDefinition):
        raise IdentifierError(f"table {spec.name} declares range_form, but static partitions have no range",
                              fix="leave range_form out (select_sql then binds $partition)")
    if tags and RESERVED_TAG in tags:
        raise UsageError(f"tags of {spec.name} may not set {RESERVED_TAG}", fix="give the tag another name")
    shared: dict[str, Any] = dict(metadata=_team_metadata(metadata, spec, spec.name), owners=list(owners or []),
                  kinds=set(kinds) if kinds is not None else {"sql"})
    check_specs = [dg.AssetCheckSpec(name, asset=key, partitions_def=partitions_def, blocking=True,
                                     description=GATE_DESCRIPTIONS[name]) for name in GATE_NAMES]
    @dg.multi_asset(
        name=spec.table,
        specs=[dg.AssetSpec(key, deps=[dg.AssetDep(dg.AssetKey(spec.source.split("/")),
                                                   partition_mapping=source_partition_mapping)],
                            partitions_def=partitions_def, code_version=spec.code_version,
                            description=_with_hint(spec.description), group_name=group_name, kinds=shared["kinds"],
                            owners=shared["owners"], tags={**(tags or {}), RESERVED_TAG: ""},
                            metadata={**shared["metadata"], SPEC_METADATA: spec.to_json()})],
        check_specs=check_specs,
        partitions_def=partitions_def,
        can_subset=True,
        backfill_policy=dg.BackfillPolicy.multi_run(partitions_per_run),
        op_tags={REPLAYABLE_OP_TAG: spec.name},
        required_resource_keys={warehouse_key},
    )
    def target(context: dg.AssetExecutionContext) -> Iterator[dg.MaterializeResult[Any] | dg.AssetCheckResult
                                                              | dg.AssetCheckEvaluation]:
        keys = list(context.partition_keys)
        tags = dict(context.run.tags)
        actor = run_actor(context)
        scheme = table_scheme(spec, partitions_def)
        if key not in context.selected_asset_keys:
            # the checks alone (the UI's "Execute" on a check): gates judge the write they belong to, so
            # this body would write the partition, under the plan its tags name, before Dagster failed
            # the step on the materialization it did not select (found by an attack)
            raise dg.Failure(description=str(UsageError(
                f"a run of {spec.name}'s checks alone would write {keys[0] if keys else 'its partitions'}: "
                "its gates run only on the write they judge",
                fix=f"materialize {spec.name} (its checks run with it), or judge a plan's window again with "
                    "`backfill reconcile PLAN`")))
        try:
            warehouse = as_warehouse(getattr(context.resources, warehouse_key), warehouse_key)
            with warehouse.session() as session:
                graph = graph_of_run(context)
                try:
                    inputs = recorded_inputs(context.instance, spec.source) if spec.source not in graph.tables else ()
                    permission = permit(session, spec, scheme, keys, tags, graph, inputs)
                    if permission.plan is not None:  # any run of a plan honours its lease
                        refuse_foreign_run(session, permission.plan.plan_id, tags, keys[0])
                except PartitionRefused as exc:
                    raise dg.Failure(description=str(exc), metadata={
                        "plan": exc.plan_id or "none", "partition": exc.partition}) from None
                done = write_partitions(session, spec, scheme, permission, run_id=context.run.run_id, actor=actor)
                writes, results = done.writes, done.results
                impact = _impact_metadata(context, session, spec, scheme, permission)
                try:  # the writes are committed: showing the state late never fails them
                    plan_state = _changed_plan_state(session, permission, results, tags, context.run.run_id, graph)
                except Exception as exc:  # noqa: BLE001 - the reopen sensor's next tick records it
                    context.log.warning(f"the plan's state shows at the reopen sensor's next tick "
                                        f"(recording it now failed: {type(exc).__name__}: {exc})")
                    plan_state = []
        except BackfillError as exc:
            raise dg.Failure(description=str(exc)) from None
        for event in plan_state:
            context.log_event(event)
        plan_id = permission.plan.plan_id if permission.plan else "incremental"
        single = len(writes) == 1
        failed = {k: [r.gate for r in rs if not r.passed] for k, rs in results.items()}
        failed = {k: g for k, g in failed.items() if g}
        # The rows are written whatever the gates say, so Dagster records the materialization and
        # the checks judge it; publish is what refuses them.
        yield dg.MaterializeResult(asset_key=key, metadata={
            "plan": plan_id, "rows": sum(w.rows for w in writes),
            "partitions": dg.MetadataValue.int(len(writes)),
            "partitions_failing_gates": dg.MetadataValue.int(len(failed)),
            **({"fingerprint": str(writes[0].fingerprint)} if single else
               {"range": f"{keys[0]}..{keys[-1]}"}),
            **impact,
        })
        selected = {c.name for c in context.selected_asset_check_keys}
        logged = []
        for write in writes:
            for result in results[write.partition_key]:
                if result.gate not in selected:
                    continue
                if single:
                    yield _check_event(key, result, None)  # Dagster's blocking fails the step
                else:
                    logged.append(_check_event(key, result, write.partition_key))
        # imported here: it brings in Dagster's sqlite storages, SQLAlchemy and alembic, which a
        # command that only loads the definitions (status, reconcile, plan) never needs (loading the
        # TPC-H benchmark's definitions: 2.0-2.8 -> 1.1-1.5 s)
        from backfill_assets.dagster_storage import log_check_evaluations

        log_check_evaluations(context, logged)  # one write to the event log, not one per gate and partition
        if failed and not single:
            first = next(iter(failed))
            raise dg.Failure(description=f"gates failed on {len(failed)} of {len(writes)} partition(s), "
                                         f"first {first}: {', '.join(failed[first])}")

    publish = make_publish_asset(spec, partitions_def, key, group_name=group_name,
                                 warehouse_key=warehouse_key, description=publish_description,
                                 tags=dict(tags or {}),
                                 **{**shared, "metadata": _team_metadata(metadata, spec, spec.publish_as)})
    sensor = make_reopen_sensor(spec, partitions_def, publish.key, warehouse_key)
    return ReplayableTable(spec, partitions_def, target, publish, sensor, make_notice_relay(warehouse_key))


__all__ = ["PLAN_TAG", "ReplayableTable", "make_replayable_table"]

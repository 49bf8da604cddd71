"""The publish asset: what consumers read, copied from the audited target under the publish rule."""


from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import dagster as dg

from backfill_assets.defs.resources import DEFAULT_KEY, as_warehouse
from backfill_assets.defs.run_context import run_actor, table_scheme
from backfill_assets.defs.verdicts_shown import changed_evaluations
from backfill_assets.errors import BackfillError
from backfill_assets.graph import asset_key, graph_of_run
from backfill_assets.impact import Impact
from backfill_assets.publish import rule
from backfill_assets.table import TableSpec


def impact_metadata(impact: Impact) -> dict[str, Any]:
    """An impact as materialization metadata: numeric deltas the UI plots, and its markdown table."""
    return {k: dg.MetadataValue.md(str(v)) if k == "impact" else v for k, v in impact.metadata().items()}


def make_publish_asset(spec: TableSpec, partitions_def: dg.PartitionsDefinition, target_key: dg.AssetKey,
                       *, group_name: str | None = None,
                       warehouse_key: str = DEFAULT_KEY, description: str | None = None,
                       metadata: Mapping[str, object] | None = None, tags: Mapping[str, str] | None = None,
                       owners: Sequence[str] = (), kinds: Iterable[str] = ("sql",)) -> dg.AssetsDefinition:
    @dg.asset(
        key=dg.AssetKey(spec.publish_as.split("/")),
        deps=[target_key],
        partitions_def=partitions_def,
        backfill_policy=dg.BackfillPolicy.single_run(),
        group_name=group_name,
        kinds=set(kinds),
        owners=list(owners),
        tags=dict(tags or {}),
        metadata=dict(metadata or {}),
        description=description or f"Published {spec.name}: only partitions whose gates all passed on exactly "
                                   "the data being copied; frozen while a replay plan holds them.",
        required_resource_keys={warehouse_key},
    )
    def published(context: dg.AssetExecutionContext) -> Iterator[dg.AssetCheckEvaluation | dg.MaterializeResult[Any]]:
        keys = list(context.partition_keys)
        scheme = table_scheme(spec, partitions_def)
        graph = graph_of_run(context)
        refusal: BackfillError | None = None
        try:
            warehouse = as_warehouse(getattr(context.resources, warehouse_key), warehouse_key)
            with warehouse.session() as session:
                done = rule.publish(session, spec, scheme, keys, actor=run_actor(context), graph=graph)
        except BackfillError as exc:
            refusal = exc
        if refusal is not None:
            from backfill_assets.dagster_storage import with_targets  # Dagster's storages: runs only

            # the UI shows a partition changed after its gates ran on its table's check, a graph's
            # other table's too (a month edited by hand stayed green: found by an attack); yielded
            # (not logged) so the events are stored before the step fails; each targets the
            # partition's latest materialization, or the check's partition status would not count it
            yield from with_targets(context.instance, changed_evaluations(getattr(refusal, "changed", {})))
            raise dg.Failure(description=str(refusal))
        # the other tables of a plan's graph were copied in the same transaction: their published
        # assets are materialized by this run too, partition by partition, so the UI shows them current
        for asset, copied in done.graph.items():
            other = graph.spec(asset)
            # what its consumers see change, as the target's published asset carries its own
            seen, why = done.graph_impact.get(asset, (None, "not computed"))
            impact = impact_metadata(seen) if seen is not None else {
                "impact": dg.MetadataValue.text(f"not computed: {why}")}
            for key in copied:
                context.log_event(dg.AssetMaterialization(
                    asset_key=asset_key(other.publish_as), partition=key,
                    metadata={"plans": ", ".join(done.plans_published), "published_with": spec.publish_as,
                              **impact}))
        replaced: dict[str, Any] = {"replaced_edited_partitions": dg.MetadataValue.int(len(done.replaced_edits)),
                    "replaced_edits": ", ".join(sorted(done.replaced_edits)[:50])} if done.replaced_edits else {}
        yield dg.MaterializeResult(metadata={
            **replaced,
            "rows": done.rows, "partitions": dg.MetadataValue.int(len(keys)),
            "range": f"{keys[0]}..{keys[-1]}", "plans": ", ".join(done.plans_published) or "none",
            **({"published_with": ", ".join(graph.spec(a).publish_as for a in done.graph)} if done.graph else {}),
            **(impact_metadata(done.impact) if done.impact is not None else
               {"impact": dg.MetadataValue.text(f"not computed: {done.impact_error}")})})

    return published

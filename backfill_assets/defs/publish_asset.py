"""The publish asset: what consumers read, copied from the audited target under the publish rule."""


import dagster as dg

from backfill_assets.defs.resources import WarehouseResource
from backfill_assets.errors import BackfillError
from backfill_assets.publish import rule
from backfill_assets.table import TableSpec


def make_publish_asset(spec: TableSpec, partitions_def: dg.PartitionsDefinition,
                       target_key: dg.AssetKey, *, group_name: str | None = None
                       ) -> dg.AssetsDefinition:
    @dg.asset(
        key=dg.AssetKey(spec.publish_as.split("/")),
        deps=[target_key],
        partitions_def=partitions_def,
        backfill_policy=dg.BackfillPolicy.single_run(),
        group_name=group_name,
        kinds={"duckdb"},
        description=f"Published {spec.name}: only partitions whose gates all passed; paused while "
                    "a replay plan holds them.",
    )
    def published(context: dg.AssetExecutionContext, warehouse: WarehouseResource):
        keys = list(context.partition_keys)
        tags = dict(context.run.tags)
        with warehouse.get_connection() as con:
            try:
                copied = rule.publish(con, spec, keys, tags,
                                      actor=tags.get("backfill_assets/actor", "dagster"))
            except BackfillError as exc:
                raise dg.Failure(description=str(exc)) from None
        return dg.MaterializeResult(metadata={"rows": copied,
                                              "partitions": f"{keys[0]}..{keys[-1]}"})

    return published

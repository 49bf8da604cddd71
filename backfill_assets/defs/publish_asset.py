"""The publish asset: what consumers read, copied from the audited target under the publish rule."""


from typing import TYPE_CHECKING

import dagster as dg

from backfill_assets.defs.resources import WarehouseResource
from backfill_assets.errors import BackfillError, PublishBlocked
from backfill_assets.gates.results import UNCHANGED_SINCE_CHECKED
from backfill_assets.publish import rule
from backfill_assets.table import TableSpec

if TYPE_CHECKING:
    from backfill_assets.defs.replayable import ReplayableTable


def make_publish_asset(spec: TableSpec, partitions_def: dg.PartitionsDefinition, target_key: dg.AssetKey,
                       holder: dict[str, "ReplayableTable"], *, group_name: str | None = None
                       ) -> dg.AssetsDefinition:
    @dg.asset(
        key=dg.AssetKey(spec.publish_as.split("/")),
        deps=[target_key],
        partitions_def=partitions_def,
        backfill_policy=dg.BackfillPolicy.single_run(),
        group_name=group_name,
        kinds={"sql"},
        description=f"Published {spec.name}: only partitions whose gates all passed on exactly the "
                    "data being copied; paused while a replay plan holds them.",
    )
    def published(context: dg.AssetExecutionContext, warehouse: WarehouseResource):
        from backfill_assets.defs.replayable import run_actor

        keys = list(context.partition_keys)
        scheme = holder["table"].scheme()
        with warehouse.session() as session:
            try:
                done = rule.publish(session, spec, scheme, keys, actor=run_actor(context))
            except PublishBlocked as exc:
                for key, (now, written, _) in getattr(exc, "changed", {}).items():
                    # the UI shows the refusal on the target's sixth check, for that partition
                    context.log_event(dg.AssetCheckEvaluation(
                        asset_key=target_key, check_name=UNCHANGED_SINCE_CHECKED, passed=False,
                        partition=key, severity=dg.AssetCheckSeverity.ERROR, blocking=True,
                        description=f"changed since its gates checked it: now {now}, checked {written}",
                        metadata={"now": str(now), "checked": str(written)}))
                raise dg.Failure(description=str(exc)) from None
            except BackfillError as exc:
                raise dg.Failure(description=str(exc)) from None
        return dg.MaterializeResult(metadata={
            "rows": done.rows, "partitions": dg.MetadataValue.int(len(keys)),
            "range": f"{keys[0]}..{keys[-1]}", "plans": ", ".join(done.plans_published) or "none"})

    return published

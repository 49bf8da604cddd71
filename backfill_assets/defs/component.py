"""`ReplayableTableComponent`: a replayable table declared in YAML, the Dagster 1.13 way.

A team puts this in `defs/<name>/defs.yaml` of a `dg` project:

    type: backfill_assets.defs.component.ReplayableTableComponent
    attributes:
      name: daily_revenue
      source: orders
      publish_as: published_revenue
      partitions: {cadence: daily, start: "2026-01-01"}
      select_sql: "SELECT ... FROM orders WHERE order_date = $partition GROUP BY ..."
      ...

It builds exactly what `make_replayable_table` builds. Unknown keys are errors (dg.Model forbids
extras), and every identifier is validated by TableSpec before any SQL exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import dagster as dg

from backfill_assets.defs.replayable import DEFAULT_PARTITIONS_PER_RUN, make_replayable_table
from backfill_assets.defs.resources import DEFAULT_KEY, backfill_resources
from backfill_assets.errors import UsageError
from backfill_assets.table import Column, Metric, TableSpec


class ColumnModel(dg.Model):
    name: str
    type: str
    nullable: bool = True


class MetricModel(dg.Model):
    name: str
    target_sql: str
    source_sql: str


class PartitionsModel(dg.Model):
    cadence: Literal["hourly", "daily", "weekly", "monthly", "static"] = "daily"
    start: str | None = None        # first key of a time cadence, e.g. "2026-01-01" or "2026-01-01-00:00"
    timezone: str | None = None
    keys: list[str] | None = None   # the keys of a static partitioning

    def build(self) -> dg.PartitionsDefinition:
        if self.cadence == "static":
            return dg.StaticPartitionsDefinition(self.keys or [])
        kinds: dict[str, Callable[..., dg.PartitionsDefinition]] = {
                 "hourly": dg.HourlyPartitionsDefinition, "daily": dg.DailyPartitionsDefinition,
                 "weekly": dg.WeeklyPartitionsDefinition, "monthly": dg.MonthlyPartitionsDefinition}
        extra = {"timezone": self.timezone} if self.timezone else {}
        return kinds[self.cadence](start_date=self.start or "2026-01-01", **extra)


class SourceMappingModel(dg.Model):
    """How this table's partitions read its source's, when the source is another replayable table:
    `static` maps the source's keys to this table's ({source key: key}); `time_window` shifts the
    overlap by whole partitions. Without it, Dagster's default (overlap, or identity)."""

    static: dict[str, str] | None = None
    time_window: dict[str, int] | None = None  # {start_offset: 0, end_offset: 0}

    def build(self) -> dg.PartitionMapping | None:
        if self.static is not None:
            return dg.StaticPartitionMapping(self.static)
        if self.time_window is not None:
            return dg.TimeWindowPartitionMapping(start_offset=self.time_window.get("start_offset", 0),
                                                 end_offset=self.time_window.get("end_offset", 0))
        return None


class ReplayableTableComponent(dg.Component, dg.Model, dg.Resolvable):
    """A partitioned target recomputed from a source, with its gates, publish asset and sensor."""

    name: str
    source: str
    publish_as: str
    partitions: PartitionsModel = PartitionsModel()
    select_sql: str
    partition_column: str
    source_partition_column: str
    business_keys: list[str]
    source_keys: dict[str, str] = {}
    source_event_id: str | None = None
    contract: list[ColumnModel]
    metrics: list[MetricModel]
    event_id_column: str | None = None
    code_version: str | int = "1"  # `code_version: 2` in YAML is an int
    description: str = ""
    range_form: bool = False  # select_sql reads any $partition_start..$partition_end: one statement a run
    group_name: str | None = None
    partitions_per_run: int = DEFAULT_PARTITIONS_PER_RUN
    # when `source` is another replayable table (a rollup of a daily table): how partitions map
    source_partition_mapping: SourceMappingModel | None = None
    home: str = ""  # empty: $BACKFILL_HOME, resolved when a run connects
    warehouse_url: str = ""  # empty: $BACKFILL_WAREHOUSE_URL, else the DuckDB file in the home
    # the team's own connection: a resource key their definitions bind (a DuckDBResource); then this
    # component declares no resource, and `home`/`warehouse_url` must stay empty
    warehouse_key: str = DEFAULT_KEY
    # passed through to the target and the published asset (besides partition_expr and schema)
    metadata: dict[str, Any] = {}
    tags: dict[str, str] = {}
    owners: list[str] = []
    kinds: list[str] | None = None
    publish_description: str | None = None

    def spec(self) -> TableSpec:
        return TableSpec(
            name=self.name, source=self.source, select_sql=self.select_sql,
            partition_column=self.partition_column, source_partition_column=self.source_partition_column,
            business_keys=tuple(self.business_keys), source_keys=tuple(self.source_keys.items()),
            source_event_id=self.source_event_id,
            contract=tuple(Column(c.name, c.type, c.nullable) for c in self.contract),
            metrics=tuple(Metric(m.name, m.target_sql, m.source_sql) for m in self.metrics),
            publish_as=self.publish_as, event_id_column=self.event_id_column,
            code_version=str(self.code_version), description=self.description, range_form=self.range_form)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        mapping = self.source_partition_mapping.build() if self.source_partition_mapping else None
        own = self.warehouse_key == DEFAULT_KEY
        if not own and (self.home or self.warehouse_url):
            raise UsageError(f"component {self.name} names warehouse_key {self.warehouse_key!r} and also home or "
                             "warehouse_url", fix="configure the warehouse in that resource, or drop warehouse_key")
        table = make_replayable_table(self.spec(), self.partitions.build(), group_name=self.group_name,
                                      partitions_per_run=self.partitions_per_run, source_partition_mapping=mapping,
                                      warehouse_key=self.warehouse_key, metadata=self.metadata, tags=self.tags,
                                      owners=self.owners, kinds=self.kinds,
                                      publish_description=self.publish_description)
        return dg.Definitions(assets=list(table.assets), sensors=table.sensors,
                              resources=backfill_resources(self.home, self.warehouse_url) if own else {})

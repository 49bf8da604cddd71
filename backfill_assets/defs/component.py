"""`ReplayableTableComponent`: a replayable table declared in YAML, the Dagster 1.13 way.

A team puts this in `defs/<name>/defs.yaml` of a `dg` project:

    type: backfill_assets.defs.component.ReplayableTableComponent
    attributes:
      name: daily_revenue
      source: orders
      publish_as: published_revenue
      partitions_start_date: "2026-01-01"
      select_sql: "SELECT ... FROM orders WHERE order_date = $partition GROUP BY ..."
      ...

It builds exactly what `make_replayable_table` builds. Unknown keys are errors (dg.Model forbids
extras), and every identifier is validated by TableSpec before any SQL exists.
"""

import dagster as dg

from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.defs.resources import backfill_resources
from backfill_assets.table import Column, Metric, TableSpec


class ColumnModel(dg.Model):
    name: str
    type: str
    nullable: bool = True


class MetricModel(dg.Model):
    name: str
    target_sql: str
    source_sql: str


class ReplayableTableComponent(dg.Component, dg.Model, dg.Resolvable):
    """A partitioned target recomputed from a source, with its gates, publish asset and sensor."""

    name: str
    source: str
    publish_as: str
    partitions_start_date: str
    select_sql: str
    partition_column: str
    source_partition_column: str
    business_keys: list[str]
    contract: list[ColumnModel]
    metrics: list[MetricModel]
    expected_rows_sql: str
    event_id_column: str | None = None
    code_version: str | int = "1"  # `code_version: 2` in YAML is an int
    description: str = ""
    group_name: str | None = None
    database: str = ""  # empty: $BACKFILL_HOME/warehouse.duckdb, resolved when a run connects

    def spec(self) -> TableSpec:
        return TableSpec(
            name=self.name, source=self.source, select_sql=self.select_sql,
            partition_column=self.partition_column,
            source_partition_column=self.source_partition_column,
            business_keys=tuple(self.business_keys),
            contract=tuple(Column(c.name, c.type, c.nullable) for c in self.contract),
            metrics=tuple(Metric(m.name, m.target_sql, m.source_sql) for m in self.metrics),
            expected_rows_sql=self.expected_rows_sql, publish_as=self.publish_as,
            event_id_column=self.event_id_column, code_version=str(self.code_version),
            description=self.description)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        partitions = dg.DailyPartitionsDefinition(start_date=self.partitions_start_date)
        table = make_replayable_table(self.spec(), partitions, group_name=self.group_name)
        return dg.Definitions(assets=list(table.assets), sensors=[table.sensor],
                              resources=backfill_resources(self.database))

"""What a team declares about a replayable table: its SQL, keys, metrics and contract.

Every identifier is validated when the spec is built, so nothing unchecked ever reaches SQL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from backfill_assets.errors import IdentifierError
from backfill_assets.warehouse.identifiers import checked, table_for_asset

_TYPE = re.compile(r"^[A-Z]+( ?\(\d+(, ?\d+)?\))?(\[\])?$")


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # DuckDB type name as information_schema reports it, e.g. DATE, BIGINT, DECIMAL(18,2)
    nullable: bool = True

    def __post_init__(self) -> None:
        checked(self.name, "contract column")
        if not _TYPE.match(self.type.upper()):
            raise IdentifierError(f"column type {self.type!r} of {self.name} is not a plain SQL type",
                                  fix="use a type name such as BIGINT, VARCHAR or DECIMAL(18,2)")


@dataclass(frozen=True)
class Metric:
    """A business aggregate computed on the target and, independently, on the source.

    `target_sql` aggregates the target's rows of one partition; `source_sql` aggregates the source's
    rows of the same partition. Both are SQL expressions written by the table's owners (code, not
    YAML input), e.g. target ``sum(net_revenue)`` against source ``sum(amount) - 2 * ...``.
    """

    name: str
    target_sql: str
    source_sql: str

    def __post_init__(self) -> None:
        checked(self.name, "metric name")


@dataclass(frozen=True)
class TableSpec:
    """A partitioned target recomputed from a source by `select_sql`.

    `select_sql` must return exactly the contract's columns for the partition bound to the
    parameter ``$partition`` (a DATE). `expected_rows_sql` is an aggregate over the source's rows of
    one partition giving the number of rows the target should hold (row-count parity).
    """

    name: str
    source: str
    select_sql: str
    partition_column: str
    source_partition_column: str
    business_keys: tuple[str, ...]
    contract: tuple[Column, ...]
    metrics: tuple[Metric, ...]
    expected_rows_sql: str
    publish_as: str
    event_id_column: str | None = None  # replay mode re-applies events keyed by this column
    code_version: str = "1"
    description: str = ""

    def __post_init__(self) -> None:
        table_for_asset(self.name)
        table_for_asset(self.source)
        table_for_asset(self.publish_as)
        checked(self.partition_column, "partition column")
        checked(self.source_partition_column, "source partition column")
        for key in self.business_keys:
            checked(key, "business key")
        names = [c.name for c in self.contract]
        for key in (*self.business_keys, self.partition_column):
            if key not in names:
                raise IdentifierError(f"{key!r} of table {self.name} is not a contract column",
                                      fix=f"declare it in the contract ({', '.join(names)})")
        if self.event_id_column is not None and self.event_id_column not in names:
            raise IdentifierError(f"event id column {self.event_id_column!r} is not a contract column",
                                  fix="declare it in the contract")

    @property
    def table(self) -> str:
        return table_for_asset(self.name)

    @property
    def source_table(self) -> str:
        return table_for_asset(self.source)

    @property
    def publish_table(self) -> str:
        return table_for_asset(self.publish_as)

    @property
    def columns(self) -> list[str]:
        return [c.name for c in self.contract]

    def metric(self, name: str) -> Metric:
        for metric in self.metrics:
            if metric.name == name:
                return metric
        raise IdentifierError(f"table {self.name} declares no metric {name!r}",
                              fix=f"use one of: {', '.join(m.name for m in self.metrics)}")

    def create_sql(self, table: str | None = None) -> str:
        from backfill_assets.warehouse.identifiers import quote

        # no NOT NULL in the DDL: the contract gate must see a bad transform's NULLs and block
        # publish, rather than the write failing half-way through a window
        cols = ", ".join(f"{quote(c.name)} {c.type}"
                         for c in self.contract)
        return f"CREATE TABLE IF NOT EXISTS {quote(table or self.table)} ({cols})"

"""What a team declares about a replayable table: its SQL, keys, metrics and contract.

Every identifier is validated when the spec is built, so nothing unchecked ever reaches SQL. The
spec travels with the definitions (as asset metadata), so the CLI, runs, the sensor and publish
all use the spec of the definitions actually loaded.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from functools import cached_property

from backfill_assets.errors import IdentifierError
from backfill_assets.identifiers import quote, table_for_asset, validated

_TYPE = re.compile(r"^[A-Z]+( [A-Z]+)*( ?\(\d+(, ?\d+)?\))?(\[\])?$")


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # a plain SQL type name: DATE, BIGINT, VARCHAR, DECIMAL(18,2), TIMESTAMP ...
    nullable: bool = True

    def __post_init__(self) -> None:
        validated(self.name, "contract column")
        if not isinstance(self.type, str) or not _TYPE.match(self.type.upper()):
            raise IdentifierError(f"column type {self.type!r} of {self.name} is not a plain SQL type",
                                  fix="use a type name such as BIGINT, VARCHAR or DECIMAL(18,2)")


RESERVED_METRIC_NAMES = frozenset({"added", "removed", "changed", "partitions_changed"})


@dataclass(frozen=True)
class Metric:
    """A business aggregate computed on the target and, independently, on the source.

    Both are aggregate SQL expressions written by the table's owners (code, not YAML input),
    evaluated per business-key group: `target_sql` over the target's rows of one key group,
    `source_sql` over the source rows of the same group, e.g. target ``sum(net_revenue)`` against
    source ``sum(amount) - sum(amount) FILTER (WHERE status = 'refunded')``.
    """

    name: str
    target_sql: str
    source_sql: str

    def __post_init__(self) -> None:
        validated(self.name, "metric name")
        if self.name.lower() in RESERVED_METRIC_NAMES:
            # an impact's totals hold these counts beside each metric's figures
            raise IdentifierError(f"metric name {self.name!r} is reserved for the impact's row counts",
                                  fix=f"rename the metric (reserved: {', '.join(sorted(RESERVED_METRIC_NAMES))})")


@dataclass(frozen=True)
class TableSpec:
    """A partitioned target recomputed from a source by `select_sql`.

    `select_sql` returns exactly the contract's columns for one partition, bound as `$partition`
    (or `$partition_start` / `$partition_end` for a time window). `source_keys` maps each business
    key to the source expression that yields it (default: the source column of the same name), so
    the gates compare target and source key group by key group.
    """

    name: str
    source: str
    select_sql: str
    partition_column: str
    source_partition_column: str
    business_keys: tuple[str, ...]
    contract: tuple[Column, ...]
    metrics: tuple[Metric, ...]
    publish_as: str
    source_keys: tuple[tuple[str, str], ...] = ()
    source_event_id: str | None = None  # a source column unique per event: its duplicates fail a gate
    event_id_column: str | None = None  # replay mode re-applies events keyed by this target column
    code_version: str = "1"
    description: str = ""
    # select_sql reads any range `$partition_start`..`$partition_end` of whole partitions and returns
    # each row with its own partition column: a run's partitions are then recomputed by one statement
    # (one scan of the source) instead of one per partition
    range_form: bool = False
    _source_keys: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for asset in (self.name, self.source, self.publish_as):
            table_for_asset(asset)
        validated(self.partition_column, "partition column")
        validated(self.source_partition_column, "source partition column")
        if table_for_asset(self.source).lower() in (table_for_asset(self.name).lower(),
                                                    table_for_asset(self.publish_as).lower()):
            # the gates compared the table with itself, so each passed whatever it held, and a
            # replay read what it wrote
            raise IdentifierError(f"table {self.name} names {self.source} as its own source: its gates would "
                                  "compare it with itself", fix="name the table it is computed from as its source")
        if not self.business_keys:
            raise IdentifierError(f"table {self.name} declares no business keys",
                                  fix="list the columns that identify one row")
        names = [c.name for c in self.contract]
        reserved = [n for n in names if n.lower().startswith("backfill_stage_")]
        if reserved:  # the write stage adds columns of that prefix beside the contract's
            raise IdentifierError(f"column {reserved[0]!r} of table {self.name} uses the prefix "
                                  "backfill_stage_, which the framework reserves", fix="rename the column")
        for key in (*self.business_keys, self.partition_column):
            validated(key, "business key")
            if key not in names:
                raise IdentifierError(f"{key!r} of table {self.name} is not a contract column",
                                      fix=f"declare it in the contract ({', '.join(names)})")
        if self.partition_column not in self.business_keys:
            raise IdentifierError(f"the partition column {self.partition_column} of {self.name} is "
                                  "not a business key", fix="add it to business_keys")
        mapping = dict(self.source_keys)
        unknown = sorted(set(mapping) - set(self.business_keys))
        if unknown:
            raise IdentifierError(f"source_keys of {self.name} name {', '.join(unknown)}, which are "
                                  "not business keys", fix=f"map only {', '.join(self.business_keys)}")
        for key in self.business_keys:
            mapping.setdefault(key, quote(key))
        object.__setattr__(self, "_source_keys", mapping)
        for column in (self.source_event_id,):
            if column is not None:
                validated(column, "source event id column")
        if self.event_id_column is not None and self.event_id_column not in names:
            raise IdentifierError(f"event id column {self.event_id_column!r} is not a contract column",
                                  fix="declare it in the contract")
        seen = [m.name for m in self.metrics]
        if len(set(seen)) != len(seen):
            raise IdentifierError(f"table {self.name} declares a metric twice", fix="keep one of each")
        if self.range_form:
            from backfill_assets.partitions import partition_params

            used = set(partition_params(self.select_sql))
            if used != {"partition_start", "partition_end"}:
                raise IdentifierError(f"table {self.name} declares range_form, but its select_sql binds "
                                      f"{', '.join(sorted(used)) or 'no partition parameter'}",
                                      fix="filter the source with $partition_start and $partition_end only "
                                          "(not $partition), or leave range_form out")

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

    @property
    def value_columns(self) -> list[str]:
        return [c for c in self.columns if c not in self.business_keys]

    @property
    def key_types(self) -> tuple[str, ...]:
        """The declared type of each business key, in order."""
        return tuple(self.column(k).type for k in self.business_keys)

    def source_key_sql(self, key: str) -> str:
        """The source expression that yields business key `key`."""
        return self._source_keys[key]

    def column(self, name: str) -> Column:
        return next(c for c in self.contract if c.name == name)

    def metric(self, name: str) -> Metric:
        for metric in self.metrics:
            if metric.name == name:
                return metric
        raise IdentifierError(f"table {self.name} declares no metric {name!r}",
                              fix=f"use one of: {', '.join(m.name for m in self.metrics)}")

    @cached_property
    def code_identity(self) -> str:
        """What an approval binds of the table's code: its code version and the sha256 of everything
        that decides what a write computes and how the gates judge it (the description aside)."""
        data = json.loads(self.to_json())
        data.pop("description", None)
        if not data.get("range_form"):  # added later: a spec without it keeps the identity it had
            data.pop("range_form", None)
        digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf-8")).hexdigest()
        label = re.sub(r"[^\x21-\x7e]", "_", self.code_version)[:64] or "_"
        return f"{label}/{digest}"

    # --- travelling with the definitions ----------------------------------------------------------
    def to_json(self) -> str:
        data = asdict(self)
        data.pop("_source_keys", None)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TableSpec:
        data = json.loads(text)
        data["contract"] = tuple(Column(**c) for c in data["contract"])
        data["metrics"] = tuple(Metric(**m) for m in data["metrics"])
        data["business_keys"] = tuple(data["business_keys"])
        data["source_keys"] = tuple(tuple(pair) for pair in data["source_keys"])
        return cls(**data)


def code_identity_of(specs: list[TableSpec] | tuple[TableSpec, ...]) -> str:
    """What an approval binds of a plan's code: its table's code identity, or for a plan over a
    graph of tables one identity over all of theirs (a change to any of them voids the signatures)."""
    if len(specs) == 1:
        return specs[0].code_identity
    lines = "\n".join(f"{s.name}={s.code_identity}" for s in sorted(specs, key=lambda s: s.name))
    return f"graph/{hashlib.sha256(lines.encode('utf-8')).hexdigest()}"

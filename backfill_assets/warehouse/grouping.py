"""Grouping a table's rows by partition key for a whole slice, in one pass.

Equality schemes group on the column itself; range schemes join the rows to the slice's windows
(a small VALUES table, `Engine.values_sql`), which both engines run as a range join.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backfill_assets.identifiers import qualified, quote
from backfill_assets.partitions import PartitionScheme
from backfill_assets.warehouse.engine import Engine, Session, bound_rows
from backfill_assets.warehouse.partition_sql import many_predicate


@dataclass(frozen=True)
class Grouping:
    key_sql: str        # the expression to GROUP BY (and select) for a row's partition
    join_sql: str       # appended after the table in FROM
    where_sql: str      # restricts the scan to the slice
    params: list[Any]   # bound in order: join first, then where
    decode: dict[Any, str] | None  # column value -> key (equality), None when key_sql is the key

    def key(self, value: Any) -> str:
        if self.decode is None:
            return str(value)
        if value not in self.decode and isinstance(value, str):
            return self.decode[value.rstrip(" ")]  # PostgreSQL pads CHAR(n): 'a' reads back as 'a   '
        return self.decode[value]


def grouping(engine: Engine, scheme: PartitionScheme, column_sql: str, keys: Sequence[str]) -> Grouping:
    keys = list(dict.fromkeys(keys))
    if scheme.kind == "equality":
        where, params = many_predicate(scheme, column_sql, keys)
        return Grouping(column_sql, "", where, params, scheme.key_of_value(keys))
    params = []
    for key in keys:
        lo, hi = scheme.predicate_params(key)
        params += [key, lo, hi]
    windows = engine.values_sql(bound_rows(len(keys), 3), ("pkey", "lo", "hi"), "backfill_keys")
    join = f" JOIN {windows} ON {column_sql} >= backfill_keys.lo AND {column_sql} < backfill_keys.hi"
    return Grouping("backfill_keys.pkey", join, "TRUE", params, None)


def rows_per_partition(session: Session, table: str, partition_column: str, scheme: PartitionScheme,
                       keys: Sequence[str], schema: str | None = None) -> dict[str, int]:
    """Rows each key holds in `table` now, in one grouped count (keys without rows are absent)."""
    group = grouping(session.engine, scheme, f"t.{quote(partition_column)}", keys)
    source = qualified(schema, table) if schema else quote(table)
    return {group.key(v): int(n) for v, n in session.rows(
        f"SELECT {group.key_sql}, {session.engine.builtin('count')}(*) FROM {source} AS t{group.join_sql} "
        f"WHERE {group.where_sql} GROUP BY {group.key_sql}", group.params)}


def rows_in_no_key(session: Session, table: str, partition_column: str, spans: Sequence[tuple[Any, Any]],
                   scheme: PartitionScheme, keys: Sequence[str]) -> tuple[int, Any]:
    """The rows of `table` whose partition column lies in one of `spans` (as `PartitionScheme.span`
    gives them: `[lo, hi)`, or `(value, None)` for a static key) but in none of `keys`' partitions
    of `scheme`: (how many, the least such value). What a rollup's window reads beyond its upstream
    partitions (rows before the upstream's first partition, a region it does not declare) is in no
    partition, so no write, gate or fingerprint of the upstream covers it."""
    column = f"t.{quote(partition_column)}"
    parts: list[str] = []
    params: list[Any] = []
    for lo, hi in spans:
        if hi is None:
            parts.append(f"{column} = ?")
            params.append(lo)
        else:
            parts.append(f"({column} >= ? AND {column} < ?)")
            params += [lo, hi]
    if not parts:
        return 0, None
    inside, more = many_predicate(scheme, column, keys)
    engine = session.engine  # its own aggregates: `min(varchar)` of one's own beats pg_catalog's min(text)
    count, least = session.rows(f"SELECT {engine.builtin('count')}(*), {engine.builtin('min')}({column}) "
                                f"FROM {quote(table)} AS t "
                                f"WHERE ({' OR '.join(parts)}) AND NOT ({inside})", [*params, *more])[0]
    return int(count), least

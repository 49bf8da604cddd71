"""Order-independent fingerprints of partitions, defined by us and computed in the engine.

A partition's fingerprint is its row count and the sum, as an exact wide integer, of each row's
fingerprint: the first 8 bytes of md5 of the row's canonical text (`Engine.row_text_sql`) read
as an unsigned big-endian integer. A sum, unlike XOR, does not cancel a duplicated pair of rows.
The definition does not depend on an undocumented engine hash; `tests/test_fingerprints.py` pins
the values of a small fixed table, so an engine upgrade that changes them fails loudly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from backfill_assets.partitions import PartitionScheme
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.grouping import grouping
from backfill_assets.warehouse.identifiers import quote

EMPTY = "0"


@dataclass(frozen=True)
class Fingerprint:
    rows: int
    digest: str  # the exact sum, as decimal text

    def __str__(self) -> str:
        return f"{self.rows} rows #{self.digest[-12:]}"


def fingerprint_sum_sql(session: Session, columns: Sequence[str], alias: str = "") -> str:
    engine = session.engine
    return f"CAST(coalesce(sum({engine.row_fingerprint_sql(columns, alias)}), 0) AS {engine.wide_int})"


def fingerprints(session: Session, table: str, columns: Sequence[str], scheme: PartitionScheme,
                 partition_column: str, keys: Sequence[str],
                 schema: str | None = None) -> dict[str, Fingerprint]:
    """Fingerprints of several partitions in one pass; partitions without rows get (0, '0')."""
    if not keys:
        return {}
    source = f"{quote(schema)}.{quote(table)}" if schema else quote(table)
    group = grouping(scheme, f"t.{quote(partition_column)}", keys)
    rows = session.rows(
        f"SELECT {group.key_sql}, count(*), {session.engine.text_of(fingerprint_sum_sql(session, columns, 't'))} "
        f"FROM {source} AS t{group.join_sql} WHERE {group.where_sql} GROUP BY {group.key_sql}",
        group.params)
    found = {group.key(value): Fingerprint(int(n), str(digest)) for value, n, digest in rows}
    return {k: found.get(k, Fingerprint(0, EMPTY)) for k in keys}

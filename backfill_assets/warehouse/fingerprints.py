"""Order-independent, collision-resistant fingerprints of partitions, computed in the engine.

A row's digest is sha256 of its canonical text (`Engine.row_text_sql` with the columns' catalog
types: length-prefixed fields, `~` for NULL, each value's text the same on every engine and in
every session). A partition's fingerprint is its row count and `sha256:` + the hex sha256 of its
rows' 32-byte digests concatenated in ascending byte order, duplicates kept. Sorting makes it
order-independent; hashing the whole sorted list, instead of adding or XOR-ing the row digests,
makes it collision-resistant: two different multisets of rows give different byte strings, so equal
fingerprints need a sha256 collision. (A sum of row hashes, the previous release's
`legacy_fingerprints`, gives way to a k-tree search in seconds; so does any additive or XOR form,
whatever the width: tests/test_fingerprint_collisions.py.)

The `sha256:` prefix names the algorithm, so a digest of the legacy one (bare decimal digits)
never equals a new one; `fingerprints_like` computes each key with the algorithm of the record it
will be compared with. The definition depends on no undocumented engine hash;
`tests/test_fingerprints.py` pins the values of a small fixed table on both engines, so an engine
upgrade that changes a text form fails loudly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from backfill_assets.errors import ForgedRecord
from backfill_assets.identifiers import qualified, quote
from backfill_assets.partitions import PartitionScheme
from backfill_assets.warehouse import legacy_fingerprints as legacy
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.grouping import grouping

ALGORITHM = "sha256"
PREFIX = "sha256:"


@dataclass(frozen=True)
class Fingerprint:
    rows: int
    digest: str  # "sha256:<64 hex>"; a legacy record's: the md5 sum in decimal

    @property
    def algorithm(self) -> str:
        if self.digest.startswith(PREFIX):
            return ALGORITHM
        return legacy.ALGORITHM if self.legacy else "unknown"

    @property
    def legacy(self) -> bool:
        """Made by the previous release's md5 sum, which is not collision-resistant."""
        return legacy.is_legacy(self.digest)

    def __str__(self) -> str:
        if self.digest.startswith(PREFIX):
            return f"{self.rows} rows #{self.digest[len(PREFIX):][:12]}"
        if self.legacy:
            return f"{self.rows} rows {legacy.ALGORITHM} #{self.digest[-12:]}"
        return f"{self.rows} rows ({self.digest})"


#: a partition without rows: the sha256 of no bytes (what the engine computes over no rows)
EMPTY = Fingerprint(0, PREFIX + hashlib.sha256(b"").hexdigest())
LEGACY_EMPTY = Fingerprint(0, legacy.EMPTY_DIGEST)


def column_types(session: Session, table: str, columns: Sequence[str],
                 schema: str | None = None) -> list[str]:
    """Each column's type as the catalog reports it: a value's text in a fingerprint depends on
    it (`Engine.value_text_sql`). A column the table lacks gets '' (the statement then fails)."""
    found = session.engine.table_columns(session, table, schema)
    return [found.get(c.lower(), "") for c in columns]


def digest_sql(session: Session, columns: Sequence[str], types: Sequence[str], alias: str = "") -> str:
    """An aggregate: the group's digest, `sha256:<hex>`, over the columns of these types."""
    engine = session.engine
    row = engine.row_digest_sql(engine.row_text_sql(columns, alias, types))
    return f"'{PREFIX}' || {engine.digest_of_rows_sql(row)}"


def fingerprints(session: Session, table: str, columns: Sequence[str], scheme: PartitionScheme,
                 partition_column: str, keys: Sequence[str],
                 schema: str | None = None) -> dict[str, Fingerprint]:
    """Fingerprints of several partitions in one pass; partitions without rows get `EMPTY`."""
    if not keys:
        return {}
    types = column_types(session, table, columns, schema)
    return _grouped(session, table, scheme, partition_column, keys, schema,
                    digest_sql(session, columns, types, "t"), EMPTY)


def fingerprints_like(session: Session, table: str, columns: Sequence[str], scheme: PartitionScheme,
                      partition_column: str, expected: Mapping[str, Fingerprint],
                      schema: str | None = None) -> dict[str, Fingerprint]:
    """The fingerprint of each key of `expected`, by the algorithm that made its expected one, to
    compare like with like: a record made before the upgrade holds a legacy digest, which only
    the legacy algorithm can reproduce. One pass per algorithm present."""
    old = [k for k, fp in expected.items() if fp.legacy]
    new = [k for k, fp in expected.items() if not fp.legacy]
    found = fingerprints(session, table, columns, scheme, partition_column, new, schema)
    if old:
        found.update(_grouped(session, table, scheme, partition_column, old, schema,
                              legacy.digest_sql(session.engine, columns, "t"), LEGACY_EMPTY))
    return {k: found[k] for k in expected}


def _grouped(session: Session, table: str, scheme: PartitionScheme, partition_column: str,
             keys: Sequence[str], schema: str | None, aggregate: str, empty: Fingerprint) -> dict[str, Fingerprint]:
    kind = session.engine.relation_kind(session, table, schema)
    if kind not in (None, "table"):
        # a view can answer each statement differently (DuckDB's and PostgreSQL's current_query()):
        # the bytes a fingerprint proves must be the bytes the next statement reads
        name = f"{schema}.{table}" if schema else table
        if "collated" in kind:  # the bytes are the table's, but the gates would compare them otherwise
            raise ForgedRecord(f"{name} is a {kind}: its values compare and hash under the collation ('EU' as "
                               "'eu' under NOCASE), so a gate could not tell values that differ apart",
                               fix=f"declare the column without COLLATE (`ALTER TABLE {name} ALTER <column> TYPE "
                                   "VARCHAR`), then run the command again")
        raise ForgedRecord(f"{name} is a {kind}, not a table: a fingerprint proves the bytes of a table only, and "
                           "this one was replaced", fix="restore the table from backup before anything reads it")
    source = qualified(schema, table) if schema else quote(table)
    group = grouping(session.engine, scheme, f"t.{quote(partition_column)}", keys)
    rows = session.rows(
        f"SELECT {group.key_sql}, count(*), {aggregate} "
        f"FROM {source} AS t{group.join_sql} WHERE {group.where_sql} GROUP BY {group.key_sql}",
        group.params)
    found = {group.key(value): Fingerprint(int(n), str(digest)) for value, n, digest in rows}
    return {k: found.get(k, empty) for k in keys}

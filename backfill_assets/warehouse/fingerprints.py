"""Order-independent fingerprints of a partition: row count plus the sum of every row's hash.

`sum(hash(t))` (as HUGEINT) rather than `bit_xor`, because XOR cancels identical row pairs and a
duplicated pair would leave the fingerprint unchanged.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb

from backfill_assets.warehouse.identifiers import quote


@dataclass(frozen=True)
class Fingerprint:
    rows: int
    digest: str

    def __str__(self) -> str:
        return f"{self.rows} rows #{self.digest[-12:]}"


def as_date(partition_key: str) -> dt.date:
    return dt.date.fromisoformat(partition_key)


def fingerprints(con: duckdb.DuckDBPyConnection, table: str, partition_column: str,
                 partition_keys: Sequence[str]) -> dict[str, Fingerprint]:
    """Fingerprints of several partitions in one pass; partitions without rows get (0, '0')."""
    rows = con.execute(
        f"SELECT {quote(partition_column)}::VARCHAR, count(*), "
        f"coalesce(sum(hash(t)::HUGEINT), 0)::VARCHAR "
        f"FROM {quote(table)} AS t WHERE {quote(partition_column)} = ANY(?) GROUP BY 1",
        [[as_date(k) for k in partition_keys]],
    ).fetchall()
    found = {key: Fingerprint(n, digest) for key, n, digest in rows}
    return {k: found.get(k, Fingerprint(0, "0")) for k in partition_keys}


def fingerprint(con: duckdb.DuckDBPyConnection, table: str, partition_column: str,
                partition_key: str) -> Fingerprint:
    return fingerprints(con, table, partition_column, [partition_key])[partition_key]

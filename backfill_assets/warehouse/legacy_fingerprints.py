"""The previous release's fingerprint, kept only to compare with a record it made.

Homes written before sha256 fingerprints hold this algorithm's digests in `backfill_control`
(`writes`, `snapshots`, `gate_results.checked_fingerprint`): a partition's row count and the exact
sum of the first 8 bytes of md5 of each row's text (`Engine.row_text_sql` without types) read as
an unsigned big-endian integer, written as decimal digits. A sum of hashes is not
collision-resistant (a k-tree search finds other rows with the same sum in seconds,
tests/test_fingerprint_collisions.py), so nothing new is ever written with it and nothing trusts
it where a forgery could pass: `fingerprints.fingerprints_like` computes it only for a key whose
record was made by it (restoring a snapshot taken before the upgrade). This module is the one
place its SQL lives; a new engine needs none of it (it has no such records).
"""

from __future__ import annotations

from collections.abc import Sequence

from backfill_assets.errors import WarehouseError
from backfill_assets.warehouse.engine import Engine

ALGORITHM = "md5-sum"
EMPTY_DIGEST = "0"  # the sum over no rows


def is_legacy(digest: str) -> bool:
    """Whether a stored digest was made by this algorithm: decimal digits, no algorithm prefix."""
    return digest.isascii() and digest.isdigit()


def row_sql(engine: Engine, columns: Sequence[str], alias: str = "") -> str:
    """The first 8 bytes of md5(row text) as an unsigned big-endian integer, of `wide_int` type."""
    text = engine.row_text_sql(columns, alias)
    if engine.name == "duckdb":
        return f"CAST(CAST('0x' || left(md5({text}), 16) AS UBIGINT) AS HUGEINT)"
    if engine.name == "postgresql":
        digest = f"md5({text})"
        # two unsigned 32-bit halves: bit(64)::bigint would read the first 8 bytes as signed
        return (f"(CAST(CAST(CAST('x' || substr({digest}, 1, 8) AS bit(32)) AS bigint) & 4294967295 AS NUMERIC) "
                f"* 4294967296 + (CAST(CAST('x' || substr({digest}, 9, 8) AS bit(32)) AS bigint) & 4294967295))")
    raise WarehouseError(f"the {engine.name} engine has no legacy (md5-sum) fingerprints",
                         fix="records made before sha256 fingerprints exist only on DuckDB and PostgreSQL")


def digest_sql(engine: Engine, columns: Sequence[str], alias: str = "") -> str:
    """An aggregate: the group's legacy digest as text (the exact sum, in decimal)."""
    return engine.text_of(f"CAST(coalesce(sum({row_sql(engine, columns, alias)}), 0) AS {engine.wide_int})")

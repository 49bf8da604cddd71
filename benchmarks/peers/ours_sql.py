""""Ours": which rows differ between two versions of a partitioned table, fingerprints first.

Used by benchmarks/diff_peers.py until the product exposes its own function (the benchmark will
then switch to it). Plain DuckDB SQL, no import from backfill_assets.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

import duckdb

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def q(name: str) -> str:
    """A plain identifier, double-quoted (anything else is refused, never interpolated)."""
    if not _PLAIN.match(name):
        raise ValueError(f"not a plain SQL identifier: {name!r}")
    return f'"{name}"'


def row_text_sql(columns: Sequence[str], alias: str, form: str = "length_prefixed") -> str:
    """The canonical text of a row.

    * ``length_prefixed`` (default): per column ``<length>:<text>``, or ``~`` for NULL, joined
      with ``||``. This is exactly ``Engine.row_text_sql`` of backfill_assets.warehouse without
      types (the text of the product's legacy md5-sum fingerprint; its stored fingerprints are now
      sha256 over sorted row digests, which a diff does not need: it only looks for partitions
      that differ, and a sum finds them in one cheap pass). Fields cannot
      run into each other, so two different rows never share a text.
    * ``concat_ws``: ``concat_ws(chr(31), coalesce(c::VARCHAR, chr(0)), ...)``. About a third
      cheaper to build, but ambiguous for texts that contain chr(31) or chr(0).

    The text of a value is DuckDB's cast to VARCHAR (DATE -> 2026-01-05, DECIMAL(18,2) -> 1.50).
    """
    cols = [f"{alias}.{q(c)}" for c in columns]
    if form == "length_prefixed":
        return " || ".join(
            f"coalesce(CAST(length(CAST({c} AS VARCHAR)) AS VARCHAR) || ':' || CAST({c} AS VARCHAR), '~')"
            for c in cols)
    if form == "concat_ws":
        fields = ", ".join(f"coalesce(CAST({c} AS VARCHAR), chr(0))" for c in cols)
        return f"concat_ws(chr(31), {fields})"
    raise ValueError(f"unknown row text form {form!r}")


def row_fingerprint_sql(columns: Sequence[str], alias: str, form: str = "length_prefixed") -> str:
    """First 8 bytes of md5(row text) as an unsigned big-endian integer, as HUGEINT.

    ``form`` is the row text (`row_text_sql`), or ``duckdb_hash`` for DuckDB's own 64-bit
    ``hash(c1, c2, ...)`` instead of md5: about 50x cheaper, but undocumented and free to change
    between DuckDB versions, so not the product's definition (kept to show what the md5 costs).

    Measured on DuckDB 2.0.1 as the fastest exact form: the hex digest's first 16 hex digits cast
    from a '0x...' literal. `md5_number_upper` is NOT the same number: it reads those 8 bytes
    little-endian (md5('abc') = 900150983cd24fb0..., md5_number_upper('abc') = 0xb04fd23c98500190),
    and byte-swapping it back with shifts and masks is slower than the hex cast.
    """
    if form == "duckdb_hash":
        return f"CAST(hash({', '.join(f'{alias}.{q(c)}' for c in columns)}) AS HUGEINT)"
    return f"CAST(CAST('0x' || left(md5({row_text_sql(columns, alias, form)}), 16) AS UBIGINT) AS HUGEINT)"


def _partition_filter(column: str, partitions: Sequence[Any]) -> tuple[str, list[Any]]:
    """`column IN (?, ...)`, plus `OR column IS NULL` when the NULL partition is among them."""
    values = [p for p in partitions if p is not None]
    parts = []
    if values:
        parts.append(f"{column} IN ({', '.join('?' for _ in values)})")
    if len(values) < len(partitions):
        parts.append(f"{column} IS NULL")
    return "(" + " OR ".join(parts) + ")", values


def changed_partitions(con: duckdb.DuckDBPyConnection, a_table: str, b_table: str,
                       partition_column: str, columns: Sequence[str],
                       row_text: str = "length_prefixed") -> list[Any]:
    """Step (a): partitions whose fingerprint (row count, sum of row fingerprints) differs.

    One statement; each side is scanned once and grouped by partition. A NULL partition is a
    partition like any other.
    """
    p = q(partition_column)
    fp = row_fingerprint_sql(columns, "t", row_text)
    side = "SELECT t.{p} AS p, count(*) AS n, sum({fp}) AS s FROM {table} AS t GROUP BY 1"
    sql = (f"WITH fa AS ({side.format(p=p, fp=fp, table=q(a_table))}), "
           f"fb AS ({side.format(p=p, fp=fp, table=q(b_table))}) "
           "SELECT coalesce(fa.p, fb.p) FROM fa FULL JOIN fb ON fa.p IS NOT DISTINCT FROM fb.p "
           "WHERE fa.n IS DISTINCT FROM fb.n OR fa.s IS DISTINCT FROM fb.s ORDER BY 1")
    return [row[0] for row in con.execute(sql).fetchall()]


def classify(con: duckdb.DuckDBPyConnection, a_table: str, b_table: str, keys: Sequence[str],
             partition_column: str, value_columns: Sequence[str],
             partitions: Sequence[Any] | None) -> dict[Any, tuple[int, int, int]]:
    """Step (b): FULL JOIN on the keys (NULL-safe), restricted to `partitions` (None: all).

    A key only in B is added, only in A removed; in both with any value column IS DISTINCT FROM
    the other side, changed. Keys are assumed unique per side (the product gates duplicates).
    """
    if partitions is not None and not partitions:
        return {}
    p = q(partition_column)
    where, params = ("", [])
    if partitions is not None:
        cond, values = _partition_filter(p, partitions)
        where, params = f" WHERE {cond}", values + values
    cols = list(dict.fromkeys([*keys, partition_column, *value_columns]))
    select = ", ".join(q(c) for c in cols)
    on = " AND ".join(f"a.{q(k)} IS NOT DISTINCT FROM b.{q(k)}" for k in keys)
    differs = " OR ".join(f"a.{q(v)} IS DISTINCT FROM b.{q(v)}" for v in value_columns) or "false"
    sql = (f"SELECT coalesce(b.{p}, a.{p}) AS part, "
           "count(*) FILTER (WHERE a._in IS NULL) AS added, "
           "count(*) FILTER (WHERE b._in IS NULL) AS removed, "
           f"count(*) FILTER (WHERE a._in AND b._in AND ({differs})) AS changed "
           f"FROM (SELECT {select}, true AS _in FROM {q(a_table)}{where}) AS a "
           f"FULL JOIN (SELECT {select}, true AS _in FROM {q(b_table)}{where}) AS b ON {on} "
           "GROUP BY 1 HAVING added + removed + changed > 0 ORDER BY 1")
    return {part: (int(added), int(removed), int(changed))
            for part, added, removed, changed in con.execute(sql, params).fetchall()}


def ours(con: duckdb.DuckDBPyConnection, a_table: str, b_table: str, keys: Sequence[str],
         partition_column: str, value_columns: Sequence[str], *, row_text: str = "length_prefixed",
         timings: dict[str, float] | None = None) -> dict[Any, tuple[int, int, int]]:
    """Which rows differ between versions A and B of a partitioned table, per partition.

    Returns {partition value: (added, removed, changed)} for every partition with a difference
    (partitions that are equal are absent). `keys` is the business key (unique per side; NULLs
    allowed and matched NULL-safely); `partition_column` is normally one of the keys; the row is
    `keys` + `partition_column` + `value_columns`.

    (a) One pass over each side computes an order-independent fingerprint per partition:
        ``count(*)`` and ``sum`` (HUGEINT, exact) of each row's fingerprint, the first 8 bytes of
        md5 of the row's canonical text read as an unsigned big-endian integer (see
        `row_fingerprint_sql`). A sum, unlike XOR, does not cancel a duplicated pair of rows; a
        change goes unseen only if the 64-bit sums collide.
    (b) Only over the partitions whose fingerprints differ: a FULL JOIN on the keys, classifying
        each key as added (only in B), removed (only in A) or changed (in both, some value
        column IS DISTINCT FROM). The partition filter is a list of constants, so DuckDB skips
        the row groups of other partitions by their min/max.

    `row_text` picks the canonical text (`row_text_sql`; ``duckdb_hash``: see
    `row_fingerprint_sql`); `timings`, if given, receives the
    seconds of each step ("fingerprints", "join") and the number of partitions joined.
    """
    columns = list(dict.fromkeys([*keys, partition_column, *value_columns]))
    started = time.perf_counter()
    partitions = changed_partitions(con, a_table, b_table, partition_column, columns, row_text)
    fingerprinted = time.perf_counter()
    result = classify(con, a_table, b_table, keys, partition_column, value_columns, partitions)
    if timings is not None:
        timings["fingerprints"] = fingerprinted - started
        timings["join"] = time.perf_counter() - fingerprinted
        timings["partitions_joined"] = len(partitions)
    return result

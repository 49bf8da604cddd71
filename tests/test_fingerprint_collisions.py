"""Invariant 2, attacked: a fingerprint must be collision-resistant, so no one can find other rows
with the same one (issue 21: a sum of md5s let forged rows pass publish and rollback).

The attack is Wagner's k-tree algorithm, the generalized birthday search: if a partition's digest
is the sum of its rows' digests, find 16 rows X and 16 other rows Y with sum(X) = sum(Y), and
swapping Y for X leaves the fingerprint unchanged. With 32 lists of 2^12 candidate rows, each
level of the tree pairs entries whose sum cancels 12 more low bits and the last level demands an
exact zero, so the whole full-width (64-bit, exact-sum) legacy function falls to ~131,000 row
digests and a few dict look-ups, no reduced setting needed. The same search, with the same budget,
against the fingerprint the product computes now finds nothing: the sorted list of row digests is
hashed, not added, so one-row digests say nothing about the digest of their union.

Row digests come from the product's own fingerprint SQL, one row per group, in DuckDB (the
definition is the same on both engines, tests/test_fingerprints.py pins it).
"""

from __future__ import annotations

import datetime as dt

from backfill_assets.partitions import PartitionScheme
from backfill_assets.warehouse import engine_for
from backfill_assets.warehouse import legacy_fingerprints as legacy
from backfill_assets.warehouse.fingerprints import (
    LEGACY_EMPTY,
    column_types,
    digest_sql,
    fingerprints,
    fingerprints_like,
)

LEVELS, BITS = 5, 12              # 2^5 = 32 lists of 2^12 rows: 16 rows forged for 16 rows
CANDIDATES = (2 ** LEVELS) * (2 ** BITS)
COLUMNS = ["day", "region", "net"]
DAY = "2026-01-01"
SCHEME = PartitionScheme("equality", lambda k: (dt.date.fromisoformat(k), None), (DAY,), "forge")


def as_number(digest: str) -> int:
    """What an attacker adds up: the digest as an integer (decimal, or hex after its prefix)."""
    return int(digest.split(":", 1)[1], 16) if ":" in digest else int(digest)


def k_tree(values: list[int], levels: int = LEVELS, bits: int = BITS) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Index sets (plus, minus) with sum(values[plus]) == sum(values[minus]) exactly.

    Lists alternate in sign; level j pairs entries of two lists whose sum is 0 modulo 2^(j*bits)
    (a dict look-up per entry), the last level pairs exact opposites. Each merge keeps about
    2^bits entries, so the work is linear in the number of candidates.
    """
    size = len(values) >> levels
    lists = [[((1 if i % 2 == 0 else -1) * values[j], (j,)) for j in range(i * size, (i + 1) * size)]
             for i in range(2 ** levels)]
    for level in range(1, levels + 1):
        final, mask = level == levels, (1 << (level * bits)) - 1
        merged = []
        for left, right in zip(lists[0::2], lists[1::2], strict=True):
            wanted: dict[int, list] = {}
            for value, ids in right:
                wanted.setdefault(-value if final else -value & mask, []).append((value, ids))
            merged.append([(v + w, ids + other) for v, ids in left
                           for w, other in wanted.get(v if final else v & mask, ())])
        lists = merged
    # list i held the i-th id of every tuple: even lists were added, odd ones subtracted
    return [(ids[0::2], ids[1::2]) for _, ids in lists[0]]


def candidate_digests(session, aggregate: str) -> list[str]:
    """Each candidate row's digest as a one-row partition, by the given fingerprint SQL."""
    return [d for _, d in session.rows(f"SELECT t.id, {aggregate} FROM forge AS t GROUP BY t.id ORDER BY t.id")]


def partitions_of(session, plus: tuple[int, ...], minus: tuple[int, ...]) -> None:
    """The original partition holds the rows `minus`, the forged one the rows `plus`."""
    for table, ids in (("original", minus), ("forged", plus)):
        session.execute(f"DROP TABLE IF EXISTS {table}")
        session.execute(f"CREATE TABLE {table} AS SELECT day, region, net FROM forge WHERE id IN "
                        f"({', '.join('?' for _ in ids)})", list(ids))


def test_a_k_tree_search_forges_the_legacy_sum_and_finds_nothing_against_the_fingerprint(tmp_path):
    engine = engine_for(f"duckdb:///{tmp_path / 'forge.duckdb'}")
    with engine.session() as session:
        # plausible rows of one day: a region and a net revenue each, all distinct
        session.execute(f"CREATE TABLE forge AS SELECT CAST(i AS BIGINT) AS id, DATE '{DAY}' AS day, "
                        "CASE i % 5 WHEN 0 THEN 'north' WHEN 1 THEN 'south' WHEN 2 THEN 'east' WHEN 3 THEN 'west' "
                        "ELSE 'central' END AS region, CAST((100000 + i) / 100.0 AS DECIMAL(18,2)) AS net "
                        f"FROM range({CANDIDATES}) AS r(i)")
        types = column_types(session, "forge", COLUMNS)
        old = candidate_digests(session, legacy.digest_sql(engine, COLUMNS, "t"))
        new = candidate_digests(session, digest_sql(session, COLUMNS, types, "t"))

        # (a) the legacy md5 sum: collisions, 16 rows for 16, each a real pair of partitions
        found = k_tree([as_number(d) for d in old])
        assert found, "the k-tree search should break a sum of 64-bit row hashes"
        plus, minus = found[0]
        assert not set(plus) & set(minus)
        partitions_of(session, plus, minus)
        like_legacy = {DAY: LEGACY_EMPTY}  # computed as if compared with a record the legacy algorithm made
        original = fingerprints_like(session, "original", COLUMNS, SCHEME, "day", like_legacy)[DAY]
        forged = fingerprints_like(session, "forged", COLUMNS, SCHEME, "day", like_legacy)[DAY]
        assert forged == original and original.rows == 16  # different rows, one legacy fingerprint
        totals = [session.scalar(f"SELECT sum(net) FROM {t}") for t in ("original", "forged")]
        assert totals[0] != totals[1]  # and different revenue

        # (b) the same search, the same budget, against the fingerprint the product computes now
        assert k_tree([as_number(d) for d in new]) == []
        # and the legacy collision is no collision of it
        now = [fingerprints(session, t, COLUMNS, SCHEME, "day", [DAY])[DAY] for t in ("original", "forged")]
        assert now[0] != now[1] and now[0].rows == now[1].rows == 16


def test_the_fingerprint_of_two_rows_is_no_sum_or_xor_of_theirs_at_any_width(tmp_path):
    """What any additive or XOR multiset hash would show, however wide (a k-tree search breaks all
    of them with more lists): the digest of {A, B} is not derived from those of {A} and {B}."""
    engine = engine_for(f"duckdb:///{tmp_path / 'forge.duckdb'}")
    with engine.session() as session:
        session.execute(f"CREATE TABLE forge AS SELECT CAST(i AS BIGINT) AS id, "
                        f"DATE '{DAY}' AS day, 'north' AS region, CAST(i AS DECIMAL(18,2)) AS net "
                        "FROM range(2) AS r(i)")
        digest = digest_sql(session, COLUMNS, column_types(session, "forge", COLUMNS), "t")
        a, b = (as_number(d) for (d,) in session.rows(f"SELECT {digest} FROM forge AS t GROUP BY t.id ORDER BY t.id"))
        both = as_number(session.scalar(f"SELECT {digest} FROM forge AS t"))
    derived = {a + b, a ^ b} | {(a + b) % (1 << width) for width in (64, 128, 256)}
    assert both not in derived

"""Fingerprints are a function we define, pinned here: an engine upgrade that changes them fails
loudly instead of silently voiding every stored fingerprint (snapshots, proofs, publish checks)."""

from __future__ import annotations

import datetime as dt
import hashlib

from backfill_assets.partitions import PartitionScheme
from backfill_assets.warehouse.fingerprints import Fingerprint, fingerprints

COLUMNS = ["day", "name", "amount", "n", "seen"]
ROWS = [
    ("2026-01-01", "alice", "12.50", 3, "2026-01-01 10:00:00"),
    ("2026-01-01", None, "0.00", None, None),
    ("2026-01-01", "b\u00e9", "-7.25", 9007199254740993, "2026-01-01 23:59:59.123456"),
    ("2026-01-02", "x:1", "1.00", 0, "2026-01-02 00:00:00"),
    ("2026-01-02", "x:1", "1.00", 0, "2026-01-02 00:00:00"),  # a duplicated pair must not cancel
]
KEYS = ["2026-01-01", "2026-01-02", "2026-01-03"]
# Pinned on DuckDB 2.0.1 and PostgreSQL 15: the same values on both engines.
GOLDEN = {
    "2026-01-01": Fingerprint(3, "31044632207147824978"),
    "2026-01-02": Fingerprint(2, "21075681843510153552"),
    "2026-01-03": Fingerprint(0, "0"),
}
SCHEME = PartitionScheme("equality", lambda k: (dt.date.fromisoformat(k), None), tuple(KEYS), "golden")


def by_definition(rows) -> int:
    """The documented definition, computed in Python: sum of the first 8 bytes of md5 of each row's
    length-prefixed text, NULL as '~'."""
    total = 0
    for row in rows:
        text = "".join("~" if v is None else f"{len(str(v))}:{v}" for v in row)
        total += int(hashlib.md5(text.encode("utf-8")).hexdigest()[:16], 16)
    return total



def test_fingerprints_are_pinned_and_equal_on_every_engine(engine):
    with engine.session() as session:
        session.execute("CREATE TABLE golden (day DATE, name VARCHAR, amount DECIMAL(18,2), n BIGINT, seen TIMESTAMP)")
        for row in ROWS:
            session.execute("INSERT INTO golden VALUES (CAST(? AS DATE), ?, CAST(? AS DECIMAL(18,2)), ?, "
                            "CAST(? AS TIMESTAMP))", list(row))
        found = fingerprints(session, "golden", COLUMNS, SCHEME, "day", KEYS)
    assert found == GOLDEN


def test_the_pinned_values_are_the_documented_definition():
    for key in KEYS:
        rows = [r for r in ROWS if r[0] == key]
        assert GOLDEN[key] == Fingerprint(len(rows), str(by_definition(rows)))
    one = by_definition(ROWS[3:4])
    assert int(GOLDEN["2026-01-02"].digest) == 2 * one  # a sum: a duplicated row counts twice

"""The append-only evidence log: every row carries the hash of the row before it.

Editing, deleting or reordering any row breaks the chain from that row on, and `verify` names the
first row that no longer verifies.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import duckdb

from backfill_assets.control.schema import SCHEMA
from backfill_assets.errors import EvidenceChainBroken

GENESIS = "0" * 64


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _row_hash(prev_hash: str, seq: int, at: str, plan_id: str | None, kind: str, actor: str,
              payload: str) -> str:
    material = json.dumps([prev_hash, seq, at, plan_id, kind, actor, payload],
                          separators=(",", ":"))
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class EvidenceRow:
    seq: int
    at: str
    plan_id: str | None
    kind: str
    actor: str
    payload: dict[str, Any]


def append(con: duckdb.DuckDBPyConnection, *, plan_id: str | None, kind: str, actor: str,
           payload: dict[str, Any]) -> EvidenceRow:
    """Append one row. Call inside the transaction that makes the change it records."""
    last = con.execute(
        f"SELECT seq, row_hash FROM {SCHEMA}.evidence ORDER BY seq DESC LIMIT 1"
    ).fetchone()
    seq, prev = (last[0] + 1, last[1]) if last else (1, GENESIS)
    at = now_iso()
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    row_hash = _row_hash(prev, seq, at, plan_id, kind, actor, text)
    con.execute(
        f"INSERT INTO {SCHEMA}.evidence VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [seq, at, plan_id, kind, actor, text, prev, row_hash],
    )
    return EvidenceRow(seq, at, plan_id, kind, actor, json.loads(text))


def rows(con: duckdb.DuckDBPyConnection, plan_id: str | None = None,
         kind: str | None = None) -> list[EvidenceRow]:
    query = f"SELECT seq, recorded_at, plan_id, kind, actor, payload FROM {SCHEMA}.evidence WHERE 1=1"
    params: list[Any] = []
    if plan_id is not None:
        query += " AND plan_id = ?"
        params.append(plan_id)
    if kind is not None:
        query += " AND kind = ?"
        params.append(kind)
    result = con.execute(query + " ORDER BY seq", params).fetchall()
    return [EvidenceRow(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])) for r in result]


def head(con: duckdb.DuckDBPyConnection) -> tuple[int, str]:
    """The last row's number and hash: what a rendered evidence file pins."""
    row = con.execute(f"SELECT seq, row_hash FROM {SCHEMA}.evidence ORDER BY seq DESC LIMIT 1"
                      ).fetchone()
    return (row[0], row[1]) if row else (0, GENESIS)


def verify(con: duckdb.DuckDBPyConnection, pinned: tuple[int, str] | None = None) -> int:
    """Check the whole chain; return the number of rows, or raise naming the first broken row.

    A chain alone cannot reveal rows cut off its end; `pinned` (a head recorded earlier, e.g. in
    a rendered evidence file) must still be in the chain, unchanged.
    """
    prev = GENESIS
    expected_seq = 1
    count = 0
    cursor = con.execute(
        f"SELECT seq, recorded_at, plan_id, kind, actor, payload, prev_hash, row_hash "
        f"FROM {SCHEMA}.evidence ORDER BY seq"
    )
    while batch := cursor.fetchmany(1000):
        for seq, at, plan_id, kind, actor, payload, prev_hash, row_hash in batch:
            if seq != expected_seq:
                raise EvidenceChainBroken(expected_seq, f"row {expected_seq} is missing")
            if prev_hash != prev:
                raise EvidenceChainBroken(seq, "its link to the previous row was changed")
            if _row_hash(prev, seq, at, plan_id, kind, actor, payload) != row_hash:
                raise EvidenceChainBroken(seq, "its content was changed after it was written")
            prev = row_hash
            expected_seq += 1
            count += 1
    if pinned is not None and pinned[0] > 0:
        found = con.execute(f"SELECT row_hash FROM {SCHEMA}.evidence WHERE seq = ?",
                            [pinned[0]]).fetchone()
        if found is None or found[0] != pinned[1]:
            raise EvidenceChainBroken(pinned[0], "the rendered evidence pinned it, but it is "
                                                 "missing or different now (rows were cut off)")
    return count

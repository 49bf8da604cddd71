"""The evidence log's table: rows of the keyed hash chain, as stored.

`control/evidence_log.py` computes and checks the keyed hashes; here they are stored and read.
Each row is (seq, recorded_at, plan_id, kind, actor, payload, prev_hash, row_hash).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.state_store import SCHEMA, rows_in

COLUMNS = ("seq", "recorded_at", "plan_id", "kind", "actor", "payload", "prev_hash", "row_hash")
_ROW = ", ".join(COLUMNS)


def max_seq(session: Session) -> int:
    return int(session.scalar(f"SELECT max(seq) FROM {SCHEMA}.evidence") or 0)


def insert(session: Session, seq: int, at: str, plan_id: str | None, kind: str, actor: str, payload: str,
           prev_hash: str, row_hash: str) -> None:
    session.execute(f"INSERT INTO {SCHEMA}.evidence VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [seq, at, plan_id, kind, actor, payload, prev_hash, row_hash])


def rows(session: Session, plan_id: str | None = None,
         kind: str | Sequence[str] | None = None, after: int = 0) -> list[tuple[Any, ...]]:
    """Every row (of one plan, of one kind or of several; numbered above `after`), in chain order."""
    query = f"SELECT {_ROW} FROM {SCHEMA}.evidence WHERE seq > ?"
    params: list[Any] = [after]
    if plan_id is not None:
        query += " AND plan_id = ?"
        params.append(plan_id)
    kinds = [kind] if isinstance(kind, str) else list(kind or ())
    if kinds:
        query += f" AND kind IN ({', '.join('?' for _ in kinds)})"
        params += kinds
    return session.rows(query + " ORDER BY seq", params)


def rows_by_seq(session: Session, seqs: Sequence[int]) -> list[tuple[Any, ...]]:
    """The rows of these numbers that exist."""
    return rows_in(session, f"SELECT {_ROW} FROM {SCHEMA}.evidence WHERE", "seq", seqs, chunk=1000)


def rows_after(session: Session, seq: int, limit: int) -> list[tuple[Any, ...]]:
    """Up to `limit` rows numbered above `seq`, in chain order."""
    return session.rows(f"SELECT {_ROW} FROM {SCHEMA}.evidence WHERE seq > ? ORDER BY seq LIMIT {int(limit)}",
                        [seq])


def latest_of_plans(session: Session, kinds: Sequence[str], plan_ids: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    """The rows of `kinds` of these plans, each plan's newest first."""
    marks = ", ".join("?" for _ in kinds)
    for i in range(0, len(plan_ids), 500):
        part = list(plan_ids[i:i + 500])
        yield from session.rows(
            f"SELECT {_ROW} FROM {SCHEMA}.evidence WHERE kind IN ({marks}) "
            f"AND plan_id IN ({', '.join('?' for _ in part)}) ORDER BY plan_id, seq DESC", [*kinds, *part])


def index_rows(session: Session, plan_kinds: Sequence[str], chain_kinds: Sequence[str],
               seqs: Sequence[int] = ()) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """What the chain index digests (`evidence_log.index_of`), and the rows a decision checks it
    by, in one statement (one snapshot; each statement costs ~1 ms, and every decision asks):
    ("plan", plan_id, last seq, rows) of each plan's rows of `plan_kinds`; (kind, None, last seq,
    rows) of each of `chain_kinds`; ("top", None, the last row's number, rows). Then the rows
    themselves (as `COLUMNS`) of the last row and of the numbers `seqs`, those that exist.
    One scan grouped by kind and plan, summed here: a third of the three scans' cost (1.0 against
    3.1 ms at 40 rows, the planning of their union most of it), and the suite's costliest statement."""
    blank = ", NULL, NULL, NULL, NULL, NULL"
    wanted = f" OR seq IN ({', '.join('?' for _ in seqs)})" if seqs else ""
    found = session.rows(
        f"SELECT 'g', kind, plan_id, max(seq), count(*){blank} FROM {SCHEMA}.evidence GROUP BY kind, plan_id "
        f"UNION ALL SELECT 'r', kind, plan_id, seq, 0, recorded_at, actor, payload, prev_hash, row_hash "
        f"FROM {SCHEMA}.evidence WHERE seq = (SELECT max(seq) FROM {SCHEMA}.evidence){wanted}", list(seqs))
    plans, chain = set(plan_kinds), set(chain_kinds)
    summed: dict[tuple[str, str | None], tuple[int, int]] = {}

    def add(label: str, plan_id: str | None, last: int, n: int) -> None:
        before = summed.get((label, plan_id))
        summed[(label, plan_id)] = (last, n) if before is None else (max(before[0], last), before[1] + n)

    for tag, kind, plan_id, last, n, *_ in found:
        if tag != "g":
            continue
        add("top", None, last, n)
        if kind in plans and plan_id is not None:
            add("plan", plan_id, last, n)
        if kind in chain:
            add(kind, None, last, n)
    summed.setdefault(("top", None), (0, 0))  # an empty chain
    index = [(label, plan_id, last, n) for (label, plan_id), (last, n) in summed.items()]
    rows = [(r[3], r[5], r[2], r[1], r[6], r[7], r[8], r[9]) for r in found if r[0] == "r"]
    return index, rows


def plan_ids_of_kinds(session: Session, kinds: Sequence[str]) -> set[str]:
    """Every plan some row of `kinds` records."""
    return {str(p) for (p,) in session.rows(
        f"SELECT DISTINCT plan_id FROM {SCHEMA}.evidence WHERE kind IN ({', '.join('?' for _ in kinds)}) "
        "AND plan_id IS NOT NULL", list(kinds))}


def last_seq_of_kind(session: Session, kind: str) -> int:
    """The number of the last row of `kind` (0: none)."""
    return int(session.scalar(f"SELECT coalesce(max(seq), 0) FROM {SCHEMA}.evidence WHERE kind = ?", [kind]))


def hash_at(session: Session, seq: int) -> str | None:
    """The keyed hash of row `seq` (None when there is no such row)."""
    row_hash: str | None = session.scalar(f"SELECT row_hash FROM {SCHEMA}.evidence WHERE seq = ?", [seq])
    return row_hash


def head(session: Session) -> tuple[int, str] | None:
    """The last row's number and hash (`seq` is the key: DuckDB finds the highest number from its
    statistics and the row by its index, ~2x faster than a sort for its top row at 20,000 rows)."""
    row = session.one(f"SELECT seq, row_hash FROM {SCHEMA}.evidence "
                      f"WHERE seq = (SELECT max(seq) FROM {SCHEMA}.evidence)")
    return (int(row[0]), str(row[1])) if row else None


def count(session: Session, up_to: int | None = None) -> int:
    """Rows (numbered up to `up_to`: rows appended since by others are not counted)."""
    if up_to is None:
        return int(session.scalar(f"SELECT count(*) FROM {SCHEMA}.evidence") or 0)
    return int(session.scalar(f"SELECT count(*) FROM {SCHEMA}.evidence WHERE seq <= ?", [up_to]) or 0)


def count_and_top(session: Session) -> tuple[int, int]:
    """How many rows there are and the highest number."""
    found = session.one(f"SELECT count(*), coalesce(max(seq), 0) FROM {SCHEMA}.evidence") or (0, 0)
    return int(found[0]), int(found[1])


def first_broken_link(session: Session, genesis: str) -> int | None:
    """The first row whose link to the row before it (`genesis` before the first) does not hold:
    one pass in the engine, without the key."""
    found = session.scalar(
        f"SELECT min(e.seq) FROM {SCHEMA}.evidence e LEFT JOIN {SCHEMA}.evidence p ON p.seq = e.seq - 1 "
        f"WHERE (e.seq = 1 AND e.prev_hash <> ?) OR (e.seq > 1 AND (p.seq IS NULL OR p.row_hash <> e.prev_hash))",
        [genesis])
    return None if found is None else int(found)

"""The append-only evidence log: a keyed hash chain, with its heads kept outside the warehouse.

Each row's hash is HMAC-SHA256, under a key kept outside the warehouse (BACKFILL_HOME/keys/
evidence.key, mode 0600), of the row and the hash of the row before it. Someone who can write the
warehouse but not read the key cannot edit a row and recompute the chain. After each commit the
new head is appended to a head log beside the key, so rows cut off the chain's end, or a chain
emptied altogether, are detected too.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backfill_assets.control.schema import SCHEMA
from backfill_assets.errors import EvidenceChainBroken, WarehouseError
from backfill_assets.home import Home
from backfill_assets.warehouse.engine import Session

GENESIS = "0" * 64
KEY_BYTES = 32


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


# --- the key ------------------------------------------------------------------------------------

def create_key(home: Home) -> Path:
    """Create the evidence key once (`backfill init`, or the chain's first row); mode 0600."""
    path = home.evidence_key
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path  # another process created it first
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_hex(KEY_BYTES) + "\n")
    return path


def read_key(home: Home) -> bytes:
    path = home.evidence_key
    try:
        text = path.read_text(encoding="ascii").strip()
        key = bytes.fromhex(text)
    except FileNotFoundError:
        raise WarehouseError(f"the evidence key {path} is missing",
                             fix="restore it from backup (the chain cannot be verified or "
                                 "extended without it), or point BACKFILL_EVIDENCE_KEY_FILE at it") from None
    except (OSError, ValueError, UnicodeDecodeError):
        raise WarehouseError(f"the evidence key {path} is unreadable",
                             fix="restore it from backup") from None
    if len(key) < 16:
        raise WarehouseError(f"the evidence key {path} is too short", fix="restore it from backup")
    return key


def _key_for(session: Session, *, chain_empty: bool) -> bytes:
    if session.home is None:
        raise WarehouseError("no BACKFILL_HOME for the evidence key",
                             fix="open the warehouse through open_warehouse()")
    if chain_empty:
        create_key(session.home)
    return read_key(session.home)


def _row_hash(key: bytes, prev_hash: str, seq: int, at: str, plan_id: str | None, kind: str,
              actor: str, payload: str) -> str:
    material = json.dumps([prev_hash, seq, at, plan_id, kind, actor, payload], separators=(",", ":"))
    return hmac.new(key, material.encode("utf-8"), hashlib.sha256).hexdigest()


# --- the head log -------------------------------------------------------------------------------

def _append_head(home: Home, seq: int, row_hash: str) -> None:
    path = home.evidence_heads
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # one short line with O_APPEND: concurrent writers never interleave within a line
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, f"{seq} {row_hash}\n".encode("ascii"))
    finally:
        os.close(fd)


def recorded_head(home: Home) -> tuple[int, str] | None:
    """The highest head ever recorded in the head log, or None when there is none."""
    try:
        lines = home.evidence_heads.read_text(encoding="ascii").splitlines()
    except FileNotFoundError:
        return None
    best: tuple[int, str] | None = None
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and (best is None or int(parts[0]) > best[0]):
            best = (int(parts[0]), parts[1])
    return best


# --- rows ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class EvidenceRow:
    seq: int
    at: str
    plan_id: str | None
    kind: str
    actor: str
    payload: dict[str, Any]


def append(session: Session, *, plan_id: str | None, kind: str, actor: str,
           payload: dict[str, Any]) -> EvidenceRow:
    """Append one row inside the caller's transaction; its head is logged after the commit."""
    if not session.in_transaction:
        with session.transaction():
            return append(session, plan_id=plan_id, kind=kind, actor=actor, payload=payload)
    session.lock("backfill_control.evidence")  # one chain: appends take turns on server engines
    last = session.one(f"SELECT seq, row_hash FROM {SCHEMA}.evidence ORDER BY seq DESC LIMIT 1")
    seq, prev = (int(last[0]) + 1, str(last[1])) if last else (1, GENESIS)
    key = _key_for(session, chain_empty=last is None)
    at = now_iso()
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    row_hash = _row_hash(key, prev, seq, at, plan_id, kind, actor, text)
    session.execute(f"INSERT INTO {SCHEMA}.evidence VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [seq, at, plan_id, kind, actor, text, prev, row_hash])
    home = session.home
    assert home is not None
    session.after_commit(lambda: _append_head(home, seq, row_hash))
    return EvidenceRow(seq, at, plan_id, kind, actor, json.loads(text))


def rows(session: Session, plan_id: str | None = None, kind: str | None = None) -> list[EvidenceRow]:
    query = f"SELECT seq, recorded_at, plan_id, kind, actor, payload FROM {SCHEMA}.evidence WHERE 1=1"
    params: list[Any] = []
    if plan_id is not None:
        query += " AND plan_id = ?"
        params.append(plan_id)
    if kind is not None:
        query += " AND kind = ?"
        params.append(kind)
    return [EvidenceRow(int(r[0]), r[1], r[2], r[3], r[4], json.loads(r[5]))
            for r in session.rows(query + " ORDER BY seq", params)]


def head(session: Session) -> tuple[int, str]:
    """The last row's number and hash: what a rendered evidence file pins."""
    row = session.one(f"SELECT seq, row_hash FROM {SCHEMA}.evidence ORDER BY seq DESC LIMIT 1")
    return (int(row[0]), str(row[1])) if row else (0, GENESIS)


def verify(session: Session, pinned: tuple[int, str] | None = None) -> int:
    """Check the keyed chain and the recorded heads; return the number of rows.

    Raises naming the first row that was edited, deleted, re-linked or cut off.
    """
    home = session.home
    assert home is not None
    recorded = recorded_head(home)
    count = int(session.scalar(f"SELECT count(*) FROM {SCHEMA}.evidence") or 0)
    if count == 0:
        if recorded is not None:
            raise EvidenceChainBroken(recorded[0], "the chain is empty, but the head log "
                                      f"{home.evidence_heads} recorded rows up to it")
        return 0
    key = read_key(home)
    prev, expected_seq = GENESIS, 1
    last_seq, chunk = 0, 5000
    while True:
        batch = session.rows(
            f"SELECT seq, recorded_at, plan_id, kind, actor, payload, prev_hash, row_hash "
            f"FROM {SCHEMA}.evidence WHERE seq > ? ORDER BY seq LIMIT {chunk}", [last_seq])
        for seq, at, plan_id, kind, actor, payload, prev_hash, row_hash in batch:
            if seq != expected_seq:
                raise EvidenceChainBroken(expected_seq, f"row {expected_seq} is missing")
            if prev_hash != prev:
                raise EvidenceChainBroken(seq, "its link to the previous row was changed")
            if not hmac.compare_digest(
                    _row_hash(key, prev, seq, at, plan_id, kind, actor, payload), row_hash):
                raise EvidenceChainBroken(seq, "its content was changed after it was written")
            prev, expected_seq, last_seq = row_hash, expected_seq + 1, seq
        if len(batch) < chunk:
            break
    for what, mark in (("the head log", recorded), ("the rendered evidence", pinned)):
        if mark is None or mark[0] == 0:
            continue
        found = session.scalar(f"SELECT row_hash FROM {SCHEMA}.evidence WHERE seq = ?", [mark[0]])
        if found != mark[1]:
            raise EvidenceChainBroken(mark[0], f"{what} recorded it, but it is missing or different "
                                               f"now (rows were cut off the chain's end)")
    return last_seq

"""The append-only evidence log: a keyed hash chain, with its heads kept outside the warehouse.

Each row's hash is HMAC-SHA256, under a key kept outside the warehouse (BACKFILL_HOME/keys/
evidence.key, mode 0600), of the row and the hash of the row before it. Someone who can write the
warehouse but not read the key cannot edit a row and recompute the chain. After each commit the
new head is appended to a head log beside the key, so rows cut off the chain's end, or a chain
emptied altogether, are detected too. The chain records its key's id: a process given another key
(a wrong BACKFILL_EVIDENCE_KEY_FILE) is refused before it appends, instead of breaking the chain.

Decisions read rows through `verified`: each row read is checked against its keyed hash, so a row
forged by someone who can write the warehouse is refused, never obeyed (`ForgedRecord`).

Decisions also find rows by columns no key covers until a row is read: a plan's last state row
(`kind`, `plan_id`), the trust root's pins. Relabelling a row's `kind` hid it from them: the trust
root rolled back past a signed re-pin, a cancelled plan ran again (found by an attack). So each row
also carries the chain's index (`index` in its payload): the digest of, per plan, the number of its
last state row and how many it has, and the same for the pins and upgrades. Each append checks the
table still digests to the last row's index before extending it; each decision that finds rows that
way checks it against the last row, which its keyed hash and the head log vouch for (`check_index`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backfill_assets import faults
from backfill_assets.bounded import NotRegularFile, open_regular, read_regular
from backfill_assets.errors import EvidenceChainBroken, ForgedRecord, UsageError, WarehouseError
from backfill_assets.home import Home
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.state_store import evidence as store
from backfill_assets.warehouse.state_store import schema as meta_store

GENESIS = "0" * 64
# rows a decision finds by their kind: each plan's state (record.py), the trust root's pins, upgrades
PLAN_STATE_KINDS = ("plan_version", "plan_of_record", "transition", "hold", "plan_state")
INDEXED_KINDS = ("trust_root", "upgrade")
INDEX = "index"  # the payload key of the chain index
HEAD_LOG_TAIL = 64 * 1024
KEY_BYTES = 32
KEY_ID_META = "evidence_key_id"
FORGED_FIX = ("the control record was edited outside backfill: restore it from backup (`backfill evidence "
              "verify` names the first bad row)")


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
        text = read_regular(path, 4096).decode("ascii").strip()
        key = bytes.fromhex(text)
    except NotRegularFile as exc:  # a FIFO would hang the command, a device feed it for ever
        raise UsageError(f"the evidence key {path} is {exc.kind}, not a regular file",
                         fix="point BACKFILL_EVIDENCE_KEY_FILE at the key file (0600, 64 hex digits)") from None
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


def key_id(key: bytes) -> str:
    """A public name for the key: what the chain records to refuse another key."""
    return hmac.new(key, b"backfill-assets evidence key id", hashlib.sha256).hexdigest()[:16]


def can_verify(session: Session) -> bool:
    """Whether rows read here can be checked against their keyed hashes: always for a writer (it
    appends with the key); a reader without the key (a CI job that may read the warehouse) reports
    what it reads unverified, and never decides anything."""
    if not session.read_only:
        return True
    try:
        session_key(session)
    except WarehouseError:
        return False
    return True


def session_key(session: Session) -> bytes:
    """The chain's key for reading (verifying) rows; refused when it is not the chain's key."""
    cached: bytes | None = getattr(session, "_evidence_key", None)
    if cached is not None:
        return cached
    if session.home is None:
        raise WarehouseError("no BACKFILL_HOME for the evidence key",
                             fix="open the warehouse through open_warehouse()")
    key = read_key(session.home)
    recorded = meta_store.meta(session, KEY_ID_META)
    if recorded is not None and recorded != key_id(key):
        raise WarehouseError(
            f"the evidence key {session.home.evidence_key} (id {key_id(key)}) is not the key this "
            f"warehouse's chain was made with (id {recorded})",
            fix="point BACKFILL_EVIDENCE_KEY_FILE at the chain's key (restore it from backup); "
                "a chain never changes keys")
    session._evidence_key = key  # type: ignore[attr-defined]
    return key


def _key_for(session: Session, *, chain_empty: bool, last: tuple[Any, ...] | None) -> bytes:
    """The key for appending: created with the chain's first row, its id recorded then (or, for a
    chain of an earlier release, once the last row verifies under it)."""
    if session.home is None:
        raise WarehouseError("no BACKFILL_HOME for the evidence key",
                             fix="open the warehouse through open_warehouse()")
    if chain_empty:
        create_key(session.home)
    key = session_key(session)
    if getattr(session, "_key_recorded", False):
        return key
    if meta_store.meta(session, KEY_ID_META) is None:
        if last is not None and not _row_ok(key, row_of(last)):
            raise WarehouseError(
                f"the evidence key {session.home.evidence_key} does not verify the chain's last row "
                f"({last[0]}): it is not the key this chain was made with",
                fix="point BACKFILL_EVIDENCE_KEY_FILE at the chain's key (restore it from backup)")
        meta_store.add_meta(session, KEY_ID_META, key_id(key))
    else:
        session._key_recorded = True  # type: ignore[attr-defined]
    return key


def _row_hash(key: bytes, prev_hash: str, seq: int, at: str, plan_id: str | None, kind: str,
              actor: str, payload: str) -> str:
    material = json.dumps([prev_hash, seq, at, plan_id, kind, actor, payload], separators=(",", ":"))
    return hmac.new(key, material.encode("utf-8"), hashlib.sha256).hexdigest()


# --- the head log -------------------------------------------------------------------------------

def _heads_writable(session: Session, home: Home) -> None:
    """Before anything commits: the head log can be appended to (a read-only key folder, a full
    disk), so a command never fails after its commit for want of it. Once per session."""
    if getattr(session, "_heads_ok", False):
        return
    path = home.evidence_heads
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND))
    except NotRegularFile as exc:
        raise UsageError(f"the evidence head log {path} is {exc.kind}, not a regular file",
                         fix="set BACKFILL_EVIDENCE_HEADS_FILE to a regular file you can write") from None
    except OSError as exc:
        raise WarehouseError(
            f"cannot append to the evidence head log {path} ({exc.strerror or exc})",
            fix="make its folder writable, or set BACKFILL_EVIDENCE_HEADS_FILE to a writable file "
                "(the key itself may stay on a read-only mount)") from None
    session._heads_ok = True  # type: ignore[attr-defined]


def ready_to_append(session: Session) -> None:
    """Before a command commits what work done elsewhere relies on (a run's lease, before its runs
    write): the key is the chain's and the head log can be appended to, said now in one line
    rather than by each run that fails on it."""
    session_key(session)
    if session.home is not None:
        _heads_writable(session, session.home)


def _append_head(home: Home, seq: int, row_hash: str) -> None:
    path = home.evidence_heads
    try:
        # one short line with O_APPEND: concurrent writers never interleave within a line
        fd = open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            os.write(fd, f"{seq} {row_hash}\n".encode("ascii"))
        finally:
            os.close(fd)
    except (OSError, NotRegularFile) as exc:  # after the commit: say so, never fail a command whose work committed
        from backfill_assets import terminal

        terminal.say(f"backfill: warning: evidence row {seq} committed but its head could not be logged to "
                     f"{path} ({exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}); "
                     "`evidence verify` still checks the chain's links")


def recorded_head(home: Home) -> tuple[int, str] | None:
    """The highest head ever recorded in the head log, or None when there is none. Heads are logged
    in commit order, give or take a few racing commits, so the highest is among the last lines: the
    log's last 64 KB are read (~900 heads), not the whole file, which grows with every commit and is
    read by every decision (`check_index`)."""
    path = home.evidence_heads
    try:
        with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, size - HEAD_LOG_TAIL))
            lines = handle.read().decode("ascii", errors="replace").splitlines()
            if size > HEAD_LOG_TAIL:
                lines = lines[1:]  # the first line read may be the end of a line
    except FileNotFoundError:
        return None
    except NotRegularFile as exc:
        raise UsageError(f"the evidence head log {path} is {exc.kind}, not a regular file",
                         fix="set BACKFILL_EVIDENCE_HEADS_FILE to the chain's head log") from None
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
    text: str  # the payload as stored (what the keyed hash covers)
    payload: dict[str, Any]
    prev_hash: str = ""
    row_hash: str = ""


def row_of(r: tuple[Any, ...]) -> EvidenceRow:
    return EvidenceRow(int(r[0]), r[1], r[2], r[3], r[4], r[5], _payload_of(r[0], r[5]), r[6], r[7])


def _payload_of(seq: Any, text: Any) -> dict[str, Any]:
    """A row's payload: every row is appended with a JSON object, so a payload typed over with
    anything else is refused in one line before its hash is checked (`backfill status` and the
    guard, with the key, ended in an internal error: found by an attack)."""
    try:
        payload = json.loads(text)
    except (TypeError, ValueError):
        payload = None
    if not isinstance(payload, dict):
        raise ForgedRecord(f"evidence row {seq}'s payload is not the JSON object it was appended with (it was "
                           "typed over)", fix=FORGED_FIX)
    return payload


def _row_ok(key: bytes, row: EvidenceRow) -> bool:
    expected = _row_hash(key, row.prev_hash, row.seq, row.at, row.plan_id, row.kind, row.actor, row.text)
    return hmac.compare_digest(expected, row.row_hash)


# --- the chain index ----------------------------------------------------------------------------

Counts = dict[tuple[str, str | None], tuple[int, int]]


@dataclass(frozen=True)
class _Index:
    counts: Counts  # what the table holds now, as the index digests it
    top: int  # the last row's number
    rows: dict[int, tuple[Any, ...]]  # as stored: the last row, and the numbers asked for that exist


def _read_index(session: Session, seqs: Sequence[int] = ()) -> _Index:
    """The index and the rows it is checked by, in one statement. A table whose rows are not
    exactly those numbered 1 to the last is no chain: rows numbered 0 or below, which no walk
    from row 1 reads, were planted (found by an attack), or rows were removed."""
    found: Counts = {}
    top = total = 0
    index, raw = store.index_rows(session, PLAN_STATE_KINDS, INDEXED_KINDS, seqs)
    for kind, plan_id, last, rows in index:
        if kind == "top":
            top, total = int(last or 0), int(rows or 0)
        else:
            found[(str(kind), None if plan_id is None else str(plan_id))] = (int(last), int(rows))
    _numbered_from_one(total, top)
    return _Index(found, top, {int(r[0]): r for r in raw})


def _numbered_from_one(total: int, top: int) -> None:
    if total != top:
        raise EvidenceChainBroken(top, f"the chain holds {total} row(s) numbered up to {top}: "
                                       + ("rows were removed" if total < top else
                                          "rows outside its numbering were added"))


def _digest(counts: Counts) -> str:
    text = json.dumps(sorted([k, p or "", last, n] for (k, p), (last, n) in counts.items()), separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _index_counts(session: Session, key: bytes, index: _Index) -> Counts:
    """Before an append: the table's index as it stands, checked against the last row's (a chain
    of an earlier release, whose last row carries none, is verified whole once, here)."""
    if index.top == 0:
        return dict(index.counts)
    head = row_of(index.rows[index.top])
    if not _row_ok(key, head):
        raise ForgedRecord(f"evidence row {head.seq} ({head.kind}), the chain's last, does not match its keyed hash",
                           fix=FORGED_FIX)
    recorded = head.payload.get(INDEX)
    if recorded is None:
        verified(session, [row_of(r) for r in store.rows_after(session, 0, head.seq)])
    elif recorded != _digest(index.counts):
        raise ForgedRecord(INDEX_BROKEN, fix=FORGED_FIX)
    return dict(index.counts)


INDEX_BROKEN = ("the evidence chain's rows were relabelled or removed: a plan's last record, a trust root's pin "
                 "or an upgrade is not where the chain's last row says")


def check_index(session: Session) -> Counts | None:
    """The rows decisions find by kind are the ones the chain's last row indexes; that row is the
    chain's head as the head log last saw it or later. A no-op for a reader without the key (it
    decides nothing) and for a chain whose last row predates the index."""
    if not can_verify(session):
        return None
    # asked again in one snapshot, the answer is the one checked (`append` keeps it current): a
    # transaction's decisions ask ~3 times each (~2 ms each)
    snapshot = session.snapshot_number
    memo: tuple[int, Counts | None] | None = session.__dict__.get("_index_memo")
    if snapshot is not None and memo is not None and memo[0] == snapshot:
        return None if memo[1] is None else dict(memo[1])
    # while no other process can write the warehouse (`Session.memo_while_locked`), a chain whose last row is the
    # one a check passed on is still that chain: this process only appends, and an append makes
    # another last row (a row rolled back and its number reused: another hash)
    held = session.memo_while_locked()
    checked: tuple[tuple[int, str] | None, Counts | None] | None = None if held is None else held.get(_HELD_INDEX)
    if checked is not None and store.head(session) == checked[0]:
        found = checked[1]
    else:
        found, top = _check_index(session)
        if held is not None:
            held[_HELD_INDEX] = (top, None if found is None else dict(found))
    if snapshot is not None:
        session._index_memo = (snapshot, None if found is None else dict(found))  # type: ignore[attr-defined]
    return None if found is None else dict(found)


_HELD_INDEX = "evidence_log.check_index"
HELD_SEALS = "seals.verify"  # (table, chain row number, its hash) of seals verified (`seals.verify`)


def _check_index(session: Session) -> tuple[Counts | None, tuple[int, str] | None]:
    """The checked index, and the last row (number, hash) it was checked by."""
    session.refuse_shadowed_code()  # no macro answers the SQL below, nor the decision's
    home = session.home
    # the head log first: a head logged (after its commit) before the table is read is in the table
    recorded = recorded_head(home) if home is not None else None
    # row 1 names the chain (`_chain_id`), the recorded head's row is compared, the last row is checked
    index = _read_index(session, [1] if recorded is None else [1, recorded[0]])
    counts, top = index.counts, index.top
    if top == 0 and recorded is None:
        return counts, None
    if recorded is not None and (recorded[0] > top or _hash_of(index, recorded[0]) != recorded[1]):
        session_key(session)  # another home's key brings its head log: named as the wrong key (found by a review)
        raise EvidenceChainBroken(recorded[0], "the head log recorded it, but it is missing or different now "
                                               "(rows were cut off the chain's end)")
    head = by_seq(session, [top], index)[top]
    if head.payload.get(INDEX) not in (None, _digest(counts)):
        raise ForgedRecord(INDEX_BROKEN, fix=FORGED_FIX)
    return (counts if head.payload.get(INDEX) is not None else None), (top, head.row_hash)


def _hash_of(index: _Index, seq: int) -> str | None:
    row = index.rows.get(seq)
    return None if row is None else str(row[7])


def next_seq(session: Session) -> int:
    """The number the next row appended in this transaction gets: rows it seals can carry it.
    Takes the chain's turn (held until the transaction ends), so no one else appends meanwhile."""
    if not session.in_transaction:
        raise WarehouseError("next_seq needs a transaction", fix="call it inside session.transaction()")
    session.lock("backfill_control.evidence")
    return store.max_seq(session) + 1


def hold(session: Session) -> None:
    """Take the chain's turn until this transaction ends, as an append does: no other session
    appends meanwhile, so the record a decision reads under it is the record as it commits."""
    if not session.in_transaction:
        raise WarehouseError("holding the chain needs a transaction", fix="call it inside session.transaction()")
    session.lock("backfill_control.evidence")


def append(session: Session, *, plan_id: str | None, kind: str, actor: str,
           payload: dict[str, Any], seq: int | None = None) -> EvidenceRow:
    """Append one row inside the caller's transaction; its head is logged after the commit.
    `seq`: the number `next_seq` promised to rows this one seals."""
    if not session.in_transaction:
        with session.transaction():
            return append(session, plan_id=plan_id, kind=kind, actor=actor, payload=payload, seq=seq)
    session.lock("backfill_control.evidence")  # one chain: appends take turns on server engines
    index = _read_index(session)
    last = index.rows.get(index.top)
    number, prev = (int(last[0]) + 1, str(last[7])) if last else (1, GENESIS)
    if seq is not None and seq != number:
        raise WarehouseError(f"evidence row {seq} was promised but the chain's next row is {number}",
                             fix="this is a bug: report it with the log file")
    home = session.home
    key = _key_for(session, chain_empty=last is None, last=last)
    assert home is not None
    _heads_writable(session, home)
    at = now_iso()
    counts = _index_counts(session, key, index)
    mark = ("plan", plan_id) if kind in PLAN_STATE_KINDS and plan_id is not None else \
        (kind, None) if kind in INDEXED_KINDS else None
    if mark is not None:
        counts[mark] = (number, counts.get(mark, (0, 0))[1] + 1)
    payload = {**payload, INDEX: _digest(counts)}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    row_hash = _row_hash(key, prev, number, at, plan_id, kind, actor, text)
    store.insert(session, number, at, plan_id, kind, actor, text, prev, row_hash)
    # never remembered as verified until it commits: rolled back, its number goes to another row
    session.__dict__.setdefault("_appended", set()).add(number)
    session.after_commit(lambda: _append_head(home, number, row_hash))
    sealed = payload.get("seals")
    held = session.memo_while_locked() if isinstance(sealed, dict) and sealed else None
    if isinstance(sealed, dict) and held is not None:
        # each seal is of rows read in this transaction (`seals.of_seq` reads them back under this
        # number once inserted; `seal_unsealed` reads them before numbering them): committed while
        # the file stays held, they are what a verify would read (a window's reconcile read its
        # 20,000 results back again at 2,526 partitions)
        verified = held.setdefault(HELD_SEALS, set())
        session.after_commit(lambda: verified.update((str(t), number, row_hash) for t in sealed))
    # the index this row digests is what the table now holds; remembered only where a check of this
    # snapshot is (an append reads no head log: remembered alone, it let later decisions obey a chain
    # cut off its end, found by an attack)
    memo = session.__dict__.pop("_index_memo", None)
    if memo is not None and session.snapshot_number is not None and memo[0] == session.snapshot_number:
        session._index_memo = (memo[0], dict(counts))  # type: ignore[attr-defined]
    return EvidenceRow(number, at, plan_id, kind, actor, text, json.loads(text), prev, row_hash)


def rows(session: Session, plan_id: str | None = None,
         kind: str | tuple[str, ...] | None = None, after: int = 0) -> list[EvidenceRow]:
    """Rows as stored (numbered above `after`), for reports; decisions read through `verified`. Each
    row returned is of `plan_id` and `kind` (or one of `kind`) as Python compares them, whatever the
    warehouse's `=` answered (an operator of one's own made a plan's `plan_version` row pass for its
    `published` one: found by an attack)."""
    kinds = (kind,) if isinstance(kind, str) else kind
    return [r for r in (row_of(x) for x in store.rows(session, plan_id, kinds, after))
            if (plan_id is None or r.plan_id == plan_id) and (kinds is None or r.kind in kinds) and r.seq > after]


def verified(session: Session, found: list[EvidenceRow]) -> list[EvidenceRow]:
    """`found`, each checked against its keyed hash; ForgedRecord naming the first that fails."""
    key = session_key(session)
    for row in found:
        if not _row_ok(key, row):
            raise ForgedRecord(f"evidence row {row.seq} ({row.kind} of plan {row.plan_id or '-'}) does not match "
                               "its keyed hash", fix=FORGED_FIX)
    return found


# chain rows verified once, by warehouse and number: a row never changes, so a verified one stays
# what it was when written (a later edit of it in the table is not obeyed here; `verify` finds it)
_VERIFIED: dict[tuple[str, int], EvidenceRow] = {}


def _chain_id(session: Session, read: _Index | None = None) -> str:
    """Which chain this is: its first row's keyed hash (random key, first time), once per session.
    A file copied over another at the same path is another chain."""
    found = getattr(session, "_chain_id", None)
    if not found:  # an empty chain has no id yet: asked again once it has rows
        found = _hash_of(read, 1) if read is not None and read.top else store.hash_at(session, 1)
        found = str(found or "")
        session._chain_id = found  # type: ignore[attr-defined]
    return found


def by_seq(session: Session, seqs: list[int], read: _Index | None = None) -> dict[int, EvidenceRow]:
    """The rows of these numbers, verified; a missing one is a ForgedRecord too. `read`: rows the
    caller read in its own statement, used rather than read again."""
    where = f"{session.engine.identity()}:{_chain_id(session, read)}"
    known = {s: _VERIFIED[(where, s)] for s in set(seqs) if (where, s) in _VERIFIED}
    wanted = sorted(set(seqs) - set(known))
    given = {s: read.rows[s] for s in wanted if s in read.rows} if read is not None else {}
    fetched = store.rows_by_seq(session, [s for s in wanted if s not in given]) if len(given) < len(wanted) else []
    found = {int(r[0]): row_of(r) for r in [*given.values(), *fetched]}
    missing = [s for s in wanted if s not in found]
    if missing:
        raise ForgedRecord(f"evidence row {missing[0]}, which records rows the control record holds, is gone",
                           fix=FORGED_FIX)
    verified(session, list(found.values()))
    if len(_VERIFIED) > 100_000:
        _VERIFIED.clear()
    # a row this session appended may still roll back, and its number then goes to another row: a
    # cached copy would be obeyed in its place (the chain index reads each plan's newest row by number)
    uncommitted = session.__dict__.get("_appended", ())
    _VERIFIED.update({(where, s): row for s, row in found.items() if s not in uncommitted})
    return {**known, **found}


def check_links(session: Session) -> None:
    """One pass in the engine, without the key: no row removed, none re-linked, none cut off the
    end the head log saw. Rows edited in place are found by their keyed hash (`verified`, `verify`)."""
    count, top = store.count_and_top(session)
    _numbered_from_one(int(count), int(top))
    broken = store.first_broken_link(session, GENESIS)
    if broken is not None:
        raise EvidenceChainBroken(broken, "its link to the previous row was changed")
    home = session.home
    recorded = recorded_head(home) if home is not None else None
    if recorded is not None and recorded[0] > 0:
        if store.hash_at(session, recorded[0]) != recorded[1]:
            if can_verify(session):
                session_key(session)  # another home's key brings its head log: named as the wrong key
            raise EvidenceChainBroken(recorded[0], "the head log recorded it, but it is missing or different now "
                                                   "(rows were cut off the chain's end)")


def head(session: Session) -> tuple[int, str]:
    """The last row's number and hash: what a rendered evidence file pins."""
    return store.head(session) or (0, GENESIS)


ROWS_AT_ONCE = 1000


def last_before_reading(session: Session) -> int:
    """The chain's last row, read before a decision reads the ledger rows it will compare with the
    chain (0 where there is no key to verify with): a row committed by then was committed with the
    rows it recorded, so they are there to read; one committed after is not asked of them
    (PostgreSQL reads each statement afresh: a run's write committed between the two reads was
    otherwise taken for a row hidden, found by an attack)."""
    return head(session)[0] if can_verify(session) else 0


def rows_after(session: Session, floor: int, top: int) -> Iterator[EvidenceRow]:
    """Every chain row numbered after `floor` up to `top`, in order, each verified: the chain is
    exactly rows 1 to its last (checked), so these are all there is, and none can be hidden from
    a read by its kind or plan (a row relabelled would be read, and refused)."""
    for start in range(floor + 1, top + 1, ROWS_AT_ONCE):
        found = by_seq(session, list(range(start, min(start + ROWS_AT_ONCE, top + 1))))
        yield from (found[seq] for seq in sorted(found))


def verify(session: Session, pinned: tuple[int, str] | None = None) -> int:
    """Check the keyed chain and the recorded heads; return the number of rows.

    Raises naming the first row that was edited, deleted, re-linked or cut off.
    """
    home = session.home
    assert home is not None
    recorded = recorded_head(home)
    count = store.count(session)
    if count == 0:
        if recorded is not None:
            raise EvidenceChainBroken(recorded[0], "the chain is empty, but the head log "
                                      f"{home.evidence_heads} recorded rows up to it")
        return 0
    key = session_key(session)
    prev, expected_seq = GENESIS, 1
    last_seq, chunk = 0, 5000
    faults.checkpoint("verify.walk")  # a long chain's walk: other processes append meanwhile
    while True:
        batch = store.rows_after(session, last_seq, chunk)
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
    # the walk reads from row 1, so none numbered below it; counted up to where it ended, in one
    # statement after it (rows another process appended meanwhile are no removal: PostgreSQL reads
    # each statement at its own snapshot; found by a review)
    _numbered_from_one(store.count(session, up_to=last_seq), last_seq)
    for what, mark in (("the head log", recorded), ("the rendered evidence", pinned)):
        if mark is None or mark[0] == 0:
            continue
        if store.hash_at(session, mark[0]) != mark[1]:
            raise EvidenceChainBroken(mark[0], f"{what} recorded it, but it is missing or different "
                                               f"now (rows were cut off the chain's end)")
    return last_seq

"""Seals: each ledger row is bound to the keyed chain row that recorded it.

A write transaction's ledger rows (`writes`, `snapshots`) and a judged slice's `gate_results`
carry the number of the chain row appended with them (`evidence_seq`), and that row's payload
holds, per table, the sha256 of those rows (`"seals": {"writes": ...}`). Before a decision acts on
a ledger row it recomputes the digest of every row of that seal and compares it with the chain
row, whose keyed hash it checks: `UPDATE gate_results SET passed = true` by someone who can write
the warehouse but not read the evidence key is refused, naming the row, never obeyed.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from backfill_assets import faults
from backfill_assets.control import evidence_log
from backfill_assets.control.names import SCHEMA
from backfill_assets.errors import ForgedRecord
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.state_store import evidence as evidence_store
from backfill_assets.warehouse.state_store import seals as store
from backfill_assets.warehouse.state_store.seals import SEALED

__all__ = ["SEALED", "verify", "verify_read", "verify_all", "last_upgrade", "digest", "of_seq", "seal_unsealed"]


_COMPACT = json.JSONEncoder(separators=(",", ":"))  # made once: json.dumps with options makes one a call


def digest(table: str, rows: Iterable[Sequence[object]]) -> str:
    """The seal of `rows` of `table` (each in SEALED order), however they are ordered: the sha256 of
    the compact JSON of `[table, rows]`, each value null, a boolean, an integer or its text, the rows
    sorted by their JSON. Each row is encoded once (a window's publish seals tens of thousands):
    sorting the compact encodings orders rows as sorting `json.dumps(row)` did, since the two differ
    only by a space after each separating comma, which two rows share up to their first difference
    (tests/test_seal_digest.py holds the first definition against this one)."""
    encoded = sorted(_COMPACT.encode([v if v is None or isinstance(v, bool | int) else str(v) for v in row])
                     for row in rows)
    text = f"[{_COMPACT.encode(table)},[{','.join(encoded)}]]"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _canonical(value: object) -> object:
    return value if value is None or isinstance(value, bool | int) else str(value)


def of_seq(session: Session, table: str, seq: int, inserted: Sequence[Mapping[str, object]]) -> str:
    """The seal of the rows of `table` that carry `seq`, read back as a verifier reads them: exactly
    the rows the caller just inserted with it, each holding the values it gave (`inserted`: one
    mapping a row, of the columns it did not leave to the warehouse, such as a row's id).

    Chain row `seq` does not exist yet, so any other row that carries its number was put there by
    someone else (its number is predictable): sealing it would make it verify, so it is refused.
    And a seal is of what the writer meant, never of whatever landed: on PostgreSQL a table's owner
    may hang a trigger, rule or default on a ledger table (or, through a data table's trigger or
    CHECK, which run with the writer's rights, on any) that changes a row as it is inserted (a
    failing gate's `passed` set to true, found by an attack); such a row is refused, not sealed."""
    rows = store.rows_of_seq(session, table, seq)
    if len(rows) != len(inserted):
        raise ForgedRecord(f"{len(rows) - len(inserted)} row(s) of {SCHEMA}.{table} already carry evidence row "
                           f"{seq}, which is being written now: rows planted for it are never sealed",
                           fix=evidence_log.FORGED_FIX)
    if inserted:
        names = list(inserted[0])
        at = [SEALED[table].index(name) for name in names]
        landed = sorted(_COMPACT.encode([_canonical(row[i]) for i in at]) for row in rows)
        meant = sorted(_COMPACT.encode([_canonical(row[name]) for name in names]) for row in inserted)
        if landed != meant:
            raise ForgedRecord(f"rows of {SCHEMA}.{table} changed as they were inserted (a trigger, rule or default "
                               "on the table?): the record holds only what its writer meant, so none is sealed",
                               fix="drop what the table's owner added to it (`\\d` lists triggers, rules and "
                                   "defaults), then run the command again; see the README's threat model")
    return digest(table, rows)


# chain rows whose sealed rows are read at once: a run's write transaction seals up to 50 partitions'
# rows; its gate results are 8 a partition, each with its figures (~2.5 KB of text), so a window of
# thousands of partitions is verified ~1,600 gate results (~4 MB) at a time
SEQS_AT_ONCE = {"gate_results": 4}
SEQS_AT_ONCE_OTHERWISE = 20


CHANGED_WHILE_READ_FIX = ("the record reads as sealed again, so `backfill evidence verify` passes: find who writes "
                          "the control schema beside backfill (the warehouse's statement log), stop them, then run "
                          "the command again")


def verify_read(session: Session, table: str, columns: Sequence[str], read: Sequence[Sequence[object]],
                what: str = "", *, newest_by: Sequence[str] = ()) -> None:
    """The rows a decision read (`read`: each its values of `columns`, sealed columns of `table`,
    then its `evidence_seq`) are rows their seals cover, as verified, each read no more often than
    it is sealed: on PostgreSQL each statement reads afresh, so the seals' rows read again by
    `verify` could be other than the decision's (an insider's `passed = true` committed before the
    decision's read and put back before the seal check's published partitions whose gates failed; a
    copy of the proof's one write, planted for the read, passed the proof: found by attacks).

    `newest_by` (columns among `columns`, the first naming what the decision read at all): the
    decision read the newest row of each, so no row of a seal it read may be newer than the one read
    of the same (one failing result of a reconcile moved out of the read's way, the seven passing
    ones read: a failed partition was published, found by an attack). ForgedRecord otherwise."""
    at = [SEALED[table].index(c) for c in columns]
    newest_at = [SEALED[table].index(c) for c in newest_by]
    verify(session, table, [cast("int | None", r[-1]) for r in read], what,
           read=_Read(at, read, newest_at, [list(columns).index(c) for c in newest_by]))


@dataclass(frozen=True)
class _Read:
    """What `verify_read` checks of a decision's rows (positions: `at` and `newest_at` in SEALED's
    order, `newest_in` in the row read)."""
    at: list[int]
    rows: Sequence[Sequence[object]]
    newest_at: list[int]
    newest_in: list[int]

    def by_seq(self) -> dict[int, Counter[tuple[object, ...]]]:
        found: dict[int, Counter[tuple[object, ...]]] = {}
        for row in self.rows:
            found.setdefault(cast(int, row[-1]), Counter())[tuple(_canonical(v) for v in row[:-1])] += 1
        return found

    def newest(self) -> tuple[set[object], dict[tuple[object, ...], int]]:
        """What was read at all (the first `newest_by` column's values), and the newest seal read of each."""
        read_at_all: set[object] = set()
        newest: dict[tuple[object, ...], int] = {}
        for row in self.rows if self.newest_in else ():
            ident = tuple(_canonical(row[i]) for i in self.newest_in)
            read_at_all.add(ident[0])
            newest[ident] = max(newest.get(ident, 0), cast(int, row[-1]))
        return read_at_all, newest

    def refuse_other(self, table: str, what: str, seq: int, kind: str, sealed: list[tuple[Any, ...]],
                     read: Counter[tuple[object, ...]],
                     newest: tuple[set[object], dict[tuple[object, ...], int]]) -> None:
        have = Counter(tuple(_canonical(row[i]) for i in self.at) for row in sealed)
        if any(n > have[row] for row, n in read.items()):
            raise ForgedRecord(f"rows of {SCHEMA}.{table}{what} read for this decision differ from the ones evidence "
                               f"row {seq} ({kind}) sealed, read again: they were changed while read",
                               fix=CHANGED_WHILE_READ_FIX)
        read_at_all, newest_read = newest
        for row in sealed if self.newest_at else ():
            ident = tuple(_canonical(row[i]) for i in self.newest_at)
            if ident[0] in read_at_all and newest_read.get(ident, 0) < seq:
                raise ForgedRecord(f"a row of {SCHEMA}.{table}{what} that evidence row {seq} ({kind}) sealed was not "
                                   "read for this decision, an older one was: it was moved out of the read's way",
                                   fix=CHANGED_WHILE_READ_FIX)


def verify(session: Session, table: str, seqs: Iterable[int | None], what: str = "",
           read: _Read | None = None) -> None:
    """Every row sealed by these chain rows matches its seal; ForgedRecord otherwise (also for a
    row of a decision that carries no seal). `read`: see `verify_read`."""
    given = list(seqs)
    if any(s is None for s in given):
        raise ForgedRecord(f"a row of {SCHEMA}.{table}{what} carries no seal of the evidence chain",
                           fix=evidence_log.FORGED_FIX)
    # a number as the warehouse made it, never a text that reads as one ('0123' sorts after '99'):
    # the rows found latest by it must be the ones numbered latest (the column's type is checked as
    # each session opens; this is the second line)
    if not all(_is_seal_number(s) for s in given):
        raise ForgedRecord(f"a row of {SCHEMA}.{table}{what} carries a seal number that is not a whole number",
                           fix=evidence_log.FORGED_FIX)
    wanted = sorted({int(s) for s in given if s is not None})
    if not wanted or not evidence_log.can_verify(session):
        return
    # while no other process can write the warehouse (`Session.memo_while_locked`), rows found to match their
    # seal still do: this process only inserts sealed rows, under a chain row it appends with them
    # (a decision reads the same seals several times: 361 of 425 checks in a 365-partition command)
    held = session.memo_while_locked()
    checked: set[tuple[str, int, str]] = set() if held is None else held.setdefault(evidence_log.HELD_SEALS, set())
    uncommitted = session.__dict__.get("_appended", ())  # rolled back, its number goes to another row
    # what the decision read, tallied once a seal is read again (never, for a seal remembered checked)
    was_read: dict[int, Counter[tuple[object, ...]]] | None = None
    newest: tuple[set[object], dict[tuple[object, ...], int]] = (set(), {})
    # a few chain rows at a time, so a window's thousands of sealed rows are never all in memory
    at_once = SEQS_AT_ONCE.get(table, SEQS_AT_ONCE_OTHERWISE)
    for i in range(0, len(wanted), at_once):
        chain = evidence_log.by_seq(session, wanted[i:i + at_once])
        part = [s for s in wanted[i:i + at_once] if (table, s, chain[s].row_hash) not in checked]
        if not part:
            continue
        found: dict[int, list[tuple[Any, ...]]] = {s: [] for s in part}
        for row in store.rows_of_seqs(session, table, part):
            if not _is_seal_number(row[-1]):
                raise ForgedRecord(f"a row of {SCHEMA}.{table}{what} carries a seal number that is not a whole number",
                                   fix=evidence_log.FORGED_FIX)
            found[row[-1]].append(row[:-1])
        for seq in part:
            sealed = chain[seq].payload.get("seals", {}).get(table)
            if sealed != digest(table, found[seq]):
                raise ForgedRecord(
                    f"rows of {SCHEMA}.{table}{what} recorded with evidence row {seq} ({chain[seq].kind}) differ "
                    "from what that row sealed (edited, inserted or removed)", fix=evidence_log.FORGED_FIX)
            if read is not None:
                if was_read is None:
                    was_read, newest = read.by_seq(), read.newest()
                read.refuse_other(table, what, seq, chain[seq].kind, found[seq], was_read.get(seq, Counter()), newest)
        if held is not None:
            checked.update((table, s, chain[s].row_hash) for s in part if s not in uncommitted)


def last_upgrade(session: Session) -> int:
    """The chain row of the last upgrade (0: none): it re-sealed every row as it stood, so the rows
    that chain rows before it recorded carry its seals, not theirs."""
    counts = evidence_log.check_index(session)  # the last upgrade is the one the chain indexes
    return evidence_store.last_seq_of_kind(session, "upgrade") if counts is None else \
        counts.get(("upgrade", None), (0, 0))[0]


def _is_seal_number(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def verify_all(session: Session) -> int:
    """Every seal in the warehouse (for `evidence verify`); returns the number of rows checked."""
    total = 0
    for table in SEALED:
        seqs = store.sealing_seqs(session, table)
        unsealed = store.count_rows(session, table, unsealed=True)
        if unsealed:
            raise ForgedRecord(f"{unsealed} row(s) of {SCHEMA}.{table} carry no seal of the evidence chain",
                               fix=evidence_log.FORGED_FIX)
        for i in range(0, len(seqs), 200):
            verify(session, table, seqs[i:i + 200])
        total += store.count_rows(session, table)
    # a seal whose rows were all removed is a chain row no ledger row points at any more; asked of
    # the chain's rows up to its last before the ledger is read: rows committed with a chain row
    # after it (a run writing meanwhile, on PostgreSQL) were not read as gone (found by an attack)
    top = evidence_log.head(session)[0]
    referenced = {s for table in SEALED for s in store.sealing_seqs(session, table)}
    faults.checkpoint("seals.verify_all.after_ledger")
    upgraded = last_upgrade(session)
    for row in evidence_log.rows(session):
        if row.seq > top:
            continue
        tables = row.payload.get("seals") if isinstance(row.payload, dict) else None
        if row.seq > upgraded and tables and any(tables.get(t) != digest(t, []) for t in tables) \
                and row.seq not in referenced:
            raise ForgedRecord(f"the rows evidence row {row.seq} ({row.kind}) sealed are gone from the control record",
                               fix=evidence_log.FORGED_FIX)
    return total


def seal_unsealed(session: Session, actor: str) -> None:
    """The upgrade from schema 2: seal every row written before seals existed, as it stands, with one
    chain row per table (the 0.2 record is trusted as it was when upgraded)."""
    for table in SEALED:
        rows = store.unsealed_rows(session, table)
        if not rows:
            continue
        seq = evidence_log.next_seq(session)
        store.seal_unsealed(session, table, seq)
        evidence_log.append(session, plan_id=None, kind="upgrade_seal", actor=actor, seq=seq, payload={
            "table": table, "rows": len(rows), "seals": {table: digest(table, rows)}})

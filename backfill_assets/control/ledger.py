"""The ledger: every partition write, and what the gates said about each.

A gate result names the write it judged (`write_id`) and the fingerprint of the data it checked.
The publish rule trusts only results on a partition's latest write whose checked fingerprint is
the write's own, and the data it copies must still carry that fingerprint.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from backfill_assets import faults
from backfill_assets.control import evidence_log, seals
from backfill_assets.control.names import SCHEMA
from backfill_assets.errors import ForgedRecord
from backfill_assets.gates.cutover import MATCHED, Comparison
from backfill_assets.gates.results import CHANGES_AS_EXPECTED, UNCHANGED_SINCE_CHECKED, GateResult
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.fingerprints import Fingerprint
from backfill_assets.warehouse.state_store import ledger as store


@dataclass(frozen=True)
class LatestWrite:
    partition_key: str
    write_id: int
    plan_id: str | None
    recorded_at: str
    fingerprint: Fingerprint
    code_version: str | None
    code_identity: str | None = None
    seq: int = 0  # the chain row that sealed it: what "written after" means (ids are the warehouse's)
    gates: dict[str, tuple[bool, dict[str, Any]]] = field(default_factory=dict)  # gate -> (passed, figures)
    checked: dict[str, str | None] = field(default_factory=dict)  # gate -> checked fingerprint

    @property
    def passed(self) -> bool:
        return bool(self.gates) and all(p for p, _ in self.gates.values())

    @property
    def failed(self) -> list[str]:
        return [g for g, (p, _) in self.gates.items() if not p]


def record_writes(session: Session, *, plan_id: str | None, asset: str, mode: str, run_id: str | None,
                  code_version: str, code_identity: str, written: Mapping[str, Fingerprint], actor: str,
                  sha256: str | None = None,
                  reads: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
                  publish_as: str | None = None,
                  partition_column: str | None = None) -> tuple[dict[str, int], str]:
    """One ledger row per partition written ({key: fingerprint after the write}), in one statement,
    sealed by one `write` chain row; returns each key's write id and the time recorded. `reads`:
    what each partition was computed from ({other replayable table: {partition written: the
    partitions of that table it read}}), which a rollback or a publish of those partitions asks
    whatever definitions it loads; `publish_as`: the table the target publishes into;
    `partition_column`: the column its partitions are of (`partitioned_by`)."""
    at = evidence_log.now_iso()
    if not written:
        return {}, at
    seq = evidence_log.next_seq(session)
    ids = store.insert_writes(session, plan_id=plan_id, asset=asset, mode=mode, run_id=run_id,
                              code_version=code_version, code_identity=code_identity, at=at, seq=seq,
                              written=[(key, fp.rows, fp.digest) for key, fp in written.items()])
    evidence_log.append(session, plan_id=plan_id, kind="write", actor=actor, seq=seq, payload={
        "table": asset, "mode": mode, "run_id": run_id, "code_version": code_version,
        "code_identity": code_identity, "sha256": sha256,
        **({"reads": {t: {k: list(u) for k, u in per.items()} for t, per in reads.items()}} if reads else {}),
        **({"publish_as": publish_as} if publish_as else {}),
        **({"partition_column": partition_column} if partition_column else {}),
        "partitions": {k: {"rows": fp.rows, "fingerprint": fp.digest, "write_id": ids[k]} for k, fp in written.items()},
        "seals": {"writes": seals.of_seq(session, "writes", seq, [
            {"plan_id": plan_id, "asset": asset, "partition_key": key, "mode": mode, "run_id": run_id,
             "code_version": code_version, "row_count": fp.rows, "fingerprint": fp.digest, "recorded_at": at,
             "code_identity": code_identity} for key, fp in written.items()])}})
    return ids, at


def record_results(session: Session, *, plan_id: str | None, asset: str,
                   judged: Sequence[tuple[int | None, str, Fingerprint | None, list[GateResult]]], actor: str,
                   summary: Mapping[str, object] | None = None) -> None:
    """Store results: one (write_id, partition, checked fingerprint, results) per partition, in one
    statement for the whole slice, sealed by one `gates` chain row carrying `summary`."""
    at = evidence_log.now_iso()
    rows = [(write_id, plan_id, asset, key, result.gate, result.passed, checked.digest if checked else None,
             json.dumps(result.to_json(), default=str), at)
            for write_id, key, checked, results in judged for result in results]
    if not rows:
        return
    seq = evidence_log.next_seq(session)
    store.insert_results(session, seq, rows)
    evidence_log.append(session, plan_id=plan_id, kind="gates", actor=actor, seq=seq, payload={
        **(summary or {"table": asset, "partitions": len(judged)}),
        "judged": {key: write_id for write_id, key, _, _ in judged},
        "seals": {"gate_results": seals.of_seq(session, "gate_results", seq,
                                               [dict(zip(store.RESULT_COLUMNS, row, strict=True)) for row in rows])}})


# the sealed columns `latest` reads of a write, and of a result (its figures last, when read)
WRITE_READ = ("asset", "partition_key", "write_id", "plan_id", "recorded_at", "row_count", "fingerprint",
              "code_version", "code_identity")
RESULT_READ = ("write_id", "gate", "passed", "checked_fingerprint", "figures")


def latest(session: Session, asset: str, keys: Sequence[str],
           plan_id: str | None = None, figures: bool = True) -> dict[str, LatestWrite | None]:
    """The latest write per key (of the plan, when given) and the latest result of each gate on it,
    each checked against the seal of the chain row that recorded it (ForgedRecord otherwise; the
    seal covers the figures whether they are read or not). Without `figures` each gate's figures
    are left empty: a window's verdict reads thousands of results and needs only their outcome."""
    keys = list(dict.fromkeys(keys))
    out: dict[str, LatestWrite | None] = {k: None for k in keys}
    if not keys:
        return out
    top = evidence_log.last_before_reading(session)
    rows = store.latest_writes(session, asset, keys, plan_id, figures)
    faults.checkpoint("ledger.latest.after_read")
    writes_read, results_read = [], []
    judged: dict[str, int] = {}  # key -> the newest chain row of the results read for its write
    for key, wid, pid, at, n, digest, version, identity, wseq, gate, passed, text, checked, gseq in rows:
        entry = out.get(key)
        if entry is None:
            entry = LatestWrite(key, int(wid), pid, at, Fingerprint(int(n), str(digest)), version, identity,
                                seq=int(wseq) if wseq is not None else 0)
            out[key] = entry
            writes_read.append((asset, key, wid, pid, at, n, digest, version, identity, wseq))
        if gate is not None:
            entry.gates[gate] = (bool(passed), json.loads(text) if text is not None else {})
            entry.checked[gate] = checked
            results_read.append((wid, gate, passed, checked, text, gseq) if figures else
                                (wid, gate, passed, checked, gseq))
            if isinstance(gseq, int):
                judged[key] = max(judged.get(key, 0), gseq)
    # each row as read here, not only its seal's rows as read again (PostgreSQL reads afresh)
    seals.verify_read(session, "writes", WRITE_READ, writes_read, f" of {asset}", newest_by=("partition_key",))
    seals.verify_read(session, "gate_results", RESULT_READ[:5 if figures else 4], results_read, f" of {asset}",
                      newest_by=("write_id", "gate"))
    _refuse_newer_in_chain(session, asset, plan_id, {k: e for k, e in out.items() if e is not None}, judged, top)
    return out


def _refuse_newer_in_chain(session: Session, asset: str, plan_id: str | None, found: Mapping[str, LatestWrite],
                           judged: Mapping[str, int], top: int) -> None:
    """No chain row after the latest write read for a key recorded a newer write of it (of the plan,
    when given), nor newer results on that write. Each row read matches its seal, but a whole sealed
    group deleted leaves no row to mismatch: the failing results of a reconcile taken out, the
    older passing ones read as the latest, the plan moved to reconciled and its failed partition
    published (on PostgreSQL, hidden while publish waited for its lock and put back after; found
    by an attack). The chain is exactly rows 1 to its last (checked), so the rows after the oldest
    write read, up to `top` (the last row before the ledger was read), are all there is to look at."""
    if not found or not top:
        return
    for row in evidence_log.rows_after(session, min(e.seq for e in found.values()), top):
        payload = row.payload if isinstance(row.payload, dict) else {}
        if row.kind == "write" and payload.get("table") == asset and plan_id in (None, row.plan_id):
            newer = [k for k in payload.get("partitions") or {} if k in found and row.seq > found[k].seq]
            if newer:
                raise ForgedRecord(f"{asset} {newer[0]}: the write that evidence row {row.seq} recorded is gone from "
                                   f"{SCHEMA}.writes (an older one reads as the latest)", fix=evidence_log.FORGED_FIX)
        elif row.kind == "gates" and payload.get("table") == asset:
            newer = [k for k, write_id in (payload.get("judged") or {}).items()
                     if k in found and write_id == found[k].write_id and row.seq > judged.get(k, 0)]
            if newer:
                raise ForgedRecord(f"{asset} {newer[0]}: the gate results that evidence row {row.seq} recorded are "
                                   f"gone from {SCHEMA}.gate_results (older ones read as the latest)",
                                   fix=evidence_log.FORGED_FIX)


@dataclass(frozen=True)
class Chained:
    """A write or a snapshot as its chain row recorded it: the partitions of `table` (a write's
    asset, a snapshot's warehouse table) that plan `plan_id` wrote or copied aside."""
    seq: int
    kind: str  # "write" or "snapshot"
    plan_id: str | None
    table: str
    keys: frozenset[str]
    # a write's: {other replayable table: {partition written: the partitions of it that one read}}
    reads: Mapping[str, Mapping[str, frozenset[str]]] = field(default_factory=dict)

    def read_of(self, table: str, key: str) -> frozenset[str]:
        """The partitions of `table` that this write's partition `key` was computed from."""
        return self.reads.get(table, {}).get(key, frozenset())


def plan_writes_chained(session: Session, plan_id: str, top: int, asset: str | None = None) -> list[Chained]:
    """The writes the chain recorded of the plan (of `asset`, when given) up to row `top`, after the
    last upgrade: the rows chain rows before it recorded carry the upgrade's seal, not its number."""
    return [c for c in chained_writes(session, top, floor=seals.last_upgrade(session))
            if c.kind == "write" and c.plan_id == plan_id and asset in (None, c.table)]


def chained_writes(session: Session, top: int, floor: int = 0) -> list[Chained]:
    """Every write and snapshot the chain recorded up to row `top`, from every one of its rows, each
    verified (a row read by its kind could be relabelled away unseen). A decision that reads from
    the ledger which partitions a plan wrote or snapshotted compares what it read with these: a
    whole sealed group deleted leaves no row to mismatch its seal (on PostgreSQL, hidden while a
    rollback waited for its lock, the partitions of a window run were left out of the rollback;
    while a withdraw waited, a plan that wrote was withdrawn: found by an attack)."""
    found: list[Chained] = []
    for row in evidence_log.rows_after(session, floor, top):
        partitions = row.payload.get("partitions") if isinstance(row.payload, dict) else None
        if row.kind in ("write", "snapshot") and isinstance(partitions, dict):
            found.append(Chained(row.seq, row.kind, row.plan_id, str(row.payload.get("table")), frozenset(partitions),
                                 _reads_of(row.payload.get("reads"))))
    return found


def _reads_of(found: object) -> dict[str, dict[str, frozenset[str]]]:
    """A write row's `reads` ({table: {partition: [keys]}}); rows of releases before it have none."""
    if not isinstance(found, dict):
        return {}
    return {str(t): {str(k): frozenset(str(u) for u in keys) for k, keys in per.items() if isinstance(keys, list)}
            for t, per in found.items() if isinstance(per, dict)}


def comparisons(latest: Mapping[str, LatestWrite | None]) -> dict[str, Comparison]:
    """The dual run of each partition's latest write, from `latest` entries (a cutover's streak is
    counted over them): only a result that checked that write's own bytes counts (the publish rule
    trusts no other)."""
    out = {}
    for key, entry in latest.items():
        if entry is None or CHANGES_AS_EXPECTED not in entry.gates:
            continue
        _, figures = entry.gates[CHANGES_AS_EXPECTED]
        matched = (figures.get("numbers") or {}).get(MATCHED)
        if matched is None or entry.checked.get(CHANGES_AS_EXPECTED) != entry.fingerprint.digest:
            continue
        dual = (figures.get("actual") or {}).get("dual_run") or {}
        out[key] = Comparison(key, bool(matched), str(dual.get("worst") or ""), dual.get("published_fingerprint"))
    return out


def code_versions(session: Session, asset: str, plan_id: str) -> dict[str, str | None]:
    """The code version of the latest write of each partition the plan wrote (one light query),
    checked against their seals."""
    top = evidence_log.last_before_reading(session)
    rows = store.latest_code_versions(session, asset, plan_id)
    seals.verify_read(session, "writes", ("asset", "plan_id", "partition_key", "code_version"),
                      [(asset, plan_id, *r) for r in rows], f" of plan {plan_id}", newest_by=("partition_key",))
    if not session.snapshot_transactions:
        # an engine that reads each statement afresh (PostgreSQL): the plan's newer writes of other
        # code, their whole group moved out of the read's way just while it read, had the window's
        # one code version gate pass (found by an attack); where a transaction reads one snapshot
        # (DuckDB, whose file no other process writes meanwhile) a group deleted for good is found
        # by publish's whole-record check
        read = {str(k): int(s) for k, _, s in rows}
        for chained in plan_writes_chained(session, plan_id, top, asset):
            newer = sorted(k for k in chained.keys if read.get(k, 0) < chained.seq)
            if newer:
                raise ForgedRecord(f"plan {plan_id}'s write of {asset} {newer[0]} (evidence row {chained.seq}) was "
                                   f"not read from {SCHEMA}.writes, an older one was", fix=seals.CHANGED_WHILE_READ_FIX)
    return {r[0]: r[1] for r in rows}


def fingerprints_written(session: Session, asset: str, plan_id: str, key: str) -> list[str]:
    """The fingerprints of every write of `key` under the plan, oldest first (the proof compares
    the last two), checked against their seals."""
    top = evidence_log.last_before_reading(session)
    rows = store.fingerprints_of(session, asset, plan_id, key)
    seals.verify_read(session, "writes", ("asset", "plan_id", "partition_key", "fingerprint"),
                      [(asset, plan_id, key, *r) for r in rows], f" of plan {plan_id}")
    # a write between two identical ones, its group deleted, would leave the last two identical
    read = {r[1] for r in rows}
    lost = [c.seq for c in chained_writes(session, top) if c.kind == "write" and c.plan_id == plan_id
            and c.table == asset and key in c.keys and c.seq not in read]
    if lost:
        raise ForgedRecord(f"plan {plan_id}'s write of {asset} {key} (evidence row {lost[0]}) is gone from "
                           f"{SCHEMA}.writes", fix=evidence_log.FORGED_FIX)
    return [str(r[0]) for r in rows]


def tables_claimed(session: Session) -> list[tuple[str, str | None]]:
    """(table's asset, the target asset that wrote it) of every target written and every published
    table published (None: only put back by a rollback, or published before publications named
    their target), as the ledger holds them and as the chain recorded them: with the ledger's rows
    hidden while a second definition's run asked, it published into the first's published table
    (found by an attack)."""
    top = evidence_log.last_before_reading(session)
    found = set(store.tables_claimed(session))
    for row in evidence_log.rows_after(session, 0, top):
        payload = row.payload if isinstance(row.payload, dict) else {}
        table, target = payload.get("table"), payload.get("target")
        if row.kind == "write" and isinstance(table, str):
            found.add((table, table))
            # the table its writes are published into, as the write's definitions declared it: a team's
            # own table adopted as `publish_as` holds rows before any publication names it, and a
            # month in another code location read it as a raw source, recorded no reads, and was left
            # published beside the days a plan published into it (found by an attack)
            published = payload.get("publish_as")
            if isinstance(published, str):
                found.add((published, table))
        elif row.kind == "publication" and isinstance(table, str):
            found.add((table, target if isinstance(target, str) else None))
    return sorted(found, key=lambda c: (c[0], c[1] or ""))


def partitioned_by(session: Session, asset: str) -> set[str]:
    """The partition columns the chain's writes of `asset` recorded (writes before this release
    recorded none). A key is history by its rows, its writes and its published rows, all asked by
    the partition column of the definitions loaded now: definitions partitioning the team's daily
    table by `region` found a region that held no rows "new", wrote rows of it into every day the
    team's history held, and publish gave them to consumers, with no plan (found by an attack)."""
    top = evidence_log.last_before_reading(session)
    found = set()
    for row in evidence_log.rows_after(session, 0, top):
        payload = row.payload if isinstance(row.payload, dict) else {}
        column = payload.get("partition_column")
        if row.kind == "write" and payload.get("table") == asset and isinstance(column, str):
            found.add(column)
    return found


def rewrites_without_plan(session: Session, asset: str | None = None, keys: Sequence[str] = ()) -> list[str]:
    """One line for each write under no plan of a partition written before it (all, or of `asset`'s
    `keys`). The permission never lets one through (a partition ever written is history, which only
    a plan rewrites), so the ledger holding one says its rows were hidden to let the write in and put
    back: a Materialize then wrote unplanned data that publish copied and `evidence verify` passed
    (found by an attack). Read after the rows were checked against their seals (publish, verify)."""
    if asset is not None and not keys:
        return []
    top = evidence_log.last_before_reading(session)
    rows = store.rewrites_without_plan(session, asset, keys)
    found = [f"{'' if asset else f'{a} '}{key}: written without a plan (write {wid}) over a partition written "
             f"before (write {first})" for a, key, wid, first in rows]
    if top:
        # and as the chain recorded the partitions' writes: the earlier write's whole group hidden
        # while publish waited for its lock, on PostgreSQL, let an unplanned rewrite be copied
        # (found by an attack; `evidence verify`, reading the whole record, found it only after);
        # the whole record's check asks it too: the group hidden again between its read of the
        # seals and this read passed it (found by an attack)
        said = {(str(a), str(key)) for a, key, _, _ in rows}
        found += _chained_rewrites(session, top, asset, keys, said)
    return found


def _chained_rewrites(session: Session, top: int, asset: str | None, keys: Sequence[str],
                      said: set[tuple[str, str]]) -> list[str]:
    """`rewrites_without_plan` as the chain recorded the writes (of `asset`'s `keys`, or of every
    table), but for the partitions in `said` (already found in the ledger)."""
    first: dict[tuple[str, str], int] = {}
    out = []
    for c in chained_writes(session, top):
        if c.kind != "write" or (asset is not None and c.table != asset):
            continue
        for key in sorted(c.keys if asset is None else c.keys & set(keys)):
            earlier = first.setdefault((c.table, key), c.seq)
            if earlier != c.seq and c.plan_id is None and (c.table, key) not in said:
                said.add((c.table, key))
                out.append(f"{'' if asset else f'{c.table} '}{key}: written without a plan (evidence row {c.seq}) "
                           f"over a partition written before (evidence row {earlier})")
    return out


def ever_written(session: Session, asset: str, keys: Sequence[str]) -> set[str]:
    """The keys of `asset` the framework ever wrote, under a plan or not: such a partition is
    history even when it holds no rows now. Not checked against seals: a row forged into `writes`
    can only make a partition need a plan, and one deleted is found by publish and rollback, which
    verify the whole record."""
    keys = list(dict.fromkeys(keys))
    if not keys:
        return set()
    return store.keys_ever_written(session, asset, keys)


@dataclass(frozen=True)
class RecordedFailure:
    asset: str
    partition_key: str
    gate: str
    figures: dict[str, Any]
    recorded_at: str
    write_id: int | None
    seq: int = 0  # the chain row that recorded it: a later write is one with a later chain row


def failures_of_plan(session: Session, plan_id: str) -> list[RecordedFailure]:
    """Every failing gate result ever recorded under the plan, oldest first, checked against seals,
    and every failure the chain's `gates` rows of the plan name read: moved out of the read's way
    (another plan_id, on PostgreSQL just while it read), a repaired failure left the evidence with
    no failure and no repair (found by an attack)."""
    top = evidence_log.last_before_reading(session)
    rows = store.failed_results(session, plan_id)
    seals.verify_read(session, "gate_results", ("plan_id", "passed", "asset", "partition_key", "gate", "figures",
                                                "recorded_at", "write_id"),
                      [(plan_id, False, *r) for r in rows], f" of plan {plan_id}")
    read = {(str(a), str(k), str(g), s) for a, k, g, _, _, _, s in rows}
    # (the rows a chain row recorded before an upgrade carry the upgrade's seal, not its number)
    for row in evidence_log.rows_after(session, seals.last_upgrade(session), top):
        payload = row.payload if isinstance(row.payload, dict) else {}
        if row.kind != "gates" or row.plan_id != plan_id:
            continue
        failed = {(k, UNCHANGED_SINCE_CHECKED) for k in payload.get("judged") or {}} \
            if payload.get("publish_refused") else {(k, g) for k, gates in (payload.get("failed") or {}).items()
                                                    for g in gates}
        gone = sorted((k, g) for k, g in failed if (payload.get("table"), k, g, row.seq) not in read)
        if gone:
            raise ForgedRecord(f"plan {plan_id}'s failing result {gone[0][1]} of {gone[0][0]} (evidence row {row.seq}) "
                               f"was not read from {SCHEMA}.gate_results", fix=seals.CHANGED_WHILE_READ_FIX)
    return [RecordedFailure(str(a), str(k), str(g), json.loads(f), str(at), None if w is None else int(w),
                            seq=int(s) if s is not None else 0)
            for a, k, g, f, at, w, s in rows]


def code_written(session: Session, plan_id: str) -> list[tuple[str, str | None, str | None, int, str, str]]:
    """Each (table, code version, code identity) the plan's writes ran: partitions, first and last time."""
    # the rows themselves, checked as read, then counted: a count the engine made of rows read apart
    # from their seals' could be of rows changed between the two reads (PostgreSQL)
    top = evidence_log.last_before_reading(session)
    rows = store.writes_of_plan(session, plan_id)
    seals.verify_read(session, "writes", ("plan_id", "asset", "code_version", "code_identity", "partition_key",
                                          "recorded_at"), [(plan_id, *r) for r in rows], f" of plan {plan_id}")
    # and every write the chain recorded of the plan read (one moved out of the read's way, on
    # PostgreSQL just while it read, went uncounted: found by an attack)
    read = {(str(a), str(k), s) for a, _, _, k, _, s in rows}
    for chained in plan_writes_chained(session, plan_id, top):
        gone = sorted(k for k in chained.keys if (chained.table, k, chained.seq) not in read)
        if gone:
            raise ForgedRecord(f"plan {plan_id}'s write of {chained.table} {gone[0]} (evidence row {chained.seq}) was "
                               f"not read from {SCHEMA}.writes", fix=seals.CHANGED_WHILE_READ_FIX)
    runs: dict[tuple[str, str | None, str | None], tuple[set[str], str, str]] = {}
    for asset, version, identity, key, at, _ in rows:
        keys, first, last = runs.setdefault((str(asset), version, identity), (set(), str(at), str(at)))
        keys.add(str(key))
        runs[(str(asset), version, identity)] = (keys, min(first, str(at)), max(last, str(at)))
    return sorted(((a, v, i, len(keys), first, last) for (a, v, i), (keys, first, last) in runs.items()),
                  key=lambda r: (r[4], r[0]))

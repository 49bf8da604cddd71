"""The plan of record: plans, their versions and signed approvals, and the phase machine's funnel.

Once a version's approvals are complete, its canonical content lives here under its sha256 and
everything (the write permission, the coordinator, runs, reconcile, publish, rollback) reads the
window, proof partitions, mode and thresholds from here, never from a file path on one machine.
Approving an edited plan records the new version beside the old one; the plan of record moves to
it only when its own approvals are complete, counting, where another version is the plan of record,
only those given since that one's adoption (`adoption`). Every phase change goes through `transition`.

What is read here is re-verified: every change of a plan's row is a chain row carrying the whole
new state, and a row of `plans` that differs from the chain's last record of it is refused; a
version's content must hash to its sha256 and its partitions to the digest its chain row holds.
Someone who can write the warehouse but not read the evidence key cannot forge either.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar

from backfill_assets import faults
from backfill_assets.control import evidence_log
from backfill_assets.control.names import SCHEMA
from backfill_assets.errors import ForgedRecord, UsageError
from backfill_assets.plan.identity import canonical_text, plan_from_canonical
from backfill_assets.plan.model import Plan
from backfill_assets.plan.phases import ACTIVE, PAST_PROOF, Hold, Phase, check_transition
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.state_store import evidence as evidence_store
from backfill_assets.warehouse.state_store import plans as store

# the chain rows that record a plan's row; each carries the row's whole new state under "state"
STATE_KINDS = evidence_log.PLAN_STATE_KINDS
_STATE_FIELDS = ("phase", "target", "owner", "approved_sha256", "hold")
_T = TypeVar("_T")


@dataclass(frozen=True)
class PlanVersion:
    """One version of a plan as recorded: its content and the partition keys it resolved to, for
    its target (`partition_keys`) and for every table of its graph (`members`, target first)."""

    sha256: str
    plan: Plan
    partition_keys: tuple[str, ...]
    source_file: str | None
    members: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __post_init__(self) -> None:
        if not self.members:  # a plan of one table
            object.__setattr__(self, "members", ((self.plan.target, tuple(self.partition_keys)),))

    @property
    def proof_keys(self) -> tuple[str, ...]:
        return tuple(self.plan.proof_keys)

    @property
    def assets(self) -> tuple[str, ...]:
        return tuple(a for a, _ in self.members)

    def keys_of(self, asset: str) -> tuple[str, ...]:
        return next((keys for a, keys in self.members if a == asset), ())


@dataclass(frozen=True)
class PlanState:
    """A plan's row in the record with its plan of record (None until a version is approved)."""

    plan_id: str
    phase: Phase
    target: str
    owner: str
    approved_sha256: str | None
    hold: Hold | None
    updated_at: str
    version: PlanVersion | None

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE

    @property
    def approved(self) -> PlanVersion:
        if self.version is None:
            raise UsageError(f"plan {self.plan_id} has no approved version yet",
                             fix="collect its approvals with `backfill plan approve`")
        return self.version

    @property
    def partition_keys(self) -> tuple[str, ...]:
        return self.version.partition_keys if self.version else ()

    @property
    def proof_keys(self) -> tuple[str, ...]:
        return self.version.proof_keys if self.version else ()

    @property
    def past_proof(self) -> bool:
        return self.phase in PAST_PROOF

    @property
    def assets(self) -> tuple[str, ...]:
        """The tables the plan writes, its target first (its target alone before approval)."""
        return self.version.assets if self.version else (self.target,)

    def involves(self, asset: str) -> bool:
        return asset == self.target or asset in self.assets

    def keys_of(self, asset: str) -> tuple[str, ...]:
        return self.version.keys_of(asset) if self.version else ()

    def covers(self, key: str, asset: str | None = None) -> bool:
        """Whether the plan holds partition `key` of `asset` (its target when None)."""
        if self.version is None:
            return False
        asset = asset or self.target
        return key in _key_set(self.version.sha256, asset, self.version.keys_of(asset))


@lru_cache(maxsize=256)
def _key_set(sha: str, asset: str, keys: tuple[str, ...]) -> frozenset[str]:
    return frozenset(keys)


def members_text(target: str, members: Mapping[str, Sequence[str]]) -> str:
    """How a version's partitions are stored: the target's keys as a list (what a plan of one table
    always stored), or every table's keys, the target first, when the plan covers a graph."""
    if list(members) == [target]:
        return json.dumps(list(members[target]))
    return json.dumps({"members": [[asset, list(keys)] for asset, keys in members.items()]})


@lru_cache(maxsize=64)
def _version_from(sha: str, content: str, keys: str, source: str | None) -> PlanVersion:
    # versions are content-addressed and immutable, so parsing each once per process is safe
    try:
        plan = plan_from_canonical(content)
        stored = json.loads(keys)
        if isinstance(stored, dict):
            members = tuple((str(a), tuple(k)) for a, k in stored["members"])
        else:
            members = ((plan.target, tuple(stored)),)
        return PlanVersion(sha, plan, members[0][1], source, members)
    except (ValueError, TypeError, KeyError, IndexError):
        # read without the key, a row an insider typed over is unverified: its partitions (or a
        # planted version's content) that are no plan's stopped the guard with an internal error
        # (found by an attack); a reader with the key refuses the row before it is parsed
        raise ForgedRecord(f"version {sha[:12]} in {SCHEMA}.plan_versions holds content or partitions that are no "
                           "plan's", fix=evidence_log.FORGED_FIX) from None


def keys_digest(keys_text: str) -> str:
    return hashlib.sha256(keys_text.encode("utf-8")).hexdigest()


# verified versions, by the row as read: a row edited later is read, and refused, again
_VERSIONS: dict[tuple[Any, ...], PlanVersion] = {}


def version(session: Session, sha: str) -> PlanVersion | None:
    row = store.version_row(session, sha)
    if row is None:
        return None
    cache_key = (session.engine.describe(), *row)
    found = _VERSIONS.get(cache_key)
    if found is not None:
        return found
    _, plan_id, content, keys, source, seq = row
    where = f"version {sha[:12]} of plan {plan_id} in {SCHEMA}.plan_versions"
    if hashlib.sha256(str(content).encode("ascii", errors="replace")).hexdigest() != sha:
        raise ForgedRecord(f"{where}: its content does not hash to its sha256 (it was edited)",
                           fix=evidence_log.FORGED_FIX)
    verify = evidence_log.can_verify(session)
    if verify and seq is not None:
        sealed = evidence_log.by_seq(session, [int(seq)])[int(seq)]
        if sealed.kind != "plan_version" or sealed.payload.get("sha256") != sha or \
                sealed.payload.get("keys_sha256") != keys_digest(str(keys)):
            raise ForgedRecord(f"{where}: its partitions are not the ones the evidence chain recorded",
                               fix=evidence_log.FORGED_FIX)
        # the file it was approved from, which the evidence names: an UPDATE of the column put
        # another file in the rendered evidence and `evidence verify` passed (found by an attack)
        if "file" in sealed.payload and sealed.payload["file"] != source:
            raise ForgedRecord(f"{where}: its file is not the one the evidence chain recorded",
                               fix=evidence_log.FORGED_FIX)
    elif verify:
        raise ForgedRecord(f"{where} carries no seal", fix=evidence_log.FORGED_FIX)
    found = _version_from(sha, str(content), str(keys), source)
    if verify and len(_VERSIONS) < 256:
        _VERSIONS[cache_key] = found
    return found


def _state_of(row: tuple[Any, ...]) -> dict[str, str | None]:
    return dict(zip(_STATE_FIELDS, (row[1], row[2], row[3], row[4], row[5]), strict=True))


def _chain_states(session: Session, plan_ids: list[str],
                  checked: tuple[evidence_log.Counts | None] | None = None) -> dict[str, evidence_log.EvidenceRow]:
    """The chain's last record of each plan's row (verified). `checked`: the index this decision
    already checked (`check_index`'s answer, in a 1-tuple; None: check it here)."""
    if not plan_ids:
        return {}
    # each plan's last row is the one the chain indexes
    counts = evidence_log.check_index(session) if checked is None else checked[0]
    found: dict[str, evidence_log.EvidenceRow] = {}
    if counts is not None:
        # the rows the checked statement named, never a second statement's (a view can answer each
        # statement differently); each plan's newest state row must carry its state (no skipping)
        seqs = {p: counts[("plan", p)][0] for p in plan_ids if ("plan", p) in counts}
        rows = evidence_log.by_seq(session, list(seqs.values())) if seqs else {}
        for p, s in seqs.items():
            row = rows[s]
            if row.plan_id != p or row.kind not in STATE_KINDS:
                raise ForgedRecord(f"evidence row {s} is not plan {p}'s", fix=evidence_log.FORGED_FIX)
            if "state" in row.payload:
                found[p] = row
                continue
            # a row of an earlier release without its state: every state row of the plan, verified
            every = [r for r in _plan_rows(session, p, counts) if r.kind in STATE_KINDS]
            stated = [r for r in every if "state" in r.payload]
            if stated:
                found[p] = stated[-1]
        return found
    for raw in evidence_store.latest_of_plans(session, STATE_KINDS, plan_ids):
        if raw[2] in found:
            continue
        row = evidence_log.row_of(raw)
        if "state" in row.payload:
            found[str(raw[2])] = row
    evidence_log.verified(session, list(found.values()))
    return found


def _plan_rows(session: Session, plan_id: str, counts: evidence_log.Counts | None,
               kinds: tuple[str, ...] | None = None) -> list[evidence_log.EvidenceRow]:
    """Every chain row of the plan (of `kinds`, which hold its state rows) in order, each verified,
    its state rows as many as the checked chain index `counts` says (none hidden; None: a chain of
    an earlier release, not indexed)."""
    every = sorted(evidence_log.verified(session, evidence_log.rows(session, plan_id=plan_id, kind=kinds)),
                   key=lambda r: r.seq)
    if counts is not None and \
            len({r.seq for r in every if r.kind in STATE_KINDS}) != counts.get(("plan", plan_id), (0, 0))[1]:
        # forged, unless a change of the plan committed between the index's read and this one
        # (PostgreSQL reads each statement afresh): `_read_again` reads both again
        raise PlanRowDisagrees(evidence_log.INDEX_BROKEN, fix=evidence_log.FORGED_FIX)
    return every


class PlanRowDisagrees(ForgedRecord):
    """A plan's row differs from the chain's last record of it: forged, unless the two were read
    apart and a change of the plan committed between them (`_read_again`)."""


# reads of the plans tried before a row that differs from the chain is called forged: each change
# of a plan commits its row and its chain row together, so two reads apart see both or neither
# unless one commits between them, which a third read would need to meet again
READS = 3


def _read_again(session: Session, read: Callable[[], _T]) -> _T:
    """`read()`, again when its plan rows and the chain disagreed and the engine reads each
    statement afresh (PostgreSQL, or outside a transaction): a pause committed between the two reads
    had a healthy plan called forged (found by an attack). The last read, outside a transaction,
    holds the chain's turn, so no change commits between its two statements; a read that still
    disagrees is refused. Every read that passes compared a row with the chain's record of it."""
    for _ in range(READS - 1):
        try:
            return read()
        except PlanRowDisagrees:
            if session.snapshot_number is not None:
                raise
    if session.in_transaction:  # the chain is the last lock a writer takes: not taken before others here
        return read()
    # the last read holds the chain's turn, which every change of a plan holds until its row and
    # its chain row commit together: none can commit between this read's two statements (three
    # changes, each committed between a read's index and its plans, had a status called forged:
    # found by an attack)
    with session.transaction():
        evidence_log.hold(session)
        return read()


def _states(session: Session, rows: list[tuple[Any, ...]],
            checked: tuple[evidence_log.Counts | None] | None = None) -> list[PlanState]:
    if rows and evidence_log.can_verify(session):
        chain = _chain_states(session, [r[0] for r in rows], checked)
        for row in rows:
            sealed = chain.get(row[0])
            if sealed is None:
                raise PlanRowDisagrees(f"plan {row[0]} is in {SCHEMA}.plans, but the evidence chain never recorded it",
                                 fix=evidence_log.FORGED_FIX)
            expected = sealed.payload["state"]
            for name, value in _state_of(row).items():
                if expected.get(name) != value:
                    raise PlanRowDisagrees(
                        f"plan {row[0]}: {SCHEMA}.plans says {name} {value!r}, but the evidence chain's last record "
                        f"of it (row {sealed.seq}) says {expected.get(name)!r}", fix=evidence_log.FORGED_FIX)
    return [PlanState(r[0], *_phase_and_hold(r), r[6], _approved_version(session, r[0], r[4]))
            for r in rows]


def _phase_and_hold(row: tuple[Any, ...]) -> tuple[Phase, str, str, str | None, Hold | None]:
    """The row's phase, target, owner, plan of record and hold; a phase or hold that is no word of
    ours is a forged row (read without the key, unverified, it stopped the guard with an internal
    error: found by an attack)."""
    try:
        return Phase(row[1]), row[2], row[3], row[4], Hold(row[5]) if row[5] else None
    except ValueError:
        raise ForgedRecord(f"plan {row[0]}'s row in {SCHEMA}.plans holds phase {str(row[1])[:40]!r} and hold "
                           f"{str(row[5])[:40]!r}, which are no phase and hold of a plan",
                           fix=evidence_log.FORGED_FIX) from None


def _approved_version(session: Session, plan_id: str, sha: str | None) -> PlanVersion | None:
    if not sha:
        return None
    found = version(session, sha)
    if found is None:  # a plan of record without its content would hold no partition: no claim, no freeze
        raise ForgedRecord(f"plan {plan_id}'s plan of record {sha[:12]} is gone from {SCHEMA}.plan_versions",
                           fix=evidence_log.FORGED_FIX)
    return found


def verify_all(session: Session) -> list[PlanState]:
    """Every plan's row and version against the chain, and every plan and version the chain
    recorded still there: a row deleted outright is found here (publish, rollback, `evidence
    verify`), not by the decisions that read one plan."""
    # the chain before the tables, each time: a plan, version or approval committed between the two
    # reads (its rows and its chain row commit together) is then in the table read second, never
    # taken for a row deleted (PostgreSQL reads each statement afresh: found by an attack)
    recorded = evidence_store.plan_ids_of_kinds(session, STATE_KINDS)
    faults.checkpoint("record.verify_all.after_plans_chain")
    states = all_plans(session)
    gone = sorted(recorded - {s.plan_id for s in states})
    if gone:
        raise ForgedRecord(f"plan {gone[0]} is in the evidence chain, but its row is gone from {SCHEMA}.plans",
                           fix=evidence_log.FORGED_FIX)
    versions = evidence_log.rows(session, kind="plan_version")
    faults.checkpoint("record.verify_all.after_versions_chain")
    stored = store.version_shas(session)
    for row in versions:
        sha = str(row.payload.get("sha256") or "")
        if sha and sha not in stored:
            raise ForgedRecord(f"version {sha[:12]} of plan {row.plan_id} is in the evidence chain (row {row.seq}), "
                               f"but gone from {SCHEMA}.plan_versions", fix=evidence_log.FORGED_FIX)
    # approvals deleted had every run ask for the signatures again (found by an attack); those an
    # upgrade from schema 2 moved aside (`approvals_v2`) are the chain's rows before the upgrade. The
    # chain is read before the table: a row and its chain row commit together, so one committed
    # between the two reads is in the table if its chain row was read
    upgraded = evidence_store.last_seq_of_kind(session, "upgrade")
    chained = evidence_log.rows(session, kind="approval")
    held = store.approval_seqs(session)
    for row in chained:
        if row.seq > upgraded and row.seq not in held:
            raise ForgedRecord(f"the approval by {row.payload.get('principal')} of plan {row.plan_id} is in the "
                               f"evidence chain (row {row.seq}), but gone from {SCHEMA}.approvals",
                               fix=evidence_log.FORGED_FIX)
    return states


def get(session: Session, plan_id: str, *, lock: bool = False, exclusive: bool = False) -> PlanState | None:
    """The plan's state; with `lock`, its row is held (shared) until the transaction ends: a
    writer's re-check, so a withdraw or rollback cannot slip between the check and the write;
    `exclusive` for the one about to change it."""
    def read() -> PlanState | None:
        row = store.plan_row(session, plan_id, lock=lock, exclusive=exclusive)
        faults.checkpoint("record.get.after_row")
        return _states(session, [row])[0] if row else None

    return _read_again(session, read)


def require(session: Session, plan_id: str, *, lock: bool = False, exclusive: bool = False) -> PlanState:
    state = get(session, plan_id, lock=lock, exclusive=exclusive)
    if state is None:
        raise UsageError(f"plan {plan_id} is not in the control record",
                         fix="approve it first with `backfill plan approve`")
    return state


def all_plans(session: Session, target: str | None = None) -> list[PlanState]:
    """Every plan, or those that write `target` (as their target or a table of their graph)."""
    # every row is read and verified, then filtered: a row whose target or phase was edited to hide
    # it from a filter is refused, not skipped; and every plan the chain indexes (read first: a plan
    # recorded meanwhile is committed with its row) must have one: a running plan's row deleted
    # while publish waited for its lock, on PostgreSQL, had its partitions published as no plan's
    # (found by an attack), a check only `evidence verify` made before
    return [s for s in _read_again(session, lambda: _all_plans(session)) if target is None or s.involves(target)]


def _all_plans(session: Session) -> list[PlanState]:
    verify = evidence_log.can_verify(session)
    counts = evidence_log.check_index(session) if verify else None
    faults.checkpoint("record.all_plans.after_index")
    rows = store.plan_rows(session)
    indexed = {p for kind, p in counts if kind == "plan" and p is not None} if counts is not None else set()
    if counts is not None:
        gone = sorted(indexed - {str(r[0]) for r in rows})
        if gone:
            raise ForgedRecord(f"plan {gone[0]} is in the evidence chain, but its row is gone from {SCHEMA}.plans",
                               fix=evidence_log.FORGED_FIX)
    # the states against the index just checked (a second check cost each read of the plans a
    # statement), unless a plan recorded since it was read is among the rows: then against a new one
    known = verify and {str(r[0]) for r in rows} <= indexed
    return _states(session, rows, (counts,) if known else None)


def active_plans(session: Session, target: str | None = None) -> list[PlanState]:
    return [s for s in all_plans(session, target) if s.active]


def _chain_state(state: PlanState | None, **changes: str | None) -> dict[str, str | None]:
    base = {} if state is None else {"phase": state.phase.value, "target": state.target, "owner": state.owner,
                                     "approved_sha256": state.approved_sha256,
                                     "hold": None if state.hold is None else state.hold.value}
    return {**base, **changes}


def record_version(session: Session, plan: Plan, sha: str, keys: list[str], source_file: str | None,
                   actor: str, members: Mapping[str, Sequence[str]] | None = None) -> PlanState:
    """Remember a version of the plan (first approval of it); the plan row starts as drafted.
    `members`: every table's partitions when the plan covers a graph ({asset: keys}, target first)."""
    existing = get(session, plan.plan_id)
    if existing is None and evidence_log.can_verify(session) and _chain_states(session, [plan.plan_id]):
        # its row was deleted: starting it again as drafted would reuse its writes and snapshots
        raise ForgedRecord(f"plan {plan.plan_id} is in the evidence chain, but its row is gone from {SCHEMA}.plans",
                           fix=evidence_log.FORGED_FIX)
    if version(session, sha) is None or existing is None:
        keys_text = members_text(plan.target, members or {plan.target: keys})
        seq = evidence_log.next_seq(session)
        payload: dict[str, object] = {"sha256": sha, "partitions": len(keys), "first": keys[0], "last": keys[-1],
                                      "file": source_file, "keys_sha256": keys_digest(keys_text)}
        if version(session, sha) is None:
            store.insert_version(session, sha, plan.plan_id, canonical_text(plan), keys_text, source_file,
                                 evidence_log.now_iso(), seq)
        if existing is None:
            store.insert_plan(session, plan.plan_id, Phase.DRAFTED.value, plan.target, plan.owner,
                              evidence_log.now_iso())
            payload["state"] = _chain_state(None, phase=Phase.DRAFTED.value, target=plan.target, owner=plan.owner,
                                            approved_sha256=None, hold=None)
        else:  # the plan's last state row carries its state too, unchanged (none was skipped over)
            payload["state"] = _chain_state(existing)
        evidence_log.append(session, plan_id=plan.plan_id, kind="plan_version", actor=actor, payload=payload,
                            seq=seq)
    return require(session, plan.plan_id)


@dataclass(frozen=True)
class RecordedApproval:
    principal: str
    statement: str
    signature: str
    key_fingerprint: str
    trust_version: int
    actor: str
    approved_at: str


def approvals(session: Session, sha: str) -> list[RecordedApproval]:
    """The signatures recorded for a version, as stored: they authenticate themselves, so whoever
    counts them verifies each under the pinned trust root (`control.authority`)."""
    return [RecordedApproval(r[0], r[1], r[2], r[3], int(r[4]), r[5], r[6])
            for r in store.approval_rows(session, sha)]


def add_approval(session: Session, plan_id: str, sha: str, approval: RecordedApproval) -> bool:
    """Record a verified approval once; False when this very signature is already recorded."""
    if any((a.principal, a.statement, a.signature) == (approval.principal, approval.statement, approval.signature)
           for a in approvals(session, sha)):
        return False
    seq = evidence_log.next_seq(session)
    store.insert_approval(session, sha, plan_id, approval.principal, approval.statement, approval.signature,
                          approval.key_fingerprint, approval.trust_version, approval.actor, approval.approved_at, seq)
    evidence_log.append(session, plan_id=plan_id, kind="approval", actor=approval.actor, seq=seq, payload={
        "sha256": sha, "principal": approval.principal, "key": approval.key_fingerprint,
        "trust_version": approval.trust_version, "statement": approval.statement, "signature": approval.signature})
    return True


@dataclass(frozen=True)
class Adoption:
    """When a version last became a plan's plan of record, and the approvals the chain recorded
    after that: only those, of statements naming this adoption (`mark`), may replace it
    (`approving.approve`)."""
    sha256: str  # the version adopted
    row_hash: str  # the keyed hash of the chain row that recorded it: unknown until it was recorded
    adopted: tuple[str, ...]  # every version made the plan of record up to this adoption, this one last
    approvals_after: frozenset[tuple[str, str]]  # (statement, signature) of the chain's later approval rows

    @property
    def mark(self) -> str:
        """What a `plan replacement` statement names as the plan of record it replaces."""
        return f"{self.sha256}@{self.row_hash}"


def _adoptions(session: Session, plan_id: str) -> tuple[list[evidence_log.EvidenceRow],
                                                       list[tuple[evidence_log.EvidenceRow, str]]]:
    """The plan's chain rows (each verified, its state rows as many as the chain index counts: none
    hidden), and each change of its plan of record, in order: (the state row that recorded it, the
    version it made the plan of record). Read again where a change of the plan committed between
    the index's read and the rows' (a pause during `backfill status` on PostgreSQL was called a
    forgery: found by an attack)."""
    # its state rows and approvals: not its runs' rows (three a run), which it would read at every decision
    kinds = (*STATE_KINDS, "approval")
    if not evidence_log.can_verify(session):
        # a reader without the key (an approver printing a statement, a CI job) decides nothing and
        # reports what it reads, unverified: a forged mark in a statement only makes it count for nothing
        every = sorted(evidence_log.rows(session, plan_id=plan_id, kind=kinds), key=lambda r: r.seq)
    else:
        every = _read_again(session, lambda: _plan_rows(session, plan_id, evidence_log.check_index(session), kinds))
    changes: list[tuple[evidence_log.EvidenceRow, str]] = []
    before = None
    for row in (r for r in every if r.kind in STATE_KINDS):
        # read as data of any shape: a keyless reader's rows are unverified (a payload an insider
        # made a string was an internal error there: found by a review)
        payload = row.payload if isinstance(row.payload, dict) else {}
        found = payload.get("state")
        state: dict[str, Any] = found if isinstance(found, dict) else {}
        of_record = payload.get("sha256") if row.kind == "plan_of_record" else state.get("approved_sha256", before)
        of_record = of_record if isinstance(of_record, str) else None
        if of_record is not None and of_record != before:
            changes.append((row, of_record))
        before = of_record
    return every, changes


def _adoption_at(every: list[evidence_log.EvidenceRow], row: evidence_log.EvidenceRow, sha: str,
                 changes: list[tuple[evidence_log.EvidenceRow, str]]) -> Adoption:
    adopted = tuple(dict.fromkeys([*(v for r, v in changes if r.seq <= row.seq and v != sha), sha]))
    return Adoption(sha, row.row_hash, adopted,
                    frozenset((str(r.payload.get("statement")), str(r.payload.get("signature"))) for r in every
                              if r.kind == "approval" and r.seq > row.seq and isinstance(r.payload, dict)))


def adoption(session: Session, plan_id: str, sha: str) -> Adoption:
    """`sha`'s last adoption as the chain recorded it. A plan of an earlier release whose rows never
    name the change answers its newest state row."""
    return _last_adoption(session, plan_id, sha, *_adoptions(session, plan_id))


def _last_adoption(session: Session, plan_id: str, sha: str, every: list[evidence_log.EvidenceRow],
                   changes: list[tuple[evidence_log.EvidenceRow, str]]) -> Adoption:
    states = [r for r in every if r.kind in STATE_KINDS]
    if not states:
        raise ForgedRecord(f"plan {plan_id} has a plan of record, but the evidence chain never recorded the plan",
                           fix=evidence_log.FORGED_FIX)
    found = [row for row, adopted in changes if adopted == sha]
    return _adoption_at(every, found[-1] if found else states[-1], sha, changes)


def replaced(session: Session, plan_id: str, sha: str) -> Adoption | None:
    """The adoption of a plan of record that version `sha`'s approvals must name (`plan
    replacement` statements, `Adoption.mark`): the plan of record's, when `sha` is another version
    (what it would replace); when `sha` is the plan of record, the one its own adoption replaced, so
    every decision counts its approvals as its adoption did (a superseded version made the plan of
    record again by a chain row alone ran on its old signatures: found by an attack). None where
    there is none (a first approval, a first plan of record)."""
    every, changes = _adoptions(session, plan_id)
    # the plan of record as the chain's verified rows last changed it (the plan's row says the same,
    # or its reads are refused); a plan of an earlier release whose rows never name it: its row
    current = changes[-1][1] if changes else None
    if current is None:
        state = get(session, plan_id)
        current = None if state is None else state.approved_sha256
    if current is None:
        return None
    if current != sha:
        return _last_adoption(session, plan_id, current, every, changes)
    last = max((i for i, (_, adopted) in enumerate(changes) if adopted == sha), default=None)
    if not last:  # its first adoption, or a chain of an earlier release that never named it
        return None
    row, before = changes[last - 1]
    return _adoption_at(every, row, before, changes)


def adoptions(session: Session, plan_id: str) -> list[tuple[evidence_log.EvidenceRow, str]]:
    """Each change of the plan's plan of record, in order: (the chain row that recorded it, the
    version it made the plan of record), a chain of an earlier release's state rows included."""
    return _adoptions(session, plan_id)[1]


def replaced_at_adoption(session: Session, plan_id: str, sha: str) -> Adoption | None:
    """The adoption that version `sha`'s last adoption replaced, as that adoption counted its
    approvals (`replaced` answers for now: for a version superseded since, the plan of record it
    would replace today); for a version never adopted, `replaced`. For the rendered evidence,
    which says how each version of a plan was adopted."""
    every, changes = _adoptions(session, plan_id)
    last = max((i for i, (_, adopted) in enumerate(changes) if adopted == sha), default=None)
    if last is None:
        return replaced(session, plan_id, sha)
    if not last:
        return None
    row, before = changes[last - 1]
    return _adoption_at(every, row, before, changes)


def replaced_by(session: Session, plan_id: str, sha: str) -> str | None:
    """What a statement approving version `sha` names as the plan of record it replaces
    (`replaced`), or None: a `plan approval` statement then."""
    found = replaced(session, plan_id, sha)
    return None if found is None else found.mark


def adopt(session: Session, plan_id: str, sha: str, actor: str) -> PlanState:
    """Make `sha` the plan of record (its approvals are complete). Only the lifecycle calls it:
    `lifecycle.approvals_complete` then approves a drafted plan."""
    state = require(session, plan_id, exclusive=True)
    chosen = version(session, sha)
    assert chosen is not None
    store.set_plan_of_record(session, plan_id, sha, chosen.plan.target, chosen.plan.owner, evidence_log.now_iso())
    evidence_log.append(session, plan_id=plan_id, kind="plan_of_record", actor=actor, payload={
        "sha256": sha, "previous": state.approved_sha256,
        "state": _chain_state(state, approved_sha256=sha, target=chosen.plan.target, owner=chosen.plan.owner)})
    return require(session, plan_id)


def transition(session: Session, plan_id: str, target: Phase, actor: str, note: str = "") -> PlanState:
    """The one place a plan's phase changes; recorded in the evidence in the same transaction.
    Called only by `backfill_assets.lifecycle`, which decides when (tests/test_architecture.py)."""
    with session.transaction():
        state = require(session, plan_id, exclusive=True)
        check_transition(plan_id, state.phase, target)
        store.set_phase(session, plan_id, target.value, evidence_log.now_iso())
        evidence_log.append(session, plan_id=plan_id, kind="transition", actor=actor, payload={
            "from": state.phase.value, "to": target.value, "note": note,
            "sha256": state.approved_sha256, "state": _chain_state(state, phase=target.value)})
        return require(session, plan_id)


def set_hold(session: Session, plan_id: str, hold: Hold | None, actor: str, note: str = "") -> PlanState:
    """Pause, cancel or resume (None) a plan's further runs; called only by `backfill_assets.lifecycle`."""
    to = None if hold is None else Hold(hold).value  # stored and sealed as the plain word
    with session.transaction():
        state = require(session, plan_id, exclusive=True)
        store.set_hold(session, plan_id, to, evidence_log.now_iso())
        evidence_log.append(session, plan_id=plan_id, kind="hold", actor=actor, payload={
            "from": None if state.hold is None else state.hold.value, "to": to, "note": note,
            "state": _chain_state(state, hold=to)})
        return require(session, plan_id)


def seal_upgraded_plans(session: Session, actor: str) -> None:
    """After an upgrade from schema 2 (no plan active): one chain row per version and per plan, so
    the chain records every version and every row of `plans` as it stood when upgraded."""
    for sha, plan_id, keys in store.unsealed_versions(session):
        seq = evidence_log.next_seq(session)
        store.seal_version(session, sha, seq)
        evidence_log.append(session, plan_id=plan_id, kind="plan_version", actor=actor, seq=seq, payload={
            "sha256": sha, "keys_sha256": keys_digest(str(keys)), "note": "sealed by the upgrade from schema 2"})
    for row in store.plan_rows(session):
        evidence_log.append(session, plan_id=row[0], kind="plan_state", actor=actor, payload={
            "note": "recorded by the upgrade from schema 2", "state": _state_of(row)})

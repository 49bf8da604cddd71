"""The trust root pinned in the control record: allowed_signers, the policy, the warehouse's id.

`backfill init` pins the first root (the team's reviewed files) and creates the warehouse's id.
Every later change must carry signatures, over a `trust root` statement naming the new files'
sha256 and the root it replaces, of the quorum of the root *currently pinned*: someone who can
run the CLI cannot list their own keys as alice and bob. Each pin is a chain row.

`current` re-verifies the whole history on every read (cached per process while it is
unchanged): the first root's chain row under the evidence key, each later one's signatures under
the root before it, and each stored file against its sha256. A root forged by someone who can
write the warehouse is refused, never obeyed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backfill_assets.control import evidence_log
from backfill_assets.control.names import SCHEMA
from backfill_assets.errors import ForgedRecord, TrustRootError, UsageError
from backfill_assets.signing.allowed_signers import AllowedSigners
from backfill_assets.signing.statements import TRUST_ROOT, Statement
from backfill_assets.trust.policy import Policy, Requirement
from backfill_assets.trust.root import Candidate, Tally, TrustRoot, tally
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.state_store import schema as meta_store
from backfill_assets.warehouse.state_store import trust as store

LEGACY_PIN_KEY = "approvers_pin"  # schema 2 pinned only the sha256 of allowed_signers here
_NO_ROOT_FIX = ("pin the team's reviewed files once: `backfill init --allowed-signers approvers/allowed_signers "
                "[--policy approvers/policy.yaml]`")


@dataclass(frozen=True)
class PinnedRoot:
    root: TrustRoot
    pinned_by: str
    pinned_at: str
    signed_by: tuple[str, ...]  # who signed this change (empty for the first root)

    def describe(self) -> str:
        who = f", signed by {', '.join(self.signed_by)}" if self.signed_by else " (the first root)"
        return f"{self.root.describe()}, pinned by {self.pinned_by} at {self.pinned_at}{who}"


_CACHE: dict[tuple[str, str], list[PinnedRoot]] = {}


def _rows(session: Session) -> tuple[list[tuple[Any, ...]], tuple[int, int | None]]:
    """The pinned roots, and how many pins the chain recorded with the last one's number: each row
    is checked against its own chain row, and these find a row deleted (the pin that removed a
    leaked key) or all of them (so that `init` would pin a first root again)."""
    from backfill_assets.control.schema import SCHEMA_VERSION, schema_version

    if schema_version(session) != SCHEMA_VERSION:  # before an upgrade there is no trust_roots table
        return [], (0, None)
    counts = evidence_log.check_index(session)  # the pins counted are the chain's, none relabelled away
    rows, pins, last_pin = store.roots_and_pins(session)
    if counts is not None:  # the checked statement's, not another's (a view answers each differently)
        last_pin, pins = counts.get(("trust_root", None), (None, 0))
    return rows, (pins, last_pin)


def _refuse_removed(session: Session, rows: list[tuple[Any, ...]], pins: int, last_pin: int | None) -> None:
    # a row no chain row pinned, or one pinned twice, is refused by the checks of each row; what
    # only the chain shows is that its last pin has no row any more
    if last_pin is None or any(r[9] == last_pin for r in rows):
        return
    gone = evidence_log.by_seq(session, [int(last_pin)])[int(last_pin)].payload.get("version", "?")
    raise ForgedRecord(f"trust root v{gone}, pinned by evidence row {last_pin}, is gone from {SCHEMA}.trust_roots "
                       f"({len(rows)} row(s) there, {pins} pin(s) in the chain)", fix=evidence_log.FORGED_FIX)


def history(session: Session) -> list[PinnedRoot]:
    """Every pinned root, oldest first, each verified; [] when none is pinned."""
    rows, (pins, last_pin) = _rows(session)
    verify = evidence_log.can_verify(session)
    if verify:
        _refuse_removed(session, rows, pins, last_pin)
    if not rows:
        return []
    # the chain's count of pins is part of what was verified: the same rows after a later pin's
    # row was deleted are not the rows this process verified then
    fingerprint = hashlib.sha256(json.dumps([rows, pins, last_pin], default=str).encode()).hexdigest()
    cache_key = (session.engine.describe(), fingerprint)
    if cache_key in _CACHE:
        return _CACHE[cache_key]
    chain = evidence_log.by_seq(session, [int(r[9]) for r in rows if r[9] is not None]) if verify else {}
    out: list[PinnedRoot] = []
    for number, row in enumerate(rows, start=1):
        version, warehouse_id, signers_text, signers_sha, policy_text, policy_sha, signatures, by, at, seq = row
        where = f"trust root v{version} in {SCHEMA}.trust_roots"
        if int(version) != number:
            raise ForgedRecord(f"{where}: versions are not consecutive from 1", fix=evidence_log.FORGED_FIX)
        signers = AllowedSigners.parse(signers_text, source=f"allowed_signers v{version}", pinned=True)
        policy = Policy.parse(policy_text, source=f"policy v{version}")
        if signers.sha256 != signers_sha or policy.sha256 != policy_sha:
            raise ForgedRecord(f"{where}: its stored files do not match their sha256", fix=evidence_log.FORGED_FIX)
        root = TrustRoot(int(version), str(warehouse_id), signers, policy)
        shown_by, shown_at = str(by), str(at)
        if verify:
            sealed = chain.get(int(seq)) if seq is not None else None
            payload = sealed.payload if sealed else {}
            if sealed is None or sealed.kind != "trust_root" or payload.get("version") != root.version or \
                    payload.get("signers_sha256") != signers_sha or payload.get("policy_sha256") != policy_sha or \
                    payload.get("warehouse_id") != root.warehouse_id or \
                    payload.get("signatures_sha256") != _digest(signatures):
                raise ForgedRecord(f"{where} does not match the evidence chain's record of it",
                                   fix=evidence_log.FORGED_FIX)
            # who pinned it and when, as the chain's keyed row says: the table's columns are no
            # seal's, and `approvers show` named whoever an insider typed there (found by an attack)
            shown_by = sealed.actor
            shown_at = _pinned_at(sealed.at, where).replace(microsecond=0).isoformat()
        signed_by: tuple[str, ...] = ()
        if out:
            previous = out[-1].root
            if root.warehouse_id != previous.warehouse_id:
                raise ForgedRecord(f"{where} names another warehouse", fix=evidence_log.FORGED_FIX)
            # the signatures were valid when the change was pinned: at the chain row's time (which
            # no one without the key can alter), else the row's own
            when = chain[int(seq)].at if verify and seq is not None else str(at)
            counted = count_change(previous, signers, policy, _candidates(signatures, where),
                                   now=_pinned_at(when, where))
            if not counted.approved:
                raise ForgedRecord(f"{where} lacks the quorum of v{previous.version}'s approvers "
                                   f"({counted.describe()})", fix=evidence_log.FORGED_FIX)
            signed_by = tuple(counted.approvers)
        out.append(PinnedRoot(root, shown_by, shown_at, signed_by))
    if len(_CACHE) > 16:
        _CACHE.clear()
    _CACHE[cache_key] = out
    return out


def current(session: Session) -> PinnedRoot | None:
    found = history(session)
    return found[-1] if found else None


def require(session: Session) -> TrustRoot:
    pinned = current(session)
    if pinned is None:
        raise TrustRootError(f"no trust root is pinned in {session.engine.describe()}: approvals cannot be "
                             "checked", fix=_NO_ROOT_FIX)
    return pinned.root


def _digest(signatures: str) -> str:
    return hashlib.sha256(signatures.encode("utf-8")).hexdigest()


# a row read without the key is unverified: what an insider typed into it stopped the guard with an
# internal error (found by an attack); it is refused in one line instead, as a row that is no pin's

def _candidates(signatures: str, where: str) -> list[Candidate]:
    """The signatures a pin's row lists, each a principal, statement and signature."""
    try:
        found = json.loads(signatures)
    except (TypeError, ValueError):
        found = None
    fields = ("principal", "statement", "signature")
    if not isinstance(found, list) or not all(
            isinstance(s, dict) and all(isinstance(s.get(f), str) for f in fields) for s in found):
        raise ForgedRecord(f"{where}: its signatures are not a list of signed statements", fix=evidence_log.FORGED_FIX)
    return [Candidate(s["principal"], s["statement"], s["signature"]) for s in found]


def _pinned_at(when: str, where: str) -> dt.datetime:
    """When a pin was made: the chain row's time (the row's own, read without the key)."""
    try:
        return dt.datetime.fromisoformat(str(when).replace("Z", "+00:00"))
    except ValueError:
        raise ForgedRecord(f"{where}: pinned at {str(when)[:40]!r}, which is no time", fix=evidence_log.FORGED_FIX) \
            from None


def change_statement(current_root: TrustRoot, signers: AllowedSigners, policy: Policy, *,
                     signed: dt.datetime | None = None, valid_days: int | None = None) -> Statement:
    """What the current root's approvers sign to pin `signers` and `policy` instead."""
    signed = signed or dt.datetime.now(dt.UTC)
    longest = current_root.policy.model.approvals.valid_days
    if valid_days is not None and not 1 <= valid_days <= longest:
        # a statement valid longer than the pinned policy lets a signature authorise never counts:
        # printed, signed, then refused at the pin (found by an attack)
        raise UsageError(f"--valid-days {valid_days}: the pinned policy lets a signature authorise 1 to {longest} "
                         "day(s), so no signature of that statement would count",
                         fix=f"pass --valid-days between 1 and {longest}, or leave it out")
    days = valid_days or longest
    return Statement.make(TRUST_ROOT, signed=signed, expires=signed + dt.timedelta(days=days),
                          warehouse=current_root.warehouse_id, replaces=current_root.identity,
                          signers=signers.sha256, policy=policy.sha256)


def count_change(current_root: TrustRoot, signers: AllowedSigners, policy: Policy,
                 candidates: Sequence[Candidate], now: dt.datetime | None = None) -> Tally:
    """The current root's approvers who signed this change, against its quorum."""
    return tally(current_root, candidates, kind=TRUST_ROOT,
                 expect={"warehouse": current_root.warehouse_id, "replaces": current_root.identity,
                         "signers": signers.sha256, "policy": policy.sha256},
                 requirement=Requirement(current_root.policy.quorum, ()), now=now)


def pin_first(session: Session, signers: AllowedSigners, policy: Policy, actor: str) -> PinnedRoot:
    """Pin the first root and create the warehouse's id (call inside a transaction)."""
    policy.check_against(set(signers.principals))
    legacy = meta_store.meta(session, LEGACY_PIN_KEY)
    if legacy is not None and json.loads(legacy).get("sha256") != signers.sha256:
        # a release-0.2 warehouse pinned its approvers: the upgrade keeps that file, nobody else's
        raise TrustRootError(
            f"{signers.source} (sha256 {signers.sha256[:12]}) is not the allowed_signers this warehouse pinned "
            f"before its upgrade (sha256 {json.loads(legacy)['sha256'][:12]})",
            fix="pin that same file first; change it afterwards with `backfill approvers pin` and the "
                "quorum's signatures")
    return _insert(session, 1, "wh-" + secrets.token_hex(8), signers, policy, [], actor)


def repin(session: Session, signers: AllowedSigners, policy: Policy, candidates: Sequence[Candidate],
          actor: str) -> tuple[PinnedRoot, Tally]:
    """Pin a new root under the quorum of the current one (call inside a transaction)."""
    session.lock("backfill_control.trust_root")
    # the chain's turn before the count, not after it: every later read verifies the signatures at
    # the pin's chain row's time, and counted, then kept waiting for another command's turn, they
    # expired before the row was stamped; the pin was then read back as "lacking the quorum" and
    # refused as a forged record (found by an attack)
    evidence_log.hold(session)
    pinned = current(session)
    if pinned is None:
        raise TrustRootError("no trust root is pinned yet", fix=_NO_ROOT_FIX)
    policy.check_against(set(signers.principals))
    now = dt.datetime.now(dt.UTC)
    counted = count_change(pinned.root, signers, policy, candidates, now=now)
    if counted.approved and counted.expires is not None and counted.expires < now + _PIN_MARGIN:
        # and what is left between the count and the row (moments, the turn held) is never enough
        # for them to stop counting in
        raise TrustRootError(
            f"the quorum's signatures of this change stop counting at {counted.expires:%Y-%m-%dT%H:%M:%SZ}, "
            f"within {_PIN_MARGIN.seconds} seconds: too soon to pin",
            fix="have the approvers sign the statement `backfill approvers statement NEW_FILE` prints now, "
                "then pin with their signatures")
    if not counted.approved:
        raise TrustRootError(
            f"changing the trust root needs {pinned.root.policy.quorum} signature(s) of the approvers of "
            f"{pinned.root.describe()}: {counted.describe()}",
            fix="have that many of the currently pinned approvers sign the statement printed by "
                "`backfill approvers statement NEW_FILE`, then pass their signatures")
    signatures = [{"principal": c.principal, "statement": c.statement.text, "signature": c.signature,
                   "key": c.fingerprint} for c in counted.counted]
    return _insert(session, pinned.root.version + 1, pinned.root.warehouse_id, signers, policy, signatures,
                   actor), counted


_PIN_MARGIN = dt.timedelta(minutes=1)


def _insert(session: Session, version: int, warehouse_id: str, signers: AllowedSigners, policy: Policy,
            signatures: list[dict[str, str]], actor: str) -> PinnedRoot:
    text = json.dumps(signatures, sort_keys=True)
    at = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
    seq = evidence_log.next_seq(session)
    store.insert(session, [version, warehouse_id, _text_of(signers), signers.sha256, policy.text, policy.sha256,
                           text, actor, at, seq])
    evidence_log.append(session, plan_id=None, kind="trust_root", actor=actor, seq=seq, payload={
        "version": version, "warehouse_id": warehouse_id, "signers_sha256": signers.sha256,
        "policy_sha256": policy.sha256, "signatures_sha256": _digest(text),
        "signed_by": [s["principal"] for s in signatures], "signers_source": signers.source,
        "policy_source": policy.source})
    _CACHE.clear()
    found = current(session)
    assert found is not None and found.root.version == version
    return found


def _text_of(signers: AllowedSigners) -> str:
    if signers.text is None:
        raise TrustRootError(f"{signers.source} was read without its text", fix="load it with AllowedSigners.load")
    return signers.text

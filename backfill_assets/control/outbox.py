"""Notices to downstream owners: queued in the transaction, delivered after it by a relay.

`enqueue` writes an outbox row (and its evidence) inside the caller's transaction, so a notice
exists exactly when the change it announces committed. `relay` delivers pending webhook notices
after the commit, with no warehouse connection open while a receiver answers: a slow or dead
webhook never holds the warehouse lock. Each delivery has a total deadline and each relay a total
budget, so a receiver that trickles its answer cannot hang a command or a sensor tick.

A notice is never dropped: a failed delivery is retried with backoff (its next attempt time is
kept in `outbox_retries`) by every later relay (the CLI after its command, the relay sensor on
each tick) until it is delivered. Delivery is at least once; receivers deduplicate on
`notice_id`. Notices without a webhook are read with `backfill notices`.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

from backfill_assets.control import evidence_log
from backfill_assets.control.names import SCHEMA, next_id
from backfill_assets.control.webhook import post
from backfill_assets.settings import number
from backfill_assets.warehouse import Warehouse, release_kept
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.state_store import outbox as store

DEADLINE_ENV = "BACKFILL_WEBHOOK_DEADLINE_SECONDS"
DEFAULT_DEADLINE_SECONDS = 10.0  # one delivery, connect to status line
BUDGET_ENV = "BACKFILL_RELAY_BUDGET_SECONDS"
DEFAULT_BUDGET_SECONDS = 20.0  # one relay call, every delivery it attempts
BACKOFF_FIRST_SECONDS = 15.0
BACKOFF_MAX_SECONDS = 3600.0
# the next attempt of each notice that failed; a table of the relay's own, made on first failure
RETRIES = store.RETRIES


DELIVERED = "notice_delivered"  # the chain row of a delivery: `delivered_at` alone is the table's word


def _digest(plan_id: Any, event: Any, recipients: Any, message: Any, body: Any, webhook_url: Any) -> str:
    """What a notice says and where it goes, as its outbox row stores it."""
    text = json.dumps([plan_id, event, recipients, message, body, webhook_url], separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def enqueue(session: Session, *, plan_id: str, event: str, recipients: list[str], message: str,
            body: dict[str, Any], webhook_url: str | None, actor: str) -> int:
    notice_id = next_id(session)
    payload = {**body, "notice_id": notice_id, "event": event, "message": message,
               "recipients": recipients}
    told, text = ", ".join(recipients), json.dumps(payload, sort_keys=True, default=str)
    store.insert(session, notice_id, plan_id, event, told, message, text, webhook_url, evidence_log.now_iso())
    evidence_log.append(session, plan_id=plan_id, kind="notification", actor=actor, payload={
        "notice_id": notice_id, "event": event, "recipients": recipients, "webhook": bool(webhook_url),
        "digest": _digest(plan_id, event, told, message, text, webhook_url)})
    return notice_id


def _recorded(session: Session) -> dict[int, Any]:
    """notice_id -> its chain row, verified under the key (the relay records deliveries: it has it)."""
    rows = evidence_log.rows(session, kind="notification")
    if evidence_log.can_verify(session):
        rows = evidence_log.verified(session, rows)
    return {int(r.payload["notice_id"]): r for r in rows if isinstance(r.payload.get("notice_id"), int)}


def _plan_webhooks(session: Session, plan_id: str) -> set[str]:
    """The webhooks the plan's recorded versions name (each version checked against its sha256)."""
    from backfill_assets.control import record

    shas = {str(r.payload.get("sha256")) for r in evidence_log.rows(session, plan_id, "plan_version")}
    found = (record.version(session, sha) for sha in sorted(shas))
    return {v.plan.publish.webhook_url for v in found if v is not None and v.plan.publish.webhook_url}


def _delivered(session: Session) -> set[int]:
    """The notices whose delivery is a chain row (verified, as `_recorded`'s rows are)."""
    rows = evidence_log.rows(session, kind=DELIVERED)
    if evidence_log.can_verify(session):
        rows = evidence_log.verified(session, rows)
    return {int(r.payload["notice_id"]) for r in rows if isinstance(r.payload.get("notice_id"), int)}


def _differs(row: Any, stored: tuple[Any, ...]) -> bool:
    """The outbox row is not the notice the chain recorded (chain rows before the digest: not told)."""
    digest = row.payload.get("digest")
    return digest is not None and digest != _digest(*stored[:6])


def verify_all(session: Session) -> int:
    """Every notice the chain recorded since the last upgrade is still in the outbox: one deleted
    (a freeze downstream owners were to be told of) was dropped without a trace. Returns how many."""
    from backfill_assets.errors import ForgedRecord
    from backfill_assets.warehouse.state_store import evidence as evidence_store

    upgraded = evidence_store.last_seq_of_kind(session, "upgrade")
    # the chain's rows first (see `record.verify_all`): a notice queued between the reads is in both
    recorded = [r for r in evidence_log.rows(session, kind="notification") if r.seq > upgraded]
    held = store.contents(session)
    for row in recorded:
        nid = row.payload.get("notice_id")
        stored = held.get(nid) if isinstance(nid, int) else None
        if stored is None:
            raise ForgedRecord(f"notice {nid} of plan {row.plan_id} is in the evidence chain "
                               f"(row {row.seq}), but gone from {SCHEMA}.outbox", fix=evidence_log.FORGED_FIX)
        if _differs(row, stored):
            # pointed elsewhere, told to others, or saying something else (found by an attack)
            raise ForgedRecord(f"notice {nid} of plan {row.plan_id} in {SCHEMA}.outbox differs from what the "
                               f"evidence chain recorded (row {row.seq})", fix=evidence_log.FORGED_FIX)
    return len(recorded)


@dataclass(frozen=True)
class Delivery:
    notice_id: int
    ok: bool
    detail: str


def backoff_seconds(attempts: int) -> float:
    """Seconds before the next attempt after `attempts` failed ones: doubling, capped at an hour."""
    # the exponent capped first: 2 ** 1024 is no float, and a receiver dead for six weeks gets there
    return float(min(BACKOFF_FIRST_SECONDS * 2 ** min(max(0, attempts - 1), 32), BACKOFF_MAX_SECONDS))


def deadline_seconds() -> float:
    return number(DEADLINE_ENV, DEFAULT_DEADLINE_SECONDS, 0.1, 600, "seconds")


def budget_seconds() -> float:
    return number(BUDGET_ENV, DEFAULT_BUDGET_SECONDS, 0.1, 3600, "seconds")


def relay(warehouse: Warehouse, *, wait_seconds: float | None = None,
          budget: float | None = None) -> list[Delivery]:
    """Deliver the webhook notices that are due, within `budget` seconds in all; record each
    outcome. Never raises for a receiver; what is not attempted now waits for the next relay."""
    if not warehouse.exists():
        return []
    budget = budget_seconds() if budget is None else budget
    per_delivery = deadline_seconds()
    with warehouse.session(wait_seconds=wait_seconds) as session:
        if not store.has_outbox(session):
            return []
        now = time.time()
        pending = store.due(session, now, now + BACKOFF_MAX_SECONDS + 600)  # hosts' clocks may differ
        marked = store.marked_delivered(session)
        if not pending and not marked:
            return []
        recorded = _recorded(session)
        # marked delivered, but no delivery of it in the chain (an edit, or a relay of the previous
        # release, which wrote none): due again, at least once, rather than dropped (found by an
        # attack) or the whole record refused for it (found by the next); notices queued before
        # deliveries were chain rows keep their word
        delivered = _delivered(session) if marked else set()
        pending += [r for r in marked if int(r[0]) not in delivered
                    and int(r[0]) in recorded and "digest" in recorded[int(r[0])].payload]
        # a notice queued before notices were digested goes only where a version of its plan said
        # (one such row was pointed at the insider's URL: found by an attack)
        legacy = {int(r[0]): _plan_webhooks(session, str(r[4])) for r in pending
                  if int(r[0]) in recorded and "digest" not in recorded[int(r[0])].payload}
    # the connection (and with DuckDB the file lock) is released while receivers answer, also one
    # the command kept open
    if pending:
        release_kept()
    ends = time.monotonic() + budget
    outcomes: list[Delivery] = []
    attempts: dict[int, int] = {}
    for nid, url, body, tried, plan_id, event, recipients, message in pending:
        left = ends - time.monotonic()
        if left <= 0:
            break  # the rest keep their turn for the next relay
        attempts[int(nid)] = int(tried) + 1
        row = recorded.get(int(nid))
        if row is None or _differs(row, (plan_id, event, recipients, message, body, url)):
            # an outbox row edited (or planted) posted a body of the insider's to a URL of theirs,
            # past the plan's webhook check (found by an attack): only the notice recorded goes out
            outcomes.append(Delivery(int(nid), False, "the outbox row differs from what the evidence chain recorded: "
                                                      "not delivered (restore the control record from backup)"))
            continue
        if int(nid) in legacy and url not in legacy[int(nid)]:
            outcomes.append(Delivery(int(nid), False, f"no version of plan {plan_id} names this webhook: not "
                                                      "delivered (the outbox was edited; restore it from backup)"))
            continue
        outcomes.append(Delivery(int(nid), *post(url, body, min(per_delivery, left))))
    if outcomes:
        with warehouse.session(wait_seconds=wait_seconds) as session, session.transaction():
            now, at = time.time(), evidence_log.now_iso()
            for outcome in outcomes:
                store.attempted(session, outcome.notice_id, None if outcome.ok else outcome.detail,
                                at if outcome.ok else None)
                if outcome.ok:  # a delivery is the chain's word, not only the table's
                    row = recorded[outcome.notice_id]
                    evidence_log.append(session, plan_id=row.plan_id, kind=DELIVERED, actor="notice relay",
                                        payload={"notice_id": outcome.notice_id, "at": at})
                else:
                    store.retry_at(session, outcome.notice_id, now + backoff_seconds(attempts[outcome.notice_id]), at)
    return outcomes


@dataclass(frozen=True)
class Notice:
    notice_id: int
    plan_id: str
    event: str
    recipients: str
    message: str
    webhook: bool
    attempts: int
    last_error: str | None
    delivered_at: str | None
    recorded_at: str
    next_attempt_at: float | None
    in_chain: bool = True  # False: no chain row records it (a row planted in the outbox)
    as_recorded: bool = True  # False: it says or goes elsewhere than its chain row's digest (edited)
    delivery_recorded: bool = True  # False: marked delivered with no delivery of it in the chain

    @property
    def delivery(self) -> str:
        if not self.in_chain:
            return "NOT a notice backfill queued: no evidence chain row records it (the outbox was edited)"
        if not self.as_recorded:
            return ("NOT the notice backfill queued: its row differs from what the evidence chain recorded "
                    "(the outbox was edited; restore it from backup, `backfill evidence verify` names it)")
        if not self.webhook:
            return "no webhook: read here"
        if self.delivered_at and not self.delivery_recorded:
            return (f"marked delivered at {self.delivered_at}, but no delivery of it is in the evidence chain "
                    "(the outbox was edited): the next relay delivers it again")
        if self.delivered_at:
            return f"delivered at {self.delivered_at}"
        if not self.attempts:
            return "queued: the next relay delivers it"
        import datetime as dt

        try:
            when = dt.datetime.fromtimestamp(self.next_attempt_at or 0, dt.UTC).isoformat(timespec="seconds") \
                if self.next_attempt_at else "the next relay"
        except (OverflowError, ValueError, OSError):  # a time no clock reaches: the table was edited
            when = f"not a time ({self.next_attempt_at})"
        return f"undelivered after {self.attempts} attempt(s): {self.last_error}; next attempt {when}"

    @property
    def undelivered(self) -> bool:
        return self.webhook and not (self.delivered_at and self.delivery_recorded)

    def to_json(self) -> dict[str, Any]:
        return {"notice_id": self.notice_id, "plan_id": self.plan_id, "event": self.event,
                "recipients": self.recipients, "message": self.message, "webhook": self.webhook,
                "attempts": self.attempts, "last_error": self.last_error,
                # the table's word alone is no delivery (`delivery` says it was marked)
                "delivered_at": self.delivered_at if self.delivery_recorded else None,
                "recorded_at": self.recorded_at, "next_attempt_at": self.next_attempt_at,
                "delivery": self.delivery}


def notices(session: Session, plan_id: str | None = None) -> list[Notice]:
    """Every notice (of one plan), oldest first, with how far its delivery got. Reads only."""
    if not store.has_outbox(session):
        return []
    rows = store.notice_rows(session, plan_id)
    held = store.contents(session, plan_id)
    # a reader's flags, from the rows as stored (a planted notice read as any other: found by an
    # attack), each compared with its chain row's digest as the relay compares it, and a delivery
    # with the chain's: a notice typed over (the only channel of a team without a webhook), or one
    # marked delivered, was listed as the table said (found by an attack)
    chained = {r.payload.get("notice_id"): r for r in evidence_log.rows(session, plan_id, "notification")}
    delivered = {r.payload.get("notice_id") for r in evidence_log.rows(session, plan_id, DELIVERED)}
    found = []
    for r in rows:
        nid = int(r[0])
        row = chained.get(nid)
        stored = held.get(nid)
        as_recorded = row is None or stored is None or not _differs(row, stored)
        # notices queued before deliveries were chain rows keep their word, as the relay's
        delivery_recorded = row is None or "digest" not in row.payload or nid in delivered
        found.append(Notice(nid, r[1], r[2], r[3], r[4], bool(r[5]), int(r[6]), r[7], r[8], r[9],
                            float(r[10]) if r[10] is not None else None, row is not None, as_recorded,
                            delivery_recorded))
    return found

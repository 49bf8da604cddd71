"""Notices to downstream owners: queued in the transaction, delivered after it by a relay.

`enqueue` writes an outbox row (and its evidence) inside the caller's transaction, so a notice
exists exactly when the change it announces committed. `relay` delivers pending webhook notices
after the commit, with no warehouse connection open while a receiver answers: a slow or dead
webhook never holds the warehouse lock and never loses a notice (it is retried on the next relay:
the CLI after its command, the reopen sensor on each tick). Delivery is at least once; receivers
deduplicate on `notice_id`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass

from backfill_assets.control import evidence_log
from backfill_assets.control.schema import SCHEMA, next_id
from backfill_assets.warehouse import Warehouse
from backfill_assets.warehouse.engine import Session

WEBHOOK_TIMEOUT_SECONDS = 5.0
MAX_ATTEMPTS = 20


def enqueue(session: Session, *, plan_id: str, event: str, recipients: list[str], message: str,
            body: dict, webhook_url: str | None, actor: str) -> int:
    notice_id = next_id(session)
    payload = {**body, "notice_id": notice_id, "event": event, "message": message,
               "recipients": recipients}
    session.execute(
        f"INSERT INTO {SCHEMA}.outbox VALUES (?, ?, ?, ?, ?, ?, ?, 0, NULL, NULL, ?)",
        [notice_id, plan_id, event, ", ".join(recipients), message,
         json.dumps(payload, sort_keys=True, default=str), webhook_url, evidence_log.now_iso()])
    evidence_log.append(session, plan_id=plan_id, kind="notification", actor=actor, payload={
        "notice_id": notice_id, "event": event, "recipients": recipients,
        "webhook": bool(webhook_url)})
    return notice_id


@dataclass(frozen=True)
class Delivery:
    notice_id: int
    ok: bool
    detail: str


def _post(url: str, body: str) -> tuple[bool, str]:
    request = urllib.request.Request(url, data=body.encode("utf-8"), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_SECONDS) as response:
            return 200 <= response.status < 300, f"HTTP {response.status}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return False, str(exc)[:200]


def relay(warehouse: Warehouse, *, wait_seconds: float | None = None) -> list[Delivery]:
    """Deliver every pending webhook notice; record each outcome. Never raises for a receiver."""
    if not warehouse.exists():
        return []
    with warehouse.session(wait_seconds=wait_seconds) as session:
        if not session.engine.table_exists(session, "outbox", SCHEMA):
            return []
        pending = session.rows(
            f"SELECT notice_id, webhook_url, body FROM {SCHEMA}.outbox WHERE webhook_url IS NOT NULL "
            "AND delivered_at IS NULL AND attempts < ? ORDER BY notice_id", [MAX_ATTEMPTS])
    # the connection (and with DuckDB the file lock) is released while receivers answer
    outcomes = [Delivery(int(nid), *_post(url, body)) for nid, url, body in pending]
    if outcomes:
        with warehouse.session(wait_seconds=wait_seconds) as session, session.transaction():
            for outcome in outcomes:
                session.execute(
                    f"UPDATE {SCHEMA}.outbox SET attempts = attempts + 1, last_error = ?, "
                    "delivered_at = ? WHERE notice_id = ?",
                    [None if outcome.ok else outcome.detail,
                     evidence_log.now_iso() if outcome.ok else None, outcome.notice_id])
    return outcomes

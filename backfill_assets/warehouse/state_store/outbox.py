"""The `outbox` (notices queued in a transaction) and `outbox_retries` (the next attempt of each
notice whose delivery failed)."""

from __future__ import annotations

from typing import Any

from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.state_store import SCHEMA

RETRIES = f"{SCHEMA}.outbox_retries"


def has_outbox(session: Session) -> bool:
    return session.engine.table_exists(session, "outbox", SCHEMA)


def _has_retries(session: Session) -> bool:
    # made by the schema since 0.3; a record of an earlier one may lack it
    return session.engine.table_exists(session, "outbox_retries", SCHEMA)


def notice_ids(session: Session) -> set[int]:
    """Every notice the outbox holds (an empty set when it has no outbox)."""
    if not has_outbox(session):
        return set()
    return {int(n) for (n,) in session.rows(f"SELECT notice_id FROM {SCHEMA}.outbox")}


def contents(session: Session, plan_id: str | None = None) -> dict[int, tuple[Any, ...]]:
    """notice_id -> (plan_id, event, recipients, message, body, webhook_url, delivered_at) of every
    notice (of one plan; none when there is no outbox)."""
    if not has_outbox(session):
        return {}
    where = " WHERE plan_id = ?" if plan_id else ""
    return {int(r[0]): tuple(r[1:]) for r in session.rows(
        f"SELECT notice_id, plan_id, event, recipients, message, body, webhook_url, delivered_at "
        f"FROM {SCHEMA}.outbox{where}", [plan_id] if plan_id else [])}


def insert(session: Session, notice_id: int, plan_id: str, event: str, recipients: str, message: str,
           body: str, webhook_url: str | None, at: str) -> None:
    """A notice not yet attempted."""
    session.execute(f"INSERT INTO {SCHEMA}.outbox VALUES (?, ?, ?, ?, ?, ?, ?, 0, NULL, NULL, ?)",
                    [notice_id, plan_id, event, recipients, message, body, webhook_url, at])


def due(session: Session, now: float, horizon: float) -> list[tuple[Any, ...]]:
    """(notice_id, webhook_url, body, attempts, plan_id, event, recipients, message) of each
    undelivered webhook notice whose next attempt is due at `now` (or set past `horizon`, which no
    backoff reaches: an edit that would hold it off for good)."""
    retries = _has_retries(session)
    join = f"LEFT JOIN {RETRIES} AS r ON r.notice_id = o.notice_id" if retries else ""
    when = "AND (r.next_attempt_at IS NULL OR r.next_attempt_at <= ? OR r.next_attempt_at > ?)" if retries else ""
    return session.rows(
        f"SELECT o.notice_id, o.webhook_url, o.body, o.attempts, o.plan_id, o.event, o.recipients, o.message "
        f"FROM {SCHEMA}.outbox AS o {join} "
        f"WHERE o.webhook_url IS NOT NULL AND o.delivered_at IS NULL {when} ORDER BY o.notice_id",
        [now, horizon] if retries else [])


def marked_delivered(session: Session) -> list[tuple[Any, ...]]:
    """The rows `due` returns, of each webhook notice marked delivered."""
    return session.rows(
        f"SELECT notice_id, webhook_url, body, attempts, plan_id, event, recipients, message FROM {SCHEMA}.outbox "
        "WHERE webhook_url IS NOT NULL AND delivered_at IS NOT NULL ORDER BY notice_id")


def attempted(session: Session, notice_id: int, error: str | None, delivered_at: str | None) -> None:
    """One more attempt of the notice: its error, or when it was delivered."""
    session.execute(f"UPDATE {SCHEMA}.outbox SET attempts = attempts + 1, last_error = ?, "
                    "delivered_at = ? WHERE notice_id = ?", [error, delivered_at, notice_id])


def retry_at(session: Session, notice_id: int, next_attempt_at: float, attempted_at: str) -> None:
    """The notice's next attempt is not before `next_attempt_at`."""
    session.execute(session.engine.upsert_sql(RETRIES, ("notice_id", "next_attempt_at", "last_attempt_at"),
                                              ("notice_id",), ("next_attempt_at", "last_attempt_at")),
                    [notice_id, next_attempt_at, attempted_at])


def notice_rows(session: Session, plan_id: str | None = None) -> list[tuple[Any, ...]]:
    """(notice_id, plan_id, event, recipients, message, has a webhook, attempts, last_error,
    delivered_at, recorded_at, next_attempt_at) of every notice (of one plan), oldest first."""
    retries = _has_retries(session)
    nxt = "r.next_attempt_at" if retries else "NULL"
    join = f"LEFT JOIN {RETRIES} AS r ON r.notice_id = o.notice_id" if retries else ""
    where = "WHERE o.plan_id = ?" if plan_id else ""
    return session.rows(
        f"SELECT o.notice_id, o.plan_id, o.event, o.recipients, o.message, o.webhook_url IS NOT NULL, "
        f"o.attempts, o.last_error, o.delivered_at, o.recorded_at, {nxt} FROM {SCHEMA}.outbox AS o {join} "
        f"{where} ORDER BY o.notice_id", [plan_id] if plan_id else [])


def last_of_event(session: Session, plan_id: str, events: tuple[str, ...]) -> tuple[Any, ...] | None:
    """(recorded_at, recipients) of the plan's last notice of one of `events`."""
    marks = ", ".join("?" for _ in events)
    return session.one(f"SELECT recorded_at, recipients FROM {SCHEMA}.outbox WHERE plan_id = ? "
                       f"AND event IN ({marks}) ORDER BY notice_id DESC LIMIT 1", [plan_id, *events])

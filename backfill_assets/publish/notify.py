"""Telling downstream owners that publish paused or reopened: always an outbox row, and a webhook
POST when the plan names one. A failed webhook is recorded, never fatal: the outbox is the record.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import duckdb

from backfill_assets.control import evidence_log
from backfill_assets.control.schema import SCHEMA
from backfill_assets.plan.model import Plan

WEBHOOK_TIMEOUT_SECONDS = 3.0


def recipients(plan: Plan) -> list[str]:
    owners = {o for consumer in plan.downstream for o in consumer.owners}
    return sorted(owners | set(plan.publish.notify))


def _post(url: str, body: dict) -> str:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode("utf-8"),
        headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_SECONDS) as response:
            return f"delivered ({response.status})"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"failed ({exc})"


def notify(con: duckdb.DuckDBPyConnection, plan: Plan, event: str, message: str,
           actor: str) -> dict:
    to = recipients(plan)
    body = {"plan_id": plan.plan_id, "event": event, "message": message, "recipients": to,
            "window": [plan.window.start.isoformat(), plan.window.end.isoformat()],
            "downstream": [c.asset for c in plan.downstream]}
    url = plan.publish.webhook_url
    status = _post(url, body) if url else None
    con.execute(f"INSERT INTO {SCHEMA}.outbox VALUES (?, ?, ?, ?, ?, ?, ?)",
                [plan.plan_id, event, ", ".join(to), message, url, status,
                 evidence_log.now_iso()])
    evidence_log.append(con, plan_id=plan.plan_id, kind="notification", actor=actor,
                        payload={"event": event, "recipients": to, "webhook": status})
    return body


def announce_pause(con: duckdb.DuckDBPyConnection, plan: Plan, actor: str) -> dict:
    return notify(con, plan, "paused",
                  f"publish of {', '.join(c.asset for c in plan.downstream)} is paused for "
                  f"{plan.window.start}..{plan.window.end} while plan {plan.plan_id} replays "
                  f"{plan.target}; you keep the last good data", actor)


def announce_reopen(con: duckdb.DuckDBPyConnection, plan: Plan, actor: str) -> dict:
    return notify(con, plan, "reopened",
                  f"publish reopened for {plan.window.start}..{plan.window.end}: every gate of "
                  f"plan {plan.plan_id} passed and the evidence is recorded", actor)

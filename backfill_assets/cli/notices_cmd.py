"""`backfill notices [PLAN] [--json]`: every notice to downstream owners and how far its delivery got.

Notices of plans without a webhook are delivered here: this is where their owners read them.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from backfill_assets.cli.common import add_home, plan_id_of, reading

if TYPE_CHECKING:
    from backfill_assets.warehouse.engine import Session


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser("notices", help="notices to downstream owners and their delivery")
    cmd.add_argument("plan", nargs="?", help="a plan file or id (default: every plan)")
    cmd.add_argument("--json", action="store_true")
    add_home(cmd)
    # the messages as consumers were sent them: records, not advice to rewrite
    cmd.set_defaults(handler=cmd_notices, relay=True, data_out=True)


def cmd_notices(args: argparse.Namespace) -> int:
    from backfill_assets.control.outbox import notices

    with reading(args) as session:
        plan_id = plan_id_of(args.plan)[0] if args.plan else None
        found = notices(session, plan_id)
    if args.json:
        print(json.dumps([n.to_json() for n in found], indent=2))
        return 0
    if not found:
        print("no notices" + (f" for plan {plan_id}" if plan_id else ""))
    for n in found:
        print(f"notice {n.notice_id}  {n.recorded_at}  plan {n.plan_id}  {n.event}  to {n.recipients or '-'}")
        print(f"  {n.message}")
        print(f"  delivery: {n.delivery}")
    undelivered = sum(1 for n in found if n.undelivered)
    if undelivered:
        print(f"{undelivered} undelivered: each relay retries them (the relay sensor's ticks, the next command)")
    return 0


def undelivered_line(session: Session, plan_id: str) -> str | None:
    """For `status`: how many of the plan's notices are not delivered yet, or None when none are."""
    from backfill_assets.control.outbox import notices

    found = notices(session, plan_id)
    waiting = [n for n in found if n.undelivered]
    unread = [n for n in found if not n.webhook]
    if not found:
        return None
    parts = [f"{len(found)} sent"]
    if waiting:
        parts.append(f"{len(waiting)} undelivered (last error: {waiting[-1].last_error or 'not tried yet'})")
    if unread:
        parts.append(f"{len(unread)} without a webhook")
    return "; ".join(parts) + (f": `backfill notices {plan_id}`" if waiting or unread else "")

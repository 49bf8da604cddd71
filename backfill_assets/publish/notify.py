"""What downstream owners are told, and when: publish frozen, reopened, rolled back, withdrawn.

Every notice is queued in the outbox inside the transaction that makes the change; the relay
(`deliver_pending`, over `control.outbox.relay`) delivers webhook notices after the commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from backfill_assets.control import outbox
from backfill_assets.errors import BackfillError
from backfill_assets.plan.model import Plan
from backfill_assets.warehouse import Warehouse
from backfill_assets.warehouse.engine import Session

if TYPE_CHECKING:
    from backfill_assets.gates.cutover import Streak


def recipients(plan: Plan) -> list[str]:
    owners = {o for consumer in plan.downstream for o in consumer.owners}
    return sorted(owners | set(plan.publish.notify))


def _notice(session: Session, plan: Plan, event: str, message: str, actor: str,
            extra: dict[str, Any] | None = None) -> int:
    body = {"plan_id": plan.plan_id, "window": [plan.window.start, plan.window.end],
            "target": plan.target, "downstream": [c.asset for c in plan.downstream], **(extra or {})}
    if plan.scenario is not None:  # an incident's id and link travel with every notice of its replay
        body["scenario"] = plan.scenario.model_dump(mode="json", exclude_none=True)
        message += f" [{plan.scenario.label()}]"
    return outbox.enqueue(session, plan_id=plan.plan_id, event=event, recipients=recipients(plan),
                          message=message, body=body, webhook_url=plan.publish.webhook_url, actor=actor)


def announce_freeze(session: Session, plan: Plan, actor: str) -> int:
    return _notice(session, plan, "frozen",
                   f"publish of {', '.join(c.asset for c in plan.downstream)} is frozen for "
                   f"{plan.window.start}..{plan.window.end} while plan {plan.plan_id} replays "
                   f"{plan.target}; you keep the last good data", actor)


def announce_reopen(session: Session, plan: Plan, actor: str, impact: dict[str, Any] | None = None,
                    cutover: Streak | None = None) -> int:
    """`impact`: what the owners will see change (`Impact.summary()`), in the notice's body;
    `cutover`: a cutover plan's dual-run streak, met (publish checked it in the same transaction)."""
    extra: dict[str, Any] = {"impact": impact} if impact else {}
    if cutover is not None:  # owners learn the new pipeline replaced the old, and on what evidence
        extra["cutover"] = cutover.to_json()
    if plan.expect is not None:
        # publish copies only partitions whose gates all passed, changes_as_expected among them
        extra["expectation"] = {"declared": plan.expect.describe(),
                                "verdict": "every partition changed as expected"}
    return _notice(session, plan, "reopened",
                   f"publish reopened for {plan.window.start}..{plan.window.end}: every gate of plan "
                   f"{plan.plan_id} passed"
                   + (", its changes as its expect: declared," if plan.expect is not None else "")
                   + (f" (the cutover: {cutover.line()})" if cutover is not None else "")
                   + " and the evidence is recorded", actor, extra or None)


def announce_end(session: Session, plan: Plan, actor: str, how: str) -> int:
    return _notice(session, plan, how,
                   f"plan {plan.plan_id} was {how.replace('_', ' ')}; publish of "
                   f"{plan.window.start}..{plan.window.end} is no longer frozen by it", actor)


@dataclass(frozen=True)
class Relayed:
    """What one relay did: each delivery it attempted, or why it could attempt none now."""

    deliveries: tuple[outbox.Delivery, ...] = ()
    waiting: str | None = None  # the warehouse busy (or unreadable): the notices wait for the next relay

    @property
    def delivered(self) -> list[int]:
        return [d.notice_id for d in self.deliveries if d.ok]

    @property
    def failed(self) -> list[outbox.Delivery]:
        return [d for d in self.deliveries if not d.ok]

    def line(self) -> str:
        """One line: the notices delivered, each that failed and why, or why the relay waits."""
        if self.waiting is not None:
            return f"notices wait for the next relay: {self.waiting}"
        if not self.deliveries:
            return "no notice due"
        parts = [f"delivered notice(s) {', '.join(map(str, self.delivered))}"] if self.delivered else []
        parts += [f"notice {d.notice_id} failed ({d.detail}), retried with backoff" for d in self.failed]
        return "; ".join(parts)


def deliver_pending(warehouse: Warehouse, *, wait_seconds: float, budget: float | None = None) -> Relayed:
    """The relay: deliver the webhook notices that are due, after the commits that queued them. Its
    hosts are the CLI (after each command) and the relay sensor (`defs.relay`, every 30 seconds: a
    deployment driven from the Dagster UI alone has no other process to deliver or retry a notice).
    Never raises a BackfillError, so a host's own outcome never depends on delivery: a warehouse
    busy now (or unreadable) leaves the notices in the outbox for the next relay, and says why."""
    try:
        return Relayed(tuple(outbox.relay(warehouse, wait_seconds=wait_seconds, budget=budget)))
    except BackfillError as exc:
        return Relayed(waiting=exc.message)

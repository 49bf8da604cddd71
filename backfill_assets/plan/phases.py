"""The phase machine of a plan.

    drafted → approved → proving → proven → running → reconciled → published → closed
                                               ↑            │           │
                                               └────────────┘      repairing (a failed
                                                                   reconcile after publish)
    rolled_back from any phase that wrote or may write; withdrawn from drafted, approved or
    proving (a plan that wrote nothing). Anything else is an illegal transition.

Every state has a way out by a command: withdraw, rollback, close.
"""

from __future__ import annotations

from enum import StrEnum

from backfill_assets.errors import PhaseError


class Phase(StrEnum):
    DRAFTED = "drafted"
    APPROVED = "approved"
    PROVING = "proving"
    PROVEN = "proven"
    RUNNING = "running"
    RECONCILED = "reconciled"
    PUBLISHED = "published"
    REPAIRING = "repairing"
    CLOSED = "closed"
    ROLLED_BACK = "rolled_back"
    WITHDRAWN = "withdrawn"


class Hold(StrEnum):
    """What stops a plan's runs without ending it (`backfill pause`, `backfill cancel`): a paused
    plan resumes with `backfill run`; a cancelled one only rolls back. A held plan's window is not
    published either (its stop is also the claim on a window by any active plan)."""

    PAUSED = "paused"
    CANCELLED = "cancelled"


_NEXT: dict[Phase, set[Phase]] = {
    Phase.DRAFTED: {Phase.APPROVED, Phase.WITHDRAWN},
    Phase.APPROVED: {Phase.PROVING, Phase.WITHDRAWN, Phase.ROLLED_BACK},
    # a failed proof stays in proving; a passed one moves on
    Phase.PROVING: {Phase.PROVEN, Phase.WITHDRAWN, Phase.ROLLED_BACK},
    Phase.PROVEN: {Phase.RUNNING, Phase.ROLLED_BACK},
    Phase.RUNNING: {Phase.RECONCILED, Phase.ROLLED_BACK},
    # a fix re-materializes named partitions after the window reconciled
    Phase.RECONCILED: {Phase.PUBLISHED, Phase.RUNNING, Phase.ROLLED_BACK},
    Phase.PUBLISHED: {Phase.CLOSED, Phase.REPAIRING, Phase.ROLLED_BACK},
    Phase.REPAIRING: {Phase.RECONCILED, Phase.ROLLED_BACK},
    Phase.CLOSED: {Phase.ROLLED_BACK},
    Phase.ROLLED_BACK: set(),
    Phase.WITHDRAWN: set(),
}

# Phases in which a plan holds its window: its claim and the publish freeze apply.
ACTIVE = frozenset({Phase.APPROVED, Phase.PROVING, Phase.PROVEN, Phase.RUNNING, Phase.RECONCILED,
                    Phase.REPAIRING})
# Phases in which the plan may write beyond its proof partitions.
PAST_PROOF = frozenset({Phase.PROVEN, Phase.RUNNING, Phase.RECONCILED, Phase.REPAIRING})
# Phases in which the plan may write at all.
WRITABLE = frozenset({Phase.APPROVED, Phase.PROVING}) | PAST_PROOF
ENDED = frozenset({Phase.CLOSED, Phase.ROLLED_BACK, Phase.WITHDRAWN})
# Phases in which consumers see what the plan wrote: a rollback changes what they read.
SEEN_BY_CONSUMERS = frozenset({Phase.PUBLISHED, Phase.REPAIRING, Phase.CLOSED})


def allowed_next(phase: Phase) -> set[Phase]:
    return set(_NEXT[phase])


def check_transition(plan_id: str, current: Phase, target: Phase) -> None:
    if target not in allowed_next(current):
        allowed = ", ".join(sorted(allowed_next(current))) or "none (the plan has ended)"
        raise PhaseError(
            f"plan {plan_id} cannot move from {current} to {target}",
            fix=f"from {current} it may move to: {allowed}",
        )

"""The phase machine of a plan.

drafted → approved → proving → proven → running → reconciled → published → closed, and
rolled_back from any phase but itself. Anything else is an illegal transition.
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
    CLOSED = "closed"
    ROLLED_BACK = "rolled_back"


_NEXT: dict[Phase, set[Phase]] = {
    Phase.DRAFTED: {Phase.APPROVED},
    Phase.APPROVED: {Phase.PROVING},
    # a failed proof stays in proving; a passed one moves on
    Phase.PROVING: {Phase.PROVEN},
    Phase.PROVEN: {Phase.RUNNING},
    Phase.RUNNING: {Phase.RECONCILED},
    # a fix re-materializes named partitions after the window reconciled
    Phase.RECONCILED: {Phase.PUBLISHED, Phase.RUNNING},
    Phase.PUBLISHED: {Phase.CLOSED},
    Phase.CLOSED: set(),
    Phase.ROLLED_BACK: set(),
}

# Phases in which a plan holds its window: the freeze lock and the publish pause apply.
ACTIVE = frozenset(
    {Phase.APPROVED, Phase.PROVING, Phase.PROVEN, Phase.RUNNING, Phase.RECONCILED}
)
# Phases in which a backfill run may write beyond the proof partitions.
PAST_PROOF = frozenset({Phase.PROVEN, Phase.RUNNING, Phase.RECONCILED})


def allowed_next(phase: Phase) -> set[Phase]:
    nxt = set(_NEXT[phase])
    if phase is not Phase.ROLLED_BACK:
        nxt.add(Phase.ROLLED_BACK)
    return nxt


def check_transition(plan_id: str, current: Phase, target: Phase) -> None:
    if target not in allowed_next(current):
        allowed = ", ".join(sorted(allowed_next(current))) or "none (the plan is finished)"
        raise PhaseError(
            f"plan {plan_id} cannot move from {current} to {target}",
            fix=f"from {current} it may move to: {allowed}",
        )

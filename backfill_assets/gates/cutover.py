"""A cutover's dual run: each judged partition of the shadow (the plan's target) compared key by key
with the published table, and the streak of consecutive matching partitions the cutover waits for.

The comparison of a partition is recorded as `dual_run.*` figures of its `changes_as_expected`
result, never as a verdict of its own: a gate is what every partition must pass before publish,
and a dual run is judged as a streak, so a mismatch early in the window is allowed once
`shadow_days` partitions after it matched (see README, "Cutover"). Recorded there, it is sealed by
the evidence chain with the other results, and the streak is read back from the sealed record
(`control.ledger.comparisons`) by publish, `status`, the evidence and the reopen notice alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backfill_assets.plan.model import Plan, Scenario

MATCHED = "dual_run.matched"


def cutover_of(plan: Plan, asset: str) -> Scenario | None:
    """The plan's cutover when `asset` is its target (the shadow the dual run judges), else None."""
    scenario = plan.scenario
    if scenario is None or scenario.kind != "cutover" or asset != plan.target:
        return None
    return scenario


@dataclass(frozen=True)
class Comparison:
    """One partition's dual run as its latest sealed result recorded it."""

    key: str
    matched: bool
    worst: str
    published_fingerprint: str | None


@dataclass(frozen=True)
class Streak:
    """Consecutive matching partitions of the window, in its order, up to the last one compared; a
    mismatch, or a partition not compared before it, starts the count again."""

    count: int
    needed: int
    compared: int
    partitions: int
    mismatches: tuple[tuple[str, str], ...]   # (key, worst keys) of every partition mismatching now
    broken_by: tuple[str, str] | None          # the mismatch (or gap) the streak counts from

    @property
    def met(self) -> bool:
        return self.count >= self.needed

    def line(self) -> str:
        """One line: the streak, what is needed, and what reset it."""
        text = (f"dual-run streak {self.count} of {self.needed} consecutive matching partition(s) needed "
                f"({self.compared} of {self.partitions} compared")
        text += f", {len(self.mismatches)} mismatching)" if self.mismatches else ")"
        if self.broken_by is not None:
            key, why = self.broken_by
            text += f"; reset at {key}: {why}"
        return text

    def to_json(self) -> dict[str, object]:
        return {"streak": self.count, "needed": self.needed, "met": self.met, "compared": self.compared,
                "partitions": self.partitions, "mismatches": dict(self.mismatches),
                "reset_at": self.broken_by[0] if self.broken_by else None}


def streak(keys: Sequence[str], found: Mapping[str, Comparison], needed: int,
           stale: Mapping[str, str] | None = None) -> Streak:
    """The streak over `keys` in the window's order. `stale`: partitions whose comparison no longer
    holds (the published partition changed since), with why; they count as not compared."""
    stale = stale or {}
    compared = [k for k in keys if k in found and k not in stale]
    # a stale comparison counts as not compared but still ends the count: a mismatch made stale at
    # the window's end (its published day restated) must not leave the days before it as the streak
    last = max((i for i, k in enumerate(keys) if k in found), default=-1)
    count, broken = 0, None
    for key in keys[:last + 1]:
        comparison = found.get(key)
        if comparison is None or key in stale:
            count, broken = 0, (key, stale.get(key, "not compared yet"))
        elif comparison.matched:
            count += 1
        else:
            count, broken = 0, (key, comparison.worst or "mismatch")
    mismatches = tuple((k, found[k].worst) for k in compared if not found[k].matched)
    return Streak(count, needed, len(compared), len(keys), mismatches, broken)

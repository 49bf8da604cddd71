"""The seed's Replay Plan Checklist, ticked from the plan file and the control record.

Its items are the seed's, in this project's words: the seed's "publish pause" is the publish freeze,
its "reconciliation checks" are the gates, its "slice proof" is the single-partition proof.
"""

from __future__ import annotations

from dataclasses import dataclass

from backfill_assets.errors import PlanProblem
from backfill_assets.plan.model import Plan, flat
from backfill_assets.trust.root import Tally


@dataclass(frozen=True)
class Item:
    label: str
    done: bool
    reason: str
    gating: bool  # the guard exits 0 only when every gating item is done

    def render(self) -> str:
        return f"- [{'x' if self.done else ' '}] {self.label}: {self.reason}"


@dataclass(frozen=True)
class ExecutionState:
    """What only execution can tick; read from the control record."""

    proof: str | None = None          # e.g. "proof passed at ... (fingerprints equal)"
    reconciled: str | None = None
    published: str | None = None
    pending_proof: str = "not run yet: `backfill run PLAN --proof`"
    pending_reconcile: str = "not yet: `backfill run PLAN`, then `backfill reconcile PLAN`"
    pending_publish: str = "not reopened yet: the sensor or `backfill publish PLAN` does it"


# Plan keys by the checklist item they belong to; anything unlisted belongs to the first item.
_ITEM_KEYS = {
    0: ("target", "source_of_truth", "owner", "reason", "plan_id", "scenario"),
    1: ("window", "execution.proof_partitions"),
    2: ("publish", "downstream"),
    3: ("execution", "incremental"),
    4: ("rollback",),
    5: ("gates", "checks", "expect"),  # checks: the old spelling of gates
    6: ("approvals",),
}

LABELS = [
    "templates/backfill-plan.yaml drafted with owner and reason",
    "affected window and partitions bounded",
    "publish frozen and downstream owners notified",
    "idempotent write strategy documented",
    "rollback strategy documented",
    "reconciliation gates defined with thresholds",
    "approvals captured",
    "dry run or single-partition proof completed",
    "full window reconciliation passed",
    "publish reopened only after evidence recorded",
]


def _item_of(key: str) -> int:
    best, best_len = 0, -1
    for index, prefixes in _ITEM_KEYS.items():
        for prefix in prefixes:
            if (key == prefix or key.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    return best


def build(plan: Plan | None, problems: list[PlanProblem], approvals: Tally | None,
          execution: ExecutionState, freeze_notice: str | None = None,
          approvals_note: str | None = None) -> list[Item]:
    by_item: dict[int, list[PlanProblem]] = {}
    for problem in problems:
        by_item.setdefault(_item_of(problem.key), []).append(problem)

    def planned(index: int, ok_reason: str) -> Item:
        found = by_item.get(index, [])
        if found:
            more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
            return Item(LABELS[index], False, f"{found[0]}{more}", True)
        if plan is None:
            return Item(LABELS[index], False, "the plan does not validate yet", True)
        return Item(LABELS[index], True, ok_reason, True)

    items = [
        planned(0, f"owner {plan.owner}; reason given"
                + (f"; scenario: {plan.scenario.label()}" if plan.scenario else "") if plan else ""),
        planned(1, f"{plan.window.start}..{plan.window.end}, proof {', '.join(plan.proof_keys[:3])}"
                if plan else ""),
        planned(2, (freeze_notice or "freeze set; notice goes to "
                    + ", ".join(sorted({o for c in plan.downstream for o in c.owners}
                                       | set(plan.publish.notify)))
                    + " when the plan is approved") if plan else ""),
        planned(3, f"mode {plan.execution.mode}; {flat(plan.execution.idempotency)[:60]}" if plan else ""),
        planned(4, "strategy written" if plan else ""),
        planned(5, f"row count <= {plan.gates.row_count_parity.max_diff_pct:g}%, duplicates <= "
                   f"{plan.gates.duplicates.max_rows}, {len(plan.gates.metrics)} metric(s) per key group, "
                   "contract, one code version, source without duplicates, unchanged since checked; "
                   + (f"changes as expected: {plan.expect.describe()}" if plan.expect else
                      "changes not declared (no expect:)")
                if plan else ""),
    ]
    if by_item.get(6) or plan is None:
        items.append(planned(6, ""))
    elif approvals is None:
        items.append(Item(LABELS[6], False, approvals_note or "not counted: no trust root", True))
    else:
        items.append(Item(LABELS[6], approvals.approved, approvals.describe(), True))
    items.append(Item(LABELS[7], execution.proof is not None,
                      execution.proof or execution.pending_proof, False))
    items.append(Item(LABELS[8], execution.reconciled is not None,
                      execution.reconciled or execution.pending_reconcile, False))
    items.append(Item(LABELS[9], execution.published is not None,
                      execution.published or execution.pending_publish, False))
    return items


def render(items: list[Item]) -> str:
    return "Backfill checklist:\n" + "\n".join(item.render() for item in items)

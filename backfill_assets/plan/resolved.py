"""The plan as run: the validated plan plus its file, hash, approval tally and partition list."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from backfill_assets.plan.approvals import ApprovalTally, tally
from backfill_assets.plan.loading import load_plan
from backfill_assets.plan.model import Plan


@dataclass(frozen=True)
class ResolvedPlan:
    plan: Plan
    path: Path
    tally: ApprovalTally

    @property
    def plan_id(self) -> str:
        return self.plan.plan_id

    @property
    def sha256(self) -> str:
        return self.tally.sha256

    @property
    def partition_keys(self) -> list[str]:
        return self.plan.partition_keys

    @property
    def proof_keys(self) -> list[str]:
        return self.plan.proof_keys

    def slices(self, keys: list[str] | None = None) -> list[list[str]]:
        """Keys (default: the window minus the proof) in slices of max_concurrent_partitions."""
        size = self.plan.execution.max_concurrent_partitions
        keys = [k for k in self.partition_keys if k not in self.proof_keys] if keys is None else keys
        return [keys[i:i + size] for i in range(0, len(keys), size)]


def resolve(path: str | Path) -> ResolvedPlan:
    path = Path(path)
    plan = load_plan(path)
    return ResolvedPlan(plan, path, tally(plan))

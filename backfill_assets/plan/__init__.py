"""Replay plans: the model, loading, identity, approvals and the phase machine."""

from backfill_assets.plan.approvals import ApprovalTally, tally
from backfill_assets.plan.identity import plan_sha256
from backfill_assets.plan.loading import collect_problems, load_plan, read_plan_document
from backfill_assets.plan.model import Plan
from backfill_assets.plan.phases import Phase
from backfill_assets.plan.resolved import ResolvedPlan, resolve

__all__ = [
    "ApprovalTally",
    "Phase",
    "Plan",
    "ResolvedPlan",
    "collect_problems",
    "load_plan",
    "plan_sha256",
    "read_plan_document",
    "resolve",
    "tally",
]

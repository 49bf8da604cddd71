"""Which approvals count, and writing a new one into the plan file.

An approval counts only if it is bound to the plan's current hash, its approver is not the owner,
and it is that approver's first counted approval.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from backfill_assets.errors import ApprovalError, PlanReadError
from backfill_assets.plan.identity import plan_sha256
from backfill_assets.plan.model import Approval, Plan


@dataclass(frozen=True)
class VoidApproval:
    approval: Approval
    reason: str


@dataclass(frozen=True)
class ApprovalTally:
    sha256: str
    required: int
    counted: list[Approval] = field(default_factory=list)
    void: list[VoidApproval] = field(default_factory=list)

    @property
    def approved(self) -> bool:
        return len(self.counted) >= self.required

    @property
    def approvers(self) -> list[str]:
        return [a.by for a in self.counted]


def _same_person(a: str, b: str) -> bool:
    return a.strip().casefold() == b.strip().casefold()


def tally(plan: Plan) -> ApprovalTally:
    sha = plan_sha256(plan)
    counted: list[Approval] = []
    void: list[VoidApproval] = []
    for approval in plan.approvals.granted:
        if approval.plan_sha256 != sha:
            void.append(VoidApproval(approval, f"given for plan {approval.plan_sha256[:12]}, but "
                                     f"the plan is now {sha[:12]} (edited since approval)"))
        elif _same_person(approval.by, plan.owner):
            void.append(VoidApproval(approval, "the owner cannot approve their own plan"))
        elif any(_same_person(approval.by, c.by) for c in counted):
            void.append(VoidApproval(approval, f"{approval.by} already approved; each approver "
                                     "counts once"))
        else:
            counted.append(approval)
    return ApprovalTally(sha, plan.approvals.required, counted, void)


def restrict_to_recorded(current: ApprovalTally, recorded: set[str]) -> ApprovalTally:
    """Only approvals the control record saw given (casefolded names) count."""
    counted = [a for a in current.counted if a.by.casefold() in recorded]
    void = list(current.void) + [
        VoidApproval(a, "not given with `backfill plan approve` (no record of it)")
        for a in current.counted if a.by.casefold() not in recorded]
    return ApprovalTally(current.sha256, current.required, counted, void)


def check_can_approve(plan: Plan, approver: str) -> None:
    if not approver.strip():
        raise ApprovalError("approver name is empty", fix="pass --by NAME")
    if _same_person(approver, plan.owner):
        raise ApprovalError(
            f"{approver} owns plan {plan.plan_id} and cannot approve it",
            fix="ask someone other than the owner to approve",
        )
    current = tally(plan)
    if any(_same_person(approver, a.by) for a in current.counted):
        raise ApprovalError(
            f"{approver} already approved plan {plan.plan_id} at this hash",
            fix="ask a different approver; each approver counts once",
        )


def new_approval(plan: Plan, approver: str, now: dt.datetime | None = None) -> Approval:
    at = (now or dt.datetime.now(dt.UTC)).replace(microsecond=0)
    return Approval(by=approver.strip(), at=at, plan_sha256=plan_sha256(plan))


def _entry_line(indent: str, approval: Approval) -> str:
    at = approval.at.isoformat().replace("+00:00", "Z")
    by = approval.by.replace('"', '\\"')
    return f'{indent}- {{by: "{by}", at: "{at}", plan_sha256: "{approval.plan_sha256}"}}\n'


def append_approval_text(text: str, approval: Approval) -> str:
    """Append an approval under `approvals.granted`, keeping the rest of the file as written."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        match = re.match(r"^(\s*)granted:\s*(\[\s*\])?\s*(#.*)?$", line.rstrip("\n"))
        if not match:
            continue
        indent = match.group(1)
        if match.group(2):
            lines[i] = f"{indent}granted:" + (f"  {match.group(3)}" if match.group(3) else "") + "\n"
        end = i + 1
        while end < len(lines):
            nxt = lines[end]
            stripped = nxt.strip()
            nxt_indent = len(nxt) - len(nxt.lstrip())
            if stripped and not stripped.startswith("#") and (
                nxt_indent < len(indent) or (nxt_indent == len(indent)
                                             and not stripped.startswith("-"))
            ):
                break
            end += 1
        while end > i + 1 and not lines[end - 1].strip():
            end -= 1
        if end > 0 and not lines[end - 1].endswith("\n"):
            lines[end - 1] += "\n"
        items = [ln for ln in lines[i + 1:end] if ln.strip().startswith("-")]
        item_indent = items[0][: len(items[0]) - len(items[0].lstrip())] if items else indent + "  "
        lines.insert(end, _entry_line(item_indent, approval))
        return "".join(lines)
    raise PlanReadError(
        "the plan has no `approvals.granted` key to append to",
        fix="add `granted: []` under approvals",
    )


def write_approval(path: Path, plan: Plan, approval: Approval) -> None:
    """Append the approval to the file atomically and check the file still means the same plan."""
    text = path.read_text(encoding="utf-8")
    updated = append_approval_text(text, approval)
    try:
        granted = (yaml.safe_load(updated).get("approvals") or {}).get("granted") or []
    except (yaml.YAMLError, AttributeError):
        granted = []
    if len(granted) != len(plan.approvals.granted) + 1:
        raise PlanReadError(
            f"{path}: could not append the approval without changing the plan's layout",
            fix="write `granted:` as a block list under approvals, as in the template",
        )
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(updated)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

"""Which approvals count, and mirroring signed approvals into the plan file.

An approval is an SSH signature (the SSHSIG format git uses, namespace `backfill-plan`) over the
plan's sha256 by a principal. It counts only if the signature verifies for that principal against
the team's reviewed `allowed_signers` file, it is bound to the plan's current hash, the principal
is not the owner, and that principal was not counted already. The guard, `plan show` and
`plan approve` all use `tally`, so they give the same answer with or without a control record.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from backfill_assets.errors import AllowedSignersError, PlanReadError, SignatureError
from backfill_assets.plan.identity import plan_sha256
from backfill_assets.plan.model import Approval, Plan
from backfill_assets.plan.yaml_document import read_yaml_text
from backfill_assets.signing import sshsig
from backfill_assets.signing.allowed_signers import AllowedSigners

SIGNERS_ENV = "BACKFILL_ALLOWED_SIGNERS"
DEFAULT_SIGNERS = Path("approvers") / "allowed_signers"


def signed_message(sha256: str) -> bytes:
    """What an approver signs: the plan's sha256 as 64 hex characters, nothing else."""
    return sha256.encode("ascii")


def signing_command(sha256: str) -> str:
    return (f"printf '%s' {sha256} | ssh-keygen -Y sign -f ~/.ssh/id_ed25519 -n {sshsig.NAMESPACE} "
            "> approval.sig")


def find_allowed_signers(plan_file: str | Path | None = None, explicit: str | None = None) -> Path:
    """--allowed-signers, then $BACKFILL_ALLOWED_SIGNERS, then approvers/allowed_signers in the plan
    file's folder or any folder above it, then in the current directory."""
    if explicit:
        return Path(explicit)
    if os.environ.get(SIGNERS_ENV):
        return Path(os.environ[SIGNERS_ENV])
    if plan_file is not None:
        for folder in Path(plan_file).resolve().parents:
            candidate = folder / DEFAULT_SIGNERS
            if candidate.exists():
                return candidate
    return DEFAULT_SIGNERS.resolve()


def load_signers(plan_file: str | Path | None = None, explicit: str | None = None
                 ) -> tuple[AllowedSigners | None, str | None]:
    """The allowed signers, or None with the reason (approvals cannot count without them)."""
    try:
        return AllowedSigners.load(find_allowed_signers(plan_file, explicit)), None
    except AllowedSignersError as exc:
        return None, str(exc)


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

    def describe(self) -> str:
        who = f" ({', '.join(self.approvers)})" if self.counted else ""
        void = "; void: " + "; ".join(f"{v.approval.by} ({v.reason})" for v in self.void) if self.void else ""
        return f"{len(self.counted)}/{self.required} signed approvals counted{who}{void}"


def tally(plan: Plan, signers: AllowedSigners | None, why_no_signers: str | None = None) -> ApprovalTally:
    sha = plan_sha256(plan)
    counted: list[Approval] = []
    void: list[VoidApproval] = []
    for approval in plan.approvals.granted:
        reason = void_reason(approval, plan, sha, signers, why_no_signers, counted)
        if reason is None:
            counted.append(approval)
        else:
            void.append(VoidApproval(approval, reason))
    return ApprovalTally(sha, plan.approvals.required, counted, void)


def void_reason(approval: Approval, plan: Plan, sha: str, signers: AllowedSigners | None,
                why_no_signers: str | None, counted: list[Approval]) -> str | None:
    if approval.plan_sha256 != sha:
        return (f"given for plan {approval.plan_sha256[:12]}, but the plan is now {sha[:12]} "
                "(edited since approval)")
    if approval.by == plan.owner:
        return "the owner cannot approve their own plan"
    if any(approval.by == c.by for c in counted):
        return f"{approval.by} already approved; each approver counts once"
    if signers is None:
        return f"cannot be verified: {why_no_signers or 'no allowed_signers file'}"
    try:
        verified = signers.verify_approval(approval.by, signed_message(sha), approval.signature)
    except SignatureError as exc:
        return f"signature refused: {exc.message}"
    for other in counted:  # one key listed under two names is still one person
        if sshsig.parse(other.signature).fingerprint == verified.fingerprint:
            return f"signed with the key that signed {other.by}'s approval; a key counts once"
    return None


# --- the file mirror ------------------------------------------------------------------------------

def _one_line(signature: str) -> str:
    try:
        return sshsig.one_line(signature)
    except SignatureError:  # kept as given; the tally voids it
        return "".join(signature.split()).replace('"', "")


def _entry_line(indent: str, approval: Approval) -> str:
    at = approval.at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    return (f'{indent}- {{by: "{approval.by}", at: "{at}", plan_sha256: "{approval.plan_sha256}", '
            f'signature: "{_one_line(approval.signature)}"}}\n')


def append_approval_text(text: str, approval: Approval) -> str:
    """Append an approval under `approvals.granted`, keeping the rest of the file as written."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        match = re.match(r"^(\s*)granted:\s*(\[\s*\])?\s*(#.*)?$", line.rstrip("\r\n"))
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
                nxt_indent < len(indent) or (nxt_indent == len(indent) and not stripped.startswith("-"))):
                break
            end += 1
        # blank lines and comments at or left of `granted:` after the list belong to what follows
        while end > i + 1 and (not lines[end - 1].strip() or (
                lines[end - 1].lstrip().startswith("#")
                and len(lines[end - 1]) - len(lines[end - 1].lstrip()) <= len(indent))):
            end -= 1
        if end > 0 and not lines[end - 1].endswith("\n"):
            lines[end - 1] += "\n"
        items = [ln for ln in lines[i + 1:end] if ln.strip().startswith("-")]
        item_indent = items[0][: len(items[0]) - len(items[0].lstrip())] if items else indent + "  "
        lines.insert(end, _entry_line(item_indent, approval))
        return "".join(lines)
    raise PlanReadError("the plan has no `approvals.granted` key to append to",
                        fix="add `granted: []` under approvals, as in the template")


def _granted(text: str, source: str) -> list[dict]:
    document = read_yaml_text(text, source)
    approvals = document.get("approvals")
    granted = approvals.get("granted") if isinstance(approvals, dict) else None
    return [g for g in granted if isinstance(g, dict)] if isinstance(granted, list) else []


def mirror_into_file(path: Path, approvals: list[Approval]) -> int:
    """Write every given approval the file lacks into it, atomically, keeping comments and layout.

    Idempotent: an approval already in the file (same principal, hash and signature) is skipped,
    so re-running after a crash converges. Returns how many were added.
    """
    text = path.read_text(encoding="utf-8")
    present = {(g.get("by"), g.get("plan_sha256"), _one_line(str(g.get("signature", ""))))
               for g in _granted(text, str(path)) if g.get("signature")}
    updated, added = text, 0
    for approval in approvals:
        mark = (approval.by, approval.plan_sha256, _one_line(approval.signature))
        if mark not in present:
            updated = append_approval_text(updated, approval)
            present.add(mark)
            added += 1
    if not added:
        return 0
    if len(_granted(updated, str(path))) != len(_granted(text, str(path))) + added:
        raise PlanReadError(f"{path}: could not append the approval without changing the plan's layout",
                            fix="write `granted:` as a block list under approvals, as in the template")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(updated)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return added

"""Which approvals count, and mirroring signed approvals into the plan file.

An approval is an SSH signature (the SSHSIG format git uses, namespace `backfill-plan`) by a
principal over a `plan approval` statement (signing.statements) that binds the plan's sha256, the
code identity of its table, the warehouse and an expiry. It counts under the team's trust root
(allowed_signers and policy, trust.root): the guard, `plan show` and `plan approve` count a file's
signatures with `file_tally`, decisions count the recorded ones (control.authority), the same way.

The trust root is never a file found next to the plan (a pull request could add one): it is the
one pinned in the control record or, where there is none (a CI job without the warehouse), the
file named explicitly (`--allowed-signers`, `$BACKFILL_ALLOWED_SIGNERS`: the default branch's).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backfill_assets import faults
from backfill_assets.bounded import read_bounded, replace_file
from backfill_assets.errors import AllowedSignersError, PlanReadError, PolicyError, SignatureError, printable
from backfill_assets.plan.identity import plan_sha256
from backfill_assets.plan.model import Approval, Plan
from backfill_assets.signing import sshsig
from backfill_assets.signing.allowed_signers import AllowedSigners
from backfill_assets.signing.statements import APPROVALS, PLAN_APPROVAL, PLAN_REPLACEMENT, Statement, stamp
from backfill_assets.trust.policy import POLICY_FILE, Policy, Requirement
from backfill_assets.trust.root import Candidate, Tally, TrustRoot, Void, tally
from backfill_assets.yaml_document import MAX_PLAN_BYTES, read_yaml_text

SIGNERS_ENV = "BACKFILL_ALLOWED_SIGNERS"
POLICY_ENV = "BACKFILL_POLICY"


def plan_statement(plan: Plan, root: TrustRoot, code: str, *, signed: dt.datetime | None = None,
                   valid_days: int | None = None, replaces: str | None = None) -> Statement:
    """What an approver signs for `plan` under `root`, for a table whose code identity is `code`;
    `replaces`: the plan of record this version would replace (`record.replaced_by`), named in a
    `plan replacement` statement."""
    signed = signed or dt.datetime.now(dt.UTC)
    days = min(valid_days or root.policy.model.approvals.valid_days, root.policy.model.approvals.valid_days)
    fields = {"plan": plan_sha256(plan), "code": code, "warehouse": root.warehouse_id}
    if replaces is not None:
        return Statement.make(PLAN_REPLACEMENT, signed=signed, expires=signed + dt.timedelta(days=days),
                              replaces=replaces, **fields)
    return Statement.make(PLAN_APPROVAL, signed=signed, expires=signed + dt.timedelta(days=days), **fields)


def signing_command(statement_file: str = "statement.txt") -> str:
    return f"ssh-keygen -Y sign -f ~/.ssh/id_ed25519 -n {sshsig.NAMESPACE} {statement_file}"


@dataclass(frozen=True)
class NamedRoot:
    """A trust root named explicitly (a CI job without the warehouse): no warehouse id unless given."""

    root: TrustRoot
    source: str


def explicit_root(signers_path: str | None, policy_path: str | None = None,
                  warehouse_id: str | None = None) -> NamedRoot | None:
    """The trust root named by --allowed-signers / $BACKFILL_ALLOWED_SIGNERS (and --policy /
    $BACKFILL_POLICY, else policy.yaml beside that file, else the default policy); None if none."""
    path = signers_path or os.environ.get(SIGNERS_ENV) or None
    if not path:
        return None
    signers = AllowedSigners.load(path)
    chosen = policy_path or os.environ.get(POLICY_ENV) or None
    beside = Path(path).parent / POLICY_FILE
    # present, whatever it is (a dangling link, a pipe, a folder): read, or refused in one line, as the
    # team's policy, never passed over for the default one (the guard counted 2 approvers where the
    # team's unreadable policy asked 3: ALLOWED, found by an attack), as `init` reads it
    policy = Policy.load(chosen) if chosen else Policy.load(beside) if os.path.lexists(beside) else Policy.default()
    return NamedRoot(TrustRoot(0, warehouse_id or "", signers, policy), f"{signers.source} and {policy.source}")


def load_explicit_root(signers_path: str | None, policy_path: str | None = None,
                       warehouse_id: str | None = None) -> tuple[NamedRoot | None, str | None]:
    """`explicit_root`, or None with why (a guard or `plan show` reports it instead of failing)."""
    try:
        return explicit_root(signers_path, policy_path, warehouse_id), None
    except (AllowedSignersError, PolicyError) as exc:
        return None, str(exc)


def file_candidates(plan: Plan) -> tuple[list[Candidate], list[Void]]:
    """The plan file's signed entries as candidates; entries of the earlier form are void."""
    found, void = [], []
    for entry in plan.approvals.granted:
        if entry.code is None or entry.warehouse is None or entry.expires is None:
            void.append(Void(entry.by, "signs the plan hash alone (an earlier form): sign the statement of "
                                       "`backfill plan statement` instead"))
            continue
        fields = {"plan": entry.plan_sha256, "code": entry.code, "warehouse": entry.warehouse}
        try:
            statement = Statement.make(PLAN_APPROVAL, signed=entry.at, expires=entry.expires, **fields) \
                if entry.replaces is None else \
                Statement.make(PLAN_REPLACEMENT, signed=entry.at, expires=entry.expires, replaces=entry.replaces,
                               **fields)
        except SignatureError as exc:
            void.append(Void(entry.by, exc.message))
            continue
        found.append(Candidate(entry.by, statement.text, entry.signature))
    return found, void


def file_tally(plan: Plan, root: TrustRoot, code: str | None, now: dt.datetime | None = None,
               replaces: str | None = None, at_least: Requirement | None = None,
               refused: str | None = None) -> Tally:
    """The file's signatures counted under `root`; `code` None when the table could not be loaded
    (shown as unchecked), and so is a root without a warehouse id. `replaces`: the plan of record
    this version would replace, where the record can be read (`record.replaced_by`): only `plan
    replacement` statements naming it count then (a superseded version's file, still signed, was
    shown approved beside the record that superseded it: found by an attack), and `at_least`, what
    replacing it needs, raises the plan's own requirement (`authority.replaced_floor`); `refused`: why
    this version can never replace it (then no signature counts, each void saying why)."""
    candidates, void = file_candidates(plan)
    expect = {"plan": plan_sha256(plan), "code": code, "warehouse": root.warehouse_id or None}
    counted = tally(root, candidates, kind=APPROVALS if replaces is None else (PLAN_REPLACEMENT,),
                    expect=expect if replaces is None else {**expect, "replaces": replaces},
                    requirement=root.policy.requirement(plan.assets, plan.approvals.required).at_least(at_least),
                    owner=plan.owner, now=now)
    if refused is not None:  # the decisive reason, each signature's (a kind's mismatch hid it)
        return dataclasses.replace(counted, counted=[], owner_signature=None,
                                   void=void + [Void(c.principal, refused) for c in candidates])
    return dataclasses.replace(counted, void=void + counted.void)


def entry_of(principal: str, statement: Statement, signature: str) -> Approval:
    """The file entry of a signature over a plan approval (or replacement) statement."""
    return Approval(by=principal, at=statement.signed, plan_sha256=statement["plan"], code=statement["code"],
                    warehouse=statement["warehouse"], expires=statement.expires, replaces=statement.get("replaces"),
                    signature=signature)


# --- the file mirror ------------------------------------------------------------------------------

def _one_line(signature: str) -> str:
    try:
        return sshsig.one_line(signature)
    except SignatureError:  # kept as given; the tally voids it
        return "".join(signature.split()).replace('"', "")


def _entry_line(indent: str, approval: Approval) -> str:
    bound = "".join(f', {name}: "{value}"' for name, value in (
        ("code", approval.code), ("warehouse", approval.warehouse),
        ("expires", stamp(approval.expires) if approval.expires else None), ("replaces", approval.replaces))
        if value is not None)
    return (f'{indent}- {{by: "{approval.by}", at: "{stamp(approval.at)}", plan_sha256: "{approval.plan_sha256}"'
            f'{bound}, signature: "{_one_line(approval.signature)}"}}\n')


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


def _granted(text: str, source: str) -> list[dict[str, Any]]:
    document = read_yaml_text(text, source)
    approvals = document.get("approvals")
    granted = approvals.get("granted") if isinstance(approvals, dict) else None
    return [g for g in granted if isinstance(g, dict)] if isinstance(granted, list) else []


def mirror_into_file(path: Path, approvals: list[Approval]) -> int:
    """Write every given approval the file lacks into it, atomically, keeping comments and layout.

    Idempotent: an approval already in the file (same principal, hash and signature) is skipped,
    so re-running after a crash converges. Returns how many were added. A link is followed: the
    file it names is rewritten (the rename replaced a link into the reviewed checkout with a file
    of its own, and the checkout's file, the guard's, never got the signature: found by an attack).
    """
    path = Path(os.path.realpath(path))
    # read as the plan was, bounded and never blocking: the file may have changed since (an editor
    # saved it in Latin-1, a named pipe put at its name: an internal error over a committed approval,
    # or a hang holding the table's turn, found by an attack)
    data = read_bounded(path, MAX_PLAN_BYTES, "plan file", "put the plan file back", error=PlanReadError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanReadError(f"{printable(path)} is not UTF-8 now (byte {exc.start})",
                            fix="save the plan file as UTF-8") from None
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
    faults.checkpoint("approve.mirror_read")
    replace_file(path, updated)
    return added

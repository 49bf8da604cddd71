"""The trust root, and counting signatures under it.

A warehouse's trust root is the team's allowed_signers file and policy, pinned in its control
record with the warehouse's id. Every signature that authorises something (a plan approval, a
change of the trust root, the rollback of a published plan) is counted here, the same way for
the guard, `plan show`, `plan approve` and every decision that re-verifies what it reads:

- the statement is well formed, of the expected kind, and binds the expected plan, code and
  warehouse (or trust-root change);
- it is not expired, not from the future, and valid no longer than the policy allows;
- the signature verifies for the named principal under allowed_signers (keys compared as OpenSSH
  canonicalises them);
- the owner's signature is required where there is an owner, and any key listed for the owner
  never counts as an approver, under whatever name it is listed;
- each principal and each key counts once; the policy's groups are each represented.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from backfill_assets.errors import PrincipalError, SignatureError
from backfill_assets.signing.allowed_signers import AllowedSigners
from backfill_assets.signing.principals import canonical_principal
from backfill_assets.signing.sshsig import fingerprint
from backfill_assets.signing.statements import PLAN_APPROVAL, PLAN_REPLACEMENT, Statement, stamp
from backfill_assets.trust.policy import Policy, Requirement


@dataclass(frozen=True)
class TrustRoot:
    version: int
    warehouse_id: str
    signers: AllowedSigners
    policy: Policy

    @property
    def identity(self) -> str:
        """What a change of the root names as the root it replaces."""
        return f"v{self.version}:{self.signers.sha256[:16]}:{self.policy.sha256[:16]}"

    def describe(self) -> str:
        return (f"trust root v{self.version} (allowed_signers {self.signers.sha256[:12]}, policy "
                f"{self.policy.sha256[:12]}) of warehouse {self.warehouse_id}")


@dataclass(frozen=True)
class Candidate:
    """A signature offered for counting: who claims it, the statement text, the signature."""

    principal: str
    statement: str
    signature: str


@dataclass(frozen=True)
class Counted:
    principal: str
    fingerprint: str  # the canonical key's, as `ssh-keygen -l` prints it
    statement: Statement
    signature: str  # the signature's one-line base64
    until: dt.datetime  # when it stops counting: its statement's expiry, or its key's end in allowed_signers


@dataclass(frozen=True)
class Void:
    principal: str
    reason: str


COUNTED = "counted"
OWNER_SIGNED = "owner, required, never counted as an approver"


@dataclass(frozen=True)
class Tally:
    requirement: Requirement
    owner: str | None
    counted: list[Counted] = field(default_factory=list)
    void: list[Void] = field(default_factory=list)
    owner_signature: Counted | None = None
    missing_groups: tuple[str, ...] = ()
    unchecked: tuple[str, ...] = ()  # bound fields nobody could check here (no definitions, no record)
    owner_required: bool = True  # a plan needs its owner's signature; a rollback only excludes the owner
    groups: tuple[tuple[str, frozenset[str]], ...] = ()  # each required group and its members
    # each candidate, in the order given, with what counting made of it: `COUNTED`, `OWNER_SIGNED`
    # or why it did not count (the rendered evidence says it of every signature it lists)
    verdicts: tuple[tuple[Candidate, str], ...] = ()

    @property
    def approved(self) -> bool:
        return ((self.owner is None or not self.owner_required or self.owner_signature is not None)
                and len(self.counted) >= self.requirement.minimum and not self.missing_groups)

    @property
    def approvers(self) -> list[str]:
        return [c.principal for c in self.counted]

    @property
    def expires(self) -> dt.datetime | None:
        """When the approval as counted stops holding: the first expiry after which the signatures
        still valid no longer meet the requirement (the owner's, the minimum, each group's)."""
        moments = sorted({c.until for c in self.counted}
                         | ({self.owner_signature.until} if self.owner_signature else set()))
        return next((m for m in moments if not self._holds_after(m)), moments[-1] if moments else None)

    def _holds_after(self, moment: dt.datetime) -> bool:
        live = {c.principal for c in self.counted if c.until > moment}
        owner = self.owner_signature is not None and self.owner_signature.until > moment
        return ((self.owner is None or not self.owner_required or owner) and len(live) >= self.requirement.minimum
                and all(live & members for _, members in self.groups))

    def missing(self) -> list[str]:
        out = []
        if self.owner is not None and self.owner_required and self.owner_signature is None:
            out.append(f"the owner {self.owner}'s signature")
        if len(self.counted) < self.requirement.minimum:
            out.append(f"{self.requirement.minimum - len(self.counted)} more approver signature(s)")
        out += [f"a signature from group {g}" for g in self.missing_groups]
        return out

    def describe(self, void: bool = True) -> str:
        owner = ""
        if self.owner is not None and self.owner_required:
            owner = f"owner {self.owner} " + ("signed; " if self.owner_signature else "has not signed; ")
        who = f" ({', '.join(self.approvers)})" if self.counted else ""
        groups = f"; needs {', '.join(self.missing())}" if not self.approved else ""
        until = f"; valid until {stamp(self.expires)}" if self.approved and self.expires else ""
        voids = "; void: " + "; ".join(f"{v.principal} ({v.reason})" for v in self.void) \
            if self.void and void else ""
        return (f"{owner}{len(self.counted)}/{self.requirement.minimum} approver signature(s) counted{who}"
                f"{groups}{until}{voids}")


_MISMATCH = {
    "plan": "given for plan {found:.12}, but the plan is now {wanted:.12} (edited since it was signed)",
    "code": "signed for code {found}, but the table's code is now {wanted} (the table changed)",
    "warehouse": "signed for warehouse {found}, but this is warehouse {wanted}",
    "replaces": "signed to replace trust root {found}, but the pinned root is {wanted}",
    "signers": "signed for allowed_signers {found:.12}, not this one ({wanted:.12})",
    "policy": "signed for policy {found:.12}, not this one ({wanted:.12})",
}
_MISMATCH_OF = {
    (PLAN_REPLACEMENT, "replaces"): "signed to replace the plan of record {found}, but the one in force is "
                                      "{wanted} (adopted since the statement was printed)",
}


def _short_mark(mark: str) -> str:
    """A plan of record as a replacement names it (`sha@adoption row hash`), shortened to read."""
    sha, _, row = mark.partition("@")
    return f"{sha[:12]} (adoption {row[:12]})" if row else mark[:24]


def tally(root: TrustRoot, candidates: Iterable[Candidate], *, kind: str | tuple[str, ...],
          expect: Mapping[str, str | None],
          requirement: Requirement, owner: str | None = None, owner_required: bool = True,
          now: dt.datetime | None = None) -> Tally:
    """Count `candidates` under `root` for a statement of `kind` (or of any of several) binding
    `expect` (a field whose expected value is None is shown as unchecked, not compared; one the
    statement's kind does not bind is a mismatch). The owner's keys never count as
    an approver's; with `owner_required`, the owner's own signature is needed too."""
    now = now or dt.datetime.now(dt.UTC)
    signers, policy = root.signers, root.policy
    owner_keys = signers.keys_of(owner) if owner is not None else frozenset()
    owner_fingerprints = {fingerprint(k) for k in owner_keys}
    counted: list[Counted] = []
    void: list[Void] = []
    owner_signature: Counted | None = None
    verdicts: list[tuple[Candidate, str]] = []
    for candidate in candidates:
        reason, found = _judge(candidate, signers, policy, kind, expect, now)
        if found is None:
            void.append(Void(str(candidate.principal), reason or "refused"))
            verdicts.append((candidate, f"NOT counted, {reason or 'refused'}"))
            continue
        if found.principal == owner:
            owner_signature = owner_signature or found
            verdicts.append((candidate, OWNER_SIGNED if owner_required else
                             "NOT counted, the owner never counts as an approver"))
            continue
        if any(c.principal == found.principal and c.fingerprint == found.fingerprint for c in counted):
            # the same approver signing again (a fresh statement): nothing new, nothing void
            verdicts.append((candidate, f"NOT counted, {found.principal} already counted; each approver counts once"))
            continue
        before = len(void)
        # the owner listed under a second name (`olivia,oli KEY`) is still the owner
        if owner is not None and (found.fingerprint in owner_fingerprints
                                  or signers.keys_of(found.principal) & owner_keys):
            void.append(Void(found.principal, f"signed with a key listed for the owner {owner}; the owner "
                                              "never counts as an approver"))
        elif any(c.principal == found.principal for c in counted):
            void.append(Void(found.principal, f"{found.principal} already counted; each approver counts once"))
        elif any(c.fingerprint == found.fingerprint for c in counted):
            twin = next(c.principal for c in counted if c.fingerprint == found.fingerprint)
            void.append(Void(found.principal, f"signed with the key that signed {twin}'s; a key counts once"))
        else:
            counted.append(found)
        verdicts.append((candidate, f"NOT counted, {void[-1].reason}" if len(void) > before else COUNTED))
    members = {c.principal for c in counted}
    missing = tuple(g for g in requirement.groups if not members & set(policy.members(g)))
    unchecked = tuple(name for name, value in expect.items() if value is None)
    if owner is not None and not owner_required and owner_signature is not None:
        void.append(Void(owner, "the owner never counts as an approver"))
        owner_signature = None
    return Tally(requirement, owner, counted, void, owner_signature, missing, unchecked, owner_required,
                 tuple((g, frozenset(policy.members(g))) for g in requirement.groups), tuple(verdicts))


def _judge(candidate: Candidate, signers: AllowedSigners, policy: Policy, kind: str | tuple[str, ...],
           expect: Mapping[str, str | None], now: dt.datetime) -> tuple[str | None, Counted | None]:
    """(why the candidate does not count, None) or (None, the counted signature)."""
    try:
        name = canonical_principal(candidate.principal, "signer")
        statement = Statement.parse(candidate.statement)
    except (PrincipalError, SignatureError) as exc:
        return exc.message, None
    kinds = (kind,) if isinstance(kind, str) else kind
    # what the statement binds that differs first (an approval of an edited plan says so, whichever
    # kind it is), then its kind, then what it does not bind
    for field_name, wanted in expect.items():
        found = statement.get(field_name)
        if wanted is not None and found is not None and found != wanted:
            special = _MISMATCH_OF.get((statement.kind, field_name))
            if special is not None:
                return special.format(found=_short_mark(found), wanted=_short_mark(wanted)), None
            return _MISMATCH.get(field_name, "{found} is not {wanted}").format(found=found, wanted=wanted), None
    if statement.kind not in kinds:
        if kinds == (PLAN_REPLACEMENT,) and statement.kind == PLAN_APPROVAL:
            # the signer may have signed under a release that asked no replacement statement
            return ("a plan approval statement, where replacing a plan of record (or having replaced one) "
                    "takes a plan replacement statement naming its adoption (`backfill plan statement` "
                    "prints it; a replacement approved under an earlier release is signed again so)"), None
        return f"a {statement.kind} statement, not a {' or a '.join(kinds)}", None
    for field_name, wanted in expect.items():
        if wanted is not None and statement.get(field_name) is None:
            return f"a {statement.kind} statement names no {field_name} ({wanted[:12]}...)", None
    timing = statement.timing_problem(now, policy.valid_for)
    if timing:
        return timing, None
    try:
        verified = signers.verify_approval(name, statement.message, candidate.signature, at=now)
    except SignatureError as exc:
        return f"signature refused: {exc.message}", None
    # a key whose line in allowed_signers ends first stops the signature counting then (a verdict
    # cached until `Tally.expires` must not outlive it)
    key_end = signers.valid_until(name, verified.public_key, at=now)
    until = statement.expires if key_end is None else min(statement.expires, key_end)
    return None, Counted(name, verified.fingerprint, statement, verified.one_line, until)

"""The team's approval policy: a reviewed file beside allowed_signers, pinned with it.

A plan states how many approvals it wants, but the plan's author writes that number: so the
minimum comes from the team's policy (a plan may ask for more, never fewer), with stricter rules
for some tables, groups whose signature some tables require, how long a signature stays valid,
and the quorum of pinned approvers that may change the policy or allowed_signers:

    approvals:
      minimum: 2          # signatures of approvers (not the owner) on every plan
      valid_days: 14      # a signature authorises at most this long after it is signed
    targets:              # stricter rules by asset-key glob; every matching rule applies
      - match: "finance/*"
        minimum: 3
        require: [controllers]   # at least one signature from each group named
    groups:
      controllers: [carol, dave]
    trust_root:
      quorum: 2           # signatures of the pinned approvers that change this file or allowed_signers
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, StringConstraints, ValidationError

from backfill_assets.bounded import read_bounded
from backfill_assets.errors import PolicyError, PrincipalError
from backfill_assets.signing.principals import canonical_principal
from backfill_assets.yaml_document import read_yaml_text

POLICY_FILE = "policy.yaml"
MAX_POLICY_BYTES = 64 * 1024
_FIX = "fix the policy file (see README, 'The team's policy')"

DEFAULT_TEXT = """\
# The team's approval policy (backfill-assets). Reviewed like code; changed only with the
# signatures of the trust root's quorum (`backfill approvers pin`).
approvals:
  minimum: 2        # signatures of approvers (never the owner) on every plan; a plan may ask for more
  valid_days: 14    # a signature authorises at most this long after it is signed
targets: []         # stricter rules by asset-key glob: [{match: "finance/*", minimum: 3, require: [group]}]
groups: {}          # named sets of approvers: {controllers: [carol, dave]}
trust_root:
  quorum: 2         # signatures of the pinned approvers that change this file or allowed_signers
"""


def _principal(value: Any) -> str:
    try:
        return canonical_principal(value, "group member")
    except PrincipalError as exc:
        raise ValueError(exc.message) from None


Principal = Annotated[str, BeforeValidator(_principal)]
Count = Annotated[StrictInt, Field(ge=1, le=20)]
GroupName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")]


class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ApprovalRule(_Block):
    minimum: Count = 2
    valid_days: Annotated[StrictInt, Field(ge=1, le=366)] = 14


class TargetRule(_Block):
    match: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_/*?\[\]!-]{1,200}$")]
    minimum: Count | None = None
    require: Annotated[list[GroupName], Field(max_length=20)] = Field(default_factory=list)


class TrustRootRule(_Block):
    quorum: Count = 2


class PolicyModel(_Block):
    approvals: ApprovalRule = ApprovalRule()
    targets: Annotated[list[TargetRule], Field(max_length=200)] = Field(default_factory=list)
    groups: dict[GroupName, Annotated[list[Principal], Field(min_length=1, max_length=100)]] = \
        Field(default_factory=dict)
    trust_root: TrustRootRule = TrustRootRule()


@dataclass(frozen=True)
class Requirement:
    """What a plan of one target needs: this many approvers, one of each group."""

    minimum: int
    groups: tuple[str, ...]

    def at_least(self, other: Requirement | None) -> Requirement:
        """This, raised to `other` where it asks more (more approvers, other groups)."""
        if other is None:
            return self
        return Requirement(max(self.minimum, other.minimum), tuple(dict.fromkeys((*self.groups, *other.groups))))


@dataclass(frozen=True)
class Policy:
    model: PolicyModel
    text: str
    source: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def valid_for(self) -> dt.timedelta:
        return dt.timedelta(days=self.model.approvals.valid_days)

    @property
    def quorum(self) -> int:
        return self.model.trust_root.quorum

    def members(self, group: str) -> tuple[str, ...]:
        return tuple(self.model.groups.get(group, ()))

    def requirement(self, targets: str | Sequence[str], asked: int = 1) -> Requirement:
        """The rule for a plan writing `targets` (its target and its graph's tables): the policy's
        minimum, raised by every rule matching any of them and by the plan itself (`asked`), never
        lowered."""
        names = [targets] if isinstance(targets, str) else list(targets)
        minimum, groups = max(self.model.approvals.minimum, asked), []
        for rule in self.model.targets:
            if any(fnmatch.fnmatchcase(name, rule.match) for name in names):
                minimum = max(minimum, rule.minimum or 0)
                groups += [g for g in rule.require if g not in groups]
        return Requirement(minimum, tuple(groups))

    @classmethod
    def parse(cls, text: str, source: str = POLICY_FILE) -> Policy:
        document = read_yaml_text(text, source)
        try:
            model = PolicyModel.model_validate(document)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top)"
            message = str(first["msg"]).removeprefix("Value error, ")
            raise PolicyError(f"{source}: {where}: {message}", fix=_FIX) from None
        unknown = sorted({g for rule in model.targets for g in rule.require} - set(model.groups))
        if unknown:
            raise PolicyError(f"{source}: targets require group(s) {', '.join(unknown)}, which groups: does "
                              "not define", fix="define each group under `groups:` or remove it")
        return cls(model, text, source)

    @classmethod
    def load(cls, path: str | Path) -> Policy:
        fix = "give the team's reviewed policy file (see README, 'The team's policy')"
        try:
            data = read_bounded(path, MAX_POLICY_BYTES, "policy file", fix)
        except FileNotFoundError:
            raise PolicyError(f"policy file {path} does not exist", fix=fix) from None
        except OSError as exc:
            raise PolicyError(f"cannot read policy file {path} ({exc.strerror})", fix=fix) from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise PolicyError(f"{path} is not UTF-8 text", fix="save it as plain UTF-8 text") from None
        return cls.parse(text, str(path))

    @classmethod
    def default(cls) -> Policy:
        return cls.parse(DEFAULT_TEXT, "the default policy")

    def check_against(self, listed: set[str]) -> None:
        """Refuse a policy that names approvers allowed_signers does not list, or whose quorum the
        listed approvers could never reach (the trust root could then never change)."""
        for group, members in self.model.groups.items():
            missing = sorted(set(members) - listed)
            if missing:
                raise PolicyError(f"{self.source}: group {group} names {', '.join(missing)}, whom allowed_signers "
                                  "does not list", fix="list them in allowed_signers or remove them from the group")
        if self.quorum > len(listed):
            raise PolicyError(f"{self.source}: trust_root.quorum is {self.quorum} but allowed_signers lists "
                              f"{len(listed)} approver(s): the trust root could never change",
                              fix="lower the quorum or list more approvers")
